"""Warnings on a queued job whose DRA claims cannot be counted yet.

The devices a pod's ResourceClaimTemplates ask for are charged to quota
(:mod:`queues.dra`); a claim that cannot be counted (a DeviceClass no
``deviceClassMappings`` entry covers, a template or class that does not exist, a claim
named by ResourceClaimName, ``allocationMode: All``) keeps the Workload waiting
``Misconfigured``. The object is still allowed (a template may be created after its
Job), but its creator is told at once, with the same message the Workload will carry.
The view's ``dra`` (the live cache's accounting) is read when it has one; a view without
it (``serve --webhooks-only``) gives no warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.fields import IntegrationError
from admission.integrations.framework.interface import Integration
from queues.pods import PodSpecError, podset_from_template

__all__ = ["claim_warnings"]


def claim_warnings(
    integ: Integration, obj: Mapping[str, Any], namespace: str, view: Any
) -> list[str]:
    dra = getattr(view, "dra", None)
    if dra is None:
        return []
    try:
        roles = integ.roles(obj)
    except IntegrationError:
        return []
    out = []
    for i, role in enumerate(roles):
        spec = role.template.get("spec") if isinstance(role.template, Mapping) else None
        if not isinstance(spec, Mapping) or not spec.get("resourceClaims"):
            continue
        try:
            ps = podset_from_template(name=role.name, count=1, template=role.template)
        except (PodSpecError, ValueError, ArithmeticError):
            continue  # refused or warned about on its own
        counted = dra.pod_set(ps, i, namespace)
        if counted.dra_error:
            out.append(
                f"{counted.dra_error}: the Workload will not be admitted until its DRA "
                "claims can be counted against quota"
            )
    return out
