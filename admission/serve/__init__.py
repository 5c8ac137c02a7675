"""``quartermaster serve``'s composition root: it wires the Kubernetes adapter
(:mod:`admission.kube`), the engine and the webhook server (:mod:`webhooks`) into one
service. It is the one place where the adapter and the webhooks meet, so neither
imports the other."""
