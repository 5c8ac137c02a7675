"""What one pod of a pod template asks for, computed the way Kubernetes and Kueue do.

Kueue does not look at containers when it assigns quota: it looks at the *pod*
request, which Kubernetes derives from the containers with rules that are easy to get
subtly wrong (sidecars add up, plain init containers only raise a floor, pod-level
resources override, overhead is added last, limits stand in for missing requests).
This module is the single place those rules live, working on the plain camelCase
dicts of the API (``PodSpec`` / ``PodTemplateSpec``), and it also extracts the
placement constraints (nodeSelector, required node affinity, tolerations) that flavor
assignment matches against ResourceFlavors.

Sources: k8s.io/component-helpers/resource ``PodRequests`` and
``AggregateContainerRequests``; Kueue pkg/workload ``UseLimitsAsMissingRequestsInPod``,
``DefaultHugePagePodLevelLimits`` and ``DefaultPodLevelRequests`` (no LimitRange and
no RuntimeClass lookup here: ``overhead`` is taken as written in the spec).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from queues.memo import ContentMemo, content_key
from queues.model import (
    NodeSelectorTerm,
    PodSet,
    SelectorRequirement,
    Toleration,
)
from queues.quantity import QuantityError, parse_quantity, to_units

__all__ = [
    "PodSpecError",
    "pod_node_selector",
    "pod_required_affinity",
    "pod_requests",
    "pod_tolerations",
    "podset_from_template",
]

HUGEPAGES_PREFIX = "hugepages-"
NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
TOLERATION_OPERATORS = frozenset({"Equal", "Exists"})
TAINT_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})

ResourceList = dict[str, Fraction]


class PodSpecError(ValueError):
    """A pod spec has the wrong shape; the message names the field."""


# --------------------------------------------------------------------------- helpers


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSpecError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: str, *, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise PodSpecError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, val in _mapping(value, where).items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise PodSpecError(f"{where}: keys and values must be strings, got {key!r}: {val!r}")
        out[key] = val
    return out


def _resource_list(value: Any, where: str) -> ResourceList:
    out: ResourceList = {}
    for name, raw in _mapping(value, where).items():
        if not isinstance(name, str):
            raise PodSpecError(f"{where}: resource names must be strings, got {name!r}")
        try:
            out[name] = parse_quantity(raw)
        except QuantityError as err:
            raise QuantityError(f'{where}["{name}"]: {err}') from err
        if out[name] < 0:  # a negative overhead or request would hide other pods' usage
            raise PodSpecError(
                f'{where}["{name}"]: must be greater than or equal to 0, got "{raw}"'
            )
    return out


def _add(into: ResourceList, other: ResourceList) -> None:
    for name, qty in other.items():
        into[name] = into.get(name, Fraction(0)) + qty


def _max(into: ResourceList, other: ResourceList) -> None:
    for name, qty in other.items():
        if name not in into or qty > into[name]:
            into[name] = qty


def _is_pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith(HUGEPAGES_PREFIX)


class _Container:
    __slots__ = ("limits", "requests", "sidecar")

    def __init__(self, requests: ResourceList, limits: ResourceList, sidecar: bool) -> None:
        self.requests = requests
        self.limits = limits
        self.sidecar = sidecar


def _containers(spec: Mapping[str, Any], field: str) -> list[_Container]:
    init = field == "initContainers"
    out: list[_Container] = []
    for i, raw in enumerate(_list(spec.get(field), field)):
        container = _mapping(raw, f"{field}[{i}]")
        cname = container.get("name")
        label = (
            f'{"initContainer" if init else "container"} "{cname}"' if cname else f"{field}[{i}]"
        )
        resources = _mapping(container.get("resources"), f"{label} resources")
        requests = _resource_list(resources.get("requests"), f"{label} resources.requests")
        limits = _resource_list(resources.get("limits"), f"{label} resources.limits")
        # Kueue's UseLimitsAsMissingRequestsInPod: a limit stands in for a missing request.
        for name, qty in limits.items():
            requests.setdefault(name, qty)
        restart = _string(container.get("restartPolicy"), f"{label} restartPolicy")
        out.append(_Container(requests, limits, sidecar=init and restart == "Always"))
    return out


def _aggregate(
    containers: list[_Container], init: list[_Container], *, limits: bool
) -> ResourceList:
    """component-helpers ``aggregateContainerResourcesByFn`` (KEP-753 sidecar rules).

    Regular containers and sidecars (restartable init containers) run together and add
    up; each plain init container runs alone next to the sidecars started before it,
    and the pod needs the largest of those moments.
    """
    total: ResourceList = {}
    for c in containers:
        _add(total, c.limits if limits else c.requests)
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for c in init:
        own = c.limits if limits else c.requests
        if c.sidecar:
            _add(total, own)
            _add(sidecars, own)
            moment = dict(sidecars)
        else:
            moment = dict(own)
            _add(moment, sidecars)
        _max(init_peak, moment)
    _max(total, init_peak)
    return total


def _exact_pod_requests(
    spec: Mapping[str, Any],
    parsed: tuple[list[_Container], list[_Container]] | None = None,
) -> ResourceList:
    containers, init = parsed or (
        _containers(spec, "containers"),
        _containers(spec, "initContainers"),
    )
    aggregate = _aggregate(containers, init, limits=False)

    pod_resources = _mapping(spec.get("resources"), "spec.resources")
    pod_req = _resource_list(pod_resources.get("requests"), "spec.resources.requests")
    pod_lim = _resource_list(pod_resources.get("limits"), "spec.resources.limits")
    if pod_req or pod_lim:
        # DefaultHugePagePodLevelLimits: hugepage limits default from the containers.
        for name, qty in _aggregate(containers, init, limits=True).items():
            if name.startswith(HUGEPAGES_PREFIX) and name not in pod_req:
                pod_lim.setdefault(name, qty)
        # DefaultPodLevelRequests: cpu/memory default from the containers' aggregate,
        # then anything still missing from the pod-level limits.
        for name, qty in aggregate.items():
            if _is_pod_level_resource(name) and not name.startswith(HUGEPAGES_PREFIX):
                pod_req.setdefault(name, qty)
        for name, qty in pod_lim.items():
            if _is_pod_level_resource(name):
                pod_req.setdefault(name, qty)

    result = dict(aggregate)
    # PodRequests: supported pod-level requests replace the container aggregate.
    for name, qty in pod_req.items():
        if _is_pod_level_resource(name):
            result[name] = qty
    _add(result, _resource_list(spec.get("overhead"), "spec.overhead"))
    return result


# --------------------------------------------------------------------------- public


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Requests of one pod in engine units (cpu milli-cores, others whole units).

    Per resource: max(sum of containers and sidecars, each init container plus the
    sidecars started before it), replaced by pod-level ``spec.resources`` where set,
    plus ``overhead``. Container requests default to their limits. The sum is exact and
    rounded up once per resource; resources that come out as zero are dropped.
    Raises ``QuantityError`` naming the container and resource for a bad quantity and
    ``PodSpecError`` for a malformed spec.
    """
    return _units(_exact_pod_requests(_mapping(pod_spec, "spec")))


