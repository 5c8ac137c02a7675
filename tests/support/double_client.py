"""A ``kubernetes.aio`` client configuration for the API-server double.

The double (``admission.apiserver_double``) ships with the service and imports nothing of
``kubernetes`` (only ``admission.kube`` may); tests that drive it through the official
client build their configuration here.
"""

from __future__ import annotations

from kubernetes.aio.client import Configuration

from admission.apiserver_double import ADMIN_TOKEN


def kube_client_config(
    url: str, *, token: str | None = ADMIN_TOKEN, ca_pem: bytes | None = None
) -> Configuration:
    """A ``kubernetes.aio`` configuration pointing at the double (no retries); it sends
    the double's admin token unless given another (``None``: anonymous, as on a
    cluster that is 403 for nearly everything)."""
    config = Configuration(host=url)
    if token:
        config.api_key = {"BearerToken": token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
    if ca_pem:
        config.ca_cert_data = ca_pem.decode()
    return config
