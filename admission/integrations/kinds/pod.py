"""Plain pod gangs (Kueue's ``pod`` integration, docs/semantics.md §2, §3.4): the pure side.

Frameworks that create bare pods (Ray, MPI, Spark, Argo, …) get all-or-nothing
admission by labelling their pods ``kueue.x-k8s.io/pod-group-name`` and annotating
them ``kueue.x-k8s.io/pod-group-total-count``; the pod webhook keeps each managed pod
behind the scheduling gate ``kueue.x-k8s.io/admission`` with the finalizer
``kueue.x-k8s.io/managed``. A group is a *composable* job (Kueue's ``ComposableJob``):
the object is the set of its pods, so it has its own reconciler
(``admission.kube.reconcilers.pod_groups``); this module holds what that reconciler computes —
the group's Workload (one podSet per pod shape), the ungate patch that starts a pod
with its podSet's flavors, the patch lifting our finalizer.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.composition import (
    KUEUE_API_VERSION,
    pod_set_json,
    pod_set_model,
    spec_json,
    workload_priority,
)
from admission.integrations.framework.fields import IntegrationError, Obj, meta_of
from admission.integrations.framework.interface import Finished, Integration, Role
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.framework.workload_names import workload_name
from queues.api.labels import ADMISSION_GATE, PREBUILT_WORKLOAD, TOPOLOGY_GATE
from queues.api.labels import IS_GROUP_WORKLOAD as IS_GROUP_WORKLOAD_ANNOTATION
from queues.api.labels import MANAGED as MANAGED_LABEL
from queues.api.labels import MANAGED as POD_FINALIZER
from queues.api.labels import POD_GROUP_FAST_ADMISSION as FAST_ADMISSION_ANNOTATION
from queues.api.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.api.labels import POD_GROUP_POD_INDEX as POD_GROUP_INDEX_LABEL
from queues.api.labels import POD_GROUP_SERVING as SERVING_ANNOTATION
from queues.api.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.api.labels import ROLE_HASH as ROLE_HASH_ANNOTATION

__all__ = [
    "ADMISSION_GATE",
    "GROUP_NAME_LABEL",
    "GROUP_TOTAL_COUNT_ANNOTATION",
    "IS_GROUP_WORKLOAD_ANNOTATION",
    "MANAGED_LABEL",
    "POD",
    "POD_FINALIZER",
    "POD_SELECTOR",
    "PodGroupError",
    "ROLE_HASH_ANNOTATION",
]

POD_SELECTOR = f"{MANAGED_LABEL}=true"
DEFAULT_POD_SET = "main"
_SHAPE_FIELDS = ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority")
_TERMINATED = ("Succeeded", "Failed")


class PodGroupError(IntegrationError):
    """A pod group whose pods cannot make a Workload (named pod and field in the message)."""


class PodIntegration(Integration):
    """Managed pods: gated by the pod webhook, grouped by ``pod-group-name``."""

    framework = "pod"
    resource = Resource("", "v1", "pods", "Pod")
    reconciler = "pods"
    # ungate (flavors' nodeSelector/tolerations), lift the finalizer, delete the pods
    # of an evicted group
    # get: a whole pod when its group's Workload is built (the informer keeps it slim)
    writes = (("get", ""), ("patch", ""), ("delete", ""))
    # only pods that name a LocalQueue (or, on UPDATE, did): with both replicas down,
    # pod creation elsewhere must not be blocked (remove with manageJobsWithoutQueueName)
    webhook_object_selector = {
        "matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]
    }
    # in-place resize of a running pod (Kubernetes 1.33+): refused when it would grow a
    # pod that runs on quota, whichever kind made it (webhooks/handlers/resize.py)
    guarded_subresources = ("resize",)

    def webhook_paths(self) -> tuple[str, str]:
        return "/mutate--v1-pod", "/validate--v1-pod"

    def label_selector(self, *, manage_without_queue_name: bool) -> str | None:
        return POD_SELECTOR  # managed pods only: the webhook labels every pod it gates

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return gated(obj)

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        phase = (obj.get("status") or {}).get("phase")
        return Finished(phase == "Succeeded", "") if phase in _TERMINATED else None

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return not terminated(obj)


POD = PodIntegration()


# -- pure helpers on raw pods ---------------------------------------------------------------


def ns_key(obj: Mapping[str, Any]) -> str:
    m = meta_of(obj)
    return f"{m.get('namespace') or 'default'}/{m.get('name') or ''}"


def group_key(pod: Mapping[str, Any] | None) -> str | None:
    """``namespace/<Workload name>`` of a managed pod: its gang's (``pod-group-name``),
    or, for a single managed pod, the prebuilt Workload it names (a MultiKueue worker's
    copy) or its own Workload's (``pod-<name>-<hash>``, Kueue's single-pod Workload: a
    Deployment's pods); None for other pods."""
    labels = meta_of(pod).get("labels") or {}
    ns = meta_of(pod).get("namespace") or "default"
    name = labels.get(GROUP_NAME_LABEL) or labels.get(PREBUILT_WORKLOAD)
    if isinstance(name, str) and name:
        return f"{ns}/{name}"
    if pod is not None and labels.get(MANAGED_LABEL) == "true" and meta_of(pod).get("name"):
        return f"{ns}/{single_pod_workload_name(pod)}"
    return None


