"""``kueue.x-k8s.io/prebuilt-workload-name``: the job runs on the Workload it names.

Kueue's semantics (``ensurePrebuiltWorkloadOwnership``/``InSync``): no Workload is
generated for the job, so its quota is charged once; the job takes the named Workload
as its own; it waits, suspended, while the Workload is missing or controlled by another
object; a Workload of another shape is marked Finished (OutOfSync) and never runs it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.integrations.framework.composition import compose
from admission.kube.client import resources as k
from tests.e2e.test_e2e_tenant_escapes import CASES
from tests.support.integration_kit import KindCase, crds_of, lifecycle_objects
from tests.support.integration_kit import meta as kit_meta
from tests.support.kube_harness import (
    Obj,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
    workload,
)

NS = "team-a"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
OBJECTS = [
    namespace(NS),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 4}}),
    local_queue(NS, "lq", "cq"),
]


def labelled_job(name: str, prebuilt: str, *, parallelism: int = 1) -> Obj:
    obj = job(NS, name, queue="lq", cpu="1", parallelism=parallelism)
    obj["metadata"]["labels"][PREBUILT] = prebuilt
    return obj


def prebuilt_workload(name: str, count: int = 2) -> Obj:
    wl = workload(NS, name, queue="lq", pod_sets=[("main", count, "1")])
    tmpl = wl["spec"]["podSets"][0]["template"]
    tmpl["spec"]["containers"][0]["name"] = "main"
    return wl


def cpu_used(s: Any) -> str | None:
    cq = s.get("clusterqueues", "cq") or {}
    for f in (cq.get("status") or {}).get("flavorsUsage") or []:
        return str(f["resources"][0]["total"])
    return None


def test_a_job_runs_on_the_prebuilt_workload_it_names_charged_once(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            created = await s.user.create(k.JOBS, labelled_job("j", "pre", parallelism=2),
                                          namespace=NS)  # fmt: skip
            assert created["spec"]["suspend"] is True
            await asyncio.sleep(0.5)  # the Workload is not there: none is generated
            assert s.workloads(NS) == []
            await s.user.create(k.WORKLOADS, prebuilt_workload("pre"), namespace=NS)
            await eventually(
                lambda: (j := s.get("jobs", "j", NS)) and j["spec"]["suspend"] is False,
                what="the job started on the prebuilt Workload",
            )
            (wl,) = s.workloads(NS)
            assert wl["metadata"]["name"] == "pre" and admitted(wl)
            (ref,) = wl["metadata"]["ownerReferences"]
            assert (ref["kind"], ref["name"], ref["controller"]) == ("Job", "j", True)
            await eventually(lambda: cpu_used(s) == "2", what="charged once: 2 cpu")

    asyncio.run(main())


def test_a_prebuilt_workload_of_another_shape_is_finished_out_of_sync(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            await s.user.create(k.WORKLOADS, prebuilt_workload("small", count=1), namespace=NS)
            await eventually(
                lambda: admitted(s.get("workloads", "small", NS)), what="small admitted"
            )
            await s.user.create(k.JOBS, labelled_job("wide", "small", parallelism=3),
                                namespace=NS)  # fmt: skip
            wl = await eventually(
                lambda: is_true(w := s.get("workloads", "small", NS), "Finished") and w,
                what="the Workload finished",
            )
            cond = next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
            assert cond["reason"] == "OutOfSync"
            assert cond["message"] == "The prebuilt workload is out of sync with its user job"
            await asyncio.sleep(0.5)
            assert s.get("jobs", "wide", NS)["spec"]["suspend"] is True
            assert [w["metadata"]["name"] for w in s.workloads(NS)] == ["small"]

    asyncio.run(main())


def test_a_job_does_not_take_a_workload_another_job_controls(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            await s.user.create(k.WORKLOADS, prebuilt_workload("pre", count=1), namespace=NS)
            await s.user.create(k.JOBS, labelled_job("first", "pre"), namespace=NS)
            await eventually(
                lambda: (j := s.get("jobs", "first", NS)) and j["spec"]["suspend"] is False,
                what="the first job started",
            )
            await s.user.create(k.JOBS, labelled_job("second", "pre"), namespace=NS)
            await asyncio.sleep(0.5)
            assert s.get("jobs", "second", NS)["spec"]["suspend"] is True
            (wl,) = s.workloads(NS)
            assert [r["name"] for r in wl["metadata"]["ownerReferences"]] == ["first"]
            await eventually(lambda: cpu_used(s) == "1", what="charged once")

    asyncio.run(main())


def prebuilt_for(case: KindCase, obj: Obj, name: str) -> Obj:
    """The Workload the service would build for ``obj``, standalone, named ``name``."""

    def lookup(res: Any, ns: str | None, ref: str) -> Obj | None:
        return next((o for o in case.extra_objects if o["metadata"]["name"] == ref), None)

    resolved = case.integration.resolve(obj, lookup)
    _, body = compose(case.integration, resolved, workload_priority_classes={},
                      priority_classes={})  # fmt: skip
    body["metadata"] = {"name": name, "namespace": NS}
    return body


@pytest.mark.parametrize("case", CASES)
def test_every_kind_runs_on_the_prebuilt_workload_it_names(
    case: KindCase, tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=lifecycle_objects(case),
                         crds=crds_of(case.integration)) as s:  # fmt: skip
            obj = case.make("o", case.roles, kit_meta("o"))
            obj["metadata"]["labels"][PREBUILT] = "pre"
            await s.user.create(k.WORKLOADS, prebuilt_for(case, obj, "pre"), namespace=NS)
            await s.user.create(case.resource, obj, namespace=NS)
            await eventually(
                lambda: (
                    (o := s.get(case.resource.plural, "o", NS))
                    and not case.integration.is_suspended(o)
                ),
                what="started on the prebuilt Workload",
            )
            (wl,) = s.workloads(NS)
            assert wl["metadata"]["name"] == "pre" and admitted(wl)
            assert [r["name"] for r in wl["metadata"]["ownerReferences"]] == ["o"]

    asyncio.run(main())


def test_a_single_pod_larger_than_the_prebuilt_workload_it_names_never_runs(
    tmp_path: Path, backend: Any
) -> None:
    """A tenant's single pod naming a small admitted prebuilt Workload: it must not run
    on that Workload's quota with a larger request."""
    from tests.e2e.test_e2e_podgroups import gated, pod

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            await s.user.create(k.WORKLOADS, prebuilt_workload("small", count=1), namespace=NS)
            await eventually(
                lambda: admitted(s.get("workloads", "small", NS)), what="small admitted"
            )
            big = pod("big", group="unused", total=1, cpu="3")
            big["metadata"]["namespace"] = NS
            del big["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
            del big["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"]
            big["metadata"]["labels"][PREBUILT] = "small"
            await s.user.create(k.PODS, big, namespace=NS)
            await asyncio.sleep(2.0)
            assert gated(s.get("pods", "big", NS)), "the larger pod ran on small's quota"
            assert cpu_used(s) in (None, "0", "1")

    asyncio.run(main())
