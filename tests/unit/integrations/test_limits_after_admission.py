"""No kind's pods grow after admission through ``limits``.

A pod asks what its requests say, and where a request is missing Kubernetes defaults it
from the limit (GPUs are usually written as limits only). A managed StatefulSet whose
template has only ``limits.cpu: 1`` was admitted as 2 × 1 cpu; raising the limit to 8
was allowed, because the update check compared ``requests`` only, and a replaced pod then
ran 8 cpu on the old Workload. The table below edits, for every kind of the registry,
the limits of a template that has no requests and checks that the edit is caught the
way the kind's reconciler catches edits: refused by the webhook (a pod owner whose
group's Workload outlives its pods), evicted by the reconciler (an object kind: its
Workload no longer matches), or admitted as a new Workload (a Deployment's new pods, a
plain pod, whose template is the pod itself)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from admission.integrations.framework.composition import compose
from admission.integrations.framework.fields import get_path
from admission.integrations.framework.interface import Integration
from admission.integrations.framework.requests import request_changes
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration, UpdateCheck
from admission.integrations.kinds.pod import workload_for_group
from admission.integrations.kinds.trainjob import TRAINJOB
from admission.integrations.registry import INTEGRATIONS
from admission.kube.objects import job_mismatch
from queues.pods import pod_requests
from tests.support.integration_kit import NS, meta, review
from tests.support.kube_harness import job
from tests.unit.integrations.test_integration_deployment import deployment
from tests.unit.integrations.test_integration_jobset import jobset
from tests.unit.integrations.test_integration_leaderworkerset import lws
from tests.unit.integrations.test_integration_mpijob import mpijob
from tests.unit.integrations.test_integration_pytorchjob import pytorchjob
from tests.unit.integrations.test_integration_raycluster import raycluster
from tests.unit.integrations.test_integration_rayjob import rayjob
from tests.unit.integrations.test_integration_statefulset import statefulset
from tests.unit.integrations.test_integration_trainjob import RUNTIME, lookup_of, trainjob

Obj = dict[str, Any]


def _pod() -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta("p"),
            "spec": {"containers": [{"name": "c", "image": "x",
                                     "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip


def _job() -> Obj:
    obj = job(NS, "j", queue="lq", parallelism=2)
    obj["metadata"]["uid"] = "u-j"
    return obj


BUILDERS: dict[str, Callable[[], Obj]] = {
    "batch/job": _job,
    "pod": _pod,
    "jobset.x-k8s.io/jobset": lambda: jobset("x", [("workers", 2)], meta("x", uid="u")),
    "kubeflow.org/pytorchjob": lambda: pytorchjob(
        "x", [("master", 1), ("worker", 2)], meta("x", uid="u")
    ),
    "kubeflow.org/mpijob": lambda: mpijob(
        "x", [("launcher", 1), ("worker", 2)], meta("x", uid="u")
    ),
    "ray.io/raycluster": lambda: raycluster("x", [("head", 1), ("workers", 2)], meta("x", uid="u")),
    "ray.io/rayjob": lambda: rayjob(
        "x", [("head", 1), ("workers", 2), ("submitter", 1)], meta("x", uid="u")
    ),
    "trainer.kubeflow.org/trainjob": lambda: dict(
        TRAINJOB.resolve(trainjob("x", [("node", 2)], meta("x", uid="u")), lookup_of(RUNTIME))
    ),
    "statefulset": lambda: statefulset("x", [("main", 2)], meta("x", uid="u")),
    "deployment": lambda: deployment("x", 2, meta("x", uid="u")),
    "leaderworkerset.x-k8s.io/leaderworkerset": lambda: lws("x", 1, 2, meta("x", uid="u")),
}


def test_every_registered_kind_is_in_the_table() -> None:
    assert sorted(BUILDERS) == sorted(i.framework for i in INTEGRATIONS)


def _edited(integ: Integration, obj: Obj, edit: Callable[[Obj], None]) -> Obj:
    """``obj`` with ``edit`` applied to every podSet's pod spec (a TrainJob's: its
    runtime's, as the TrainJob resolves it)."""
    if integ is TRAINJOB:
        runtime = copy.deepcopy(RUNTIME)
        for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            edit(rj["template"]["spec"]["template"]["spec"])
        unresolved = trainjob("x", [("node", 2)], meta("x", uid="u"))
        return dict(TRAINJOB.resolve(unresolved, lookup_of(runtime)))
    out = copy.deepcopy(obj)
    for role in integ.roles(out):
        edit(get_path(out, role.path)["spec"])
    return out