def is_single_pod(pod: Mapping[str, Any]) -> bool:
    return not (meta_of(pod).get("labels") or {}).get(GROUP_NAME_LABEL)


def single_pod_workload_name(pod: Mapping[str, Any]) -> str:
    m = meta_of(pod)
    return workload_name(owner_name=str(m.get("name") or ""), owner_uid=str(m.get("uid") or ""),
                         kind="Pod", group="")  # fmt: skip


def is_group_workload(wl: Mapping[str, Any] | None) -> bool:
    """A Workload of pods: a gang's (annotated), or a single pod's (controlled by it)."""
    meta = meta_of(wl)
    if (meta.get("annotations") or {}).get(IS_GROUP_WORKLOAD_ANNOTATION) == "true":
        return True
    return any(
        isinstance(r, Mapping) and r.get("controller") and r.get("kind") == "Pod"
        and r.get("apiVersion") == "v1"
        for r in meta.get("ownerReferences") or []
    )  # fmt: skip


def terminated(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in _TERMINATED


def succeeded(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) == "Succeeded"


def _gate_index(pod: Mapping[str, Any], gate: str = ADMISSION_GATE) -> int | None:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    for i, g in enumerate(gates):
        if isinstance(g, dict) and g.get("name") == gate:
            return i
    return None


def gated(pod: Mapping[str, Any]) -> bool:
    """Held by the admission gate, or (a TAS pod) by the topology gate."""
    return _gate_index(pod) is not None or _gate_index(pod, TOPOLOGY_GATE) is not None


def _finalizer_index(pod: Mapping[str, Any]) -> int | None:
    for i, f in enumerate(meta_of(pod).get("finalizers") or []):
        if f == POD_FINALIZER:
            return i
    return None


def fast_admission(pod: Mapping[str, Any]) -> bool:
    """Kueue's ``fastAdmission``: the group's Workload is built from its first pod (a
    StatefulSet's pods come one by one, the next only once the last one runs)."""
    return (meta_of(pod).get("annotations") or {}).get(FAST_ADMISSION_ANNOTATION) == "true"


def serving(pod: Mapping[str, Any]) -> bool:
    """Kueue's ``isServing``: the group never finishes (its controller replaces pods)."""
    return (meta_of(pod).get("annotations") or {}).get(SERVING_ANNOTATION) == "true"


def total_count(pod: Mapping[str, Any]) -> int:
    """The pod's ``pod-group-total-count`` annotation (1 for a single pod); PodGroupError
    when absent or bad."""
    if is_single_pod(pod):
        return 1
    raw = (meta_of(pod).get("annotations") or {}).get(GROUP_TOTAL_COUNT_ANNOTATION)
    where = f'pod {ns_key(pod)}: metadata.annotations["{GROUP_TOTAL_COUNT_ANNOTATION}"]'
    if raw is None:
        raise PodGroupError(f"{where}: required")
    try:
        n = int(str(raw).strip())
    except ValueError:
        raise PodGroupError(f"{where}: expected an integer, got {raw!r}") from None
    if n < 1:
        raise PodGroupError(f"{where}: must be at least 1, got {n}")
    return n


def shape_of(pod: Mapping[str, Any]) -> str:
    """The pod's role: the webhook's ``role-hash`` annotation, else a hash of the
    admission-relevant spec (containers' requests, scheduling constraints)."""
    ann = (meta_of(pod).get("annotations") or {}).get(ROLE_HASH_ANNOTATION)
    if isinstance(ann, str) and ann:
        return ann
    spec = pod.get("spec") or {}
    shape: Obj = {k: spec[k] for k in _SHAPE_FIELDS if spec.get(k) is not None}
    for key in ("initContainers", "containers"):
        shape[key] = [
            {f: c.get(f) for f in ("image", "resources") if isinstance(c, dict)}
            for c in spec.get(key) or []
        ]
    raw = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:8]


