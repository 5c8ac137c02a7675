"""Pod-template annotations -> a podSet's ``topologyRequest``, with Kueue's rules.

Every job kind (batch/v1 Job, pod groups, JobSet, the kinds of the integration
interface) asks for topology-aware placement the same way: annotations on a pod
template. Kueue turns them into ``Workload.spec.podSets[].topologyRequest`` in one
place (jobframework ``NewPodSetTopologyRequest``) and validates them in another
(``ValidateTASPodSetRequest``, ``ValidateSliceSizeAnnotationUpperBound``,
``ValidatePodSetGroupingTopology`` in tas_validation.go). Here both are one pure
function per step, so the Job webhook, the loader and every integration give the same
answer and the same field errors.

Errors are Kubernetes field errors (``path: Invalid value: "x": message``), one per
problem, with Kueue's wording; the caller decides whether they reject a webhook
request or a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from queues.api import labels
from queues.model import TopologyRequest

__all__ = [
    "TopologyAnnotationError",
    "topology_annotation_errors",
    "topology_request_from_annotations",
    "pod_set_group_errors",
    "topology_request_json",
]

_TOPOLOGY_KEYS = (
    labels.PODSET_REQUIRED_TOPOLOGY,
    labels.PODSET_PREFERRED_TOPOLOGY,
    labels.PODSET_UNCONSTRAINED_TOPOLOGY,
)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT32_MAX = 2**31 - 1
_BOOL_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_BOOL_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class TopologyAnnotationError(ValueError):
    """Pod-template topology annotations that Kueue's webhook would reject."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(errors))


def _quote(value: str) -> str:
    return json.dumps(value)


def _key(path: str, key: str) -> str:
    return f"{path}.annotations[{key}]"


