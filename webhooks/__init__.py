"""AdmissionReview webhooks (admission.k8s.io/v1) over TLS, Kueue-compatible.

Public surface:

* :mod:`webhooks.server.app` — ``build_app``, ``process_review``
* :mod:`webhooks.server.entry` — ``run_webhook_server``, ``serve_webhooks_only``
* :mod:`webhooks.codec` — the AdmissionReview envelope, read and written
* :mod:`webhooks.server.certs` — CA / serving certificates, reload, rotation, caBundle patch
* :mod:`webhooks.config` — ``WebhookConfig``
* :mod:`webhooks.view` — ``ModelView`` protocol and ``InMemoryView``
* :mod:`webhooks.handlers.generic` — the job kinds' webhooks, with the rules they share in
  :mod:`webhooks.handlers.common`
* :mod:`webhooks.handlers.job`, :mod:`webhooks.handlers.pods`, :mod:`webhooks.handlers.quota` — the handlers
"""
