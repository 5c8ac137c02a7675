"""batch/v1 Job, the way Kueue's ``batch/job`` integration handles it.

Users submit Jobs, not Workloads; Kueue's job controller turns each one into a
Workload that the scheduler queues and admits. Quartermaster derives the same
Workload (same name, podSet, count, requests, queue and priority) or its plans and
decisions would not line up with Kueue's. Sources: Kueue
pkg/controller/jobs/job/job_controller.go (``PodSets``, ``podsCount``,
``minPodsCount``, ``RunWithPodSetsInfo``, ``RestorePodSetsInfo``, ``Stop``) and the
Job webhook's min-parallelism validation.

Two things only a Job has: partial admission (``job-min-parallelism``: the admitted
count becomes ``spec.parallelism``, restored on stop), and a stop the API server
allows only in steps (see :meth:`JobIntegration.stop_step`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import job_may_own
from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import (
    IntegrationError,
    Obj,
    as_object,
    count_field,
    ref_of,
    string_map,
    template_at,
)
from admission.integrations.framework.interface import (
    Finished,
    Integration,
    Role,
    Step,
    finished_by_conditions,
)
from admission.integrations.framework.podset_info import TAS_ANNOTATIONS, PodSetInfo
from admission.integrations.framework.workload_names import workload_name
from queues.api.labels import JOB_MIN_PARALLELISM as JOB_MIN_PARALLELISM_ANNOTATION
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.api.labels import TOPOLOGY_GATE
from queues.model import PriorityClass, Workload

__all__ = [
    "JOB",
    "JOB_MIN_PARALLELISM_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "JobError",
    "JobIntegration",
    "workload_from_job",
    "workload_name",
]

DEFAULT_POD_SET_NAME = "main"
# Kueue's PodIndexLabel for batch/v1 Jobs (the ungater hands out domains in this order).
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
_ATOI_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)

JobError = IntegrationError
"""A Job cannot be turned into a Workload; the message names the Job and the field."""


class JobIntegration(Integration):
    framework = "batch/job"
    resource = Resource("batch", "v1", "jobs", "Job")
    # start/stop patches; stopping a started Job clears status.startTime so the
    # API server lets its pod template's scheduling directives be restored
    # get: the whole Job when its Workload is built (the informer keeps a slim copy)
    writes = (("get", ""), ("patch", ""), ("patch", "status"))
    pod_index_label = JOB_COMPLETION_INDEX_LABEL

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        """One podSet ``main`` with count = min(parallelism, completions) and minCount
        from the ``job-min-parallelism`` annotation."""
        kind_noun, ref = self.lower_kind, ref_of(obj)
        meta = as_object(obj.get("metadata"), kind_noun, ref, "metadata")
        annotations = string_map(meta.get("annotations"), kind_noun, ref, "metadata.annotations")
        spec = as_object(obj.get("spec"), kind_noun, ref, "spec")
        parallelism = count_field(
            spec.get("parallelism"), kind_noun, ref, "spec.parallelism", default=1
        )
        completions = count_field(
            spec.get("completions"), kind_noun, ref, "spec.completions", default=parallelism
        )
        count = min(parallelism, completions)
        min_count = _min_count(annotations.get(JOB_MIN_PARALLELISM_ANNOTATION), count, ref)
        template = template_at(obj, ("spec", "template"), kind_noun)
        return [
            Role(
                name=DEFAULT_POD_SET_NAME,
                count=count,
                template=template,
                path=("spec", "template"),
                min_count=min_count,
                count_path=("spec", "parallelism"),
            )
        ]

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return finished_by_conditions(obj, succeeded=("Complete",), failed=("Failed",))

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return job_active(obj) > 0

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        return job_may_own(obj, child, suspended=self.is_suspended(obj))

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """Kueue's ``Job.ReclaimablePods``: once fewer completions remain than
        ``parallelism``, the difference is reclaimable (an Indexed Job counts its
        completed and failed indexes below ``completions``)."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        parallelism = _int(spec.get("parallelism"), 1)
        completions = _int(spec.get("completions"), parallelism)
        if spec.get("completionMode") == "Indexed":
            terminal = terminal_indexes(
                str(status.get("completedIndexes") or ""),
                str(status.get("failedIndexes") or ""),
                completions,
            )
        else:
            terminal = _int(status.get("succeeded"), 0)
        if parallelism <= 1 or terminal <= 0:
            return {}
        remaining = max(completions - terminal, 0)
        return {DEFAULT_POD_SET_NAME: parallelism - remaining} if remaining < parallelism else {}

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        status = obj.get("status") or {}
        ready = sum(v for k in ("ready", "succeeded") if isinstance(v := status.get(k), int))
        return ready >= count

    def run_patch(self, obj: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> Obj:
        """Unsuspend with the flavors' node selector and tolerations, the podset label
        (and the labels of AdmissionChecks' podSetUpdates); under partial admission the admitted count becomes ``parallelism``."""
        (info,) = infos
        (role,) = self.roles(obj)
        tspec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        tolerations: list[Obj] = [t for t in tspec.get("tolerations") or [] if isinstance(t, dict)]
        tolerations += [t for t in info.tolerations if t not in tolerations]
        pod_spec: Obj = {}
        if info.node_selector:
            pod_spec["nodeSelector"] = dict(info.node_selector)
        if tolerations != (tspec.get("tolerations") or []):
            pod_spec["tolerations"] = tolerations
        gates = [g for g in tspec.get("schedulingGates") or [] if isinstance(g, dict)]
        have_gates = {g.get("name") for g in gates}
        if any(g not in have_gates for g in info.scheduling_gates):
            pod_spec["schedulingGates"] = gates + [
                {"name": g} for g in info.scheduling_gates if g not in have_gates
            ]
        template: Obj = {"metadata": {"labels": {**info.labels, PODSET_LABEL: info.name}}}
        if info.annotations:
            template["metadata"]["annotations"] = dict(info.annotations)
        if pod_spec:
            template["spec"] = pod_spec
        body: Obj = {"suspend": False, "template": template}
        if role.min_count is not None and info.count < role.count:
            body["parallelism"] = info.count
        return {"spec": body}

    def restore_patch(self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo]) -> Obj:
        """Put back the template's node selector, tolerations and podset label (and
        the parallelism partial admission lowered) from the Workload's copy; valid
        only on a suspended, never-started Job (see :meth:`stop_step`)."""
        (info,) = originals
        (role,) = self.roles(obj)
        tmpl = (obj.get("spec") or {}).get("template") or {}
        tspec = tmpl.get("spec") or {}
        patch_spec: Obj = {}
        have_ns = tspec.get("nodeSelector") or {}
        want_ns = info.node_selector
        if have_ns != want_ns:
            ns_patch: Obj = {k: None for k in have_ns if k not in want_ns}
            ns_patch.update({k: v for k, v in want_ns.items() if have_ns.get(k) != v})
            patch_spec["nodeSelector"] = ns_patch
        if (tspec.get("tolerations") or []) != info.tolerations:
            patch_spec["tolerations"] = info.tolerations or None
        gates = [g for g in tspec.get("schedulingGates") or [] if isinstance(g, dict)]
        kept_gates = [
            g
            for g in gates
            if g.get("name") != TOPOLOGY_GATE or TOPOLOGY_GATE in info.scheduling_gates
        ]
        if kept_gates != gates:
            patch_spec["schedulingGates"] = kept_gates or None
        template: Obj = {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if PODSET_LABEL in labels and PODSET_LABEL not in info.labels:
            template["metadata"] = {"labels": {PODSET_LABEL: None}}
        annotations = (tmpl.get("metadata") or {}).get("annotations") or {}
        added = {  # what a topology start added (``tas_info``)
            k: None for k in TAS_ANNOTATIONS if k in annotations and k not in info.annotations
        }
        if added:
            template.setdefault("metadata", {})["annotations"] = added
        if patch_spec:
            template["spec"] = patch_spec
        body: Obj = {"template": template} if template else {}
        if info.min_count is not None and (obj.get("spec") or {}).get("parallelism") != info.count:
            body["parallelism"] = info.count  # partial admission lowered it
        return {"spec": body} if body else {}

    def stop_step(
        self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo] | None
    ) -> Step | None:
        """Kueue's batch/Job ``Stop``, in the steps the API server allows.

        A Job's pod template may change only while the *stored* Job is suspended and
        has no ``status.startTime``, and the Job controller keeps ``startTime`` on
        suspend; one patch "suspend + restore the template" is refused (422) for any
        Job that has started. So: suspend; clear ``startTime`` through ``jobs/status``;
        then restore the template — once the Job controller reports no active pods,
        since from Kubernetes 1.36 (``MutableSchedulingDirectivesForSuspendedJobs``)
        the template of a suspended Job is mutable only with ``status.active == 0``.
        """
        if not self.is_suspended(obj):
            return Step({"spec": {"suspend": True}})
        if ((obj.get("status") or {}).get("startTime")) or "":
            return Step({"status": {"startTime": None}}, subresource="status")
        if originals is not None and job_active(obj) == 0:
            patch = self.restore_patch(obj, originals)
            if patch:
                return Step(patch)
        return None


