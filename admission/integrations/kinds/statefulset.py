"""StatefulSet (``apps/v1``), as Kueue's ``statefulset`` integration: a serving pod group.

A StatefulSet never finishes and its controller owns its pods, so Kueue admits it
through them: the mutating webhook writes, into the pod template of a StatefulSet that
names a queue, the pod-group metadata — queue and priority-class labels, the managed
label, ``pod-group-name`` = the StatefulSet's Workload name
(``statefulset-<name>-<hash>``, hashed without a UID: the pods name it before the
object has one), ``pod-group-total-count`` = ``spec.replicas``, and the
``pod-group-fast-admission`` and ``pod-group-serving`` annotations (its pods come one by
one under ``OrderedReady``, and a replaced pod rejoins the group) — plus
``pod-suspending-parent``, which makes the pod webhook gate every pod. The pod-group
reconciler (``admission.kube.reconcilers.pod_groups``) then builds one Workload for the set, admits
it whole, ungates the pods with their flavor, deletes the running ones on eviction
(the StatefulSet recreates them, gated, for the next admission) and releases the quota
when the set is gone. The object itself is not watched; it is read up its pods' owner
chain.

On an update (Kueue's ``ValidateUpdate``), the queue name may change only while no
replica is ready and never to none, a WorkloadPriorityClass may not be added once one is
ready nor ever removed; for a queued set the pods' shape
(``ValidateImmutablePodGroupPodSpec``) and the pod group's name are fixed, and
``replicas`` may go to or from zero (Kueue) — or, our addition, change freely while the
set's Workload holds no quota: a queued set can be resized. The template is not
rewritten then (that would roll every pod, and under ``OrderedReady`` a gated pod never
gets ready for the next): the group's size and queue are read from the set itself when
its Workload is made, and a pending Workload follows them (``PodGroupReconciler``);
scaled to zero, the Workload ends with its pods and the next pods make a new one. In
``plan`` a StatefulSet is one podSet ``main`` of ``replicas`` pods. Sources:
Kueue pkg/controller/jobs/statefulset/statefulset_webhook.go (``Default``,
``ValidateUpdate``), pkg/controller/jobs/pod/pod_controller.go (``fastAdmission``,
``isServing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.fields import (
    IntegrationError,
    controller_ref,
    count_field,
    meta_of,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import Role
from admission.integrations.kinds.admitted_by_pods import (
    Edit,
    Obj,
    PodOwnerIntegration,
    UpdateCheck,
    at,
    immutable,
    shape_errors,
)
from queues.api.labels import POD_GROUP_FAST_ADMISSION, POD_GROUP_SERVING
from queues.api.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.api.labels import POD_GROUP_POD_INDEX_LABEL as POD_INDEX_LABEL_ANNOTATION
from queues.api.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION

FRAMEWORK = "statefulset"
STS_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_TEMPLATE = ("spec", "template")


class StatefulSetIntegration(PodOwnerIntegration):
    framework = FRAMEWORK
    resource = Resource("apps", "v1", "statefulsets", "StatefulSet")
    workload_name_uses_uid = False

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        kind_noun, ref = self.lower_kind, ref_of(obj)
        spec = obj.get("spec") or {}
        replicas = count_field(spec.get("replicas"), kind_noun, ref, "spec.replicas", default=1)
        if replicas == 0:
            raise IntegrationError(f"{kind_noun} {ref}: spec.replicas: 0 (nothing to run)")
        return [
            Role(name="main", count=replicas, template=template_at(obj, _TEMPLATE, kind_noun),
                 path=_TEMPLATE)
        ]  # fmt: skip

    def plan_workloads(self, obj: Mapping[str, Any]) -> list[tuple[str | None, list[Role]]]:
        """Its one Workload; none for a set scaled to zero (it runs nothing)."""
        if self.replicas(obj) == 0:
            return []
        return super().plan_workloads(obj)

    def suspend_edits(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> list[Edit]:
        replicas = (obj.get("spec") or {}).get("replicas")
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        return self.template_edits(
            _TEMPLATE,
            labels,
            extra_labels=[(GROUP_NAME_LABEL, self.workload_name(obj))],
            annotations=[
                (GROUP_TOTAL_COUNT_ANNOTATION, str(count)),
                (POD_GROUP_FAST_ADMISSION, "true"),
                (POD_GROUP_SERVING, "true"),
                (POD_INDEX_LABEL_ANNOTATION, STS_POD_INDEX_LABEL),
            ],
        )

    def group_owner(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        ref = controller_ref(pod)
        if ref is None or (ref.get("apiVersion"), ref.get("kind")) != (self.api_version, self.kind):
            return None
        return str(ref.get("name") or ""), str(ref.get("uid") or "")

    def replicas(self, obj: Mapping[str, Any]) -> int:
        """``spec.replicas`` (1 when unset or malformed: the API server refuses those)."""
        value = (obj.get("spec") or {}).get("replicas", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    def keeps_group(self, owner: Mapping[str, Any], group: str) -> bool:
        """The set's one group, while it has replicas (scaled to zero, its Workload goes
        with its pods and a new one comes with the next pods)."""
        return group == self.workload_name(owner) and self.replicas(owner) != 0

    def group_size(self, owner: Mapping[str, Any]) -> int:
        """The group's pods: ``replicas`` now (the template's total count is the one
        at creation; a resized set is not rewritten, which would roll its pods)."""
        return self.replicas(owner)

    def update_edits(
        self, new: Mapping[str, Any], old: Mapping[str, Any], labels: Mapping[str, str]
    ) -> list[Edit]:
        """Nothing once the template holds the pod group: a new queue, priority class or
        replica count reaches the group's Workload from the set itself (rewriting the
        template would roll every pod, and a gated pod never gets ready for the next).
        A set that becomes queued gets the pod group as on a create."""
        if _template_labels(old).get(GROUP_NAME_LABEL):
            return []
        return self.suspend_edits(new, labels)

    def update_errors(self, new: Obj, old: Obj, check: UpdateCheck) -> list[str]:
        """Kueue's StatefulSet ``ValidateUpdate``: for a managed set, the pods' shape is
        fixed and ``replicas`` may only go to or from zero — or, while the set's Workload
        holds no quota, to any count (its Workload follows); scaling up from zero waits
        until the last scale-down's pods and Workload are gone. The pod group's name in
        the template is fixed."""
        errors = super().update_errors(new, old, check)
        if not check.managed:
            return errors
        errors += shape_errors(at(new, (*_TEMPLATE, "spec")),
                               at(old, (*_TEMPLATE, "spec")), "spec.template.spec")  # fmt: skip
        group = _template_labels(old).get(GROUP_NAME_LABEL)
        if group and _template_labels(new).get(GROUP_NAME_LABEL) != group:
            errors.append(immutable(f"spec.template.metadata.labels[{GROUP_NAME_LABEL}]",
                                    _template_labels(new).get(GROUP_NAME_LABEL)))  # fmt: skip
        before, after = self.replicas(old), self.replicas(new)
        key = f"{meta_of(old).get('namespace') or 'default'}/{self.workload_name(old)}"
        if before and after and before != after and check.workload(key) is True:
            errors.append(immutable("spec.replicas", after))
        elif not before and after:
            if (new.get("status") or {}).get("replicas"):
                errors.append("spec.replicas: Forbidden: scaling down is still in progress")
            elif check.workload(key) is not None:
                errors.append("spec.replicas: Forbidden: workload from previous scale-down "
                              "is still being deleted")  # fmt: skip
        return errors


def _template_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}


STATEFULSET = StatefulSetIntegration()