_NAMED_ROLE = "podset:"


def role_key(pod: Mapping[str, Any]) -> str:
    """Which podSet of its group the pod is in: the one its ``kueue.x-k8s.io/podset``
    label names (a parent's webhook writes it into each template: a LeaderWorkerSet's
    ``leader`` and ``worker``, as Kueue names them), else its shape."""
    label = (meta_of(pod).get("labels") or {}).get(PODSET_LABEL)
    return f"{_NAMED_ROLE}{label}" if isinstance(label, str) and label else shape_of(pod)


def pod_set_names(pods: list[Obj]) -> dict[str, str]:
    """role key -> podSet name: the podset label's name; ``main`` when all pods are
    alike (and unnamed), else the shapes."""
    keys = sorted({role_key(pod) for pod in pods})
    names = {k: k.removeprefix(_NAMED_ROLE) for k in keys if k.startswith(_NAMED_ROLE)}
    shapes = [k for k in keys if k not in names]
    if len(shapes) == 1 and not names:
        return {shapes[0]: DEFAULT_POD_SET}
    return {**names, **{s: s for s in shapes}}


def _template(pod: Mapping[str, Any]) -> Obj:
    spec = copy.deepcopy(pod.get("spec") or {})
    for key in ("schedulingGates", "nodeName"):
        spec.pop(key, None)
    tmpl: Obj = {"spec": spec}
    labels = {
        k: v
        for k, v in (meta_of(pod).get("labels") or {}).items()
        if not str(k).startswith("kueue.x-k8s.io/")
    }
    if labels:
        tmpl["metadata"] = {"labels": labels}
    # The topology annotations (kueue.x-k8s.io/podset-*) make the podSet's topologyRequest.
    tas = {
        k: v
        for k, v in (meta_of(pod).get("annotations") or {}).items()
        if str(k).startswith("kueue.x-k8s.io/podset-")
    }
    if tas:
        tmpl.setdefault("metadata", {})["annotations"] = tas
    return tmpl


def group_roles(pods: list[Obj]) -> list[tuple[Role, str]]:
    """One role per pod role (podSets named by :func:`pod_set_names`), with the key
    of the pod whose template it takes."""
    names = pod_set_names(pods)
    by_shape: dict[str, list[Obj]] = {}
    for pod in pods:
        by_shape.setdefault(role_key(pod), []).append(pod)
    out = []
    for shape, members in sorted(by_shape.items(), key=lambda kv: names[kv[0]]):
        role = Role(name=names[shape], count=len(members), template=_template(members[0]), path=())
        out.append((role, ns_key(members[0])))
    return out


