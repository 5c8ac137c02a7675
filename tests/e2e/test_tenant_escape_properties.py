"""Property: no sequence of tenant actions runs more than the cohort tree admits.

A tenant (a namespace user, also allowed to patch ``workloads/status``) does random
things through the API server, as a script would: creates objects of every kind the
lifecycle table knows, batch Jobs, StatefulSets and queued pods; scales a Job (the Job
controller runs ``min(parallelism, completions)``) or a StatefulSet; edits the limits
of an object's pod template (dropping its requests, so the limit stands in for them) or
resizes a pod in place (``pods/resize``); deletes a StatefulSet's pod, which its
controller recreates from the template as it is now; moves an object to the other
queue; writes ``reclaimablePods`` into a Workload; writes pods and Jobs that name an
existing object as their controller; strips the scheduling gates off a pod. Each step
is answered by the webhooks and the service; once the service is idle, what would run —
every ungated pod, every unsuspended Job's and object's pods, as their controllers would
start them (the double has none that create pods: the test plays the StatefulSet
controller there), each charged its cpu as a Workload counts it (limits standing in
for missing requests) — stays within each ClusterQueue's quota plus what it may borrow,
and within the cohort's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from admission.integrations.framework.fields import IntegrationError
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH
from queues.pods import pod_requests
from tests.e2e.test_e2e_tenant_escapes import CASES, GATE, forged_pod, queued_pod
from tests.support.integration_kit import NS, KindCase, crds_of, meta
from tests.support.kube_harness import (
    Obj,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
)
from tests.support.kube_harness import stack as start_stack
from tests.unit.integrations.test_integration_statefulset import statefulset

Q = "kueue.x-k8s.io/queue-name"
#: ClusterQueue -> (nominal cpu, what it may borrow from the cohort)
QUOTA = {"cq-a": (4, 3), "cq-b": (3, 1)}
COHORT = sum(n for n, _ in QUOTA.values())
QUEUE_OF = {"lq-a": "cq-a", "lq-b": "cq-b"}
KIND_CASES: list[KindCase] = [p.values[0] for p in CASES]


def objects() -> list[Obj]:
    out = [namespace(NS), flavor("f")]
    for cq, (nominal, borrow) in QUOTA.items():
        out.append(cluster_queue(cq, {"f": {"cpu": nominal}}, cohort="root",
                                 borrowing_limit=str(borrow)))  # fmt: skip
    out += [local_queue(NS, lq, cq) for lq, cq in QUEUE_OF.items()]
    for case in KIND_CASES:
        out += case.extra_objects
    return out


queues = st.sampled_from(sorted(QUEUE_OF))
target = st.integers(min_value=0, max_value=20)
ACTIONS = st.one_of(
    st.tuples(st.just("object"), st.integers(0, len(KIND_CASES) - 1), queues),
    st.tuples(st.just("job"), st.integers(1, 3), queues, st.booleans()),
    st.tuples(st.just("pod"), queues),
    st.tuples(st.just("statefulset"), st.integers(1, 3), queues),
    st.tuples(st.just("scale"), target, st.integers(1, 6)),
    st.tuples(st.just("limits"), target, st.integers(2, 8)),
    st.tuples(st.just("kill"), target),
    st.tuples(st.just("relabel"), target),
    st.tuples(st.just("reclaim"), target),
    st.tuples(st.just("forged-pod"), target),
    st.tuples(st.just("forged-job"), target, st.integers(1, 20)),
    st.tuples(st.just("ungate"), target),
)


class Tenant:
    """What the tenant made: (resource, name, pods it runs when running, KindCase)."""

    def __init__(self, s: Any) -> None:
        self.s = s
        self.made: list[tuple[k.Resource, str, KindCase | None]] = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"

    def pick(self, i: int) -> tuple[k.Resource, str, KindCase | None] | None:
        return self.made[i % len(self.made)] if self.made else None

    async def create(self, res: k.Resource, obj: Obj, case: KindCase | None = None) -> None:
        await self.s.user.create(res, obj, namespace=NS)
        self.made.append((res, obj["metadata"]["name"], case))

    async def act(self, action: tuple[Any, ...]) -> None:
        try:
            await self._act(*action)
        except ApiError:
            pass  # refused: what the webhooks and the API server are for

    async def _act(self, what: str, *args: Any) -> None:
        s = self.s
        if what == "object":
            case, lq = KIND_CASES[args[0]], args[1]
            name = self.name(case.integration.kind.lower())
            await self.create(
                case.resource, case.make(name, case.roles, meta(name, queue=lq)), case
            )
        elif what == "job":
            made = job(NS, self.name("job"), queue=args[1], parallelism=args[0])
            if args[2]:  # a work-queue Job: no completions, so parallelism is what runs
                del made["spec"]["completions"]
            await self.create(kr.JOBS, made)
        elif what == "pod":
            pod = queued_pod(self.name("pod"), cpu="1")
            pod["metadata"]["labels"][Q] = args[0]
            await self.create(kr.PODS, pod)
        elif what == "statefulset":
            name = self.name("sts")
            made = statefulset(name, [("main", args[0])], meta(name, queue=args[1]))
            await self.create(STATEFULSET.resource, made)
        elif (picked := self.pick(args[0])) is None:
            return
        elif what == "scale" and picked[0] in (kr.JOBS, STATEFULSET.resource):
            field = "parallelism" if picked[0] == kr.JOBS else "replicas"
            await s.user.patch(picked[0], picked[1], {"spec": {field: args[1]}}, namespace=NS)
        elif what == "limits":
            await self.raise_limits(picked, str(args[1]))
        elif what == "kill":
            pods = sorted(p["metadata"]["name"] for p in self.statefulset_pods())
            if pods:
                await s.user.delete(kr.PODS, pods[args[0] % len(pods)], namespace=NS)
        elif what == "relabel":
            obj = s.get(picked[0].plural, picked[1], NS) or {}
            lq = (
                "lq-b" if (obj.get("metadata", {}).get("labels") or {}).get(Q) == "lq-a" else "lq-a"
            )
            await s.user.patch(
                picked[0], picked[1], {"metadata": {"labels": {Q: lq}}}, namespace=NS
            )
        elif what == "reclaim":
            for wl in s.workloads(NS):
                ps = wl["spec"]["podSets"][0]
                patch = [{"op": "add", "path": "/status/reclaimablePods",
                          "value": [{"name": ps["name"], "count": ps["count"]}]}]  # fmt: skip
                await s.user.patch(kr.WORKLOADS, wl["metadata"]["name"], patch, namespace=NS,
                                   subresource="status", content_type=JSON_PATCH)  # fmt: skip
        elif what in ("forged-pod", "forged-job"):
            owner = s.get(picked[0].plural, picked[1], NS)
            if owner is None:
                return
            pod = forged_pod(self.name("stowaway"), owner)
            if what == "forged-pod":
                await self.create(kr.PODS, pod)
                return
            child = job(NS, self.name("forged"), queue="lq-a", parallelism=args[1])
            child["metadata"]["ownerReferences"] = pod["metadata"]["ownerReferences"]
            await self.create(kr.JOBS, child)
        elif what == "ungate" and picked[0] == kr.PODS:
            patch = [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
            await s.user.patch(kr.PODS, picked[1], patch, namespace=NS, content_type=JSON_PATCH)

    async def raise_limits(self, picked: tuple[k.Resource, str, KindCase | None], cpu: str) -> None:
        """A pod: resized in place to ``cpu``. An object: its (first) pod template's
        container asks ``cpu`` as a limit only (the limit stands in for the request)."""
        res, name, case = picked
        resources = {"limits": {"cpu": cpu}}
        if res == kr.PODS:
            patch = [{"op": "replace", "path": "/spec/containers/0/resources",
                      "value": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]  # fmt: skip
            await self.s.user.patch(kr.PODS, name, patch, namespace=NS, subresource="resize",
                                    content_type=JSON_PATCH)  # fmt: skip
            return
        obj = self.s.get(res.plural, name, NS)
        if obj is None:
            return
        if case is None:
            path: tuple[Any, ...] = ("spec", "template")
        else:
            try:
                path = tuple(case.integration.roles(obj)[0].path)
            except (IntegrationError, IndexError):
                return  # its templates are elsewhere (a TrainJob's runtime)
        pointer = "/" + "/".join(map(str, path)) + "/spec/containers/0/resources"
        patch = [{"op": "replace", "path": pointer, "value": resources}]
        await self.s.user.patch(res, name, patch, namespace=NS, content_type=JSON_PATCH)

    def statefulset_pods(self) -> list[Obj]:
        return [
            p for p in self.s.server.list_objects("pods", NS)
            if any(r.get("kind") == "StatefulSet" and r.get("controller")
                   for r in p["metadata"].get("ownerReferences") or [])
        ]  # fmt: skip

    async def play_statefulset_controller(self) -> None:
        """On the double, what the StatefulSet controller does (kube-controller-manager
        does it on the real backend): each missing ordinal's pod from the set's template
        as it is now, and the pods beyond its replicas deleted."""
        cluster = getattr(self.s.server, "cluster", None)
        if getattr(cluster, "controller_manager", None):
            return
        pods = {p["metadata"]["name"]: p for p in self.s.server.list_objects("pods", NS)}
        for res, name, _ in self.made:
            sts = self.s.get(res.plural, name, NS) if res == STATEFULSET.resource else None
            if sts is None or sts["metadata"].get("deletionTimestamp"):
                continue
            replicas = sts["spec"].get("replicas", 1)
            tmpl = sts["spec"]["template"]
            for i in range(max(replicas, 0)):
                pod_name = f"{name}-{i}"
                if pod_name in pods:
                    continue
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": pod_name, "namespace": NS,
                    "labels": {**(tmpl["metadata"].get("labels") or {}),
                               "apps.kubernetes.io/pod-index": str(i),
                               "statefulset.kubernetes.io/pod-name": pod_name},
                    "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                         "name": name, "uid": sts["metadata"]["uid"],
                                         "controller": True, "blockOwnerDeletion": True}]},
                    "spec": tmpl["spec"]}  # fmt: skip
                try:
                    await self.s.user.create(kr.PODS, pod, namespace=NS)
                except ApiError:
                    pass  # refused: the controller retries, and so does the next round
            for pod_name, pod in pods.items():
                ordinal = pod_name.removeprefix(f"{name}-")
                if pod_name.startswith(f"{name}-") and ordinal.isdigit():
                    if int(ordinal) >= replicas and not pod["metadata"].get("deletionTimestamp"):
                        try:
                            await self.s.user.delete(kr.PODS, pod_name, namespace=NS)
                        except ApiError:
                            pass

    def running(self) -> dict[str, int]:
        """ClusterQueue -> milli-cpu of what would run now, as Workloads count it: every
        ungated pod (a Job's pods are counted with their Job), every running Job's and
        object's pods."""
        out = dict.fromkeys(QUOTA, 0)

        def cpu(spec: Any) -> int:
            return pod_requests(spec or {}).get("cpu", 0)

        def queue_of(obj: Obj) -> str:
            return QUEUE_OF.get((obj["metadata"].get("labels") or {}).get(Q, ""), "cq-a")

        for pod in self.s.server.list_objects("pods", NS):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("batch.kubernetes.io/controller-uid"):
                continue  # its Job's, counted with the Job
            gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
            if GATE not in gates and (pod.get("status") or {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                out[queue_of(pod)] += cpu(pod["spec"])
        for res, name, case in self.made:
            obj = self.s.get(res.plural, name, NS)
            if obj is None or res in (kr.PODS, STATEFULSET.resource):
                continue
            cq = queue_of(obj)
            if res == kr.JOBS and not obj["spec"].get("suspend"):
                # the Job controller keeps min(parallelism, completions) pods running
                parallelism = obj["spec"].get("parallelism", 1)
                completions = obj["spec"].get("completions")
                pods = parallelism if completions is None else min(parallelism, completions)
                out[cq] += pods * cpu(obj["spec"]["template"].get("spec"))
            elif case is not None and not case.integration.is_suspended(obj):
                try:
                    roles = [(r.count, cpu(r.template.get("spec")))
                             for r in case.integration.roles(obj)]  # fmt: skip
                except IntegrationError:  # templates elsewhere (a TrainJob's runtime)
                    roles = [(n, 1000) for _, n in case.roles]
                out[cq] += sum(n * each for n, each in roles)
        return out


async def settled(s: Any) -> None:
    ctl = s.service.controller
    for _ in range(2):  # the events of the last writes reach the controller in between
        await eventually(ctl.idle, what="the service is idle", timeout=60)
        await asyncio.sleep(0.2)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(actions=st.lists(ACTIONS, min_size=2, max_size=7))
# the limits attacks, every run: a running pod resized up in place; a StatefulSet whose
# template's limit (standing in for its request) is raised, then a pod deleted and
# recreated from the edited template
@example(actions=[("pod", "lq-a"), ("limits", 0, 8)])
@example(actions=[("statefulset", 2, "lq-a"), ("limits", 0, 8), ("kill", 0)])
def test_no_tenant_actions_run_more_than_the_cohort_tree_admits(
    actions: list[tuple[Any, ...]], tmp_path_factory: pytest.TempPathFactory, backend: Any
) -> None:
    tmp_path: Path = tmp_path_factory.mktemp("escape")

    async def main() -> None:
        crds = crds_of(*(c.integration for c in KIND_CASES))
        async with start_stack(tmp_path, backend=backend, objects=objects(), crds=crds) as s:
            tenant = Tenant(s)
            for action in actions:
                await tenant.act(action)
                for _ in range(2):  # a killed pod goes (its finalizer lifted), then comes back
                    await tenant.play_statefulset_controller()
                    await settled(s)
                running = tenant.running()
                for cq, (nominal, borrow) in QUOTA.items():
                    assert running[cq] <= 1000 * (nominal + borrow), (cq, running, action, actions)
                assert sum(running.values()) <= 1000 * COHORT, (running, action, actions)

    asyncio.run(main())
