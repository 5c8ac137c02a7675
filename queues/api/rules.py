"""Kueue's rules beyond the schema: CEL validations and validating webhooks.

The pydantic models of ``queues.api.kinds`` check shapes, types, enums, sizes and name
patterns. What Kueue enforces on top — ``x-kubernetes-validations`` (CEL) on its CRDs
and the checks in pkg/webhooks (docs/semantics.md §1, §3.5-3.8) — lives here, one
function per kind, each returning every (field path, message) it finds, worded as
Kueue words them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from queues.api.fields import (
    DNS1123_LABEL,
    DNS1123_LABEL_MSG,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MSG,
    NEGATIVE_MSG,
    QUANTITY_MSG,
    TAINT_EFFECT_MSG,
    TAINT_EFFECTS,
    FairSharing,
    ObjectMeta,
    Problems,
    ResourceGroup,
    ResourceQuota,
    check_labels,
    check_selector,
    check_tolerations,
    join_path,
    label_value_errors,
    qualified_name_errors,
    quantity_value,
    to_quantity_text,
)
from queues.api.kinds import NAMESPACED_KINDS
from queues.memo import ContentMemo, content_key

if TYPE_CHECKING:
    from queues.api.kinds import ClusterQueueSpec, CohortSpec, ResourceFlavorSpec, Workload

MAX_FLAVORS = 256
MAX_COVERED_RESOURCES = 256
MAX_COMBINATIONS_PER_GROUP = 512


def check_meta(meta: ObjectMeta, kind: str) -> Problems:
    """Object names (DNS subdomain; label for Namespaces), namespaces and labels."""
    problems: Problems = []
    name = meta.name or ""
    if kind == "Namespace":
        if len(name) > 63:
            problems.append(("metadata.name", "must be no more than 63 characters"))
        elif not re.fullmatch(DNS1123_LABEL, name):
            problems.append(("metadata.name", DNS1123_LABEL_MSG))
    elif len(name) > 253:
        problems.append(("metadata.name", "must be no more than 253 characters"))
    elif not re.fullmatch(DNS1123_SUBDOMAIN, name):
        problems.append(("metadata.name", DNS1123_SUBDOMAIN_MSG))
    if kind in NAMESPACED_KINDS and meta.namespace is not None:
        if len(meta.namespace) > 63 or not re.fullmatch(DNS1123_LABEL, meta.namespace):
            problems.append(("metadata.namespace", DNS1123_LABEL_MSG))
    problems += check_labels(meta.labels, "metadata.labels")
    return problems


# --------------------------------------------------------------------------------------
# ResourceFlavor (§1.1, §3.8)
# --------------------------------------------------------------------------------------


def check_resource_flavor(spec: ResourceFlavorSpec) -> Problems:
    problems = check_labels(spec.node_labels, "spec.nodeLabels")
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(spec.node_taints):
        tpath = f"spec.nodeTaints[{i}]"
        problems += [(f"{tpath}.key", msg) for msg in qualified_name_errors(taint.key)]
        problems += [(f"{tpath}.value", msg) for msg in label_value_errors(taint.value)]
        if taint.effect not in TAINT_EFFECTS:
            problems.append((f"{tpath}.effect", TAINT_EFFECT_MSG))
        if (taint.key, taint.effect) in seen:
            problems.append((tpath, "taints must be unique by key and effect pair"))
        seen.add((taint.key, taint.effect))
    problems += check_tolerations(spec.tolerations, "spec.tolerations")
    if spec.topology_name is not None and not spec.node_labels:
        problems.append(("spec", "at least one nodeLabel is required when topology is set"))
    return problems


# --------------------------------------------------------------------------------------
# ClusterQueue and Cohort (§3.6, §3.7)
# --------------------------------------------------------------------------------------


def check_fair_sharing(fair_sharing: FairSharing | None, path: str) -> Problems:
    """validateFairSharing: weight ≥ 0, and when not 0, > 1n."""
    if fair_sharing is None or fair_sharing.weight is None:
        return []
    weight = quantity_value(fair_sharing.weight)
    if weight < 0:
        return [(f"{path}.weight", NEGATIVE_MSG)]
    if 0 < weight <= Fraction(1, 10**9):
        return [(f"{path}.weight", "When not 0, weight must be > 10e-9")]
    return []


def check_cluster_queue(spec: ClusterQueueSpec) -> Problems:
    problems = check_resource_groups(
        spec.resource_groups,
        "spec.resourceGroups",
        has_parent=spec.cohort_name is not None,
        no_parent_msg="must be nil when cohort is empty",
        lending_within_nominal=True,
    )
    problems += check_selector(spec.namespace_selector, "spec.namespaceSelector")
    pre = spec.preemption
    if pre.reclaim_within_cohort == "Never" and pre.borrow_within_cohort.policy != "Never":
        problems.append(
            ("spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
        )
    fung = spec.flavor_fungibility
    both_try_next = fung.when_can_borrow == fung.when_can_preempt == "TryNextFlavor"
    if fung.preference is not None and not both_try_next:
        problems.append(
            (
                "spec.flavorFungibility.preference",
                f'preference "{fung.preference}" requires both whenCanBorrow and '
                "whenCanPreempt to be TryNextFlavor",
            )
        )
    problems += check_fair_sharing(spec.fair_sharing, "spec.fairSharing")
    if spec.admission_checks_strategy is not None:
        flavors = {f.name for rg in spec.resource_groups for f in rg.flavors}
        supported = ", ".join(f'"{f}"' for f in sorted(flavors))
        seen: set[str] = set()
        for i, rule in enumerate(spec.admission_checks_strategy.admission_checks):
            rpath = f"spec.admissionChecksStrategy.admissionChecks[{i}]"
            if rule.name in seen:
                problems.append((f"{rpath}.name", f'Duplicate value: "{rule.name}"'))
            seen.add(rule.name)
            for j, flavor in enumerate(rule.on_flavors):
                if flavor not in flavors:
                    why = (
                        f"supported values: {supported} (the flavors of spec.resourceGroups)"
                        if flavors
                        else "onFlavors can name only flavors of spec.resourceGroups, and "
                        "this ClusterQueue has none"
                    )
                    problems.append(
                        (f"{rpath}.onFlavors[{j}]", f'Unsupported value: "{flavor}": {why}')
                    )
    return problems


def check_cohort(spec: CohortSpec) -> Problems:
    problems = check_resource_groups(
        spec.resource_groups,
        "spec.resourceGroups",
        has_parent=spec.parent_name is not None,
        no_parent_msg="must be nil when parent is empty",
        lending_within_nominal=False,
    )
    return problems + check_fair_sharing(spec.fair_sharing, "spec.fairSharing")


def check_resource_groups(
    groups: list[ResourceGroup],
    path: str,
    *,
    has_parent: bool,
    no_parent_msg: str,
    lending_within_nominal: bool,
) -> Problems:
    """validateResourceGroups (pkg/webhooks/common.go) plus the ResourceGroup CEL rule."""
    problems: Problems = []
    total_flavors = sum(len(rg.flavors) for rg in groups)
    total_resources = sum(len(rg.covered_resources) for rg in groups)
    if total_flavors > MAX_FLAVORS:
        problems.append(
            (
                path,
                f"total number of flavors across all resourceGroups must be ≤ {MAX_FLAVORS}, "
                f"got {total_flavors}",
            )
        )
    if total_resources > MAX_COVERED_RESOURCES:
        problems.append(
            (
                path,
                "total number of coveredResources across all resourceGroups must be "
                f"≤ {MAX_COVERED_RESOURCES}, got {total_resources}",
            )
        )
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, rg in enumerate(groups):
        gpath = f"{path}[{i}]"
        if len(rg.flavors) * len(rg.covered_resources) > MAX_COMBINATIONS_PER_GROUP:
            problems.append(
                (
                    gpath,
                    "number of flavor-resource combinations in a resourceGroup must be "
                    f"≤ {MAX_COMBINATIONS_PER_GROUP}",
                )
            )
        for j, res in enumerate(rg.covered_resources):
            rpath = f"{gpath}.coveredResources[{j}]"
            problems += [(rpath, msg) for msg in qualified_name_errors(res)]
            if res in seen_resources:
                problems.append((rpath, f'Duplicate value: "{res}"'))
            seen_resources.add(res)
        if any(len(f.resources) != len(rg.covered_resources) for f in rg.flavors):
            problems.append(
                (gpath, "flavors must have the same number of resources as the coveredResources")
            )
        for j, flavor in enumerate(rg.flavors):
            fpath = f"{gpath}.flavors[{j}]"
            if flavor.name in seen_flavors:
                problems.append((f"{fpath}.name", f'Duplicate value: "{flavor.name}"'))
            seen_flavors.add(flavor.name)
            for k, quota in enumerate(flavor.resources):
                qpath = f"{fpath}.resources[{k}]"
                if k < len(rg.covered_resources) and quota.name != rg.covered_resources[k]:
                    problems.append((f"{qpath}.name", "must match the name in coveredResources"))
                problems += _check_quota(
                    quota,
                    qpath,
                    has_parent=has_parent,
                    no_parent_msg=no_parent_msg,
                    lending_within_nominal=lending_within_nominal,
                )
    return problems


def _check_quota(
    quota: ResourceQuota,
    path: str,
    *,
    has_parent: bool,
    no_parent_msg: str,
    lending_within_nominal: bool,
) -> Problems:
    problems: Problems = []
    nominal = quantity_value(quota.nominal_quota)
    if nominal < 0:
        problems.append((f"{path}.nominalQuota", NEGATIVE_MSG))
    limits = (("borrowingLimit", quota.borrowing_limit), ("lendingLimit", quota.lending_limit))
    for field, text in limits:
        if text is None:
            continue
        if not has_parent:
            problems.append((f"{path}.{field}", no_parent_msg))
        amount = quantity_value(text)
        if amount < 0:
            problems.append((f"{path}.{field}", NEGATIVE_MSG))
        elif field == "lendingLimit" and lending_within_nominal and amount > nominal:
            problems.append((f"{path}.{field}", "must be less than or equal to the nominalQuota"))
    return problems


# --------------------------------------------------------------------------------------
# Workload (§1.5, §3.5)
# --------------------------------------------------------------------------------------


def check_workload(wl: Workload) -> Problems:
    problems: Problems = []
    spec = wl.spec
    names: set[str] = set()
    with_min_count = 0
    for i, ps in enumerate(spec.pod_sets):
        ppath = f"spec.podSets[{i}]"
        if ps.name in names:
            problems.append((f"{ppath}.name", f'Duplicate value: "{ps.name}"'))
        names.add(ps.name)
        if ps.min_count is not None:
            with_min_count += 1
            if ps.min_count > ps.count:
                problems.append((ppath, "minCount should be positive and less or equal to count"))
        problems += check_pod_template(ps.template, f"{ppath}.template")
    if with_min_count > 1:
        problems.append(("spec.podSets", "at most one podSet can use minCount"))
    ref = spec.priority_class_ref
    if ref is not None:
        if spec.priority is None:
            problems.append(("spec", "priority should not be nil when priorityClassRef is set"))
        if ref.group == "scheduling.k8s.io" and ref.kind != "PriorityClass":
            problems.append(
                (
                    "spec.priorityClassRef",
                    "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
                )
            )
        if ref.group == "kueue.x-k8s.io" and ref.kind != "WorkloadPriorityClass":
            problems.append(
                (
                    "spec.priorityClassRef",
                    "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
                )
            )
    if wl.status is not None:
        problems += _check_workload_status(wl)
    return problems


def _check_workload_status(wl: Workload) -> Problems:
    assert wl.status is not None
    problems: Problems = []
    seen: set[str] = set()
    for i, cond in enumerate(wl.status.conditions):
        if cond.type in seen:
            problems.append((f"status.conditions[{i}].type", f'Duplicate value: "{cond.type}"'))
        seen.add(cond.type)
    reserved = wl.condition("QuotaReserved")
    if reserved is None or reserved.status != "True":
        return problems
    if reserved.last_transition_time is None:
        index = wl.status.conditions.index(reserved)
        problems.append((f"status.conditions[{index}].lastTransitionTime", "Required value"))
    admission = wl.status.admission
    if admission is None:
        problems.append(
            (
                "status.admission",
                "Required value: must be set while the QuotaReserved condition is true",
            )
        )
        return problems
    counts = {ps.name: ps.count for ps in wl.spec.pod_sets}
    apath = "status.admission.podSetAssignments"
    if len(admission.pod_set_assignments) != len(wl.spec.pod_sets):
        problems.append(
            (apath, "podSetAssignments must have the same number of podSets as the spec")
        )
    for i, psa in enumerate(admission.pod_set_assignments):
        if psa.name not in counts:
            problems.append((f"{apath}[{i}].name", f'Not found: "{psa.name}"'))
            continue
        count = psa.count if psa.count is not None else counts[psa.name]
        for res, qty in psa.resource_usage.items():
            value = quantity_value(qty)
            rpath = join_path(f"{apath}[{i}].resourceUsage", res)
            if value < 0:
                problems.append((rpath, NEGATIVE_MSG))
            elif count > 0 and math.ceil(value * 1000) % count != 0:
                problems.append((rpath, f"is not a multiple of {count}"))
    return problems


_CONTAINER_LISTS = ("containers", "initContainers")


def check_pod_template(template: dict[str, Any], path: str) -> Problems:
    """A PodTemplateSpec stays free-form, but what admission reads must be well-formed.

    Only labels and annotations are allowed in its metadata; ``spec`` and at least one
    container are required; requests/limits must be non-negative quantities and may not
    use the ``pods`` key (kept for Kueue's own accounting). A template content found
    valid once is not checked again (``queues.memo``); problems are found afresh.
    """
    key = content_key(template)
    if _VALID_TEMPLATES.get(key):
        return []
    problems = _pod_template_problems(template, path)
    if not problems:
        _VALID_TEMPLATES.put(key, True)
    return problems


_VALID_TEMPLATES: ContentMemo[bool] = ContentMemo()


def _pod_template_problems(template: dict[str, Any], path: str) -> Problems:
    problems: Problems = []
    for key in template:
        if key not in ("metadata", "spec"):
            problems.append((join_path(path, key), "unknown field"))
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        problems.append((f"{path}.metadata", "must be of type object"))
    elif meta is not None:
        for key in meta:
            if key not in ("labels", "annotations"):
                problems.append(
                    (
                        join_path(f"{path}.metadata", key),
                        "only labels and annotations are allowed in the pod template metadata",
                    )
                )
    spec = template.get("spec")
    if spec is None:
        return problems + [(f"{path}.spec", "Required value")]
    if not isinstance(spec, dict):
        return problems + [(f"{path}.spec", "must be of type object")]
    if not spec.get("containers"):
        problems.append((f"{path}.spec.containers", "Required value"))
    for field in _CONTAINER_LISTS:
        items = spec.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append((f"{path}.spec.{field}", "must be of type array"))
            continue
        for i, container in enumerate(items):
            cpath = f"{path}.spec.{field}[{i}]"
            if not isinstance(container, dict):
                problems.append((cpath, "must be of type object"))
                continue
            problems += _check_resources(container.get("resources"), f"{cpath}.resources")
    problems += _check_resources(spec.get("resources"), f"{path}.spec.resources")
    if spec.get("overhead") is not None:  # a RuntimeClass's, as the pod spec carries it
        problems += _check_resource_list(spec["overhead"], f"{path}.spec.overhead")
    return problems


def _check_resources(resources: Any, path: str) -> Problems:
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [(path, "must be of type object")]
    problems: Problems = []
    for field in ("requests", "limits"):
        values = resources.get(field)
        if values is not None:
            problems += _check_resource_list(values, f"{path}.{field}")
    return problems


def _check_resource_list(values: Any, fpath: str) -> Problems:
    """One resource list (requests, limits, a pod's overhead): non-negative quantities."""
    problems: Problems = []
    if not isinstance(values, dict):
        return [(fpath, "must be of type object")]
    for res, qty in values.items():
        rpath = join_path(fpath, str(res))
        if res == "pods":
            problems.append((rpath, "the key is reserved for internal kueue use"))
            continue
        try:
            text = to_quantity_text(qty)
            value = quantity_value(text) if isinstance(text, str) else None
        except ValueError:
            value = None
        if value is None:
            problems.append((rpath, QUANTITY_MSG))
        elif value < 0:
            problems.append((rpath, NEGATIVE_MSG))
    return problems