def workload_for_group(
    gkey: str,
    pods: list[Obj],
    *,
    workload_priority_classes: Mapping[str, Any],
    priority_classes: Mapping[str, Any],
) -> Obj:
    """The Workload for a complete group: one podSet per shape (pods sorted by name)."""
    if not pods:
        raise PodGroupError(f"pod group {gkey}: no pods")
    pods = sorted(pods, key=ns_key)
    first = pods[0]
    labels = meta_of(first).get("labels") or {}
    ns, _, name = gkey.rpartition("/")
    pod_sets: list[Obj] = []
    for role, ref in group_roles(pods):
        try:  # the shape checks, requests and topology request every kind gets
            model = pod_set_model("pod", ref, role, pod_index_label=POD_GROUP_INDEX_LABEL)
        except IntegrationError as err:
            raise PodGroupError(str(err)) from err
        pod_sets.append(pod_set_json(role, model.topology))
    try:
        pc_name, pc_kind, priority = workload_priority(
            labels=labels,
            priority_class_name=str((first.get("spec") or {}).get("priorityClassName") or ""),
            kind_noun="pod",
            ref=ns_key(first),
            workload_priority_classes=workload_priority_classes,
            priority_classes=priority_classes,
            field_name="spec.priorityClassName",
        )
    except IntegrationError as err:
        raise PodGroupError(str(err)) from err
    metadata: Obj = {"name": name, "namespace": ns}
    if is_single_pod(first):  # owned by its pod, as Kueue's single-pod Workloads
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod",
                                        "name": meta_of(first).get("name"),
                                        "uid": meta_of(first).get("uid"), "controller": True,
                                        "blockOwnerDeletion": True}]  # fmt: skip
    else:
        metadata["annotations"] = {IS_GROUP_WORKLOAD_ANNOTATION: "true"}
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec_json(
            pod_sets,
            queue_name=str(labels.get(QUEUE_NAME_LABEL) or ""),
            priority=priority,
            priority_class=pc_name,
            priority_class_kind=pc_kind,
        ),
    }


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def ungate_patch(
    pod: Mapping[str, Any], info: PodSetInfo, domain: Mapping[str, str] | None = None
) -> tuple[list[Obj] | None, list[str]]:
    """JSON patch lifting the admission gate and adding the podSet's node selector and
    tolerations (the changes a gated pod allows), and the node-selector keys the pod
    already sets to another value (left alone); None when the pod is not gated.

    ``domain`` (a TAS podSet's pod): its topology domain's node selector is added and
    the ``kueue.x-k8s.io/topology`` gate lifted too (Kueue's topology ungater)."""
    gates = [(_gate_index(pod), ADMISSION_GATE)]
    if domain is not None:
        gates.append((_gate_index(pod, TOPOLOGY_GATE), TOPOLOGY_GATE))
    present = sorted(((i, g) for i, g in gates if i is not None), reverse=True)
    if not present:
        return None, []
    spec = pod.get("spec") or {}
    ops: list[Obj] = []
    for idx, gate in present:  # the higher index first: a removal shifts what follows
        ops += [
            {"op": "test", "path": f"/spec/schedulingGates/{idx}/name", "value": gate},
            {"op": "remove", "path": f"/spec/schedulingGates/{idx}"},
        ]
    have_ns = spec.get("nodeSelector") or {}
    wanted = {**info.node_selector, **(domain or {})}
    add_ns = {k: v for k, v in wanted.items() if k not in have_ns}
    kept = [k for k, v in wanted.items() if k in have_ns and have_ns[k] != v]
    if add_ns and not spec.get("nodeSelector"):
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": add_ns})
    else:
        ops += [
            {"op": "add", "path": f"/spec/nodeSelector/{_pointer(k)}", "value": v}
            for k, v in add_ns.items()
        ]
    have_tol = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    new_tol = [t for t in info.tolerations if t not in have_tol]
    if new_tol and not spec.get("tolerations"):
        ops.append({"op": "add", "path": "/spec/tolerations", "value": new_tol})
    else:
        ops += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in new_tol]
    return ops, kept


def unfinalize_patch(pod: Mapping[str, Any]) -> list[Obj] | None:
    """JSON patch removing our finalizer; None when the pod does not carry it."""
    idx = _finalizer_index(pod)
    if idx is None:
        return None
    path = f"/metadata/finalizers/{idx}"
    return [{"op": "test", "path": path, "value": POD_FINALIZER}, {"op": "remove", "path": path}]
