"""The managed ancestor up the controller-owner chain (Kueue's
``FindAncestorJobManagedByKueue``), in the walk, the webhooks and the reconciler.

The table is Kueue's own doc-comment examples (reconciler.go), with AppWrapper as the
external framework at the top, plus the stops and errors of the walk. The serve tests
play the JobSet controller (they create the child Jobs and Pods with their owner
references) on both backends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.integrations.ownership import (
    ChainTooDeep,
    CyclicOwnership,
    OwnerNotFound,
    OwnerRef,
    OwnershipError,
    managed_ancestor,
)
from admission.integrations.registry import Frameworks, frameworks
from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from tests.support.integration_kit import NS, Q, lifecycle_objects, meta, pod_template, workload_of
from tests.support.kube_harness import admitted, eventually, stack
from tests.unit.integrations.test_integration_jobset import CASE, jobset
from webhooks.config import WebhookConfig
from webhooks.handlers.owners import has_managed_ancestor, read_owners
from webhooks.review import HandlerContext
from webhooks.view import InMemoryView

JOBSET_V = "jobset.x-k8s.io/v1alpha2"
APPWRAPPER_V = "workload.codeflare.dev/v1beta2"
ALL_AND_APPWRAPPER = frameworks({
    "frameworks": ["batch/job", "pod", "jobset.x-k8s.io/jobset"],
    "externalFrameworks": ["AppWrapper.v1beta2.workload.codeflare.dev"],
})  # fmt: skip
JOBSET_DISABLED = frameworks({
    "frameworks": ["batch/job", "pod"],
    "externalFrameworks": ["AppWrapper.v1beta2.workload.codeflare.dev"],
})  # fmt: skip


def obj(api_version: str, kind: str, name: str, *, queue: bool = False,
        owner: dict | None = None, uid: str | None = None) -> dict:  # fmt: skip
    m: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid or f"uid-{name}"}
    if queue:
        m["labels"] = {Q: "lq"}
    if owner is not None:
        m["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                 "name": owner["metadata"]["name"],
                                 "uid": owner["metadata"]["uid"], "controller": True}]  # fmt: skip
    return {"apiVersion": api_version, "kind": kind, "metadata": m}


def chain(job_q: bool, jobset_q: bool, aw_q: bool) -> tuple[dict, dict[str, dict]]:
    """Job -> JobSet -> AppWrapper, each naming a queue or not; the Job is the one the
    JobSet controller makes for the JobSet's replicated Job ``w``."""
    aw = obj(APPWRAPPER_V, "AppWrapper", "aw", queue=aw_q)
    js = obj(JOBSET_V, "JobSet", "js", queue=jobset_q, owner=aw)
    js["spec"] = {"replicatedJobs": [{"name": "w", "replicas": 1,
                                      "template": {"spec": {"template": pod_template()}}}]}  # fmt: skip
    job = obj("batch/v1", "Job", "js-w-0", queue=job_q, owner=js)
    job["spec"] = {"template": pod_template()}
    return job, {o["metadata"]["name"]: o for o in (aw, js)}


def lookup_in(objects: dict[str, dict]) -> Any:
    return lambda ref: objects.get(ref.name)


def ancestor_name(job: dict, objects: dict[str, dict], fw: Frameworks, mjwqn: bool) -> str | None:
    found = managed_ancestor(
        job, lookup_in(objects), frameworks=fw, manage_without_queue_name=mjwqn
    )
    return found["metadata"]["name"] if found is not None else None


@pytest.mark.parametrize(
    ("queues", "fw", "mjwqn", "want"),
    [
        # Kueue's examples, manageJobsWithoutQueueName=false
        ((False, False, False), ALL_AND_APPWRAPPER, False, None),
        ((True, True, False), ALL_AND_APPWRAPPER, False, "js"),
        ((True, False, True), ALL_AND_APPWRAPPER, False, "aw"),
        ((True, True, True), ALL_AND_APPWRAPPER, False, "aw"),
        ((False, False, True), JOBSET_DISABLED, False, "aw"),  # through a disabled JobSet
        ((True, True, False), JOBSET_DISABLED, False, None),  # a disabled one is not managed
        # manageJobsWithoutQueueName=true: the highest managed ancestor, queue or not
        ((False, False, False), ALL_AND_APPWRAPPER, True, "aw"),
        ((True, True, False), ALL_AND_APPWRAPPER, True, "aw"),
        ((True, False, True), ALL_AND_APPWRAPPER, True, "aw"),
        ((False, False, False), JOBSET_DISABLED, True, "aw"),
    ],
)
def test_the_top_level_managed_ancestor_as_in_kueues_examples(
    queues: tuple[bool, bool, bool], fw: Frameworks, mjwqn: bool, want: str | None
) -> None:
    job, objects = chain(*queues)
    assert ancestor_name(job, objects, fw, mjwqn) == want


