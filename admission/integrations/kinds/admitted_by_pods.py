"""What the kinds admitted through their pods share (StatefulSet, Deployment,
LeaderWorkerSet: ``reconciler = "parent"``).

Such an object serves until deleted and never finishes; it counts as suspended while
no replica is ready (Kueue's rule for their queue-name immutability); its webhook holds
it by writing labels and annotations into its pod templates, which the pod webhook and
the pod-group reconciler then act on. Source: Kueue pkg/controller/jobs/{statefulset,
deployment,leaderworkerset}/*_webhook.go.

A serving group's Workload is owned by the object (a non-controller owner reference,
and Kueue's ``job-owner-gvk``/``job-owner-name`` annotations): it outlives its pods —
a preempted StatefulSet's pods are deleted and recreated, and its Workload waits for
them — and goes with the object (the garbage collector), or when the object no longer
runs the group (:meth:`PodOwnerIntegration.keeps_group`). Kueue's StatefulSet and
LeaderWorkerSet reconcilers own their Workloads the same way (pkg/controller/jobs/
statefulset/statefulset_reconciler.go ``constructWorkload``, leaderworkerset_reconciler.go
``constructWorkload``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from admission.integrations.framework.children import POD, kind_of, refuse
from admission.integrations.framework.fields import meta_of
from admission.integrations.framework.interface import Finished, Integration
from admission.integrations.framework.requests import request_changes
from queues.api.labels import JOB_OWNER_GVK, JOB_OWNER_NAME, POD_SUSPENDING_PARENT
from queues.api.labels import MANAGED as MANAGED_LABEL
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL

Edit = tuple[tuple[str, ...], str, Any]
Obj = Mapping[str, Any]
#: namespace/name of a Workload -> None: there is none; True: it holds quota; False: pending
WorkloadState = Callable[[str], bool | None]


@dataclass(frozen=True, slots=True)
class UpdateCheck:
    """What the webhook knows besides the objects: whether the new object is held by
    Kueue (names a queue, or ``manageJobsWithoutQueueName``), and its Workloads' state."""

    managed: bool
    workload: WorkloadState


QUEUE_PATH = f"metadata.labels[{QUEUE_NAME_LABEL}]"
PRIORITY_CLASS_PATH = f"metadata.labels[{PRIORITY_CLASS_LABEL}]"
# The pod-spec fields that decide how a pod is admitted (Kueue's ``SpecShape``), and of
# each container its requests and ports: what a managed group's template may not change.
_SHAPE_FIELDS = ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority",
                 "topologySpreadConstraints", "overhead", "resourceClaims")  # fmt: skip


def go_quote(value: Any) -> str:
    """A value as apimachinery's field errors print it (%q strings, %v scalars)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def immutable(path: str, value: Any) -> str:
    return f"{path}: Invalid value: {go_quote(value)}: field is immutable"


def at(obj: Any, path: Iterable[str]) -> Any:
    """The value at ``path`` in ``obj``, None where it is missing or not an object."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def spec_shape(spec: Any) -> dict[str, Any]:
    """Kueue's ``utilpod.SpecShape`` of a pod spec."""
    spec = spec if isinstance(spec, Mapping) else {}
    shape: dict[str, Any] = {k: spec.get(k) for k in _SHAPE_FIELDS}
    for key in ("initContainers", "containers"):
        shape[key] = [
            {"resources": {"requests": (c.get("resources") or {}).get("requests")},
             "ports": c.get("ports")}
            for c in spec.get(key) or [] if isinstance(c, Mapping)
        ]  # fmt: skip
    if isinstance(spec.get("resources"), Mapping):
        shape["resources"] = spec["resources"].get("requests")
    return shape


def shape_errors(new_spec: Any, old_spec: Any, path: str) -> list[str]:
    """Kueue's ``ValidateImmutablePodGroupPodSpec``: each changed field of the shape
    (per container, when the containers are as many, its requests and ports)."""
    new, old = spec_shape(new_spec), spec_shape(old_spec)
    errors: list[str] = []
    for key in sorted(set(new) | set(old)):
        new_field, old_field = new.get(key), old.get(key)
        if key in ("initContainers", "containers") and len(new_field or []) == len(old_field or []):
            for i, (nc, oc) in enumerate(zip(new_field or [], old_field or [], strict=True)):
                for field, value in (("resources.requests", nc["resources"]["requests"]),
                                     ("ports", nc["ports"])):  # fmt: skip
                    before = oc["resources"]["requests"] if field != "ports" else oc["ports"]
                    if value != before:
                        errors.append(immutable(f"{path}.{key}[{i}].{field}", value))
        elif new_field != old_field:
            errors.append(immutable(f"{path}.{key}", new_field))
    return errors


