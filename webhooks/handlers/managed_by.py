"""``managedBy`` defaulting for MultiKueue (Kueue's ``ApplyDefaultForManagedBy``,
pkg/controller/jobframework/defaults.go, and each kind's ``CanDefaultManagedBy``): a job
of a kind MultiKueue dispatches, created for a LocalQueue whose ClusterQueue has an
AdmissionCheck of controller ``kueue.x-k8s.io/multikueue``, gets ``managedBy:
kueue.x-k8s.io/multikueue`` when it names no other manager than its kind's own
operator, so a user's manifests need not say it: the manager's own operator then leaves
it alone, and MultiKueue runs it on a worker. The field is ``spec.managedBy``, or
``spec.runPolicy.managedBy`` for the Kubeflow jobs (PyTorchJob, MPIJob).

The AdmissionChecks come from the view's ``admission_checks`` (the live cache has them;
a view without them defaults nothing)."""

from __future__ import annotations

from typing import Any

from queues.api.labels import MULTIKUEUE_CONTROLLER

SPEC = ("spec",)
RUN_POLICY = ("spec", "runPolicy")

#: kind -> (the map holding its ``managedBy``, the values that mean "its own operator":
#: Kueue's defaulting replaces only these)
OWN_CONTROLLER: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "job": (SPEC, ("", "kubernetes.io/job-controller")),
    "jobset": (SPEC, ("", "jobset.sigs.k8s.io/jobset-controller")),
    "trainjob": (SPEC, ("", "trainer.kubeflow.org/trainjob-controller")),
    "pytorchjob": (RUN_POLICY, ("", "kubeflow.org/training-operator")),
    "mpijob": (RUN_POLICY, ("", "kubeflow.org/mpi-operator")),
    "rayjob": (SPEC, ("", "ray.io/kuberay-operator")),
    "raycluster": (SPEC, ("", "ray.io/kuberay-operator")),
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


def managed_by_default(
    kind: str, obj: Any, view: Any, namespace: str, queue: str
) -> tuple[str, ...] | None:
    """The map where ``obj`` (of ``kind``, lower case) should get MultiKueue's
    ``managedBy`` (None: it should not)."""
    entry = OWN_CONTROLLER.get(kind)
    if entry is None or not isinstance(obj, dict):
        return None
    where, own = entry
    node: Any = obj
    for key in where:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            break
    if node is not None and not isinstance(node, dict):
        return None
    if ((node or {}).get("managedBy") or "") not in own:
        return None
    return where if multikueue_queue(view, namespace, queue) else None