def test_the_walk_stops_at_an_unknown_owner_and_at_a_stale_reference() -> None:
    job, objects = chain(True, True, True)
    cron = obj("batch/v1", "CronJob", "cron", queue=True)
    unknown = obj("batch/v1", "Job", "j2", queue=True, owner=cron)
    assert ancestor_name(unknown, {"cron": cron}, ALL_AND_APPWRAPPER, False) is None
    objects["js"] = {**objects["js"], "metadata": {**objects["js"]["metadata"], "uid": "other"}}
    assert ancestor_name(job, objects, ALL_AND_APPWRAPPER, False) is None  # a namesake


def test_a_deployments_pods_reach_it_through_its_replicaset() -> None:
    dep = obj("apps/v1", "Deployment", "web", queue=True)
    rs = obj("apps/v1", "ReplicaSet", "web-1", owner=dep)
    pod = obj("v1", "Pod", "web-1-x", owner=rs)
    ext = frameworks({"frameworks": ["pod"], "externalFrameworks": ["Deployment.v1.apps"]})
    assert ancestor_name(pod, {"web": dep, "web-1": rs}, ext, False) == "web"


def test_a_cycle_an_owner_not_found_and_a_chain_over_ten_are_errors() -> None:
    """External framework owners (AppWrappers here) are walked through unchecked."""
    a = obj(APPWRAPPER_V, "AppWrapper", "a", queue=True)
    b = obj(APPWRAPPER_V, "AppWrapper", "b", queue=True, owner=a)
    a["metadata"]["ownerReferences"] = [{"apiVersion": APPWRAPPER_V, "kind": "AppWrapper",
                                         "name": "b", "uid": "uid-b", "controller": True}]  # fmt: skip
    job = obj("batch/v1", "Job", "j", owner=b)
    with pytest.raises(CyclicOwnership):
        ancestor_name(job, {"a": a, "b": b}, ALL_AND_APPWRAPPER, False)
    with pytest.raises(OwnerNotFound, match="AppWrapper team-a/b"):
        ancestor_name(job, {}, ALL_AND_APPWRAPPER, False)
    objects: dict[str, dict] = {}
    top = obj(APPWRAPPER_V, "AppWrapper", "aw0", queue=True)
    objects["aw0"] = top
    for i in range(1, 11):
        top = obj(APPWRAPPER_V, "AppWrapper", f"aw{i}", owner=top)
        objects[top["metadata"]["name"]] = top
    deep = obj("batch/v1", "Job", "deep", owner=top)
    with pytest.raises(ChainTooDeep, match="exceeded limit of 10"):
        ancestor_name(deep, objects, ALL_AND_APPWRAPPER, False)
    for o in objects.values():
        o["metadata"].pop("labels", None)
    shallow = obj("batch/v1", "Job", "shallow", owner=objects["aw9"])
    assert ancestor_name(shallow, objects, ALL_AND_APPWRAPPER, False) is None  # 10 owners: fine


def test_the_webhook_reads_the_owners_first_then_decides_on_them() -> None:
    job, objects = chain(True, False, True)
    read: list[OwnerRef] = []

    async def source(ref: OwnerRef) -> dict | None:
        read.append(ref)
        return objects.get(ref.name)

    ctx = HandlerContext(view=InMemoryView(), config=WebhookConfig(frameworks=ALL_AND_APPWRAPPER))
    rctx = asyncio.run(read_owners(job, ctx, source))
    assert [r.name for r in read] == ["js", "aw"]
    assert has_managed_ancestor(job, rctx)
    # without a source (serve --webhooks-only) the controller owner's kind decides
    assert has_managed_ancestor(job, ctx)
    rctx = asyncio.run(read_owners(job, ctx, lambda ref: _none()))
    with pytest.raises(OwnerNotFound):
        has_managed_ancestor(job, rctx)

    async def broken(ref: OwnerRef) -> dict | None:
        raise ConnectionError("apiserver unreachable")

    rctx = asyncio.run(read_owners(job, ctx, broken))  # a failed read: refused, saying why
    with pytest.raises(
        OwnershipError, match="cannot read the owner JobSet team-a/js: ConnectionError"
    ):
        has_managed_ancestor(job, rctx)


async def _none() -> None:
    return None


# ---------------------------------------------------------------------------- serve


def child_of(owner: dict, name: str, *, queue: bool, suspend: bool) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **meta(name, queue="lq" if queue else None),
            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                 "name": owner["metadata"]["name"],
                                 "uid": owner["metadata"]["uid"], "controller": True}],
        },
        "spec": {"suspend": suspend, "template": pod_template()},
    }  # fmt: skip


