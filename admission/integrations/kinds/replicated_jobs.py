"""The family of JobSet-shaped objects (a JobSet, the JobSet a TrainJob runs): the
JobSet resource and what their ``replicatedJobs`` and statuses say about finished pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.interface import Role

JOBSET_RESOURCE = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")


def succeeded_replicas(
    replicated_jobs: list[Any], statuses: list[Mapping[str, Any]], roles: list[Role]
) -> dict[str, int]:
    """podSet -> reclaimable pods of a JobSet-shaped object (a JobSet, a TrainJob's
    JobSet): each replicated Job's succeeded replicas, at most its ``replicas``, times
    its pods per replica."""
    by_name = {s.get("name"): s for s in statuses}
    counts = {r.name: r.count for r in roles}
    out: dict[str, int] = {}
    for rj in replicated_jobs:
        if not isinstance(rj, Mapping):
            continue
        name, replicas = rj.get("name"), int_or(rj.get("replicas"), 1)
        succeeded = int_or((by_name.get(name) or {}).get("succeeded"))
        if name in counts and replicas > 0 and 0 < succeeded <= replicas:
            out[str(name)] = succeeded * (counts[name] // replicas)
    return out


def int_or(value: Any, default: int = 0) -> int:
    """``value`` when it is an integer (not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default