class PodOwnerIntegration(Integration):
    """A pod owner admitted through its pods (subclasses set the template edits)."""

    reconciler: ClassVar[str] = "parent"
    implies: ClassVar[tuple[str, ...]] = ("pod",)
    mutates_on_update: ClassVar[bool] = True
    #: whether a managed object's pods keep what they ask for (:mod:`.requests`): its
    #: group's Workload outlives its pods, and a replaced pod joins it with what the
    #: template says then (a StatefulSet's, a LeaderWorkerSet group's)
    fixed_requests: ClassVar[bool] = True

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        """Kueue: suspended while no replica is ready."""
        ready = (obj.get("status") or {}).get("readyReplicas")
        return not (isinstance(ready, int) and ready > 0)

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return None  # serving: never finishes; deleting it ends its Workloads

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("status") or {}).get("replicas"))

    # -- the webhooks on UPDATE (Kueue's ValidateUpdate / Default of these kinds) -----------

    def update_errors(self, new: Obj, old: Obj, check: UpdateCheck) -> list[str]:
        """Kueue's rules for an update: the queue name may change only while no replica
        is ready, and never to none; a WorkloadPriorityClass may not be added once a
        replica is ready, nor ever removed. Ours: a managed object's pods keep what they
        ask for, limits included (:attr:`fixed_requests`)."""
        errors: list[str] = []
        suspended = self.is_suspended(old)
        old_q, new_q = _label(old, QUEUE_NAME_LABEL), _label(new, QUEUE_NAME_LABEL)
        if (not suspended or not new_q) and new_q != old_q:
            errors.append(immutable(QUEUE_PATH, new_q))
        old_pc, new_pc = _label(old, PRIORITY_CLASS_LABEL), _label(new, PRIORITY_CLASS_LABEL)
        if not suspended and not old_pc and new_pc:
            errors.append(f"{PRIORITY_CLASS_PATH}: Invalid value: {go_quote(new_pc)}: "
                          "WorkloadPriorityClass cannot be added to a non-suspended workload")  # fmt: skip
        elif old_pc and not new_pc:
            errors.append(f"{PRIORITY_CLASS_PATH}: Invalid value: \"\": "
                          "WorkloadPriorityClass cannot be removed from a workload")  # fmt: skip
        if check.managed and self.fixed_requests:
            errors += request_changes(self, new, old)
        return errors

    def update_edits(
        self, new: Mapping[str, Any], old: Mapping[str, Any], labels: Mapping[str, str]
    ) -> list[Edit]:
        """What the mutating webhook sets on an update of a queued object: the template
        edits of a create again, so a changed queue or priority class reaches the pods
        the controller makes next (Kueue's ``Default`` runs on updates too)."""
        return self.suspend_edits(new, labels)

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """Only the pods made from its held templates (``pod-suspending-parent``): the pod
        webhook gates those whatever their owners, and their groups are queued on their
        own. Any other child (a pod written to name it, a ReplicaSet) is not covered."""
        annotations = meta_of(child).get("annotations") or {}
        if kind_of(child) == POD and POD_SUSPENDING_PARENT in annotations:
            return None
        return refuse(obj, child)

    def group_owner(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """(name, uid or "") of the object of this kind whose group ``pod`` belongs to,
        from what its controller wrote on it; None: not known from the pod."""
        return None

    def keeps_group(self, owner: Mapping[str, Any], group: str) -> bool:
        """Whether ``owner`` still runs the pod group ``group`` (its Workload's name):
        while it does, the group's Workload is kept when its pods are gone."""
        return False

    def group_size(self, owner: Mapping[str, Any]) -> int | None:
        """The pods of each of ``owner``'s groups, as it says now (None: as the pods'
        ``pod-group-total-count`` says)."""
        return None

    def owner_metadata(self, owner: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """(owner reference, annotations) that make ``owner`` own a group's Workload:
        not its controller (the group is), no ``blockOwnerDeletion`` (as Kueue's
        ``SetOwnerReference``; it would need the owner's finalizers permission)."""
        m = meta_of(owner)
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": m.get("name"),
               "uid": m.get("uid")}  # fmt: skip
        return ref, {JOB_OWNER_GVK: self.resource.gvk, JOB_OWNER_NAME: str(m.get("name") or "")}

    def template_edits(
        self,
        template: tuple[str, ...],
        labels: Mapping[str, str],
        *,
        extra_labels: Iterable[tuple[str, str]] = (),
        annotations: Iterable[tuple[str, str]] = (),
    ) -> list[Edit]:
        """The edits of one pod template: the managed label, the object's queue and
        priority-class labels, ``pod-suspending-parent`` and the kind's own."""
        tl, ta = (*template, "metadata", "labels"), (*template, "metadata", "annotations")
        edits: list[Edit] = [(tl, MANAGED_LABEL, "true")]
        edits += [(tl, k, v) for k, v in extra_labels]
        edits += [(tl, k, labels[k]) for k in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL)
                  if labels.get(k)]  # fmt: skip
        edits += [(ta, k, v) for k, v in annotations]
        edits.append((ta, POD_SUSPENDING_PARENT, self.framework))
        return edits


def _label(obj: Mapping[str, Any], key: str) -> str:
    value = (meta_of(obj).get("labels") or {}).get(key)
    return value if isinstance(value, str) else ""