def _units(exact: ResourceList) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, qty in exact.items():
        units = to_units(name, qty)
        if units != 0:
            out[name] = units
    return out


def pod_node_selector(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    """``spec.nodeSelector`` as a fresh dict."""
    return _string_map(_mapping(pod_spec, "spec").get("nodeSelector"), "spec.nodeSelector")


def pod_required_affinity(pod_spec: Mapping[str, Any]) -> list[NodeSelectorTerm]:
    """The ORed ``requiredDuringSchedulingIgnoredDuringExecution`` node selector terms.

    Only ``matchExpressions`` are kept; ``matchFields`` are ignored like Kueue's flavor
    assigner does, so a term made only of ``matchFields`` becomes an empty term (which
    Kueue treats as matching any flavor).
    """
    spec = _mapping(pod_spec, "spec")
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms: list[NodeSelectorTerm] = []
    for ti, raw_term in enumerate(
        _list(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    ):
        term_where = f"{where}.nodeSelectorTerms[{ti}]"
        term = _mapping(raw_term, term_where)
        exprs: list[SelectorRequirement] = []
        for ei, raw_expr in enumerate(
            _list(term.get("matchExpressions"), f"{term_where}.matchExpressions")
        ):
            expr_where = f"{term_where}.matchExpressions[{ei}]"
            expr = _mapping(raw_expr, expr_where)
            key = _string(expr.get("key"), f"{expr_where}.key")
            if not key:
                raise PodSpecError(f"{expr_where}.key: required")
            operator = _string(expr.get("operator"), f"{expr_where}.operator")
            if operator not in NODE_SELECTOR_OPERATORS:
                raise PodSpecError(
                    f"{expr_where}.operator: {operator!r} is not one of {sorted(NODE_SELECTOR_OPERATORS)}"
                )
            values = _list(expr.get("values"), f"{expr_where}.values")
            for vi, v in enumerate(values):
                _string(v, f"{expr_where}.values[{vi}]")
            exprs.append(SelectorRequirement(key=key, operator=operator, values=tuple(values)))
        terms.append(NodeSelectorTerm(match_expressions=tuple(exprs)))
    return terms


def pod_tolerations(pod_spec: Mapping[str, Any]) -> list[Toleration]:
    """``spec.tolerations`` (an empty operator means Equal; tolerationSeconds is dropped)."""
    spec = _mapping(pod_spec, "spec")
    out: list[Toleration] = []
    for i, raw in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        where = f"spec.tolerations[{i}]"
        tol = _mapping(raw, where)
        key = _string(tol.get("key"), f"{where}.key")
        operator = _string(tol.get("operator"), f"{where}.operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            raise PodSpecError(f"{where}.operator: {operator!r} is not one of Equal, Exists")
        value = _string(tol.get("value"), f"{where}.value")
        effect = _string(tol.get("effect"), f"{where}.effect")
        if effect not in TAINT_EFFECTS:
            raise PodSpecError(f"{where}.effect: {effect!r} is not one of {sorted(TAINT_EFFECTS)}")
        out.append(Toleration(key=key, operator=operator, value=value, effect=effect))
    return out


def _limit_violations(
    init: list[_Container], containers: list[_Container]
) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """Containers whose explicit requests exceed their limits (Kueue's validateResources):
    (``containers`` or ``initContainers``, index, sorted resource names)."""
    out = []
    for field, lst in (("initContainers", init), ("containers", containers)):
        for i, c in enumerate(lst):
            if not c.limits:
                continue
            over = tuple(
                sorted(r for r, q in c.requests.items() if r in c.limits and q > c.limits[r])
            )
            if over:
                out.append((field, i, over))
    return tuple(out)


def limit_violations(pod_spec: Mapping[str, Any]) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    spec = _mapping(pod_spec, "spec")
    return _limit_violations(_containers(spec, "initContainers"), _containers(spec, "containers"))


def podset_from_template(
    *, name: str, count: int, template: Mapping[str, Any], min_count: int | None = None
) -> PodSet:
    """A ``PodSet`` for ``count`` pods of a ``PodTemplateSpec`` (``{metadata, spec}``).

    What a template asks for is computed once per distinct template content (Jobs of
    one array, and the workloads of a generated input, share a handful of templates);
    every PodSet gets containers of its own."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise PodSpecError(f"podSet {name!r} count: must be a non-negative integer, got {count!r}")
    if min_count is not None and (isinstance(min_count, bool) or not isinstance(min_count, int)):
        raise PodSpecError(f"podSet {name!r} minCount: must be an integer, got {min_count!r}")
    key = content_key(template)
    asks = _TEMPLATE_ASKS.get(key)
    if asks is None:
        asks = _template_asks(template)  # raises for a bad template: nothing remembered
        _TEMPLATE_ASKS.put(key, asks)
    return PodSet(
        name=name,
        count=count,
        requests=dict(asks.requests),
        min_count=min_count,
        node_selector=dict(asks.node_selector),
        required_affinity=list(asks.required_affinity),
        tolerations=list(asks.tolerations),
        limit_violations=asks.limit_violations,
        resource_claims=asks.resource_claims,
    )


class _TemplateAsks(NamedTuple):
    """What one pod of a template asks for (shared, never changed: PodSets copy it)."""

    requests: dict[str, int]
    node_selector: dict[str, str]
    required_affinity: list[NodeSelectorTerm]
    tolerations: list[Toleration]
    limit_violations: tuple[tuple[str, int, tuple[str, ...]], ...]
    resource_claims: tuple[tuple[str, str | None, str | None], ...] = ()


_TEMPLATE_ASKS: ContentMemo[_TemplateAsks] = ContentMemo()


def _template_asks(template: Mapping[str, Any]) -> _TemplateAsks:
    spec = _mapping(_mapping(template, "template").get("spec"), "template.spec")
    containers, init = _containers(spec, "containers"), _containers(spec, "initContainers")
    requests = _units(_exact_pod_requests(spec, (containers, init)))
    for c in (*init, *containers):
        for r, q in c.requests.items():
            if q == 0:
                requests.setdefault(r, 0)  # an explicit zero still names its flavor
    return _TemplateAsks(
        requests=requests,
        node_selector=pod_node_selector(spec),
        required_affinity=pod_required_affinity(spec),
        tolerations=pod_tolerations(spec),
        limit_violations=_limit_violations(init, containers),
        resource_claims=_resource_claims(spec),
    )


def _resource_claims(spec: Mapping[str, Any]) -> tuple[tuple[str, str | None, str | None], ...]:
    """``spec.resourceClaims`` as (name, template, claim); queues.dra counts them."""
    out = []
    for i, raw in enumerate(_list(spec.get("resourceClaims"), "spec.resourceClaims")):
        where = f"spec.resourceClaims[{i}]"
        prc = _mapping(raw, where)
        out.append(
            (
                _string(prc.get("name"), f"{where}.name"),
                _string(prc.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName")
                or None,
                _string(prc.get("resourceClaimName"), f"{where}.resourceClaimName") or None,
            )
        )
    return tuple(out)
