"""The job kinds MultiKueue dispatches: how the manager's job is copied to the worker
that admitted its Workload, how the worker's status comes back, and how the copy is
removed (Kueue's ``MultiKueueAdapter`` of each kind: ``SyncJob``,
``DeleteRemoteObject``, ``IsJobManagedByKueue``).

The copy keeps the job's name, namespace, labels, annotations and spec, without
``spec.managedBy`` (the worker's own controllers run it) and, for a Job, without its
selector and the controller's template labels (the worker's Job controller makes new
ones). It is labelled ``kueue.x-k8s.io/prebuilt-workload-name`` (the Workload copy
already admitted there) and ``kueue.x-k8s.io/multikueue-origin``.

Kinds: batch/v1 Job and JobSet (jobset.x-k8s.io/v1alpha2); every other kind is
rejected by the check with Kueue's message "No multikueue adapter found for owner kind".
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from admission.integrations.framework.addressing import Resource
from admission.integrations.kinds.replicated_jobs import JOBSET_RESOURCE
from admission.kube.client.resources import JOBS
from admission.kube.client.rest import Obj
from queues.api.conditions import is_true
from queues.api.labels import MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN, PREBUILT_WORKLOAD

_JOB_TEMPLATE_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)
_CREATION_META = ("name", "namespace", "labels", "annotations")


@dataclass(frozen=True, slots=True)
class Adapter:
    resource: Resource

    @property
    def kind(self) -> str:
        return self.resource.kind

    def unmanaged_reason(self, job: Obj) -> str:
        """Why the job is not MultiKueue's ("" when its ``spec.managedBy`` says it is)."""
        managed_by = str((job.get("spec") or {}).get("managedBy") or "")
        if managed_by == MULTIKUEUE_CONTROLLER:
            return ""
        return f'Expecting spec.managedBy to be "{MULTIKUEUE_CONTROLLER}" not "{managed_by}"'

    def remote_copy(self, job: Obj, workload: str, origin: str) -> Obj:
        """The object to create on the worker."""
        meta = job.get("metadata") or {}
        new_meta = {k: copy.deepcopy(meta[k]) for k in _CREATION_META if meta.get(k)}
        labels = new_meta.setdefault("labels", {})
        labels[PREBUILT_WORKLOAD] = workload
        labels[MULTIKUEUE_ORIGIN] = origin
        spec = copy.deepcopy(job.get("spec") or {})
        spec.pop("managedBy", None)
        if self.resource == JOBS:
            spec.pop("selector", None)
            tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
            if isinstance(tmpl_labels, dict):
                for key in _JOB_TEMPLATE_LABELS:
                    tmpl_labels.pop(key, None)
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.kind,
            "metadata": new_meta,
            "spec": spec,
        }

    def status_to_copy(self, local: Obj, remote: Obj) -> Obj | None:
        """The status the manager's job should get from the worker's (None: leave it
        as it is). As Kueue's Job adapter: copied while the manager's job runs, or once
        the worker's has finished; not while the manager's is still suspended and the
        worker's runs (a running status on a suspended Job is invalid)."""
        status = remote.get("status") or {}
        if (local.get("status") or {}) == status:
            return None
        if not (local.get("spec") or {}).get("suspend"):
            return status
        if (remote.get("spec") or {}).get("suspend") or self.finished(remote):
            return status
        return None

    def finished(self, obj: Obj) -> bool:
        if self.resource == JOBS:
            return is_true(obj, "Complete") or is_true(obj, "Failed")
        return is_true(obj, "Completed") or is_true(obj, "Failed")


ADAPTERS: dict[str, Adapter] = {a.kind: a for a in (Adapter(JOBS), Adapter(JOBSET_RESOURCE))}
"""Adapter by the kind of the Workload's controller owner."""
