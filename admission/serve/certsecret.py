"""Webhook serving certificates shared through a Secret.

With several replicas, each generating its own CA would leave the API server trusting
only the last one to patch ``caBundle``: webhook calls to the others would fail. So the
certificate lives in one Secret (shipped empty by the manifests): the first replica to
find it empty generates a CA and serving certificate and writes them with the Secret's
resourceVersion (a 409 means another replica won: read theirs); every replica copies
the Secret into its cert directory, where the webhook server reloads it. A bundle close
to expiry is re-issued the same way, so rotation happens once, by whichever replica
notices first. With an external CA (cert-manager) there is no CA key and nothing to do.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from admission.kube.client.errors import ApiError
from admission.kube.client.resources import SECRETS
from admission.kube.client.rest import KubeClient
from webhooks.server.certs import (
    CertBundle,
    CertError,
    bundle_from_secret,
    generate_certificates,
    read_cert_dir,
    rotate_if_needed,
    secret_from_bundle,
    write_cert_dir,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CertSync:
    """The outcome of one sync: the CA the webhook configurations must trust, and
    whether it differs from what this replica served before."""

    ca_pem: bytes
    ca_changed: bool


async def sync_certificates(
    client: KubeClient,
    *,
    namespace: str,
    secret_name: str,
    service: str,
    cert_dir: str,
    now: datetime | None = None,
) -> CertSync:
    """Make ``cert_dir`` hold the Secret's bundle, generating or rotating it if needed.

    Raises :class:`ApiError` (e.g. 404 when the Secret does not exist).
    """
    for _attempt in range(5):
        secret = await client.get(SECRETS, secret_name, namespace=namespace)
        bundle = bundle_from_secret(secret)
        fresh: CertBundle | None
        if bundle is None:
            fresh = generate_certificates(service=service, namespace=namespace, now=now)
        else:
            try:
                fresh = rotate_if_needed(bundle, now=now or datetime.now(UTC))
            except CertError:
                fresh = None  # an external CA: served as it is, rotated by its owner
        if fresh is not None:
            body: dict[str, Any] = dict(secret)
            stored = secret_from_bundle(fresh, name=secret_name, namespace=namespace)
            body["data"] = stored["data"]
            try:
                await client.replace(SECRETS, secret_name, body, namespace=namespace)
            except ApiError as err:
                if err.conflict:
                    continue  # another replica wrote first: use theirs
                raise
            log.info(
                "%s webhook certificate in Secret %s/%s",
                "issued" if bundle is None else "rotated",
                namespace,
                secret_name,
            )
            bundle = fresh
        assert bundle is not None
        return await asyncio.to_thread(_install, bundle, cert_dir)
    raise ApiError(
        409,
        "Conflict",
        f"Secret {namespace}/{secret_name} kept changing while syncing certificates",
    )


def _install(bundle: CertBundle, cert_dir: str) -> CertSync:
    try:
        current = read_cert_dir(cert_dir)
        old_ca, same = current.ca_cert_pem, current.cert_pem == bundle.cert_pem
    except (CertError, OSError):
        old_ca, same = b"", False
    if not same:
        write_cert_dir(bundle, cert_dir)
    return CertSync(ca_pem=bundle.ca_cert_pem, ca_changed=old_ca != bundle.ca_cert_pem)