def pod_of(owner: dict, name: str) -> dict:
    tmpl = pod_template()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **meta(name),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                 "name": owner["metadata"]["name"],
                                 "uid": owner["metadata"]["uid"], "controller": True}],
        },
        "spec": tmpl["spec"],
    }  # fmt: skip


def test_a_queued_child_of_an_unqueued_jobset_is_admitted_on_its_own(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue: the JobSet names no queue, so it is no managed ancestor; the Job is top-level."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(CASE), crds=("jobsets",)
        ) as s:
            js = await s.user.create(
                CASE.resource, jobset("js", CASE.roles, meta("js", queue=None)), namespace=NS
            )
            child = await s.user.create(
                k.JOBS, child_of(js, "js-driver-0", queue=True, suspend=False), namespace=NS
            )
            assert child["spec"]["suspend"] is True  # the webhook walked up and found none
            await eventually(
                lambda: admitted(s.workload_of_job(NS, "js-driver-0")), what="its own admission"
            )

    asyncio.run(main())


def test_a_running_child_of_a_pending_jobset_is_suspended_and_gets_no_workload(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue's ``shouldSuspendChildJob``: a child whose managed ancestor is not admitted
    does not run outside quota; a pod naming its suspended Job is gated on its own."""
    too_big = [(CASE.roles[0][0], CASE.roles[0][1]), (CASE.roles[1][0], 100)]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(CASE), crds=("jobsets",)
        ) as s:
            js = await s.user.create(CASE.resource, jobset("js", too_big, meta("js")), namespace=NS)
            await eventually(
                lambda: workload_of(s.server, CASE.integration, "js"), what="its Workload"
            )
            child = await s.user.create(
                k.JOBS, child_of(js, "js-workers-0", queue=True, suspend=False), namespace=NS
            )
            assert child["spec"]["suspend"] is False  # left to the JobSet by the webhook
            await eventually(
                lambda: (j := s.get("jobs", "js-workers-0", NS)) and j["spec"]["suspend"] is True,
                what="the reconciler suspends the child of a JobSet that is not admitted",
            )
            assert s.workload_of_job(NS, "js-workers-0") is None
            # a Pod written to name a suspended Job (which runs no pods) of the JobSet is
            # not covered by it: it is queued on its own, gated
            plain = await s.user.create(
                k.JOBS, child_of(js, "js-workers-1", queue=False, suspend=True), namespace=NS
            )
            created = await s.user.create(k.PODS, pod_of(plain, "js-workers-1-a"), namespace=NS)
            assert created["spec"].get("schedulingGates") == [{"name": "kueue.x-k8s.io/admission"}]
            # an owner that does not exist cannot be decided: refused
            ghost = {"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "ghost", "uid": "0000"}}  # fmt: skip
            with pytest.raises(ApiError, match="workload owner not found"):
                await s.user.create(k.PODS, pod_of(ghost, "orphan"), namespace=NS)

    asyncio.run(main())


def test_a_disabled_integration_is_walked_through_to_its_managed_ancestor() -> None:
    """The walk treats every registered kind as known, enabled or not (Kueue's
    ``isKnownOwner``); only enabled ones (and external ones) can be the ancestor."""
    fw = parse_config({"integrations": {"frameworks": ["batch/job"]}}).frameworks
    job, objects = chain(True, True, False)
    assert ancestor_name(job, objects, fw, False) is None


def test_an_owner_read_from_a_lagging_cache_is_read_again_before_it_disowns() -> None:
    """The service starts a Job and its controller makes the pods at once: the webhook's
    cached copy may still say suspended. A disowning decided on a cached owner is
    decided again on the owner as the API server has it."""
    job = obj("batch/v1", "Job", "j", queue=True)
    job["spec"] = {"suspend": True,
                   "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-j"}}}  # fmt: skip
    started = {**job, "spec": {**job["spec"], "suspend": False}}
    pod = obj("v1", "Pod", "j-x", owner=job)
    pod["metadata"]["labels"] = {"batch.kubernetes.io/controller-uid": "uid-j"}

    class Source:
        fresh_reads: list[str] = []

        async def __call__(self, ref: OwnerRef) -> dict | None:
            return job  # the cache: not yet started

        async def fresh(self, ref: OwnerRef) -> dict | None:
            self.fresh_reads.append(ref.name)
            return started

    ctx = HandlerContext(view=InMemoryView(), config=WebhookConfig(frameworks=ALL_AND_APPWRAPPER))
    source = Source()
    assert has_managed_ancestor(pod, asyncio.run(read_owners(pod, ctx, source)))
    assert source.fresh_reads == ["j"]
