"""The job kinds MultiKueue dispatches: how the manager's job is copied to the worker
that admitted its Workload, how the worker's status comes back, and how the copy is
removed (Kueue's ``MultiKueueAdapter`` of each kind: ``SyncJob``,
``DeleteRemoteObject``, ``IsJobManagedByKueue``).

Every kind here has a ``managedBy`` field: the manager's job names
``kueue.x-k8s.io/multikueue`` there (else the check is ``Rejected`` with Kueue's
"Expecting <field> to be ..." message), so the kind's operator on the manager leaves it
alone. The copy keeps the job's name, namespace, labels, annotations and spec, without
the ``managedBy`` value (the worker's operator runs it), labelled
``kueue.x-k8s.io/prebuilt-workload-name`` (the Workload copy already admitted there) and
``kueue.x-k8s.io/multikueue-origin``. Besides, per kind (Kueue's ``copyJobSpec``):

* batch/v1 Job: without ``spec.selector`` and the controller's template labels (the
  worker's Job controller makes new ones);
* TrainJob: without the ``spec.runtimePatches`` entry of manager
  ``kueue.x-k8s.io/manager`` (the worker's Kueue writes its own when it starts it).

The worker's status replaces the manager's job's whole status each time it differs
(Kueue's ``copyJobStatus``: ``dst.Status = src.Status``), except that a batch/v1 Job
still suspended on the manager takes it only once the worker's is suspended or
finished (the API refuses a running status on a suspended Job). Finished is the kind's
own rule (its integration's ``finished``): Job ``Complete``/``Failed``, JobSet
``Completed``/``Failed``, TrainJob ``Complete``/``Failed``, the Kubeflow jobs
``Succeeded``/``Failed``, RayJob ``jobDeploymentStatus`` ``Complete``/``Failed``; a
RayCluster never finishes (it serves until deleted).

Kinds (Kueue's pkg/controller/jobs/*/*_multikueue_adapter.go): batch/v1 Job, JobSet
(jobset.x-k8s.io/v1alpha2), TrainJob (trainer.kubeflow.org/v1alpha1), PyTorchJob
(kubeflow.org/v1) and MPIJob (kubeflow.org/v2beta1) with ``spec.runPolicy.managedBy``,
RayJob and RayCluster (ray.io/v1); pod groups in :mod:`.pods`; StatefulSet and
LeaderWorkerSet, which have no ``managedBy``, in :mod:`.serving`. Every other kind is
rejected by the check with Kueue's message "No multikueue adapter found for owner
kind".
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.interface import Integration
from admission.integrations.kinds.job import JOB
from admission.integrations.kinds.jobset import JOBSET
from admission.integrations.kinds.mpijob import MPIJOB
from admission.integrations.kinds.pytorchjob import PYTORCHJOB
from admission.integrations.kinds.raycluster import RAYCLUSTER
from admission.integrations.kinds.rayjob import RAYJOB
from admission.integrations.kinds.trainjob import TRAINJOB
from admission.kube.client.rest import Obj
from queues.api.labels import (
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_ORIGIN,
    PREBUILT_WORKLOAD,
    RUNTIME_PATCH_MANAGER,
)

_JOB_TEMPLATE_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)
_CREATION_META = ("name", "namespace", "labels", "annotations")


def remote_metadata(job: Obj, workload: str, origin: str) -> Obj:
    """The metadata of a worker's copy: the job's name, namespace, labels and
    annotations, labelled with the Workload already admitted there and the manager."""
    meta = job.get("metadata") or {}
    new_meta = {k: copy.deepcopy(meta[k]) for k in _CREATION_META if meta.get(k)}
    labels = new_meta.setdefault("labels", {})
    labels[PREBUILT_WORKLOAD] = workload
    labels[MULTIKUEUE_ORIGIN] = origin
    return new_meta


SPEC_MANAGED_BY = ("spec", "managedBy")
RUN_POLICY_MANAGED_BY = ("spec", "runPolicy", "managedBy")


def _without_job_selector(spec: Obj) -> None:
    """A Job's copy: no selector, no controller labels on the template."""
    spec.pop("selector", None)
    tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if isinstance(tmpl_labels, dict):
        for key in _JOB_TEMPLATE_LABELS:
            tmpl_labels.pop(key, None)


