"""Plain pods in MultiKueue (Kueue's pkg/controller/jobs/pod/pod_multikueue_adapter.go).

A pod group (pods labelled ``kueue.x-k8s.io/pod-group-name``) has no object of its own
and no ``managedBy``: the group's Workload (annotated
``kueue.x-k8s.io/is-group-workload``, named after the group) is the unit MultiKueue
dispatches, and every pod of the group is copied to the worker that admitted it; a
single managed pod (a Deployment's, say) is a group of one, its Workload controlled by
the pod. The
manager's pods stay behind their scheduling gate (the pod-group reconciler does not
ungate a Workload that has a MultiKueue check, as Kueue's
``admissioncheck.ShouldSkipLocalExecution``), so they never run on the manager, which
is why Kueue's ``IsJobManagedByKueue`` for pods is always true.

* The copy of each pod keeps its name, namespace, labels, annotations and spec (the
  admission gate included: the worker's service lifts it once its Workload copy is
  admitted), labelled ``kueue.x-k8s.io/prebuilt-workload-name`` (the Workload's name:
  a group's is the group's, which the worker's webhook requires; a single pod takes the
  copy as its own there) and ``kueue.x-k8s.io/multikueue-origin``.
* Each worker pod's status replaces its manager pod's, except that a manager pod still
  gated keeps its own ``PodScheduled`` condition (``SchedulingGated``) until the worker's
  pod is scheduled: a copied ``Unschedulable`` would look like a pod the manager's
  autoscaler should make room for. A manager pod being deleted gets nothing.
* The group is finished on the worker when every pod there is ``Succeeded`` or
  ``Failed``.
* Removing the remote objects deletes every pod of the group this manager made there.

A StatefulSet's or LeaderWorkerSet's group is not dispatched pod by pod: its Workload
names its owner (:func:`owner_kind`), whose adapter (:mod:`.serving`) copies the set.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from admission.integrations.framework.fields import controller_ref
from admission.integrations.kinds.pod import GROUP_NAME_LABEL, POD, gated
from admission.kube.client.rest import Obj
from admission.kube.multikueue.adapters import ADAPTERS, Adapter, remote_metadata
from admission.kube.multikueue.serving import BY_KIND as SERVING_BY_KIND
from admission.kube.multikueue.serving import serving_owner
from queues.api.conditions import conditions
from queues.api.labels import IS_GROUP_WORKLOAD

_TERMINATED = ("Succeeded", "Failed")
SCHEDULED = "PodScheduled"


def is_pod_group_workload(wl: Obj | None) -> bool:
    """A pod group's Workload (not a single pod's)."""
    annotations = ((wl or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(IS_GROUP_WORKLOAD) == "true"


def group_of(pod: Obj | None) -> str:
    """``namespace/group`` of a pod of a group ("" for any other pod)."""
    meta = (pod or {}).get("metadata") or {}
    name = (meta.get("labels") or {}).get(GROUP_NAME_LABEL)
    return f"{meta.get('namespace') or 'default'}/{name}" if name else ""


def _with_condition(status: Obj, cond: Obj) -> Obj:
    out = [c for c in status.get("conditions") or [] if c.get("type") != cond.get("type")]
    return {**status, "conditions": [*out, cond]}


@dataclass(frozen=True, slots=True)
class PodGroupAdapter(Adapter):
    """The rules of one pod of a group (the dispatch applies them to each)."""

    def unmanaged_reason(self, job: Obj) -> str:
        return ""  # no managedBy: the manager's pods stay gated instead

    def remote_copy(self, job: Obj, workload: str, origin: str) -> Obj:
        new_meta = remote_metadata(job, workload, origin)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": new_meta,
            "spec": copy.deepcopy(job.get("spec") or {}),
        }

    def status_to_copy(self, local: Obj, remote: Obj) -> Obj | None:
        if ((local.get("metadata") or {}).get("deletionTimestamp")) is not None:
            return None
        status = dict(remote.get("status") or {})
        mine = next((c for c in conditions(local) if c.get("type") == SCHEDULED), None)
        theirs = next((c for c in conditions(remote) if c.get("type") == SCHEDULED), None)
        if gated(local) and mine is not None and (theirs or {}).get("status") != "True":
            status = _with_condition(status, mine)
        return None if (local.get("status") or {}) == status else status

    def finished(self, obj: Obj) -> bool:
        return ((obj.get("status") or {}).get("phase")) in _TERMINATED


POD_GROUPS = PodGroupAdapter(POD)


def owner_kind(wl: Obj | None) -> str:
    """The kind the Workload ``wl`` runs (Kueue's ``wlReconciler.adapter``): the serving
    kind that owns it (a StatefulSet's, a LeaderWorkerSet's group:
    :func:`~.serving.serving_owner`), else its controller's, else ``Pod`` for a pod
    group's."""
    serving = serving_owner(wl)
    if serving is not None:
        return serving[0].kind
    kind = str((controller_ref(wl) or {}).get("kind") or "") if wl else ""
    return kind or ("Pod" if is_pod_group_workload(wl) else "")


def owner_name(wl: Obj | None) -> str:
    """The name of the object the Workload ``wl`` runs ("" for a pod group's): its
    serving owner's, else its controller's."""
    serving = serving_owner(wl)
    if serving is not None:
        return serving[1]
    return str((controller_ref(wl) or {}).get("name") or "") if wl else ""


def adapter_of_kind(kind: str) -> Adapter | None:
    """The adapter of the kind :func:`owner_kind` names (None: no adapter)."""
    return POD_GROUPS if kind == "Pod" else ADAPTERS.get(kind) or SERVING_BY_KIND.get(kind)


def adapter_for(wl: Obj | None) -> Adapter | None:
    """The adapter of the Workload ``wl``: a serving kind's, the pods' (a group's, a
    single pod's), else its controller's kind's (None: MultiKueue cannot dispatch it)."""
    return adapter_of_kind(owner_kind(wl))