def _limits_only(integ: Integration, obj: Obj, cpu: str) -> Obj:
    """``obj`` with every podSet's containers asking ``cpu`` through limits alone."""

    def edit(spec: Obj) -> None:
        for c in spec["containers"]:
            c["resources"] = {"limits": {"cpu": cpu}}

    return _edited(integ, obj, edit)


def _body(integ: Integration, obj: Obj) -> Obj:
    return compose(integ, obj, workload_priority_classes={}, priority_classes={})[1]


OWNERS = [i for i in INTEGRATIONS if i.reconciler != "pods"]


def test_a_pod_is_counted_as_its_limits_say() -> None:
    """A plain pod is its own template: its spec's resources cannot be edited (the API
    server keeps them), and its Workload counts what its limits default."""
    pod = _pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "8"}}
    pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    body = workload_for_group(f"{NS}/g", [pod], workload_priority_classes={},
                              priority_classes={})  # fmt: skip
    assert pod_requests(body["spec"]["podSets"][0]["template"]["spec"]) == {"cpu": 8000}


@pytest.mark.parametrize("integ", OWNERS, ids=lambda i: i.framework)
def test_raising_a_limit_after_admission_is_caught_for_every_kind(integ: Integration) -> None:
    base = BUILDERS[integ.framework]()
    old = _limits_only(integ, base, "1")
    new = _limits_only(integ, base, "8")
    # what every kind's Workload counts changes, and the integration-level check sees it
    changes = request_changes(integ, new, old)
    assert changes and all('"cpu":"8"' in c and '"cpu":"1"' in c for c in changes), changes
    if integ.reconciler == "object":  # running on the old admission: evicted
        why = job_mismatch(_body(integ, old), _body(integ, new), started=True)
        assert why is not None and "requests changed" in why
    elif isinstance(integ, PodOwnerIntegration) and integ.fixed_requests:
        # its group's Workload outlives its pods: the webhook refuses the edit
        errors = integ.update_errors(new, old, UpdateCheck(True, lambda _key: True))
        assert any("limits standing in for missing requests" in e for e in errors), errors
        allowed, _patch, message = review(integ, new, mutating=False, operation="UPDATE",
                                          old=old)  # fmt: skip
        assert not allowed and '"cpu":"8"' in message
    else:
        # its new pods are admitted on Workloads of their own, built from what they ask
        assert integ.framework == "deployment"
        assert _body(integ, new)["spec"]["podSets"][0]["template"]["spec"]["containers"][0][
            "resources"
        ] == {"limits": {"cpu": "8"}}


def test_unmanaged_pod_owners_may_change_their_limits() -> None:
    integ = next(i for i in INTEGRATIONS if i.framework == "statefulset")
    assert isinstance(integ, PodOwnerIntegration)
    base = BUILDERS["statefulset"]()
    old, new = _limits_only(integ, base, "1"), _limits_only(integ, base, "8")
    assert integ.update_errors(new, old, UpdateCheck(False, lambda _key: None)) == []


def test_a_statefulset_limit_raise_is_refused_by_the_server(tmp_path: Path, backend: Any) -> None:
    """On the double and on a real kube-apiserver: the webhook refuses the raise of a
    managed StatefulSet's cpu limit, and the set keeps its template."""
    from admission.integrations.kinds.statefulset import STATEFULSET
    from admission.kube.client import rest as k
    from admission.kube.client.errors import ApiError
    from admission.kube.client.resources import resource_of
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace, stack

    sts = _limits_only(STATEFULSET, BUILDERS["statefulset"](), "1")
    sts["metadata"].pop("uid", None)
    objects = [namespace(NS), flavor("default"), cluster_queue("cq", {"default": {"cpu": 2}}),
               local_queue(NS, "lq", "cq")]  # fmt: skip

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            res = resource_of(STATEFULSET)
            await s.user.create(res, sts, namespace=NS)
            patch = [{"op": "replace", "value": "8",
                      "path": "/spec/template/spec/containers/0/resources/limits/cpu"}]  # fmt: skip
            with pytest.raises(ApiError) as err:
                await s.user.patch(res, "x", patch, namespace=NS, content_type=k.JSON_PATCH)
            assert err.value.status in (400, 403, 422)
            assert "limits standing in for missing requests" in str(err.value)
            got = s.get("statefulsets", "x", NS)
            assert got is not None
            assert got["spec"]["template"]["spec"]["containers"][0]["resources"] == {
                "limits": {"cpu": "1"}
            }

    asyncio.run(main())


