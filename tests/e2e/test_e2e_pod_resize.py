"""In-place pod resize (``pods/resize``) cannot grow a pod beyond what its Workload admitted.

On the double (which serves the subresource and calls the webhook registered for it, as
kube-apiserver does) and on a real kube-apiserver (1.33+, where the subresource exists):
a tenant resizes an admitted pod — a single queued pod, a pod group's member, a batch
Job's pod (which names no queue) — up, and is refused with a field error naming the pod
and the container's field; lowering it is allowed; a pod of no queue grows freely.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH
from tests.e2e.test_e2e_tenant_escapes import SMALL_QUEUE, gated, queued_pod
from tests.support.kube_harness import Obj, admitted, eventually, job

NS = "team-a"
JOB_POD = "j-pod"


def _controller_runs(s: Any) -> bool:
    return bool(getattr(getattr(s.server, "cluster", None), "controller_manager", None))


async def _job_pod(s: Any) -> str:
    """An admitted 1-cpu Job's pod (its controller's on the real backend, played on the
    double): it carries no queue label; the Job's admission covers it."""
    created = await s.user.create(k.JOBS, job(NS, "j", queue="lq", cpu="1"), namespace=NS)
    await eventually(lambda: admitted(s.workload_of_job(NS, "j")), what="the Job admitted")
    if _controller_runs(s):
        pod = await eventually(
            lambda: next(
                (p for p in s.server.list_objects("pods", NS)
                 if p["metadata"].get("labels", {}).get("job-name") == "j"),
                None,
            ),
            what="the Job controller's pod",
        )  # fmt: skip
        return str(pod["metadata"]["name"])
    stored = await eventually(
        lambda: (j := s.get("jobs", "j", NS)) and not j["spec"]["suspend"] and j,
        what="the Job started",
    )
    uid = created["metadata"]["uid"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": JOB_POD, "namespace": NS,
            "labels": {**stored["spec"]["template"]["metadata"]["labels"]},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                 "uid": uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": stored["spec"]["template"]["spec"],
    }  # fmt: skip
    made = await s.user.create(k.PODS, pod, namespace=NS)
    assert not gated(made)
    return JOB_POD


async def _queued_pods(s: Any, pods: list[Obj]) -> str:
    for p in pods:
        await s.user.create(k.PODS, p, namespace=NS)
    name = str(pods[0]["metadata"]["name"])
    await eventually(lambda: not gated(s.get("pods", name, NS)), what="the pod ungated")
    return name


SETUPS = {
    "single-pod": lambda s: _queued_pods(s, [queued_pod("single", cpu="1")]),
    "group-member": lambda s: _queued_pods(
        s, [queued_pod(f"g-{i}", cpu="1", group="g", total=2) for i in range(2)]
    ),
    "job-pod": _job_pod,
}


async def patch_resources(s: Any, name: str, resources: Obj) -> Obj:
    """``kubectl patch pod NAME --subresource resize``: its first container's resources."""
    patch = [{"op": "replace", "path": "/spec/containers/0/resources", "value": resources}]
    return await s.user.patch(  # type: ignore[no-any-return]
        k.PODS, name, patch, namespace=NS, subresource="resize", content_type=JSON_PATCH
    )


def requests_cpu(s: Any, name: str) -> str:
    pod = s.get("pods", name, NS)
    assert pod is not None
    return str(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"])


@pytest.mark.parametrize("setup", list(SETUPS))
def test_a_pod_running_on_quota_cannot_be_resized_up(
    setup: str, tmp_path: Path, backend: Any
) -> None:
    """A queue of 2 cpu, a pod admitted for 1: resizing it to 2 cpu would run 2 on a
    queue that charges 1 (and, for the group, 3 on 2)."""

    async def main() -> None:
        async with stack_for(tmp_path, backend) as s:
            name = await SETUPS[setup](s)
            with pytest.raises(ApiError) as caught:
                await patch_resources(s, name, {"requests": {"cpu": "2"}})
            assert caught.value.status == 403, caught.value
            message = caught.value.message
            assert "spec.containers[0].resources.requests[cpu]: Forbidden" in message, message
            assert f"pod {NS}/{name} runs on the quota its Workload was admitted with" in message
            assert requests_cpu(s, name) == "1"
            # lowering stays within what was admitted
            await patch_resources(s, name, {"requests": {"cpu": "500m"}})
            assert requests_cpu(s, name) == "500m"

    asyncio.run(main())


def test_a_pod_of_no_queue_is_resized_freely(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack_for(tmp_path, backend) as s:
            pod = queued_pod("free", cpu="1")
            del pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
            await s.user.create(k.PODS, pod, namespace=NS)
            await patch_resources(s, "free", {"requests": {"cpu": "3"}})
            assert requests_cpu(s, "free") == "3"

    asyncio.run(main())


def stack_for(tmp_path: Path, backend: Any) -> Any:
    from tests.support.kube_harness import stack

    return stack(tmp_path, backend=backend, objects=SMALL_QUEUE)
