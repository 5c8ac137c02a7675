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

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from queues.labels import JOB_OWNER_GVK, JOB_OWNER_NAME, POD_SUSPENDING_PARENT
from queues.labels import MANAGED as MANAGED_LABEL
from queues.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.labels import QUEUE_NAME as QUEUE_NAME_LABEL

from .base import Finished, Integration, meta_of

Edit = tuple[tuple[str, ...], str, Any]


class PodOwnerIntegration(Integration):
    """A pod owner admitted through its pods (subclasses set the template edits)."""

    reconciler: ClassVar[str] = "parent"
    implies: ClassVar[tuple[str, ...]] = ("pod",)

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        """Kueue: suspended while no replica is ready."""
        ready = (obj.get("status") or {}).get("readyReplicas")
        return not (isinstance(ready, int) and ready > 0)

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return None  # serving: never finishes; deleting it ends its Workloads

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("status") or {}).get("replicas"))

    def group_owner(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """(name, uid or "") of the object of this kind whose group ``pod`` belongs to,
        from what its controller wrote on it; None: not known from the pod."""
        return None

    def keeps_group(self, owner: Mapping[str, Any], group: str) -> bool:
        """Whether ``owner`` still runs the pod group ``group`` (its Workload's name):
        while it does, the group's Workload is kept when its pods are gone."""
        return False

    def owner_metadata(self, owner: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """(owner reference, annotations) that make ``owner`` own a group's Workload:
        not its controller (the group is), no ``blockOwnerDeletion`` (as Kueue's
        ``SetOwnerReference``; it would need the owner's finalizers permission)."""
        m = meta_of(owner)
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": m.get("name"),
               "uid": m.get("uid")}  # fmt: skip
        gvk = f"{self.api_version}, Kind={self.kind}"
        return ref, {JOB_OWNER_GVK: gvk, JOB_OWNER_NAME: str(m.get("name") or "")}

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