def test_a_replacement_pod_asking_more_than_its_podset_stays_gated(tmp_path: Path) -> None:
    """Past the webhook (a template written while it was off, a pod made by hand with the
    group's labels): a pod of an admitted group that asks for more than its podSet's pods
    were counted for is left gated, saying why, and the group's other pods run."""
    from admission.integrations.kinds.statefulset import STATEFULSET
    from admission.kube.client import resources as kr
    from admission.kube.client.resources import resource_of
    from tests.support.integration_kit import KindCase, lifecycle_objects
    from tests.support.kube_harness import admitted, eventually, stack
    from tests.unit.integrations.test_integration_statefulset import (
        GROUP,
        _play_controller,
        _pods_of,
    )

    objects = lifecycle_objects(KindCase(STATEFULSET, statefulset, [("main", 2)], None))

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            sts = _limits_only(STATEFULSET, statefulset("web", [("main", 2)], meta("web")), "1")
            web = await s.user.create(resource_of(STATEFULSET), sts, namespace=NS)
            group = web["spec"]["template"]["metadata"]["labels"][GROUP]
            await _play_controller(s, web)
            await eventually(lambda: admitted(s.get("workloads", group, NS)), what="admitted")
            await eventually(
                lambda: (
                    all(not p["spec"].get("schedulingGates") for p in _pods_of(s, "web"))
                    and len(_pods_of(s, "web")) == 2
                ),
                what="both pods ungated",
            )
            await s.user.delete(kr.PODS, "web-1", namespace=NS)
            await eventually(lambda: s.get("pods", "web-1", NS) is None, what="web-1 gone")
            grown = copy.deepcopy(web)
            grown["spec"]["template"]["spec"]["containers"][0]["resources"] = {
                "limits": {"cpu": "8"}
            }
            await _play_controller(s, grown)  # the replacement, from the grown template
            event = await eventually(
                lambda: next(
                    (
                        e
                        for e in s.server.list_objects("events", NS)
                        if e.get("reason") == "ExceedsWorkload"
                    ),
                    None,
                ),
                what="the grown pod is held, saying why",
            )
            assert "web-1 stays gated" in event["message"]
            assert '{"cpu":"8"}' in event["message"] and '{"cpu":"1"}' in event["message"]
            pod = s.get("pods", "web-1", NS)
            assert pod is not None and pod["spec"].get("schedulingGates")

    asyncio.run(main())


def _with_overhead(integ: Integration, obj: Obj, cpu: str) -> Obj:
    return _edited(integ, obj, lambda spec: spec.__setitem__("overhead", {"cpu": cpu}))


# kinds whose templates the API server validates itself (batch/v1), or that live in
# another object (a TrainJob's runtime): their compositions refuse it instead
_OWN_WEBHOOK = [i for i in OWNERS if i.framework not in ("batch/job",
                                                         "trainer.kubeflow.org/trainjob")]  # fmt: skip


@pytest.mark.parametrize("integ", _OWN_WEBHOOK, ids=lambda i: i.framework)
def test_every_kinds_webhook_refuses_a_negative_overhead(integ: Integration) -> None:
    obj = _with_overhead(integ, BUILDERS[integ.framework](), "-20")
    obj["metadata"].pop("uid", None)
    allowed, _patch, message = review(integ, obj, mutating=False)
    assert not allowed
    assert 'spec.overhead["cpu"]: must be greater than or equal to 0, got "-20"' in message


@pytest.mark.parametrize("integ", OWNERS, ids=lambda i: i.framework)
def test_no_kind_composes_a_workload_with_a_negative_overhead(integ: Integration) -> None:
    from admission.integrations.framework.fields import IntegrationError

    obj = _with_overhead(integ, BUILDERS[integ.framework](), "-20")
    with pytest.raises(IntegrationError, match="must be greater than or equal to 0"):
        _body(integ, obj)
