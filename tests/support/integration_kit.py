"""What every job kind's test module shares: one lifecycle through ``serve``, one gang
table through ``plan``, and the webhooks called in-process.

A kind's module (``tests/unit/integrations/test_integration_<kind>.py``) describes its objects with a
:class:`KindCase` — how to build one with given roles, and how its operator reports it
finished — and runs :func:`run_lifecycle` on both backends and :func:`gang_scenario`
through ``plan``; the rest of the module is what only that kind has. The CRD the
double and the real server serve for the kind is its fixture in ``tests/support/crds/``.

The lifecycle, on a ClusterQueue with two flavors (``fa``: exactly the first role's
pods, ``fb``: the other roles'), preemption within the queue by priority:

1. a low-priority object naming the queue is suspended by the webhook, gets a Workload
   ``<kind>-<name>-<hash>`` with one podSet per role, is admitted with the first role on
   ``fa`` and the others on ``fb`` and started with each role's template pinned to its
   flavor (node selector, podset label), its quota counted in the ClusterQueue status;
2. a high-priority object of the same shape preempts it: the low one is stopped and
   its templates restored, its Workload pending again; the high one starts;
3. the operator reports the high one finished (or, for a kind that never finishes, it
   is deleted): its Workload is Finished (or gone), the quota is released, and the low
   one is admitted and started again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission.integrations.framework.interface import Integration
from admission.kube.client import rest as k
from admission.kube.client.resources import resource_of
from tests.support.kube_harness import admitted, eventually, is_true, namespace, stack
from tests.support.scenario_runner import run_scenario_spec
from tests.support.webhook_server import decode_patch
from webhooks.config import WebhookConfig
from webhooks.review import HandlerContext
from webhooks.server.app import all_webhooks, process_review
from webhooks.view import InMemoryView

Obj = dict[str, Any]
NS = "team-a"
Q = "kueue.x-k8s.io/queue-name"
PC = "kueue.x-k8s.io/priority-class"
PODSET = "kueue.x-k8s.io/podset"
Roles = list[tuple[str, int]]


def pod_template(cpu: str = "1", *, annotations: dict[str, str] | None = None) -> Obj:
    tmpl: Obj = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ],
        }
    }
    if annotations:
        tmpl["metadata"] = {"annotations": dict(annotations)}
    return tmpl


def meta(name: str, *, ns: str = NS, queue: str | None = "lq", priority_class: str | None = None,
         uid: str | None = None) -> Obj:  # fmt: skip
    labels: dict[str, str] = {}
    if queue:
        labels[Q] = queue
    if priority_class:
        labels[PC] = priority_class
    out: Obj = {"name": name, "namespace": ns, "labels": labels}
    if uid:
        out["uid"] = uid
    return out


@dataclass
class KindCase:
    """How the tests build objects of one kind and play its operator."""

    integration: Integration
    #: (name, roles [(podSet name, pods)], metadata) -> an object of the kind, every
    #: pod requesting 1 cpu, not suspended (the webhook suspends it)
    make: Callable[[str, Roles, Obj], Obj]
    #: the kind's roles in the lifecycle test: the first one's pods fit flavor fa exactly,
    #: the others need more than fa holds
    roles: Roles
    #: the operator's status write for a finished object (merge patch of ``status``);
    #: None for a kind that never finishes (a RayCluster serves until deleted): the
    #: lifecycle then deletes the object, which deletes its Workload
    finished_status: Callable[[Obj], Obj] | None
    #: objects the kind's objects need besides the queues (a TrainJob's runtime)
    extra_objects: list[Obj] = field(default_factory=list)
    #: podSet name -> where the object keeps the started pod template (None: the roles'
    #: templates; a TrainJob: the replicated Job patches of Kueue's runtime patch)
    started_templates: Callable[[Obj], dict[str, Obj]] | None = None

    @property
    def resource(self) -> k.Resource:
        return resource_of(self.integration)

    def templates(self, obj: Obj) -> dict[str, Obj]:
        """podSet name -> the object's pod template of that role."""
        if self.started_templates is not None:
            return self.started_templates(obj)
        return {r.name: dict(r.template) for r in self.integration.roles(obj)}


