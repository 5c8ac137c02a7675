"""Quota quantities beyond what a Kubernetes ``resource.Quantity`` holds (2^63-1 in
magnitude) are refused with a field error by the webhook and by ``plan``; one that
reaches the service anyway (written before the webhook, or while it was off) makes its
ClusterQueue inactive, and one queue whose status cannot be computed never freezes the
status of the others nor the release of deleted queues' finalizers."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.kube.client import resources as k
from admission.kube.reconcilers import queue_status as status_module
from queues.api.labels import RESOURCE_IN_USE
from queues.quantity import MAX_MAGNITUDE
from tests.support.kube_harness import (
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)
from tests.support.scenario_runner import run_plan_cli
from webhooks.handlers.quota import schema_problems

NOMINAL = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


def _with_quota(name: str, value: str, field: str = "nominalQuota") -> dict[str, Any]:
    cq = cluster_queue(name, {"default": {"cpu": 4}}, cohort="pool")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][field] = value
    return cq


@pytest.mark.parametrize("field", ["nominalQuota", "borrowingLimit", "lendingLimit"])
@pytest.mark.parametrize("value", ["1e400", "9223372036854775808", "-1e19", "8Ei"])
def test_a_quota_beyond_what_a_quantity_holds_is_a_field_error(field: str, value: str) -> None:
    problems = schema_problems(_with_quota("huge", value, field))
    where = NOMINAL.replace("nominalQuota", field)
    assert any(
        p.startswith(f'{where}: invalid quantity "{value}": more than 2^63-1') for p in problems
    ), problems


def test_the_largest_quantity_is_accepted() -> None:
    assert schema_problems(_with_quota("max", str(MAX_MAGNITUDE))) == []


def test_plan_refuses_the_cluster_queue_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump_all([flavor("default"), _with_quota("huge", "1e400")]))
    code, _doc, err = run_plan_cli(["-f", str(path)])
    assert code == 2
    assert f'ClusterQueue huge: {NOMINAL}: invalid quantity "1e400": more than 2^63-1' in err


def _active(s: Any, name: str) -> dict[str, Any] | None:
    cq = s.get("clusterqueues", name)
    for c in ((cq or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == "Active":
            return c
    return None


def _objects(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    spare = cluster_queue("spare", {"default": {"cpu": 1}})
    spare["metadata"]["finalizers"] = [RESOURCE_IN_USE]
    return [
        namespace("team"),
        flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 4}}),
        spare,
        local_queue("team", "lq", "cq"),
        *extra,
    ]


async def _the_others_keep_their_status(s: Any) -> None:
    """A job on ``cq`` is admitted and ``cq``'s status says so; deleting ``spare``
    releases its finalizer."""
    await s.user.create(k.JOBS, job("team", "j", queue="lq", cpu="2"), namespace="team")
    await eventually(
        lambda: (w := s.workload_of_job("team", "j")) and is_true(w, "Admitted"),
        what="the job is admitted",
    )
    await eventually(
        lambda: (
            ((s.get("clusterqueues", "cq") or {}).get("status") or {}).get("admittedWorkloads") == 1
        ),
        what="cq's status counts the admitted workload",
    )
    await s.user.delete(k.CLUSTER_QUEUES, "spare")
    await eventually(
        lambda: s.get("clusterqueues", "spare") is None,
        what="the deleted ClusterQueue's finalizer is released",
    )


def test_serve_marks_a_huge_quota_inactive_and_keeps_every_other_status(tmp_path: Path) -> None:
    huge = _with_quota("huge", "1e400")
    huge["metadata"]["finalizers"] = [RESOURCE_IN_USE]

    async def main() -> None:
        async with stack(tmp_path, objects=_objects(copy.deepcopy(huge))) as s:
            await _the_others_keep_their_status(s)
            cond = await eventually(
                lambda: (c := _active(s, "huge")) and c["status"] == "False" and c,
                what="the ClusterQueue with the huge quota is inactive",
            )
            assert cond["reason"] == "InvalidSpec"
            assert "1e400" in cond["message"] and "2^63-1" in cond["message"]
            assert not s.task.done()

    asyncio.run(main())


def test_a_queue_whose_status_fails_does_not_freeze_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    computed = status_module.cluster_queue_status

    def failing(cache: Any, name: str, *, fair_sharing: bool) -> dict[str, Any]:
        if name == "broken":
            raise OverflowError("int too large to convert to float")
        return computed(cache, name, fair_sharing=fair_sharing)

    monkeypatch.setattr(status_module, "cluster_queue_status", failing)

    async def main() -> None:
        broken = cluster_queue("broken", {"default": {"cpu": 1}})
        async with stack(tmp_path, objects=_objects(broken)) as s:
            await _the_others_keep_their_status(s)
            cond = await eventually(
                lambda: (c := _active(s, "broken")) and c["status"] == "False" and c,
                what="the ClusterQueue whose status fails says so",
            )
            assert "int too large to convert to float" in cond["message"]

    asyncio.run(main())
