"""Property: no sequence of tenant actions runs more than the cohort tree admits.

A tenant (a namespace user, also allowed to patch ``workloads/status``) does random
things through the API server, as a script would: creates objects of every kind the
lifecycle table knows, batch Jobs and queued pods; scales a Job (the Job controller runs ``min(parallelism, completions)``); moves an object to
the other queue; writes ``reclaimablePods`` into a Workload; writes pods and Jobs
that name an existing object as their controller; strips the scheduling gates off a
pod. Each step is answered by the webhooks and the service; once the service is idle,
what would run — every ungated pod, every unsuspended Job's and object's pods, as
their controllers would start them (the double has none that create pods) — stays
within each ClusterQueue's quota plus what it may borrow, and within the cohort's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH
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
    st.tuples(st.just("scale"), target, st.integers(1, 6)),
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
            await self.create(k.JOBS, made)
        elif what == "pod":
            pod = queued_pod(self.name("pod"), cpu="1")
            pod["metadata"]["labels"][Q] = args[0]
            await self.create(k.PODS, pod)
        elif (picked := self.pick(args[0])) is None:
            return
        elif what == "scale" and picked[0] == k.JOBS:
            patch = {"spec": {"parallelism": args[1]}}
            await s.user.patch(k.JOBS, picked[1], patch, namespace=NS)
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
                await s.user.patch(k.WORKLOADS, wl["metadata"]["name"], patch, namespace=NS,
                                   subresource="status", content_type=JSON_PATCH)  # fmt: skip
        elif what in ("forged-pod", "forged-job"):
            owner = s.get(picked[0].plural, picked[1], NS)
            if owner is None:
                return
            pod = forged_pod(self.name("stowaway"), owner)
            if what == "forged-pod":
                await self.create(k.PODS, pod)
                return
            child = job(NS, self.name("forged"), queue="lq-a", parallelism=args[1])
            child["metadata"]["ownerReferences"] = pod["metadata"]["ownerReferences"]
            await self.create(k.JOBS, child)
        elif what == "ungate" and picked[0] == k.PODS:
            patch = [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
            await s.user.patch(k.PODS, picked[1], patch, namespace=NS, content_type=JSON_PATCH)

    def running(self) -> dict[str, int]:
        """ClusterQueue -> cpu of what would run now (every pod asks for 1 cpu)."""
        out = dict.fromkeys(QUOTA, 0)
        for res, name, case in self.made:
            obj = self.s.get(res.plural, name, NS)
            if obj is None:
                continue
            cq = QUEUE_OF.get((obj["metadata"].get("labels") or {}).get(Q, ""), "cq-a")
            if res == k.PODS:
                gates = [g.get("name") for g in obj["spec"].get("schedulingGates") or []]
                out[cq] += 0 if GATE in gates else 1
            elif res == k.JOBS and not obj["spec"].get("suspend"):
                # the Job controller keeps min(parallelism, completions) pods running
                parallelism = obj["spec"].get("parallelism", 1)
                completions = obj["spec"].get("completions")
                out[cq] += parallelism if completions is None else min(parallelism, completions)
            elif case is not None and not case.integration.is_suspended(obj):
                out[cq] += sum(n for _, n in case.roles)
        return out


async def settled(s: Any) -> None:
    ctl = s.service.controller
    for _ in range(2):  # the events of the last writes reach the controller in between
        await eventually(ctl.idle, what="the service is idle", timeout=60)
        await asyncio.sleep(0.2)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(actions=st.lists(ACTIONS, min_size=2, max_size=7))
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
                await settled(s)
                running = tenant.running()
                for cq, (nominal, borrow) in QUOTA.items():
                    assert running[cq] <= nominal + borrow, (cq, running, action, actions)
                assert sum(running.values()) <= COHORT, (running, action, actions)

    asyncio.run(main())
