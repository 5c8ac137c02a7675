"""The one what-if: the engine on the current objects, and again with some replaced.

``plan --what-if`` and the quota webhook's impact warnings (``admission.drivers.impact``) both
call :func:`what_if`, so both run the scheduler the configuration builds
(:meth:`admission.config.schema.Config.make_scheduler`: fair sharing, admission fair
sharing, cohort credits) and cannot disagree about what an edit does.

A what-if never touches its inputs: each side runs on shallow copies of the
workloads (the scheduler replaces ``wl.admission``, it never mutates it in place).
:func:`snapshot` takes such a copy of a live model (a webhook's ``ModelView``): a
dict copy per kind and a shallow copy per workload, cheap enough to take on the
event loop, after which the live model may change freely while the what-if runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from admission.config.schema import Config
from admission.drivers.inputs import Inputs
from admission.drivers.plan import PlanResult, run_plan
from admission.engine.cache import Cache
from queues.model import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    ResourceFlavor,
    Workload,
)

__all__ = ["WhatIf", "snapshot", "what_if", "with_now"]


@dataclass(slots=True)
class WhatIf:
    """Both plans: ``before`` on the current objects, ``after`` with the edit."""

    before: PlanResult
    after: PlanResult


def _fresh(inputs: Inputs) -> Inputs:
    """The same objects with every workload shallow-copied (what a plan may replace)."""
    return replace(inputs, workloads=[copy.copy(wl) for wl in inputs.workloads])


def what_if(
    before: Inputs,
    after: Inputs,
    *,
    config: Config | None = None,
    cycles: int | None = None,
    before_cycles: Callable[[str, Cache], None] | None = None,
    deadline: float | None = None,
) -> WhatIf:
    """Plan ``before`` and ``after`` with the scheduler ``config`` builds.

    ``before_cycles(side, cache)`` (side ``"before"`` or ``"after"``) sees each cache as
    loaded; ``deadline`` (``time.monotonic()``) bounds both runs together
    (:class:`admission.drivers.plan.DeadlineExceeded`). Neither input is modified.
    """
    config = config or Config()

    def hook(side: str) -> Callable[[Cache], None] | None:
        if before_cycles is None:
            return None
        return lambda cache: before_cycles(side, cache)

    b = run_plan(
        _fresh(before),
        cycles=cycles,
        config=config,
        before_cycles=hook("before"),
        deadline=deadline,
    )
    a = run_plan(
        _fresh(after), cycles=cycles, config=config, before_cycles=hook("after"), deadline=deadline
    )
    return WhatIf(before=b, after=a)


def snapshot(
    *,
    flavors: Mapping[str, ResourceFlavor],
    cluster_queues: Mapping[str, ClusterQueue],
    cohorts: Mapping[str, Cohort],
    local_queues: Mapping[str, LocalQueue],
    workloads: Mapping[str, Workload],
    namespace_labels: Callable[[str], dict[str, str]],
    extra_namespaces: tuple[str, ...] = (),
    admission_checks: Mapping[str, AdmissionCheck] | None = None,
) -> Inputs:
    """A copy of a live model the what-if can run on while the model moves on.

    Namespaces are those of the workloads and LocalQueues (plus ``extra_namespaces``),
    with their labels as ``namespace_labels`` reports them.
    """
    wls = [copy.copy(wl) for wl in workloads.values()]
    used_ns = (
        {wl.namespace for wl in wls}
        | {lq.namespace for lq in local_queues.values()}
        | set(extra_namespaces)
    )
    return Inputs(
        flavors=dict(flavors),
        cluster_queues=dict(cluster_queues),
        cohorts=dict(cohorts),
        local_queues=dict(local_queues),
        namespaces={ns: Namespace(name=ns, labels=namespace_labels(ns)) for ns in used_ns},
        workloads=wls,
        namespaces_given=True,
        dra_counted=True,  # the live cache counted their DRA devices
        admission_checks=dict(admission_checks or {}),
    )


def with_now(config: Config | None, now: float) -> Config:
    """``config`` evaluated at ``now`` (epoch seconds), leaving ``config`` as it is."""
    return replace(config or Config(), now=now)
