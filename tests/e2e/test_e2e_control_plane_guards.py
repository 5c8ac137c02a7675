"""What the real control plane showed about the service's guards: certificates, webhooks, identity.

The caBundle stays injected when the webhook configurations are reapplied and the
visibility APIServices trust the service CA; with the service down only queued pods are
refused; only the service may change the status of a Job's Workload, and the real server
fences the service identity to the changes it makes.

Each test runs on the double and on a real kube-apiserver (``[real]``, with
``KUBEBUILDER_ASSETS``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from tests.e2e._control_plane import BASE, MUTATING, VALIDATING, run
from tests.support.kube_harness import admitted, eventually, is_true, job, stack
from webhooks.server.certs import read_cert_dir


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
                (kr.MUTATING_WEBHOOKS, MUTATING, "mutatingwebhookconfigurations"),
                (kr.VALIDATING_WEBHOOKS, VALIDATING, "validatingwebhookconfigurations"),
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
                kr.JOBS, job("team-a", "after", queue="lq"), namespace="team-a"
            )
            assert created["spec"]["suspend"] is True  # through the mutating webhook, over TLS

    run(main)


def test_with_the_service_down_only_queued_pods_are_refused(tmp_path: Path, backend: Any) -> None:
    """The Pod webhooks select pods that name a LocalQueue: when no replica answers,
    pods elsewhere (ingress, monitoring, CronJobs) are still created."""
    from admission.kube.client.errors import ApiError

    def pod(name: str, **labels: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            s.service.stop()
            await asyncio.wait_for(s.task, timeout=20)
            created = await s.user.create(kr.PODS, pod("plain", app="web"), namespace="team-a")
            assert created["metadata"]["name"] == "plain"
            try:
                await s.user.create(
                    kr.PODS,
                    pod("queued", **{"kueue.x-k8s.io/queue-name": "lq"}),
                    namespace="team-a",
                )
            except ApiError as err:
                assert err.status == 500 and "mpod.kb.io" in err.message, err
            else:
                raise AssertionError("a queued pod was created without its webhook")

    run(main)


def test_only_the_service_may_change_the_status_of_a_jobs_workload(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 13's quota escape: anyone with workloads/status set Finished=True on a
    running Job's Workload and got its quota released while the pods kept running."""
    from admission.kube.client.errors import ApiError
    from admission.kube.client.rest import JSON_PATCH

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "train", queue="lq", cpu="4"), namespace="team-a"
            )
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("team-a", "train")) and w,
                what="admitted",
            )
            finished = {
                "op": "add",
                "path": "/status/conditions/-",
                "value": {"type": "Finished", "status": "True", "reason": "Succeeded",
                          "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            }  # fmt: skip
            for patch in ([finished], [{"op": "remove", "path": "/status/admission"}]):
                try:
                    await s.user.patch(
                        kr.WORKLOADS, wl["metadata"]["name"], patch, namespace="team-a",
                        subresource="status", content_type=JSON_PATCH,
                    )  # fmt: skip
                except ApiError as err:
                    assert err.status == 403, err
                    assert "can only be changed by the admission service" in err.message
                else:
                    raise AssertionError(f"{patch} was accepted")
            assert admitted(s.workload_of_job("team-a", "train"))
            assert not is_true(s.workload_of_job("team-a", "train"), "Finished")

    run(main)


def test_real_server_fences_the_service_identity_to_the_changes_it_makes(
    tmp_path: Path, real_cluster: Any
) -> None:
    """manifests/base/admission-policy.yaml (ValidatingAdmissionPolicy, evaluated by
    kube-apiserver; the double does not model it): the service account may not swap a
    pod's image or rewrite its webhooks' rules, though RBAC lets it patch both."""
    from admission.kube.client.errors import ApiError

    async def main() -> None:
        async with stack(tmp_path, backend=real_cluster, objects=BASE) as s:
            svc = s.service.client
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }  # fmt: skip
            await s.user.create(kr.PODS, pod, namespace="team-a")
            patch = {"spec": {"containers": [{"name": "c", "image": "evil:latest"}]}}
            try:
                await svc.patch(kr.PODS, "p", patch, namespace="team-a")
            except ApiError as err:
                assert err.status in (403, 422), err
                assert "may not change a pod's containers" in err.message, err
            else:
                raise AssertionError("the service account swapped a pod's image")
            hooks = await s.user.get(kr.MUTATING_WEBHOOKS, MUTATING)
            name = hooks["webhooks"][0]["name"]
            rewrite = {"webhooks": [{"name": name, "failurePolicy": "Ignore"}]}
            try:
                await svc.patch(
                    kr.MUTATING_WEBHOOKS, MUTATING, rewrite, content_type=k.STRATEGIC_MERGE_PATCH
                )
            except ApiError as err:
                assert "may change only the webhooks' caBundle" in err.message, err
            else:
                raise AssertionError("the service account rewrote its webhook")
            # what the service does itself still works: the caBundle stays ours
            # (checked by the stack), and a queued pod is still admitted and ungated
            await s.user.create(kr.JOBS, job("team-a", "j", queue="lq"), namespace="team-a")
            await eventually(lambda: admitted(s.workload_of_job("team-a", "j")), what="admitted")

    run(main)


def _shipped_api_services() -> list[dict[str, Any]]:
    import yaml

    from tests.support.kube_harness import ROOT

    docs = yaml.safe_load_all((ROOT / "manifests/base/visibility.yaml").read_text())
    return [d for d in docs if d and d.get("kind") == "APIService"]


def test_the_visibility_api_services_trust_the_service_ca_and_are_repaired(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 17: the APIServices are shipped without insecureSkipTLSVerify; the service
    writes its CA into spec.caBundle (under the shipped RBAC on the real server: by
    resourceNames) and puts it back when an APIService is re-created Kueue's way."""
    shipped = _shipped_api_services()
    assert [a["metadata"]["name"] for a in shipped] == [
        "v1beta1.visibility.kueue.x-k8s.io",
        "v1beta2.visibility.kueue.x-k8s.io",
    ]
    assert all("insecureSkipTLSVerify" not in a["spec"] for a in shipped)

    async def main() -> None:
        async with stack(
            tmp_path,
            backend=backend,
            objects=[*BASE, *shipped],
            visibility=True,
            inject_ca_bundle=True,
            ca_bundle_period=3600.0,  # only the watch may repair it in this test
        ) as s:
            ca = read_cert_dir(s.cert_dir).ca_bundle_b64

            def trusted(name: str) -> bool:
                spec = (s.get("apiservices", name) or {}).get("spec") or {}
                return spec.get("caBundle") == ca and not spec.get("insecureSkipTLSVerify")

            for a in shipped:
                await eventually(lambda n=a["metadata"]["name"]: trusted(n), what="injected")
            name = shipped[1]["metadata"]["name"]
            kueue_style = {**shipped[1], "spec": {**shipped[1]["spec"]}}
            kueue_style["spec"]["insecureSkipTLSVerify"] = True
            await s.user.delete(kr.API_SERVICES, name)
            await s.user.create(kr.API_SERVICES, kueue_style)
            await eventually(lambda: trusted(name), what=f"{name} trusts the service's CA again")
            # why the manifests must not ship insecureSkipTLSVerify: true (both backends)
            try:
                await s.user.patch(kr.API_SERVICES, name, {"spec": {"insecureSkipTLSVerify": True}})
                raise AssertionError("insecureSkipTLSVerify next to a caBundle was accepted")
            except ApiError as err:
                assert err.status == 422, err
                assert "may not be true if caBundle is present" in err.message, err

    run(main)
