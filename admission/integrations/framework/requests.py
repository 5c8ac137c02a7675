"""What each podSet of an object asks per pod, as its Workload counts it, before and
after an edit.

A Workload charges each podSet's pods what ``queues.pods.pod_requests`` computes from the
pod template: requests, with limits standing in for missing ones (Kubernetes defaults a
request from its limit; GPUs are usually written as limits only), pod-level resources,
overhead, init containers and sidecars. A check that compares only ``requests`` lets a
template raise a limit after admission, and the pods made from it then run on more than
their Workload holds. This module compares what the Workload would count, for any kind,
from its roles (``Integration.roles``), so every kind is covered the same way: a pod
owner's webhook refuses the change while its group is managed
(:class:`.podowner.PodOwnerIntegration`), and the generic reconciler evicts a running
object whose requests changed (``objects.job_mismatch``, on the same computation).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.fields import IntegrationError, spec_field
from admission.integrations.framework.interface import Integration
from queues.pods import PodSpecError, pod_requests
from queues.quantity import QuantityError, format_quantity

Requests = dict[str, int]


def effective_requests(
    integ: Integration, obj: Mapping[str, Any]
) -> dict[str, tuple[str, Requests]]:
    """podSet name -> (the field of its pod spec, what one pod asks, in engine units);
    ``{}`` for an object whose roles or quantities cannot be read (those are refused on
    their own)."""
    try:
        roles = integ.roles(obj)
    except IntegrationError:
        return {}
    out: dict[str, tuple[str, Requests]] = {}
    for role in roles:
        spec = role.template.get("spec") if isinstance(role.template, Mapping) else None
        try:
            asks = pod_requests(spec if isinstance(spec, Mapping) else {})
        except (QuantityError, PodSpecError):
            continue
        out[role.name] = (spec_field(role.path, "spec"), asks)
    return out


def request_changes(
    integ: Integration, new: Mapping[str, Any], old: Mapping[str, Any]
) -> list[str]:
    """A field error per podSet (in both objects) whose pods would ask for something else
    than before, limits and overhead included."""
    before = effective_requests(integ, old)
    errors = []
    for name, (where, asks) in effective_requests(integ, new).items():
        was = before.get(name)
        if was is None or was[1] == asks:
            continue
        errors.append(
            f"{where}: Invalid value: {_quantities(asks)}: the pods' requests "
            f"(limits standing in for missing requests, plus overhead, init containers and "
            f"sidecars) are fixed while the object is managed: podSet {name} asked for "
            f"{_quantities(was[1])}"
        )
    return errors


def pod_claims(spec: Any) -> list[Any]:
    """A pod spec's ``resourceClaims`` as written (the DRA devices its pods are counted
    for, through their templates: queues.dra)."""
    claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    return list(claims) if isinstance(claims, list) else []


def claim_changes(integ: Integration, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """A field error per podSet (in both objects) whose pods' ``resourceClaims`` differ:
    claims added, removed or pointed at another template are DRA devices the Workload
    was not admitted for, a resource change like any other."""
    try:
        before = {r.name: r for r in integ.roles(old)}
        after = integ.roles(new)
    except IntegrationError:
        return []
    errors = []
    for role in after:
        was = before.get(role.name)
        if was is None:
            continue
        have, want = pod_claims(was.template.get("spec")), pod_claims(role.template.get("spec"))
        if have == want:
            continue
        errors.append(
            f"{spec_field(role.path, 'spec')}.resourceClaims: Invalid value: {_json(want)}: "
            f"the pods' resource claims (DRA devices count against quota) are fixed while "
            f"the object is admitted: podSet {role.name} had {_json(have)}"
        )
    return errors


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _quantities(asks: Requests) -> str:
    text = {r: format_quantity(r, v) for r, v in sorted(asks.items())}
    return json.dumps(text, separators=(",", ":"))


def pod_set_asks(wl: Mapping[str, Any]) -> dict[str, Requests]:
    """podSet name -> what each of its pods was counted for, from a Workload's templates."""
    out: dict[str, Requests] = {}
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        spec = (ps.get("template") or {}).get("spec") if isinstance(ps, Mapping) else None
        try:
            out[str(ps.get("name"))] = pod_requests(spec if isinstance(spec, Mapping) else {})
        except (QuantityError, PodSpecError):
            continue
    return out


def beyond_pod_set(pod: Mapping[str, Any], counted: Requests | None) -> str | None:
    """Why ``pod`` may not start on its podSet's admission (it asks for more of a resource
    than each of the podSet's pods was counted for: a template edited after admission),
    or None. A podSet not known here is the caller's to judge."""
    spec = pod.get("spec")
    try:
        asks = pod_requests(spec if isinstance(spec, Mapping) else {})
    except (QuantityError, PodSpecError) as err:
        return str(err)
    if counted is None:
        return None
    over = {r: v for r, v in asks.items() if v > counted.get(r, 0)}
    if not over:
        return None
    return (
        f"it asks for {_quantities(over)} per pod, and its podSet's pods were admitted "
        f"for {_quantities({r: counted.get(r, 0) for r in over})}"
    )
