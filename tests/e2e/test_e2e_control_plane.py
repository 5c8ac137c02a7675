"""What the real control plane showed: refused writes back off, caBundle stays injected,
and every write carries the product's field manager.

Each test runs on the double and on a real kube-apiserver (``[real]``, with
``KUBEBUILDER_ASSETS``); faults on the real one come from the fault proxy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from admission.kube.control.context import ControllerOptions
from tests.support.kube_harness import (
    SA_USERNAME,
    SERVICE_NS,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)
from webhooks.server.certs import read_cert_dir

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
            await s.user.create(kr.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
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
                kr.WORKLOADS, wl["metadata"]["name"], {"spec": {"active": False}}, namespace="team-a"
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
            events = (await s.user.list(kr.EVENTS, namespace="team-a"))["items"]
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


def test_every_write_is_recorded_under_the_quartermaster_field_manager(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(kr.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
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


def test_preempting_a_started_job_takes_three_writes_and_no_retries(
    tmp_path: Path, backend: Any
) -> None:
    """Suspend, clear status.startTime, restore the template: the victim's Job is
    stopped in exactly the writes the API server allows, none refused or repeated."""
    from admission.apiserver_double.jobcontroller import start_patch
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f", pool="a"),
        cluster_queue("cq", {"f": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            controller_manager = getattr(
                getattr(s.server, "cluster", None), "controller_manager", False
            )
            await s.user.create(
                kr.JOBS, job("team-a", "victim", queue="lq", cpu="3", priority_class="low"),
                namespace="team-a",
            )  # fmt: skip
            j = await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and not j["spec"]["suspend"] and j,
                what="the victim starts",
            )
            if not controller_manager:  # play the Job controller: the Job has started
                patch = start_patch(j)
                assert patch is not None
                await s.user.patch(
                    kr.JOBS, "victim", patch, namespace="team-a", subresource="status"
                )
            await eventually(
                lambda: (
                    (j := s.get("jobs", "victim", "team-a"))
                    and (j.get("status") or {}).get("startTime")
                    and (j.get("status") or {}).get("active")
                ),
                what="the victim's Job has started pods",
            )
            calls: list[str] = []
            client = s.service.client
            counted = client.on_request

            def on_request(call: str) -> None:
                calls.append(call)
                if counted is not None:
                    counted(call)

            client.on_request = on_request
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await s.user.create(
                kr.JOBS, job("team-a", "urgent", queue="lq", cpu="3", priority_class="high"),
                namespace="team-a",
            )  # fmt: skip
            await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and j["spec"]["suspend"],
                what="the victim is suspended",
            )
            if not controller_manager:  # its pods go away
                await s.user.patch(
                    kr.JOBS, "victim", {"status": {"active": 0}}, namespace="team-a",
                    subresource="status",
                )  # fmt: skip
            await eventually(
                lambda: (j := s.get("jobs", "urgent", "team-a")) and not j["spec"]["suspend"],
                what="the preemptor starts",
                timeout=30,
            )
            took = loop.time() - t0
            victim = s.get("jobs", "victim", "team-a")
            assert victim["spec"]["suspend"] is True
            assert not victim["status"].get("startTime")
            assert "kueue.x-k8s.io/podset" not in victim["spec"]["template"]["metadata"].get(
                "labels", {}
            )
            # victim: suspend, startTime cleared, template restored; preemptor: started
            assert calls.count("patch batch/jobs") == 3, calls
            assert calls.count("patch batch/jobs/status") == 1, calls
            assert s.service.metrics.reconcile_errors._metrics == {}  # nothing was refused
            print(f"preempting a started Job took {took:.2f} s on {backend!s:.40}")

    run(main)


def test_transient_admission_write_errors_do_not_cost_a_workload_its_place(
    tmp_path: Path, backend: Any
) -> None:
    """Three 500s on the higher-priority workload's admission write: it is admitted at
    the next try; the lower-priority one, which would fit in its place, waits."""
    from admission.integrations.framework.composition import compose
    from admission.integrations.kinds.job import JOB
    from queues.model import PriorityClass
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("cq", {"f": {"cpu": 4}}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]
    wpcs = {"low": PriorityClass("low", 10), "high": PriorityClass("high", 1000)}
    jobs = [
        job("team-a", "high", queue="lq", cpu="3", priority_class="high", suspend=True),
        job("team-a", "low", queue="lq", cpu="3", priority_class="low", suspend=True),
    ]

    def before(server: Any) -> None:
        for j in jobs:
            stored = server.put_object(j)
            _, body = compose(JOB, stored, workload_priority_classes=wpcs, priority_classes={})
            server.put_object(body)
            if j["metadata"]["name"] == "high":
                server.fail_next(
                    3, code=500, verb="patch", resource="workloads/status",
                    name=body["metadata"]["name"],
                )  # fmt: skip

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects, webhooks=False, before_start=before
        ) as s:
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "high")), what="high admitted"
            )
            await asyncio.sleep(0.5)
            assert not admitted(s.workload_of_job("team-a", "low"))

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
                    kr.PODS, pod("queued", **{"kueue.x-k8s.io/queue-name": "lq"}), namespace="team-a"
                )
            except ApiError as err:
                assert err.status == 500 and "mpod.kb.io" in err.message, err
            else:
                raise AssertionError("a queued pod was created without its webhook")

    run(main)


def test_a_cluster_queue_the_model_cannot_hold_is_reported_inactive(
    tmp_path: Path, backend: Any
) -> None:
    """1e1001 is a valid Kubernetes quantity (the API server stores it) but beyond any
    exact arithmetic: the ClusterQueue says so in its status instead of vanishing."""
    huge = cluster_queue("huge", {"f": {"cpu": "1e1001"}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=[*BASE, huge]) as s:
            cq = await eventually(
                lambda: (
                    (c := s.get("clusterqueues", "huge"))
                    and any(
                        x["type"] == "Active" and x["status"] == "False"
                        for x in (c.get("status") or {}).get("conditions") or []
                    )
                    and c
                ),
                what="the ClusterQueue is reported inactive",
            )
            (active,) = cq["status"]["conditions"]
            assert active["reason"] == "InvalidSpec"
            assert "nominalQuota" in active["message"], active
            ok = await eventually(lambda: s.get("clusterqueues", "cq"), what="cq")
            assert ok is not None  # the others keep working
            await s.user.create(kr.JOBS, job("team-a", "fine", queue="lq"), namespace="team-a")
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "fine")), what="cq still admits"
            )

    run(main)


def test_scaling_a_running_job_stops_it_and_requeues_it_at_its_new_size(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 13's quota escape: parallelism 1 -> 8 on an admitted, running Job must not
    run 8 pods on a 1-pod admission. The Job is stopped, its Workload takes the new
    shape and waits (8 cpu do not fit in 4)."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            grow = job("team-a", "grow", queue="lq", cpu="1")
            del grow["spec"]["completions"]  # work queue style: parallelism pods run
            await s.user.create(kr.JOBS, grow, namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "grow", "team-a")) and not j["spec"]["suspend"],
                what="the job runs",
            )
            await s.user.patch(kr.JOBS, "grow", {"spec": {"parallelism": 8}}, namespace="team-a")
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "grow"))
                    and w["spec"]["podSets"][0]["count"] == 8
                    and not admitted(w)
                    and w
                ),
                what="the Workload takes the new shape and gives the quota back",
                timeout=30,
            )
            evicted = next(c for c in wl["status"]["conditions"] if c["type"] == "Evicted")
            assert evicted["reason"] == "NoMatchingWorkload"
            assert "admitted for 1 pods, the job now has 8" in evicted["message"]
            j = s.get("jobs", "grow", "team-a")
            assert j["spec"]["suspend"] is True
            reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert reserved["status"] == "False"
            # the freed quota is the ClusterQueue's again: a 4-cpu job is admitted
            await s.user.create(
                kr.JOBS, job("team-a", "other", queue="lq", cpu="4"), namespace="team-a"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "other")), what="other admitted"
            )
            assert not admitted(s.workload_of_job("team-a", "grow"))

    run(main)


def test_a_partially_admitted_job_runs_at_the_admitted_count(tmp_path: Path, backend: Any) -> None:
    """job-min-parallelism: 6 pods asked, 4 fit: the Job starts with parallelism 4 (not
    6 pods on a 4-pod admission), and gets 6 back when it is stopped."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            body = job("team-a", "elastic", queue="lq", cpu="1", parallelism=6)
            body["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "2"}
            await s.user.create(kr.JOBS, body, namespace="team-a")
            j = await eventually(
                lambda: (
                    (j := s.get("jobs", "elastic", "team-a")) and not j["spec"]["suspend"] and j
                ),
                what="the job starts",
            )
            assert j["spec"]["parallelism"] == 4
            wl = s.workload_of_job("team-a", "elastic")
            assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 4
            await asyncio.sleep(0.5)  # no eviction for the lowered parallelism
            assert admitted(s.workload_of_job("team-a", "elastic"))
            assert not is_true(s.workload_of_job("team-a", "elastic"), "Evicted")
            await s.user.patch(
                kr.WORKLOADS, wl["metadata"]["name"], {"spec": {"active": False}}, namespace="team-a"
            )
            await eventually(
                lambda: (
                    (j := s.get("jobs", "elastic", "team-a"))
                    and j["spec"]["suspend"]
                    and j["spec"]["parallelism"] == 6
                ),
                what="stopped, with its parallelism restored",
                timeout=30,
            )

    run(main)


def test_a_raised_priority_of_an_admitted_workload_protects_it_from_preemption(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 12 bug 6 through serve: the cache re-reads an admitted Workload whose spec
    changed, so preemption compares against its new priority."""
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("cq", {"f": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("mid", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "a", queue="lq", cpu="3", priority_class="low"),
                namespace="team-a",
            )  # fmt: skip
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("team-a", "a")) and w, what="a admitted"
            )
            await s.user.patch(
                kr.WORKLOADS,
                wl["metadata"]["name"],
                {"spec": {"priority": 5000}},
                namespace="team-a",
            )
            key = f"team-a/{wl['metadata']['name']}"
            await eventually(
                lambda: (
                    (w := s.service.controller.cache.workloads.get(key)) is not None
                    and w.priority == 5000
                ),
                what="the service sees the new priority",
            )
            await s.user.create(
                kr.JOBS, job("team-a", "b", queue="lq", cpu="3", priority_class="mid"),
                namespace="team-a",
            )  # fmt: skip
            await eventually(lambda: s.workload_of_job("team-a", "b"), what="b's Workload")
            await asyncio.sleep(1.0)
            assert admitted(s.workload_of_job("team-a", "a"))
            assert not is_true(s.workload_of_job("team-a", "a"), "Evicted")
            assert not admitted(s.workload_of_job("team-a", "b"))

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


def test_a_cohort_cycle_that_slipped_past_the_webhook_disables_its_members(
    tmp_path: Path, backend: Any
) -> None:
    """The webhook's cycle check is best effort: two concurrent edits (a.parent=b and
    b.parent=a) are each valid alone and are both admitted. At run time the members of
    the cycle are inactive, with the cycle spelled out, and admit nothing."""

    def cohort(name: str, parent: str) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": name},
            "spec": {"parentName": parent},
        }

    objects = [
        namespace("team-a"),
        flavor("f"),
        cohort("a", "b"),
        cohort("b", "a"),
        cluster_queue("cq", {"f": {"cpu": 4}}, cohort="a"),
        local_queue("team-a", "lq", "cq"),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            cq = await eventually(
                lambda: (
                    (c := s.get("clusterqueues", "cq"))
                    and any(
                        x["type"] == "Active" and x["status"] == "False"
                        for x in (c.get("status") or {}).get("conditions") or []
                    )
                    and c
                ),
                what="the ClusterQueue in the cycle is inactive",
            )
            (active,) = cq["status"]["conditions"]
            assert "cycle" in active["message"].lower(), active
            assert "a" in active["message"] and "b" in active["message"]
            await s.user.create(kr.JOBS, job("team-a", "j", queue="lq"), namespace="team-a")
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "j"))
                    and any(
                        c["type"] == "QuotaReserved" and c["status"] == "False"
                        for c in (w.get("status") or {}).get("conditions") or []
                    )
                    and w
                ),
                what="the job's Workload says why it waits",
            )
            reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert "cycle" in reserved["message"].lower(), reserved
            assert not admitted(wl)

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
