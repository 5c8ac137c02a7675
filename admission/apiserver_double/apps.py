"""apps/v1 Deployments, ReplicaSets and StatefulSets as kube-apiserver defaults and
validates them: the kinds whose pods the service admits one by one.

* **Defaults** (``SetDefaults_Deployment``, ``SetDefaults_ReplicaSet``,
  ``SetDefaults_StatefulSet``): replicas; a Deployment's strategy, history limit and
  progress deadline; a StatefulSet's podManagementPolicy, updateStrategy,
  revisionHistoryLimit and PVC retention policy; the template's pod spec
  (:func:`.pods.default_pod_spec`);
* **Spec** (``ValidateStatefulSetSpec`` and the Deployment's, ReplicaSet's): a selector
  that matches the template's labels is required;
* **Updates**: a Deployment's and a ReplicaSet's selector is immutable; a StatefulSet
  update may change only replicas, ordinals, template, updateStrategy,
  revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds
  (``ValidateStatefulSetUpdate``).

Messages copy upstream's field errors, so a client sees the same 422 ``Status``.
"""

from __future__ import annotations

from typing import Any

from .compare import normalized
from .errors import FieldError, GoValue
from .pods import default_pod_spec
from .resources import ResourceType

Obj = dict[str, Any]

STS_MUTABLE_FIELDS = ("replicas", "ordinals", "template", "updateStrategy",
                      "revisionHistoryLimit", "persistentVolumeClaimRetentionPolicy",
                      "minReadySeconds")  # fmt: skip
STS_UPDATE_FORBIDDEN = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)


def is_statefulset(rt: ResourceType) -> bool:
    return rt.group == "apps" and rt.plural == "statefulsets"


def is_replicated(rt: ResourceType) -> bool:
    """apps/v1 Deployments and ReplicaSets: a selector over a pod template."""
    return rt.group == "apps" and rt.plural in ("deployments", "replicasets")


# -- defaulting -------------------------------------------------------------------------


def default_statefulset(obj: Obj) -> None:
    """``SetDefaults_StatefulSet`` (apps/v1): the fields a controller reads."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                       "rollingUpdate": {"partition": 0}})  # fmt: skip
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy",
                    {"whenDeleted": "Retain", "whenScaled": "Retain"})  # fmt: skip
    pod_spec = (spec.get("template") or {}).get("spec")
    if isinstance(pod_spec, dict):
        default_pod_spec(pod_spec)


def default_replicated(obj: Obj) -> None:
    """``SetDefaults_Deployment`` / ``SetDefaults_ReplicaSet`` (apps/v1): replicas, and a
    Deployment's strategy, history limit and progress deadline."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    if obj.get("kind") == "Deployment":
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})  # fmt: skip
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    pod_spec = (spec.get("template") or {}).get("spec")
    if isinstance(pod_spec, dict):
        default_pod_spec(pod_spec)


# -- validation -------------------------------------------------------------------------


def statefulset_spec_errors(obj: Obj) -> list[FieldError]:
    """``ValidateStatefulSetSpec`` (and the Deployment's, ReplicaSet's): a selector,
    matching the template's labels."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        what = str(obj.get("kind") or "statefulset").lower()
        return [FieldError("Invalid value", "spec.selector", f"empty selector is invalid for {what}",
                           GoValue("v1.LabelSelector{}"))]  # fmt: skip
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        return [FieldError("Invalid value", "spec.template.metadata.labels",
                           "`selector` does not match template `labels`", labels)]  # fmt: skip
    return []


def update_errors(rt: ResourceType, old: Obj, new: Obj) -> list[FieldError]:
    """An update's errors: the spec's, then a Deployment's or ReplicaSet's changed
    selector, or a StatefulSet's change outside its mutable fields."""
    errors = statefulset_spec_errors(new)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if is_replicated(rt):
        if normalized(old_spec.get("selector")) != normalized(new_spec.get("selector")):
            errors.append(FieldError("Invalid value", "spec.selector", "field is immutable",
                                     new_spec.get("selector")))  # fmt: skip
    elif any(
        normalized(old_spec.get(k)) != normalized(new_spec.get(k))
        for k in set(old_spec) | set(new_spec)
        if k not in STS_MUTABLE_FIELDS
    ):
        errors.append(FieldError("Forbidden", "spec", STS_UPDATE_FORBIDDEN))
    return errors
