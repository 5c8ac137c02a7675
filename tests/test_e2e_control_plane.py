"""What the real control plane showed: refused writes back off, caBundle stays injected,
and every write carries the product's field manager.

Each test runs on the double and on a real kube-apiserver (``[real]``, with
``KUBEBUILDER_ASSETS``); faults on the real one come from the fault proxy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube import client as k
from admission.kube.context import ControllerOptions
from tests.kube_harness import (
    SA_USERNAME,
    SERVICE_NS,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)
from webhooks.certs import read_cert_dir

BASE = [
    namespace("team-a"),
    flavor("f", pool="a"),
    cluster_queue("cq", {"f": {"cpu": 4}}),
    local_queue("team-a", "lq", "cq"),
]
MUTATING = "quartermaster-mutating-webhook-configuration"
VALIDATING = "quartermaster-validating-webhook-configuration"


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def controller(**kw: Any) -> ControllerOptions:
    opts = ControllerOptions(
        status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0, **kw
    )
    opts.excluded_namespaces = ("kube-system", SERVICE_NS)
    return opts


def test_a_refused_stop_write_backs_off_with_an_event_then_completes(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=BASE, controller=controller(retry_base=0.2)
        ) as s:
            await s.user.create(k.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and not j["spec"]["suspend"],
                what="the job starts",
            )
            wl = await eventually(lambda: s.workload_of_job("team-a", "train"), what="workload")
            loop = asyncio.get_running_loop()
            stamps: list[float] = []
            client = s.service.client
            counted = client.on_request

            def on_request(call: str) -> None:
                if call == "patch batch/jobs":
                    stamps.append(loop.time())
                if counted is not None:
                    counted(call)

            client.on_request = on_request
            s.server.fail_next(1000, code=403, verb="patch", resource="jobs", name="train")
            await s.user.patch(
                k.WORKLOADS, wl["metadata"]["name"], {"spec": {"active": False}}, namespace="team-a"
            )
            t0 = loop.time()
            await asyncio.sleep(5.0)
            elapsed = loop.time() - t0
            attempts = len(stamps)
            # retries after 0.2, 0.4, 0.8, 1.6, 3.2 s; one more may come from the
            # eviction's own status event (an event reconciles at once, as in
            # controller-runtime). A fixed 0.5 s retry would make ~10.
            allowed = 2
            delay, t = 0.2, 0.0
            while t + delay <= elapsed:
                t += delay
                delay *= 2
                allowed += 1
            assert 3 <= attempts <= allowed, (attempts, allowed)
            gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            assert gaps[-1] >= 1.5, gaps  # the backoff grew; no fixed-rate retry
            events = (await s.user.list(k.EVENTS, namespace="team-a"))["items"]
            refused = [e for e in events if e.get("reason") == "ApiRequestRefused"]
            assert len(refused) == 1  # once per run of failures, not per retry
            assert refused[0]["involvedObject"]["name"] == "train"
            assert "403" in refused[0]["message"]
            metrics = s.service.metrics.reconcile_errors
            assert metrics.labels("job", "403")._value.get() >= 2
            s.server.clear_faults()
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and j["spec"]["suspend"],
                what="the job is stopped once the API accepts the write",
                timeout=20,
            )
            await eventually(
                lambda: is_true(s.workload_of_job("team-a", "train"), "Evicted"),
                what="the workload is evicted",
            )

    run(main)


def test_the_ca_bundle_is_restored_after_the_webhook_configurations_are_reapplied(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(
            tmp_path,
            backend=backend,
            objects=BASE,
            inject_ca_bundle=True,
            ca_bundle_period=3600.0,  # only the watch may repair it in this test
        ) as s:
            ca = read_cert_dir(s.cert_dir).ca_bundle_b64

            def trusted(name: str, plural: str) -> bool:
                cfg = s.get(plural, name) or {}
                hooks = cfg.get("webhooks") or []
                return bool(hooks) and all(h["clientConfig"].get("caBundle") == ca for h in hooks)

            await eventually(
                lambda: trusted(MUTATING, "mutatingwebhookconfigurations"), what="injected"
            )
            for res, name, plural in (
                (k.MUTATING_WEBHOOKS, MUTATING, "mutatingwebhookconfigurations"),
                (k.VALIDATING_WEBHOOKS, VALIDATING, "validatingwebhookconfigurations"),
            ):
                cfg = await s.user.get(res, name)
                fresh = {
                    "apiVersion": cfg.get("apiVersion", "admissionregistration.k8s.io/v1"),
                    "kind": cfg.get("kind", res.kind),
                    "metadata": {"name": name, "labels": cfg["metadata"].get("labels") or {}},
                    "webhooks": cfg["webhooks"],
                }
                for hook in fresh["webhooks"]:
                    hook["clientConfig"].pop("caBundle", None)
                # what `kubectl delete -f && kubectl apply -f` of the manifest does
                await s.user.delete(res, name)
                await s.user.create(res, fresh)
                await eventually(
                    lambda name=name, plural=plural: trusted(name, plural),
                    what=f"{name} trusts the service's CA again",
                )
            created = await s.user.create(
                k.JOBS, job("team-a", "after", queue="lq"), namespace="team-a"
            )
            assert created["spec"]["suspend"] is True  # through the mutating webhook, over TLS

    run(main)


def test_every_write_is_recorded_under_the_quartermaster_field_manager(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(k.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and not j["spec"]["suspend"],
                what="the job starts",
            )
            service_writes = [
                r
                for r in s.server.requests
                if r.verb in ("create", "update", "patch")
                and r.user in ("", SA_USERNAME)  # the proxy sees only the service's
            ]
            assert service_writes
            assert all(r.query.get("fieldManager") == "quartermaster" for r in service_writes)
            if hasattr(s.server, "cluster"):  # the real server records managedFields
                wl = s.workload_of_job("team-a", "train")
                job_obj = s.get("jobs", "train", "team-a")
                managers = {
                    m["manager"]
                    for o in (wl, job_obj)
                    for m in o["metadata"].get("managedFields") or []
                }
                assert "quartermaster" in managers
                assert "OpenAPI-Generator" not in managers

    run(main)
