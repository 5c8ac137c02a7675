"""Webhook certificates shared through a Secret: every replica serves the same CA, the
first to find the Secret empty issues it, a bundle close to expiry is rotated once, and
the API server is made to trust the CA (caBundle) so webhook calls keep working."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from admission.apiserver_double import running_apiserver
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.serve.certsecret import sync_certificates
from tests.support.double_client import kube_client_config
from tests.support.kube_harness import (
    SERVICE_NS,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
    stack,
)
from webhooks.server.certs import (
    bundle_from_secret,
    generate_certificates,
    read_cert_dir,
    secret_from_bundle,
)

SECRET = "quartermaster-webhook-server-cert"
SERVICE = "quartermaster-webhook-service"


def empty_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": SECRET, "namespace": SERVICE_NS},
    }


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


async def _sync(client: k.KubeClient, cert_dir: Path, now: datetime | None = None):  # type: ignore[no-untyped-def]
    return await sync_certificates(
        client,
        namespace=SERVICE_NS,
        secret_name=SECRET,
        service=SERVICE,
        cert_dir=str(cert_dir),
        now=now,
    )


def test_two_replicas_serve_the_certificate_the_first_one_issued(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_apiserver(
            objects=[empty_secret()], namespaces=("default", SERVICE_NS)
        ) as server:
            client = await k.KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                first = await _sync(client, tmp_path / "a")
                second = await _sync(client, tmp_path / "b")
            finally:
                await client.close()
            a, b = read_cert_dir(tmp_path / "a"), read_cert_dir(tmp_path / "b")
            assert a.cert_pem == b.cert_pem and a.ca_cert_pem == b.ca_cert_pem
            assert first.ca_changed and second.ca_changed  # both replicas start from nothing
            stored = bundle_from_secret(server.get_object("secrets", SECRET, SERVICE_NS))
            assert stored is not None and stored.cert_pem == a.cert_pem
            assert server.request_count(verb="update", resource="secrets") == 1  # issued once

    run(main)


def test_a_conflicting_write_uses_the_other_replicas_certificate(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_apiserver(
            objects=[empty_secret()], namespaces=("default", SERVICE_NS)
        ) as server:
            client = await k.KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                server.fail_next(1, code=409, verb="update", resource="secrets")
                await _sync(client, tmp_path / "a")
            finally:
                await client.close()
            stored = bundle_from_secret(server.get_object("secrets", SECRET, SERVICE_NS))
            assert stored is not None and stored.cert_pem == read_cert_dir(tmp_path / "a").cert_pem

    run(main)


def test_a_certificate_close_to_expiry_is_rotated_with_the_same_ca(tmp_path: Path) -> None:
    async def main() -> None:
        now = datetime.now(UTC)
        old = generate_certificates(
            service=SERVICE,
            namespace=SERVICE_NS,
            now=now - timedelta(days=360),
            serving_validity=timedelta(days=365),
        )
        secret = secret_from_bundle(old, name=SECRET, namespace=SERVICE_NS)
        async with running_apiserver(
            objects=[secret], namespaces=("default", SERVICE_NS)
        ) as server:
            client = await k.KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                result = await _sync(client, tmp_path / "a", now=now)
            finally:
                await client.close()
            served = read_cert_dir(tmp_path / "a")
            assert served.cert_pem != old.cert_pem
            assert served.cert.not_valid_after_utc > now + timedelta(days=300)
            assert served.ca_cert_pem == old.ca_cert_pem and result.ca_pem == old.ca_cert_pem

    run(main)


def test_the_service_issues_the_shared_certificate_and_makes_the_api_server_trust_it(
    tmp_path: Path, backend: Any
) -> None:
    def put_secret(server: Any) -> None:
        server.put_object(empty_secret())

    async def main() -> None:
        async with stack(
            tmp_path,
            backend=backend,
            objects=[
                namespace("team"),
                flavor("default"),
                cluster_queue("cq", {"default": {"cpu": 4}}),
                local_queue("team", "lq", "cq"),
            ],
            before_start=put_secret,
            inject_ca_bundle=True,
        ) as s:
            stored = bundle_from_secret(s.get("secrets", SECRET, SERVICE_NS) or {})
            assert stored is not None
            assert read_cert_dir(s.cert_dir).ca_cert_pem == stored.ca_cert_pem

            def trusted() -> bool:
                cfg = s.get(
                    "mutatingwebhookconfigurations", "quartermaster-mutating-webhook-configuration"
                )
                hooks = (cfg or {}).get("webhooks") or []
                return bool(hooks) and all(
                    h["clientConfig"].get("caBundle") == read_cert_dir(s.cert_dir).ca_bundle_b64
                    for h in hooks
                )

            await eventually(trusted, what="the webhook configurations trust the shared CA")
            # A Job goes through the mutating webhook over TLS with the new CA: suspended.
            await s.user.create(
                kr.JOBS, job("team", "train", queue="lq", cpu="1"), namespace="team"
            )
            created = s.get("jobs", "train", "team")
            assert created is not None and created["spec"]["suspend"] is True

    run(main)
