"""``spec.managedBy`` defaulting for MultiKueue (Kueue's ``ApplyDefaultForManagedBy``,
pkg/controller/jobframework/defaults.go): a Job or JobSet created for a LocalQueue whose
ClusterQueue has an AdmissionCheck of controller ``kueue.x-k8s.io/multikueue`` gets
``spec.managedBy: kueue.x-k8s.io/multikueue`` when it names no other manager than its
kind's own controller, so a user's manifests need not say it: the manager's own Job or
JobSet controller then leaves it alone, and MultiKueue runs it on a worker.

The AdmissionChecks come from the view's ``admission_checks`` (the live cache has them;
a view without them defaults nothing)."""

from __future__ import annotations

from typing import Any

from queues.api.labels import MULTIKUEUE_CONTROLLER

#: kind -> the managedBy values that mean "its own controller" (Kueue's defaulting
#: replaces only these)
OWN_CONTROLLER = {
    "job": ("", "kubernetes.io/job-controller"),
    "jobset": ("", "jobset.sigs.k8s.io/jobset-controller"),
}


def multikueue_queue(view: Any, namespace: str, queue: str) -> bool:
    """Whether LocalQueue ``namespace/queue`` feeds a ClusterQueue checked by MultiKueue."""
    if not queue:
        return False
    lq = view.local_queues.get(f"{namespace}/{queue}")
    cq = view.cluster_queues.get(lq.cluster_queue) if lq is not None else None
    checks = getattr(view, "admission_checks", None) or {}
    if cq is None or not checks:
        return False
    return any(
        getattr(checks.get(name), "controller_name", "") == MULTIKUEUE_CONTROLLER
        for name in cq.admission_checks
    )


def managed_by_default(kind: str, obj: Any, view: Any, namespace: str, queue: str) -> bool:
    """Whether ``obj`` (of ``kind``, lower case) should get MultiKueue's managedBy."""
    own = OWN_CONTROLLER.get(kind)
    if own is None or not isinstance(obj, dict):
        return False
    spec = obj.get("spec")
    if not isinstance(spec, dict) or (spec.get("managedBy") or "") not in own:
        return False
    return multikueue_queue(view, namespace, queue)