JOB = JobIntegration()


def job_active(job: Mapping[str, Any]) -> int:
    n = (job.get("status") or {}).get("active")
    return n if isinstance(n, int) else 0


def workload_from_job(
    job: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue's job controller creates for ``job`` (a batch/v1 Job dict).

    One podSet ``main`` with count = min(parallelism, completions), minCount from the
    ``job-min-parallelism`` annotation, per-pod requests from the pod template, queue
    from the ``queue-name`` label, and priority resolved WorkloadPriorityClass label ->
    template ``priorityClassName`` -> globalDefault PriorityClass -> 0.
    Raises ``JobError`` naming the Job and the field on bad input.
    """
    return workload_model(
        JOB,
        job,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
    )


def _min_count(raw: str | None, count: int, ref: str) -> int | None:
    """The Job webhook's rule: an integer with 0 < v < count (strconv.Atoi syntax)."""
    if raw is None:
        return None
    field = f'metadata.annotations["{JOB_MIN_PARALLELISM_ANNOTATION}"]'
    value = int(raw) if _ATOI_RE.fullmatch(raw) else None
    if value is None or not 0 < value < count:
        bounds = (
            f"between 1 and {count - 1}" if count > 1 else "unset: the job has fewer than 2 pods"
        )
        raise JobError(f"job {ref}: {field}: must be {bounds}, got {raw!r}")
    return value


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def terminal_indexes(completed: str, failed: str, completions: int) -> int:
    """Kueue's ``terminalIndexesCount``: the indexes below ``completions`` in the union
    of the completed and failed interval lists (``"1,3-5"``); bad intervals are skipped."""
    done: set[int] = set()
    for text in (completed, failed):
        for part in filter(None, text.split(",")):
            first, sep, last = part.partition("-")
            if not first.isdigit() or (sep and not last.isdigit()):
                continue
            lo, hi = int(first), int(last) if sep else int(first)
            done.update(range(lo, min(hi, completions - 1) + 1))
    return len(done)
