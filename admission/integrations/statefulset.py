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
reconciler (``admission.kube.podgroups``) then builds one Workload for the set, admits
it whole, ungates the pods with their flavor, deletes the running ones on eviction
(the StatefulSet recreates them, gated, for the next admission) and releases the quota
when the set is gone. The object itself is not watched; it is read up its pods' owner
chain.

The validating webhook keeps, for a StatefulSet that names a queue, the queue name and
the pod group in its template, and ``spec.replicas``, unchanged (the group's total count
is fixed: resizing a serving group is Kueue's newer StatefulSet reconciler, not done
here). In ``plan`` a StatefulSet is one podSet ``main`` of ``replicas`` pods. Sources:
Kueue pkg/controller/jobs/statefulset/statefulset_webhook.go (``Default``,
``ValidateUpdate``), pkg/controller/jobs/pod/pod_controller.go (``fastAdmission``,
``isServing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.labels import POD_GROUP_FAST_ADMISSION, POD_GROUP_SERVING
from queues.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.labels import POD_GROUP_POD_INDEX_LABEL as POD_INDEX_LABEL_ANNOTATION
from queues.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.labels import QUEUE_NAME as QUEUE_NAME_LABEL

from .base import (
    IntegrationError,
    Resource,
    Role,
    controller_ref,
    count_field,
    ref_of,
    template_at,
)
from .podowner import Edit, PodOwnerIntegration

FRAMEWORK = "statefulset"
STS_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_TEMPLATE = ("spec", "template")


class StatefulSetIntegration(PodOwnerIntegration):
    framework = FRAMEWORK
    resource = Resource("apps", "v1", "statefulsets", "StatefulSet")
    workload_name_uses_uid = False

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        what, ref = self.what, ref_of(obj)
        spec = obj.get("spec") or {}
        replicas = count_field(spec.get("replicas"), what, ref, "spec.replicas", default=1)
        if replicas == 0:
            raise IntegrationError(f"{what} {ref}: spec.replicas: 0 (nothing to run)")
        return [
            Role(name="main", count=replicas, template=template_at(obj, _TEMPLATE, what),
                 path=_TEMPLATE)
        ]  # fmt: skip

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

    def keeps_group(self, owner: Mapping[str, Any], group: str) -> bool:
        """The set's one group, while it has replicas (scaled to zero, its Workload goes
        with its pods and a new one comes with the next pods)."""
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        return group == self.workload_name(owner) and replicas != 0

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        errors = super().validate(new, old)
        if old is None or not _labels(old).get(QUEUE_NAME_LABEL):
            return errors
        for where, get in (
            ("spec.replicas", lambda o: (o.get("spec") or {}).get("replicas", 1)),
            (f'spec.template.metadata.labels["{GROUP_NAME_LABEL}"]',
             lambda o: _template_labels(o).get(GROUP_NAME_LABEL)),
            (f'spec.template.metadata.labels["{QUEUE_NAME_LABEL}"]',
             lambda o: _template_labels(o).get(QUEUE_NAME_LABEL)),
        ):  # fmt: skip
            if get(new) != get(old):
                errors.append(f"{where}: Invalid value: {get(new)!r}: field is immutable")
        return errors


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _template_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}


STATEFULSET = StatefulSetIntegration()