def _without_kueue_runtime_patch(spec: Obj) -> None:
    """A TrainJob's copy: no runtime patch of Kueue's (the worker's Kueue adds its own)."""
    patches = spec.get("runtimePatches")
    if isinstance(patches, list):
        kept = [
            p for p in patches
            if not (isinstance(p, dict) and p.get("manager") == RUNTIME_PATCH_MANAGER)
        ]  # fmt: skip
        if kept:
            spec["runtimePatches"] = kept
        else:
            spec.pop("runtimePatches")


@dataclass(frozen=True, slots=True)
class Adapter:
    """One job kind's MultiKueue rules."""

    integration: Integration
    #: where the kind keeps ``managedBy``
    managed_by: tuple[str, ...] = SPEC_MANAGED_BY
    #: the field as Kueue's "not managed" message names it
    managed_by_name: str = "spec.managedBy"
    #: kind-specific removals from the copy's spec (in place)
    scrub: Callable[[Obj], None] | None = None
    #: a suspended manager's job takes only a suspended or finished status (batch/v1 Job)
    status_waits_for_start: bool = False

    @property
    def resource(self) -> Resource:
        return self.integration.resource

    @property
    def kind(self) -> str:
        return self.resource.kind

    def managed_by_value(self, job: Obj) -> str:
        node: object = job
        for key in self.managed_by:
            node = node.get(key) if isinstance(node, dict) else None
        return str(node or "")

    def unmanaged_reason(self, job: Obj) -> str:
        """Why the job is not MultiKueue's ("" when its ``managedBy`` says it is)."""
        managed_by = self.managed_by_value(job)
        if managed_by == MULTIKUEUE_CONTROLLER:
            return ""
        return (
            f'Expecting {self.managed_by_name} to be "{MULTIKUEUE_CONTROLLER}" not "{managed_by}"'
        )

    def remote_copy(self, job: Obj, workload: str, origin: str) -> Obj:
        """The object to create on the worker."""
        new_meta = remote_metadata(job, workload, origin)
        spec = copy.deepcopy(job.get("spec") or {})
        *parents, leaf = self.managed_by[1:]
        node = spec
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
        if self.scrub is not None:
            self.scrub(spec)
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.kind,
            "metadata": new_meta,
            "spec": spec,
        }

    def status_to_copy(self, local: Obj, remote: Obj) -> Obj | None:
        """The status the manager's job should get from the worker's (None: leave it
        as it is)."""
        status = remote.get("status") or {}
        if (local.get("status") or {}) == status:
            return None
        if not self.status_waits_for_start or not self.integration.is_suspended(local):
            return status
        if self.integration.is_suspended(remote) or self.finished(remote):
            return status
        return None

    def finished(self, obj: Obj) -> bool:
        return self.integration.finished(obj) is not None


ADAPTERS: dict[str, Adapter] = {
    a.kind: a
    for a in (
        Adapter(JOB, scrub=_without_job_selector, status_waits_for_start=True),
        Adapter(JOBSET),
        Adapter(TRAINJOB, scrub=_without_kueue_runtime_patch),
        Adapter(PYTORCHJOB, managed_by=RUN_POLICY_MANAGED_BY),
        Adapter(
            MPIJOB, managed_by=RUN_POLICY_MANAGED_BY, managed_by_name="spec.runPolicy.managedBy"
        ),
        Adapter(RAYJOB),
        Adapter(RAYCLUSTER),
    )
}
"""Adapter by the kind of the Workload's controller owner."""
