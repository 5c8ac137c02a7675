"""JobSet (``jobset.x-k8s.io/v1alpha2``), the way Kueue's ``jobset.x-k8s.io/jobset``
integration handles it.

A JobSet is a group of replicated Jobs started and stopped together: the usual shape of
multi-node GPU training (a driver and N workers, each a Job). Kueue admits it as one
Workload with one podSet per ``spec.replicatedJobs[]`` entry, ``count = replicas ×
min(parallelism, completions)``; the JobSet controller creates the child Jobs, which
carry the JobSet as controller owner and are never admitted on their own (their queue
label, if any, is the JobSet's business).

Suspension is ``spec.suspend``. The JobSet webhook lets a replicated Job's pod template
labels, annotations, node selector, tolerations and scheduling gates change only while
the JobSet is (or is becoming) suspended, and everything else of ``replicatedJobs``
never: the admission is injected in the patch that unsuspends, the restore in the
patch that suspends, and there is no partial admission. Completion shows as a
``Completed`` or ``Failed`` condition. Sources: Kueue
pkg/controller/jobs/jobset/jobset_controller.go; jobset api/jobset/v1alpha2/
jobset_types.go and pkg/webhooks/jobset_webhook.go (``ValidateUpdate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.children import jobset_may_own
from admission.integrations.framework.fields import (
    IntegrationError,
    count_field,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import (
    Finished,
    Integration,
    Role,
    finished_by_conditions,
)
from admission.integrations.kinds.replicated_jobs import (
    JOBSET_RESOURCE,
    int_or,
    succeeded_replicas,
)


class JobSetIntegration(Integration):
    framework = "jobset.x-k8s.io/jobset"
    resource = JOBSET_RESOURCE
    # Kueue's JobSet PodIndexLabel (its Jobs' completion index) for topology placement
    pod_index_label = "batch.kubernetes.io/job-completion-index"
    # and the index of its Job in the replicatedJob: ranks run across the Jobs
    sub_group_index_label = "jobset.sigs.k8s.io/job-index"

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        kind_noun, ref = self.lower_kind, ref_of(obj)
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            raise IntegrationError(f"{kind_noun} {ref}: spec: required")
        rjobs = spec.get("replicatedJobs")
        if not isinstance(rjobs, list) or not rjobs:
            raise IntegrationError(
                f"{kind_noun} {ref}: spec.replicatedJobs: at least one is required"
            )
        roles = []
        for i, rj in enumerate(rjobs):
            where = f"spec.replicatedJobs[{i}]"
            if not isinstance(rj, Mapping):
                raise IntegrationError(f"{kind_noun} {ref}: {where}: expected an object")
            name = rj.get("name")
            if not isinstance(name, str) or not name:
                raise IntegrationError(f"{kind_noun} {ref}: {where}.name: required")
            replicas = count_field(
                rj.get("replicas"), kind_noun, ref, f"{where}.replicas", default=1
            )
            job_spec = template_at(
                obj, ("spec", "replicatedJobs", i, "template", "spec"), kind_noun
            )
            parallelism = count_field(
                job_spec.get("parallelism"),
                kind_noun,
                ref,
                f"{where}.template.spec.parallelism",
                default=1,
            )
            completions = count_field(
                job_spec.get("completions"),
                kind_noun,
                ref,
                f"{where}.template.spec.completions",
                default=parallelism,
            )
            path = ("spec", "replicatedJobs", i, "template", "spec", "template")
            roles.append(
                Role(
                    name=name,
                    count=replicas * min(parallelism, completions),
                    template=template_at(obj, path, kind_noun),
                    path=path,
                    sub_group_count=replicas,
                )
            )
        return roles

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return finished_by_conditions(obj, succeeded=("Completed",), failed=("Failed",))

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return any(int_or(s.get("active")) > 0 for s in _replicated_job_statuses(obj))

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        """Every replicated Job ready or succeeded (Kueue: ready + succeeded = replicas)."""
        rjobs = (obj.get("spec") or {}).get("replicatedJobs") or []
        replicas = sum(int_or(rj.get("replicas"), 1) for rj in rjobs if isinstance(rj, Mapping))
        ready = sum(
            int_or(s.get("ready")) + int_or(s.get("succeeded"))
            for s in _replicated_job_statuses(obj)
        )
        return ready >= replicas

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        return jobset_may_own(obj, child, (obj.get("spec") or {}).get("replicatedJobs") or [])

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """Kueue's ``JobSet.ReclaimablePods``: a replicated Job's succeeded replicas
        (at most its ``replicas``) times its pods per replica."""
        try:
            roles = self.roles(obj)
        except IntegrationError:
            return {}
        return succeeded_replicas(
            (obj.get("spec") or {}).get("replicatedJobs") or [],
            _replicated_job_statuses(obj),
            roles,
        )


def _replicated_job_statuses(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = obj.get("status") or {}
    items = status.get("replicatedJobsStatus") if isinstance(status, Mapping) else None
    return [s for s in items or [] if isinstance(s, Mapping)]


JOBSET = JobSetIntegration()
