"""StatefulSet and LeaderWorkerSet in MultiKueue (Kueue's
pkg/controller/jobs/statefulset/statefulset_multikueue_adapter.go and
pkg/controller/jobs/leaderworkerset/leaderworkerset_multikueue_adapter.go).

Both are admitted through their pods (:mod:`admission.integrations.kinds.admitted_by_pods`):
their Workloads are pod groups owned — not controlled — by the object, which the
Workload names in Kueue's ``kueue.x-k8s.io/job-owner-gvk`` and ``job-owner-name``
annotations; MultiKueue finds the kind there first, as Kueue's ``wlReconciler.adapter``
does. Neither kind has a ``managedBy`` field, so the object is always MultiKueue's
(``IsJobManagedByKueue`` is true): its controller on the manager runs as usual and makes
the pods, which stay behind their scheduling gate there (the pod-group reconciler never
ungates a Workload that has a MultiKueue check, Kueue's ``ShouldSkipLocalExecution``).

* The object itself is copied to the worker that admitted its Workload: name,
  namespace, labels, annotations and spec as they are (the pod templates keep the
  pod-group metadata the manager's webhook wrote), labelled
  ``kueue.x-k8s.io/multikueue-origin`` and annotated
  ``kueue.x-k8s.io/multikueue-origin-uid`` with the manager's UID; a StatefulSet's copy
  is also labelled ``kueue.x-k8s.io/prebuilt-workload-name`` (its one Workload). On the
  worker the copy's pods name the same Workloads as the manager's (the names do not
  depend on the UID here) and join the Workload copies the manager created; the worker's
  pod-group reconciler never makes a Workload of its own for a copy's pods.
* Nothing comes back: the manager's own StatefulSet (or LWS) controller writes the
  object's status, and would overwrite any status copied from the worker.
* Never finished: they serve until deleted. Deleting the manager's object (its Workloads
  go with it), scaling it to zero (the Workload goes with its pods) or losing the quota
  removes the copies from the worker.
* A LeaderWorkerSet has one Workload per group (``spec.replicas``; Kueue's
  ``MultiKueueMultiWorkloadAdapter``): the copy is made once (an existing one is fine),
  removing any group's copies deletes the worker's set (the other groups' reconciles
  make it again), and all groups go to one worker (:mod:`.components`). An event of the
  worker's copy wakes the groups of the set the manager dispatched, found by the set
  (:func:`copied_set`), not by one Workload name per ``spec.replicas``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.integrations.framework.addressing import gvk
from admission.integrations.framework.fields import IntegrationError, meta_of, ref_of
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration
from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.kube.client.rest import Obj
from admission.kube.multikueue.adapters import Adapter, remote_metadata
from queues.api.labels import (
    JOB_OWNER_GVK,
    JOB_OWNER_NAME,
    MULTIKUEUE_ORIGIN,
    MULTIKUEUE_ORIGIN_UID,
    PREBUILT_WORKLOAD,
)

#: Kueue's ``maxLeaderWorkerSetReplicas``: more groups than this are refused
MAX_GROUPS = 1_000_000


@dataclass(frozen=True, slots=True)
class ServingAdapter(Adapter):
    """A kind admitted through its pods: copied whole, never synced back, never finished."""

    #: whether the copy is labelled with the Workload's name (a StatefulSet's one Workload)
    names_workload: bool = True
    #: one Workload per group of the object (a LeaderWorkerSet)
    multi_workload: bool = False

    @property
    def pod_owner(self) -> PodOwnerIntegration:
        integ = self.integration
        assert isinstance(integ, PodOwnerIntegration)
        return integ

    def unmanaged_reason(self, job: Obj) -> str:
        return ""  # no managedBy: the manager's pods stay gated instead

    def remote_copy(self, job: Obj, workload: str, origin: str) -> Obj:
        new_meta = remote_metadata(job, workload, origin)
        if not self.names_workload:
            new_meta["labels"].pop(PREBUILT_WORKLOAD, None)
        uid = str(meta_of(job).get("uid") or "")
        new_meta.setdefault("annotations", {})[MULTIKUEUE_ORIGIN_UID] = uid
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.kind,
            "metadata": new_meta,
            "spec": copy.deepcopy(job.get("spec") or {}),
        }

    def status_to_copy(self, local: Obj, remote: Obj) -> Obj | None:
        return None  # the manager's own controller writes the status

    def finished(self, obj: Obj) -> bool:
        return False  # serving: deleting it ends its Workloads

    # -- the Workloads of one object ----------------------------------------------------------

    def groups(self, owner: Mapping[str, Any]) -> int:
        """How many Workloads ``owner`` makes (Kueue's ``GetExpectedWorkloadCount``);
        IntegrationError naming the object and field when it cannot say."""
        if not self.multi_workload:
            return 1
        replicas = LEADERWORKERSET.replicas(owner)
        if replicas > MAX_GROUPS:
            raise IntegrationError(
                f"{LEADERWORKERSET.lower_kind} {ref_of(owner)}: spec.replicas: "
                f"must be <= {MAX_GROUPS}, got {replicas}"
            )
        return replicas

    def workload_names(self, owner: Mapping[str, Any]) -> list[str]:
        """The names of ``owner``'s Workloads, by group index (IntegrationError as
        :meth:`groups`)."""
        if not self.multi_workload:
            return [self.pod_owner.workload_name(owner)]
        name = str(meta_of(owner).get("name") or "")
        return [LEADERWORKERSET.group_name(name, i) for i in range(self.groups(owner))]

    def workload_keys(self, obj: Mapping[str, Any]) -> list[str]:
        """The manager's Workload a worker's copy is labelled with (Kueue's
        ``WorkloadKeysFor`` of a StatefulSet); none for an object this manager did not
        make or that names none, nor for the copy of a set of several Workloads
        (:meth:`copied_set` names that set instead)."""
        m = meta_of(obj)
        labels = m.get("labels") or {}
        if not self.names_workload or not _a_copy(labels):
            return []
        name = labels.get(PREBUILT_WORKLOAD)
        ns = str(m.get("namespace") or "default")
        return [f"{ns}/{name}"] if isinstance(name, str) and name else []

    def copied_set(self, obj: Mapping[str, Any]) -> str | None:
        """``namespace/name`` of the manager's set a worker's copy of a LeaderWorkerSet is
        (None: not such a copy). The copy runs every group of the set: Kueue's
        ``WorkloadKeysFor`` names one Workload per ``spec.replicas``, a field the worker
        writes (up to a million); the manager instead wakes the groups of the set it
        dispatched, which it knows by the set."""
        m = meta_of(obj)
        if not self.multi_workload or not _a_copy(m.get("labels") or {}) or not m.get("name"):
            return None
        return f"{m.get('namespace') or 'default'}/{m['name']}"


def _a_copy(labels: object) -> bool:
    """Labels of a copy a manager made (``multikueue-origin``)."""
    return isinstance(labels, Mapping) and MULTIKUEUE_ORIGIN in labels


STATEFULSET_ADAPTER = ServingAdapter(STATEFULSET)
LEADERWORKERSET_ADAPTER = ServingAdapter(LEADERWORKERSET, names_workload=False,
                                         multi_workload=True)  # fmt: skip

SERVING: dict[str, ServingAdapter] = {
    a.resource.gvk: a for a in (STATEFULSET_ADAPTER, LEADERWORKERSET_ADAPTER)
}
"""Adapter by the ``job-owner-gvk`` annotation of the Workload."""
BY_KIND: dict[str, ServingAdapter] = {a.kind: a for a in SERVING.values()}


def serving_owner(wl: Mapping[str, Any] | None) -> tuple[ServingAdapter, str] | None:
    """(adapter, owner name) of a serving kind's Workload (Kueue's first rules in
    ``wlReconciler.adapter``): its ``job-owner-gvk`` and ``job-owner-name`` annotations,
    else — the informers keep no such annotation — its owner reference to an object of
    a serving kind when it has no controller; None for any other Workload."""
    m = meta_of(wl)
    annotations = m.get("annotations") or {}
    if isinstance(annotations, Mapping):
        adapter = SERVING.get(str(annotations.get(JOB_OWNER_GVK) or ""))
        name = annotations.get(JOB_OWNER_NAME)
        if adapter is not None and isinstance(name, str) and name:
            return adapter, name
    refs = m.get("ownerReferences") or []
    if not isinstance(refs, list) or any(isinstance(r, Mapping) and r.get("controller")
                                         for r in refs):  # fmt: skip
        return None
    for ref in refs:
        if not isinstance(ref, Mapping):
            continue
        adapter = SERVING.get(gvk(str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")))
        if adapter is not None and ref.get("name"):
            return adapter, str(ref["name"])
    return None


def owner_uid(wl: Mapping[str, Any], adapter: ServingAdapter) -> str:
    """The UID of the Workload's owner reference of the adapter's kind ("" if none)."""
    for ref in meta_of(wl).get("ownerReferences") or []:
        if (
            isinstance(ref, Mapping)
            and gvk(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
            == adapter.resource.gvk
        ):
            return str(ref.get("uid") or "")
    return ""


def workload_keys(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """The manager's Workloads (``namespace/name``) a job copy of ``kind`` on a worker
    runs, by its ``prebuilt-workload-name`` label (none for a LeaderWorkerSet's copy:
    :func:`copied_set`)."""
    adapter = BY_KIND.get(kind)
    if adapter is not None:
        return adapter.workload_keys(obj)
    m = meta_of(obj)
    name = (m.get("labels") or {}).get(PREBUILT_WORKLOAD)
    return [f"{m.get('namespace')}/{name}"] if name else []


def copied_set(kind: str, obj: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the manager's set of several Workloads a job copy of ``kind``
    on a worker is (:meth:`ServingAdapter.copied_set`; None for any other object)."""
    adapter = BY_KIND.get(kind)
    return adapter.copied_set(obj) if adapter is not None else None


def set_of(wl: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(kind, ``namespace/name``) of the set of several Workloads whose group the
    Workload ``wl`` is (None: any other Workload)."""
    found = serving_owner(wl)
    if found is None or not found[0].multi_workload:
        return None
    return found[0].kind, f"{meta_of(wl).get('namespace') or 'default'}/{found[1]}"