def lifecycle_objects(case: KindCase) -> list[Obj]:
    first = case.roles[0][1]
    rest = sum(n for _, n in case.roles[1:])
    flavors = [("fa", first)] + ([("fb", rest)] if rest else [])
    return [
        namespace(NS),
        *(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": f},
                "spec": {"nodeLabels": {"pool": f}},
            }
            for f, _ in flavors
        ),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": f, "resources": [{"name": "cpu", "nominalQuota": str(n)}]}
                            for f, n in flavors
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": NS},
            "spec": {"clusterQueue": "cq"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "low"},
            "value": 10,
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        },
        *case.extra_objects,
    ]


def workload_of(server: Any, integ: Integration, name: str, ns: str = NS) -> Obj | None:
    """The Workload controlled by the object ``ns/name`` of the kind."""
    for wl in server.list_objects("workloads", ns):
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == integ.kind and ref.get("name") == name and ref.get("controller"):
                return wl
    return None


def flavor_of(wl: Obj, pod_set: str) -> str:
    for psa in wl["status"]["admission"]["podSetAssignments"]:
        if psa["name"] == pod_set:
            (flavor,) = set(psa["flavors"].values())
            return str(flavor)
    raise AssertionError(f"no assignment for podSet {pod_set}: {wl['status']['admission']}")


def _started_on(case: KindCase, obj: Obj | None, flavors: dict[str, str]) -> bool:
    if obj is None or case.integration.is_suspended(obj):
        return False
    for name, tmpl in case.templates(obj).items():
        if (tmpl.get("spec") or {}).get("nodeSelector") != {"pool": flavors[name]}:
            return False
        if ((tmpl.get("metadata") or {}).get("labels") or {}).get(PODSET) != name:
            return False
    return True


def _stopped_and_restored(case: KindCase, obj: Obj | None) -> bool:
    if obj is None or not case.integration.is_suspended(obj):
        return False
    for tmpl in case.templates(obj).values():
        if (tmpl.get("spec") or {}).get("nodeSelector"):
            return False
        if PODSET in ((tmpl.get("metadata") or {}).get("labels") or {}):
            return False
    return True


def crds_of(integration: Integration, *more: Integration) -> tuple[str, ...]:
    """The operator CRDs (``tests/support/crds/``, by plural) the kinds' objects need: the
    ``crds`` of ``stack``."""
    from admission.kube.control.integrationgate import api_resources, needs_crd

    plurals = [r.plural for i in (integration, *more) for r in api_resources(i) if needs_crd(r)]
    return tuple(dict.fromkeys(plurals))


async def run_lifecycle(case: KindCase, tmp_path: Path, backend: Any) -> None:
    integ, res = case.integration, case.resource
    expected_flavors = {name: ("fa" if i == 0 else "fb") for i, (name, _) in enumerate(case.roles)}
    objects = lifecycle_objects(case)
    async with stack(tmp_path, backend=backend, objects=objects, crds=crds_of(integ)) as s:
        low = case.make("low", case.roles, meta("low", priority_class="low"))
        created = await s.user.create(res, low, namespace=NS)
        assert integ.is_suspended(created), "the mutating webhook suspends a queued object"
        wl = await eventually(lambda: workload_of(s.server, integ, "low"), what="a Workload")
        assert wl["metadata"]["name"].startswith(f"{integ.kind.lower()}-low-")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == case.roles
        wl = await eventually(
            lambda: admitted(w := workload_of(s.server, integ, "low")) and w, what="admission"
        )
        assert {n: flavor_of(wl, n) for n, _ in case.roles} == expected_flavors
        await eventually(
            lambda: _started_on(case, s.get(res.plural, "low", NS), expected_flavors),
            what="the object is started with each podSet's flavor",
        )

        def usage(flavor: str) -> str | None:
            cq = s.get("clusterqueues", "cq") or {}
            for f in (cq.get("status") or {}).get("flavorsUsage") or []:
                if f["name"] == flavor:
                    return str(f["resources"][0]["total"])
            return None

        await eventually(lambda: usage("fa") == str(case.roles[0][1]), what="quota counted")

        high = case.make("high", case.roles, meta("high", priority_class="high"))
        await s.user.create(res, high, namespace=NS)
        await eventually(
            lambda: _stopped_and_restored(case, s.get(res.plural, "low", NS)),
            what="the preempted object is stopped and its templates restored",
        )
        low_wl = await eventually(
            lambda: (
                (w := workload_of(s.server, integ, "low"))
                and not admitted(w)
                and is_true(w, "Preempted")
                and w
            ),
            what="the preempted Workload is pending again",
        )
        assert is_true(low_wl, "Evicted")
        await eventually(
            lambda: _started_on(case, s.get(res.plural, "high", NS), expected_flavors),
            what="the high-priority object is started",
        )

        stored = s.get(res.plural, "high", NS)
        assert stored is not None
        if case.finished_status is None:
            await s.user.delete(res, "high", namespace=NS)
            await eventually(
                lambda: workload_of(s.server, integ, "high") is None,
                what="the deleted object's Workload is deleted",
            )
        else:
            await s.user.patch(
                res, "high", {"status": case.finished_status(stored)}, namespace=NS,
                subresource="status",
            )  # fmt: skip
            await eventually(
                lambda: is_true(workload_of(s.server, integ, "high"), "Finished"),
                what="the finished object's Workload is Finished",
            )
        await eventually(
            lambda: _started_on(case, s.get(res.plural, "low", NS), expected_flavors),
            what="the released quota admits and starts the preempted object again",
        )


