"""Composing the Workload for a job object: the engine's model (podSets, queue,
priority) and the API object Kueue's reconciler creates (Kueue's ``ConstructWorkload``,
``ExtractPriority``)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from admission.integrations.framework.fields import (
    IntegrationError,
    Obj,
    as_object,
    creation_time_of,
    meta_of,
    spec_field,
    string_map,
)
from admission.integrations.framework.interface import (
    Integration,
    Role,
    template_annotations,
)
from admission.integrations.framework.workload_names import workload_name
from queues.api import labels
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.api.topology_request import (
    TopologyAnnotationError,
    topology_request_from_annotations,
    topology_request_json,
)
from queues.model import (
    PodSet,
    PriorityClass,
    TopologyRequest,
    Workload,
)
from queues.pods import PodSpecError, podset_from_template
from queues.quantity import QuantityError

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
JOB_UID_LABEL = labels.JOB_UID
OWNER_GVK_ANNOTATION = labels.JOB_OWNER_GVK
OWNER_NAME_ANNOTATION = labels.JOB_OWNER_NAME
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
POD_PRIORITY_CLASS = "PriorityClass"
# Namespace for UIDs invented for objects that carry none (files, tests), so that the
# derived Workload names stay the same from run to run.
_FAKE_UID_NAMESPACE = uuid.UUID("6f1c1d0e-8a53-4b8e-9a52-7b1f4c0d9e21")


def pod_set_model(
    kind_noun: str,
    ref: str,
    role: Role,
    *,
    pod_index_label: str | None = None,
    sub_group_index_label: str | None = None,
) -> PodSet:
    """The engine's podSet for a role: per-pod requests and placement from the
    template, and the topology request its annotations make — the one place
    pod-template annotations become a ``topologyRequest``, for every kind."""
    spec = role.template.get("spec")
    if spec is None:
        spec = {}
    elif not isinstance(spec, Mapping):
        raise IntegrationError(
            f"{kind_noun} {ref}: {spec_field(role.path, 'spec')}: expected an object, got {type(spec).__name__}"
        )
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise IntegrationError(
            f"{kind_noun} {ref}: {spec_field(role.path, 'spec.containers')}: at least one container is required"
        )
    try:
        pod_set = podset_from_template(
            name=role.name, count=role.count, template=role.template, min_count=role.min_count
        )
    except (QuantityError, PodSpecError) as err:
        raise IntegrationError(
            f"{kind_noun} {ref}: {spec_field(role.path, 'spec')}: {err}"
        ) from err
    annotations = template_annotations(kind_noun, ref, role)
    if annotations:
        try:
            pod_set.topology = topology_request_from_annotations(
                annotations,
                path=spec_field(role.path, "metadata"),
                count=role.count,
                pod_index_label=pod_index_label,
                sub_group=(
                    (sub_group_index_label, role.sub_group_count)
                    if sub_group_index_label is not None and role.sub_group_count is not None
                    else None
                ),
            )
        except TopologyAnnotationError as err:
            raise IntegrationError(f"{kind_noun} {ref}: {err}") from err
    return pod_set


def workload_model(
    integration: Integration,
    obj: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    roles: Sequence[Role] | None = None,
    name: str | None = None,
) -> Workload:
    """The Workload Kueue creates for ``obj`` (the engine's model): one podSet per
    role, queue from the ``queue-name`` label, priority from :func:`workload_priority`.
    Raises IntegrationError naming the object and the field on bad input."""
    kind_noun = integration.lower_kind
    if not isinstance(obj, Mapping):
        raise IntegrationError(f"{kind_noun}: expected an object, got {type(obj).__name__}")
    metadata = as_object(obj.get("metadata"), kind_noun, "<unknown>", "metadata")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise IntegrationError(
            f"{kind_noun} <unknown>: metadata.namespace: expected a string, got {namespace!r}"
        )
    obj_name = metadata.get("name")
    if not isinstance(obj_name, str) or not obj_name:
        raise IntegrationError(
            f"{kind_noun} {namespace}/<unnamed>: metadata.name: required, got {obj_name!r}"
        )
    ref = f"{namespace}/{obj_name}"
    for key, expected in (("kind", integration.kind), ("apiVersion", integration.api_version)):
        if key in obj and obj[key] != expected:
            raise IntegrationError(
                f"{kind_noun} {ref}: {key}: expected {expected!r}, got {obj[key]!r}"
            )
    labels = string_map(metadata.get("labels"), kind_noun, ref, "metadata.labels")
    annotations = string_map(metadata.get("annotations"), kind_noun, ref, "metadata.annotations")
    uid = metadata.get("uid")
    if uid is None or uid == "":
        uid = str(uuid.uuid5(_FAKE_UID_NAMESPACE, ref))
    elif not isinstance(uid, str):
        raise IntegrationError(f"{kind_noun} {ref}: metadata.uid: expected a string, got {uid!r}")
    creation_time = creation_time_of(metadata.get("creationTimestamp"), kind_noun, ref)
    if roles is None:
        roles = integration.roles(obj)
    if not roles:
        raise IntegrationError(f"{kind_noun} {ref}: spec: no podSets (nothing to run)")
    pod_sets = [
        pod_set_model(
            kind_noun,
            ref,
            role,
            pod_index_label=integration.pod_index_label,
            sub_group_index_label=integration.sub_group_index_label,
        )
        for role in roles
    ]
    pc_name, pc_field = integration.priority_class_name(obj, roles)
    priority_class, kind, priority = workload_priority(
        labels=labels,
        priority_class_name=pc_name,
        kind_noun=kind_noun,
        ref=ref,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
        field_name=pc_field,
    )
    if name is None:
        name = workload_name(owner_name=obj_name,
                             owner_uid=uid if integration.workload_name_uses_uid else "",
                             kind=integration.kind, group=integration.resource.group)  # fmt: skip
    return Workload(
        namespace=namespace,
        name=name,
        pod_sets=pod_sets,
        queue_name=labels.get(QUEUE_NAME_LABEL, ""),
        priority=priority,
        priority_class=priority_class,
        priority_class_kind=kind,
        uid=uid,
        creation_time=creation_time,
        labels=labels,
        annotations=annotations,
    )


SLIM_DIGEST = "x-quartermaster-digest"
"""Key of a pod template the service's informers slimmed (admission/kube/watch/slim.py): the
digest of the whole template. Carried into the Workload body built from it, which is
then compared with the stored Workload, never written."""


def pod_set_json(role: Role, topology: TopologyRequest | None = None) -> Obj:
    """A Workload ``spec.podSets[]`` entry: the template's labels, annotations and spec,
    and the ``topologyRequest`` its annotations make (``pod_set_model``'s)."""
    tmeta = role.template.get("metadata") or {}
    pod_template: Obj = {"spec": copy.deepcopy(dict(role.template.get("spec") or {}))}
    kept = {k: copy.deepcopy(tmeta[k]) for k in ("labels", "annotations") if tmeta.get(k)}
    if kept:
        pod_template["metadata"] = kept
    if SLIM_DIGEST in role.template:
        pod_template[SLIM_DIGEST] = role.template[SLIM_DIGEST]
    out: Obj = {"name": role.name, "count": role.count, "template": pod_template}
    if role.min_count is not None:
        out["minCount"] = role.min_count
    if topology is not None:
        out["topologyRequest"] = topology_request_json(topology)
    return out


def workload_spec(wl: Workload, pod_sets: list[Obj]) -> Obj:
    """A Workload's ``spec``: podSets, queue, priority and the priority class it came from."""
    return spec_json(
        pod_sets,
        queue_name=wl.queue_name,
        priority=wl.priority,
        priority_class=wl.priority_class,
        priority_class_kind=wl.priority_class_kind,
    )


def spec_json(
    pod_sets: list[Obj],
    *,
    queue_name: str,
    priority: int,
    priority_class: str | None,
    priority_class_kind: str | None,
) -> Obj:
    spec: Obj = {"podSets": pod_sets, "priority": priority}
    spec.update({"queueName": queue_name} if queue_name else {})  # omitempty: "" is invalid
    if priority_class:
        group = (
            "scheduling.k8s.io" if priority_class_kind == POD_PRIORITY_CLASS else "kueue.x-k8s.io"
        )
        spec["priorityClassRef"] = {
            "group": group,
            "kind": priority_class_kind or WORKLOAD_PRIORITY_CLASS,
            "name": priority_class,
        }
    return spec


def workload_body(
    integration: Integration, obj: Mapping[str, Any], wl: Workload, roles: Sequence[Role]
) -> Obj:
    """The Workload object Kueue's reconciler creates for ``obj``: owned by it
    (controller reference, ``job-uid`` label, owner annotations)."""
    m = meta_of(obj)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": wl.name,
            "namespace": m.get("namespace") or "default",
            "labels": {JOB_UID_LABEL: str(m.get("uid") or "")},
            "annotations": {
                OWNER_GVK_ANNOTATION: integration.resource.gvk,
                OWNER_NAME_ANNOTATION: str(m.get("name") or ""),
            },
            "ownerReferences": [
                {
                    "apiVersion": integration.api_version,
                    "kind": integration.kind,
                    "name": m.get("name"),
                    "uid": m.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": workload_spec(
            wl, [pod_set_json(r, ps.topology) for r, ps in zip(roles, wl.pod_sets, strict=True)]
        ),
    }


def compose(
    integration: Integration,
    obj: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> tuple[Workload, Obj]:
    """The Workload for ``obj``: the engine's model and the API object Kueue creates."""
    roles = integration.roles(obj)
    wl = workload_model(
        integration,
        obj,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
        roles=roles,
    )
    return wl, workload_body(integration, obj, wl, roles)


def workload_priority(
    *,
    labels: Mapping[str, str],
    priority_class_name: str,
    kind_noun: str,
    ref: str,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    field_name: str = "spec.template.spec.priorityClassName",
) -> tuple[str | None, str | None, int]:
    """Kueue's ``ExtractPriority``: (class name, class kind, priority value) from the
    WorkloadPriorityClass label, else the pod PriorityClass, else the lowest global
    default PriorityClass, else 0."""
    wpc_name = labels.get(PRIORITY_CLASS_LABEL, "")
    if wpc_name:
        wpc = workload_priority_classes.get(wpc_name)
        if wpc is None:
            raise IntegrationError(
                f'{kind_noun} {ref}: metadata.labels["{PRIORITY_CLASS_LABEL}"]: '
                f"WorkloadPriorityClass {wpc_name!r} not found (WorkloadPriorityClassNotFound)"
            )
        return wpc.name, WORKLOAD_PRIORITY_CLASS, wpc.value
    if priority_class_name:
        pc = priority_classes.get(priority_class_name)
        if pc is None:
            raise IntegrationError(
                f"{kind_noun} {ref}: {field_name}: PriorityClass {priority_class_name!r} not found"
            )
        return pc.name, POD_PRIORITY_CLASS, pc.value
    # Several global defaults can exist after a race; Kueue takes the lowest value.
    defaults = [pc for pc in priority_classes.values() if pc.global_default]
    if defaults:
        pc = min(defaults, key=lambda default: (default.value, default.name))
        return pc.name, POD_PRIORITY_CLASS, pc.value
    return None, None, 0