def label_name_errors(value: str, where: str) -> list[str]:
    """metav1validation.ValidateLabelName: a qualified name (optional DNS prefix)."""
    errs: list[str] = []
    prefix, slash, name = value.rpartition("/")
    if not slash:
        prefix, name = "", value
    if slash and not prefix:
        errs.append(f"{where}: Invalid value: {_quote(value)}: prefix part must be non-empty")
    elif prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        errs.append(
            f"{where}: Invalid value: {_quote(value)}: prefix part a lowercase RFC 1123 "
            "subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character"
        )
    if not name:
        errs.append(f"{where}: Invalid value: {_quote(value)}: name part must be non-empty")
    elif len(name) > 63:
        errs.append(
            f"{where}: Invalid value: {_quote(value)}: name part must be no more than 63 bytes"
        )
    elif not _QUALIFIED_NAME.match(name):
        errs.append(
            f"{where}: Invalid value: {_quote(value)}: name part must consist of alphanumeric "
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return errs


def _parse_int32(value: str) -> int | None:
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        return None
    n = int(value)
    return n if -(2**31) <= n <= _INT32_MAX else None


def topology_annotation_errors(
    annotations: Mapping[str, str], *, path: str, count: int | None = None
) -> list[str]:
    """Kueue's ValidateTASPodSetRequest (and, given the podSet ``count``,
    ValidateSliceSizeAnnotationUpperBound) for one pod template's annotations.

    ``path`` is the template's metadata path, e.g. ``spec.template.metadata``."""
    errs: list[str] = []
    found = [k for k in _TOPOLOGY_KEYS if k in annotations]
    ann_path = f"{path}.annotations"
    if len(found) > 1:
        errs.append(
            f"{ann_path}: Invalid value: must not contain more than one topology annotation: "
            + "["
            + ", ".join(_quote(k) for k in _TOPOLOGY_KEYS)
            + "]"
        )
    for key in (
        labels.PODSET_REQUIRED_TOPOLOGY,
        labels.PODSET_PREFERRED_TOPOLOGY,
        labels.PODSET_SLICE_REQUIRED_TOPOLOGY,
    ):
        if key in annotations:
            errs += label_name_errors(annotations[key], _key(path, key))
    required = labels.PODSET_REQUIRED_TOPOLOGY in annotations
    preferred = labels.PODSET_PREFERRED_TOPOLOGY in annotations
    slice_required = labels.PODSET_SLICE_REQUIRED_TOPOLOGY in annotations
    slice_size_found = labels.PODSET_SLICE_SIZE in annotations
    group = annotations.get(labels.PODSET_GROUP_NAME)
    if group is not None:
        where = _key(path, labels.PODSET_GROUP_NAME)
        if re.fullmatch(r"\+?[0-9]+", group) and int(group) < 2**64:
            errs.append(f"{where}: Invalid value: {_quote(group)}: must not be a number")
        if slice_size_found:
            errs.append(
                f"{where}: Forbidden: may not be set when '{labels.PODSET_SLICE_SIZE}' is specified"
            )
        if slice_required:
            errs.append(
                f"{where}: Forbidden: may not be set when "
                f"'{labels.PODSET_SLICE_REQUIRED_TOPOLOGY}' is specified"
            )
        if not preferred and not required:
            errs.append(
                f"{where}: Forbidden: may not be set when neither "
                f"'{labels.PODSET_PREFERRED_TOPOLOGY}' nor '{labels.PODSET_REQUIRED_TOPOLOGY}' "
                "is specified"
            )
    unconstrained = annotations.get(labels.PODSET_UNCONSTRAINED_TOPOLOGY)
    if unconstrained is not None and unconstrained not in (*_BOOL_TRUE, *_BOOL_FALSE):
        errs.append(
            f"{_key(path, labels.PODSET_UNCONSTRAINED_TOPOLOGY)}: Invalid value: "
            f"{_quote(unconstrained)}: must be a boolean value"
        )
    size_text = annotations.get(labels.PODSET_SLICE_SIZE)
    if size_text is not None:
        where = _key(path, labels.PODSET_SLICE_SIZE)
        size = _parse_int32(size_text)
        if size is None:
            errs.append(f"{where}: Invalid value: {_quote(size_text)}: must be a numeric value")
        elif size < 1:
            errs.append(
                f"{where}: Invalid value: {_quote(size_text)}: must be greater than or equal to 1"
            )
        elif count is not None and size > count:
            errs.append(
                f"{where}: Invalid value: {_quote(size_text)}: must not be greater than pod set "
                f"count {count}"
            )
    if slice_required and not slice_size_found:
        errs.append(
            f"{_key(path, labels.PODSET_SLICE_SIZE)}: Required value: must be set when "
            f"'{labels.PODSET_SLICE_REQUIRED_TOPOLOGY}' is specified"
        )
    if slice_size_found and not slice_required:
        errs.append(
            f"{_key(path, labels.PODSET_SLICE_SIZE)}: Forbidden: may not be set when "
            f"'{labels.PODSET_SLICE_REQUIRED_TOPOLOGY}' is not specified"
        )
    errs += _constraints_errors(
        annotations, path, slice_required, slice_size_found, group is not None, count
    )
    return errs


_CONSTRAINTS = labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS
_LAYER_COUNT = "topology constraints must contain between 1 and 3 entries"


def _constraints(text: str) -> list[tuple[str, int]] | str:
    """The multi-layer constraints annotation's layers, or why it is not a JSON array of
    {"topology": string, "size": integer} objects."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return f"must be a valid JSON array: {exc}"
    if not isinstance(raw, list):
        return "must be a valid JSON array"
    out: list[tuple[str, int]] = []
    for item in raw:
        if not isinstance(item, dict) or set(item) - {"topology", "size"}:
            return 'must be a valid JSON array of {"topology": string, "size": integer} objects'
        topo, size = item.get("topology", ""), item.get("size", 0)
        if not isinstance(topo, str) or not isinstance(size, int) or isinstance(size, bool):
            return 'must be a valid JSON array of {"topology": string, "size": integer} objects'
        out.append((topo, size))
    return out


def _constraints_errors(
    annotations: Mapping[str, str],
    path: str,
    slice_required: bool,
    slice_size_found: bool,
    group_found: bool,
    count: int | None,
) -> list[str]:
    """Kueue's validateSliceRequiredTopologyConstraintsAnnotation (TASMultiLayerTopology,
    on by default since 0.19) and its upper bound: the outermost size <= the podSet count."""
    text = annotations.get(_CONSTRAINTS)
    if text is None:
        return []
    where = _key(path, _CONSTRAINTS)
    errs: list[str] = []
    if slice_required:
        errs.append(
            f"{where}: Forbidden: may not be set when "
            f"'{labels.PODSET_SLICE_REQUIRED_TOPOLOGY}' is specified"
        )
    if slice_size_found:
        errs.append(
            f"{where}: Forbidden: may not be set when '{labels.PODSET_SLICE_SIZE}' is specified"
        )
    if group_found:
        errs.append(
            f"{_key(path, labels.PODSET_GROUP_NAME)}: Forbidden: may not be set when "
            f"'{_CONSTRAINTS}' is specified"
        )
    layers = _constraints(text)
    if isinstance(layers, str):
        return [*errs, f"{where}: Invalid value: {_quote(text)}: {layers}"]
    if not 1 <= len(layers) <= 3:
        return [*errs, f"{where}: Invalid value: {_quote(text)}: {_LAYER_COUNT}"]
    seen: dict[str, int] = {}
    for i, (topo, size) in enumerate(layers):
        errs += label_name_errors(topo, f"{where}[{i}].topology")
        if size < 1:
            errs.append(
                f"{where}[{i}].size: Invalid value: {size}: must be greater than or equal to 1"
            )
    for i, (topo, _) in enumerate(layers):
        if topo in seen:
            errs.append(
                f'{where}[{i}].topology: Duplicate value: "{topo} (also at index {seen[topo]})"'
            )
        else:
            seen[topo] = i
    for i in range(len(layers) - 1):
        parent, child = layers[i][1], layers[i + 1][1]
        if child > 0 and parent % child != 0:
            errs.append(
                f"{where}[{i + 1}].size: Invalid value: {child}: must evenly divide the parent "
                f"layer size {parent}"
            )
    if count is not None and layers[0][1] > count:
        errs.append(
            f"{where}: Invalid value: {layers[0][1]}: must not be greater than pod set count {count}"
        )
    return errs


def topology_request_from_annotations(
    annotations: Mapping[str, str],
    *,
    path: str = "spec.template.metadata",
    count: int | None = None,
    pod_index_label: str | None = None,
    sub_group: tuple[str, int] | None = None,
) -> TopologyRequest | None:
    """The podSet's ``topologyRequest`` (Kueue's NewPodSetTopologyRequest), or None when
    the template asks for nothing. Raises ``TopologyAnnotationError`` with every field
    error Kueue's webhook reports for these annotations.

    ``pod_index_label`` is the label that numbers the kind's pods (for a batch/v1 Job
    ``batch.kubernetes.io/job-completion-index``); the ungater uses it to give pods their
    domains in index order; ``sub_group`` (label, count) numbers groups of such pods
    (a JobSet's Jobs: ``jobset.sigs.k8s.io/job-index`` and the replicas), so a pod's
    rank is its index plus its group's index times the group size (Kueue's SubGroup)."""
    errs = topology_annotation_errors(annotations, path=path, count=count)
    if errs:
        raise TopologyAnnotationError(errs)
    get = annotations.get
    unconstrained = get(labels.PODSET_UNCONSTRAINED_TOPOLOGY)
    size = get(labels.PODSET_SLICE_SIZE)
    text = get(_CONSTRAINTS)
    layers = _constraints(text) if text is not None else []
    assert not isinstance(layers, str)  # checked above
    tr = TopologyRequest(
        slice_constraints=tuple(layers),
        required=get(labels.PODSET_REQUIRED_TOPOLOGY),
        preferred=get(labels.PODSET_PREFERRED_TOPOLOGY),
        unconstrained=(unconstrained in _BOOL_TRUE) if unconstrained is not None else None,
        pod_set_group_name=get(labels.PODSET_GROUP_NAME),
        slice_required_topology=get(labels.PODSET_SLICE_REQUIRED_TOPOLOGY),
        slice_size=int(size) if size is not None else None,
    )
    if tr == TopologyRequest():
        return None
    if pod_index_label is not None and tr.requests_tas:
        tr = replace(tr, pod_index_label=pod_index_label)
        if sub_group is not None:
            tr = replace(tr, sub_group_index_label=sub_group[0], sub_group_count=sub_group[1])
    return tr


def pod_set_group_errors(
    pod_sets: Sequence[tuple[str, int, TopologyRequest | None]], *, paths: Mapping[str, str]
) -> list[str]:
    """Kueue's ValidatePodSetGroupingTopology over a workload's podSets: a group has
    exactly 2 podSets, one of them with a single pod, both requiring (or preferring) the
    same level. ``pod_sets`` is (name, count, request); ``paths`` maps a podSet name to
    its template metadata path."""
    groups: dict[str, list[tuple[str, int, TopologyRequest]]] = {}
    for name, count, tr in pod_sets:
        if tr is not None and tr.pod_set_group_name is not None:
            groups.setdefault(tr.pod_set_group_name, []).append((name, count, tr))
    errs: list[str] = []
    for group, members in groups.items():
        if len(members) != 2:
            for name, _, _ in members:
                errs.append(
                    f"{_key(paths[name], labels.PODSET_GROUP_NAME)}: Invalid value: "
                    f"{_quote(group)}: can only define groups of exactly 2 pod sets, got: "
                    f"{len(members)} pod set(s)"
                )
            continue
        (n1, c1, r1), (n2, c2, r2) = members
        if c1 != 1 and c2 != 1:
            msg = (
                "can only define groups where at least one pod set has only 1 replica, got: "
                f"{c1} replica(s) and {c2} replica(s) in the group"
            )
            for n in (n1, n2):
                errs.append(
                    f"{_key(paths[n], labels.PODSET_GROUP_NAME)}: Invalid value: "
                    f"{_quote(group)}: {msg}"
                )
        consistent = (
            (r1.required is not None or r1.preferred is not None)
            and (r2.required is not None or r2.preferred is not None)
            and r1.required == r2.required
            and r1.preferred == r2.preferred
        )
        if not consistent:
            for a, b in ((n1, n2), (n2, n1)):
                errs.append(
                    f"{paths[a]}.annotations: Invalid value: must specify "
                    f"'{labels.PODSET_REQUIRED_TOPOLOGY}' or '{labels.PODSET_PREFERRED_TOPOLOGY}' "
                    f"topology consistent with '{paths[b]}.annotations' in group '{group}'"
                )
    return errs


def topology_request_json(tr: TopologyRequest) -> dict[str, object]:
    """The Workload podSet's ``topologyRequest`` (v1beta2 field names)."""
    fields = (
        ("required", tr.required),
        ("preferred", tr.preferred),
        ("unconstrained", tr.unconstrained),
        ("podIndexLabel", tr.pod_index_label),
        ("subGroupIndexLabel", tr.sub_group_index_label),
        ("subGroupCount", tr.sub_group_count),
        ("podSetGroupName", tr.pod_set_group_name),
        ("podSetSliceRequiredTopology", tr.slice_required_topology),
        ("podSetSliceSize", tr.slice_size),
        (
            "podsetSliceRequiredTopologyConstraints",
            [{"topology": t, "size": n} for t, n in tr.slice_constraints] or None,
        ),
    )
    return {k: v for k, v in fields if v is not None}