def gang_scenario(case: KindCase, tmp_path: Path) -> None:
    """Through ``plan``: an object whose roles all fit is admitted role by role on its
    flavors; one whose second role does not fit is pending as a whole, the message naming
    that podSet; one without a queue name is not managed."""
    objects = lifecycle_objects(case)
    fits = case.make("fits", case.roles, meta("fits", uid="uid-fits"))
    big = copy.deepcopy(case.roles)
    grown = 1 if len(big) > 1 else 0
    big[grown] = (big[grown][0], big[grown][1] + 100)
    too_big = case.make("too-big", big, meta("too-big", uid="uid-too-big"))
    unqueued = case.make("plain", case.roles, meta("plain", queue=None, uid="uid-plain"))
    integ = case.integration
    key = f"{NS}/{integ.workload_name(fits)}"
    big_key = f"{NS}/{integ.workload_name(too_big)}"
    pod_set_flavors = {
        name: {"cpu": "fa" if i == 0 else "fb"} for i, (name, _) in enumerate(case.roles)
    }
    run_scenario_spec(
        {
            "description": f"{integ.kind}: a gang is admitted only when every role fits",
            "objects": [*objects, fits, too_big, unqueued],
            "expect": {
                "admitted": {
                    key: {
                        "clusterQueue": "cq",
                        "podSetFlavors": pod_set_flavors,
                        "counts": dict(case.roles),
                    }
                },
                "pending": {big_key: {"clusterQueue": "cq", "message": [big[grown][0]]}},
                "preempted": {},
            },
        },
        tmp_path,
    )


# -------------------------------------------------------------------------- webhooks


def webhook_view() -> InMemoryView:
    from queues.model import LocalQueue, Namespace

    return InMemoryView(
        local_queues={f"{NS}/lq": LocalQueue(NS, "lq", "cq")},
        namespaces={NS: Namespace(NS)},
    )


def review(
    integ: Integration,
    obj: Obj,
    *,
    mutating: bool,
    operation: str = "CREATE",
    old: Obj | None = None,
    config: WebhookConfig | None = None,
    view: InMemoryView | None = None,
) -> tuple[bool, list[Obj], str]:
    """(allowed, JSON patch, denial message) of the kind's webhook at its path, over the
    server's own review parsing and encoding (no HTTP)."""
    path = integ.webhook_paths()[0 if mutating else 1]
    config = config or WebhookConfig()
    spec = next(s for s in all_webhooks(config.frameworks) if s.path == path)
    r = integ.resource
    request = {
        "uid": "u",
        "kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "resource": {"group": r.group, "version": r.version, "resource": r.plural},
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", NS),
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()  # fmt: skip
    status, payload, _ = process_review(
        body, spec, HandlerContext(view=view or webhook_view(), config=config)
    )
    assert status == 200, payload
    doc = json.loads(payload)
    response = doc["response"]
    return response["allowed"], decode_patch(doc), (response.get("status") or {}).get("message", "")
