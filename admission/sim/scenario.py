"""Simulation scenarios: what the simulator runs, and Kueue's generator format.

A ``Scenario`` is the queue objects (flavors, ClusterQueues, Cohorts, LocalQueues,
optionally Namespaces) plus timed workloads (``SimWorkload``: arrival, runtime, class).
It is built either from a trace (``admission.sim.trace``) or, here, from the
generator configuration of Kueue's scheduler performance test
(``cohorts[].queuesSets[].workloadsSets[]``, test/performance/scheduler/runner/generator
in kubernetes-sigs/kueue), with the runner's semantics:

* cohort ``<cohortClass>-<i>``; ClusterQueue ``<queueClass>-<set>-<j>-<cohort>`` with one
  resource group (cpu) on one ResourceFlavor (``rf``, or ``resourceFlavor.name``),
  ``nominalQuota``/``borrowingLimit``, preemption ``withinClusterQueue`` /
  ``reclaimWithinCohort``, every namespace selected; a namespace and a LocalQueue of
  the ClusterQueue's name;
* each workloads set of a queue runs concurrently from t=0 and creates its ``count``
  rounds of templates, each creation preceded by a ``creationIntervalMs`` wait (so the
  k-th workload of a set, counting from 0, is created at ``(k+1) × interval``), named
  ``<class>-<set>-<round>-<template>``, one pod (``podCount``) requesting ``request``
  cpu, priority ``priority``, finishing ``runtimeMs`` after admission. This project's
  extension: ``checkpointIntervalMs`` / ``checkpointJitterMs`` / ``checkpointOnNoticeMs``
  give its workloads checkpoints (``SimWorkload``; admission.sim.progress).

Times are integer microseconds of simulated time from the scenario start (t=0, when
the queue objects exist). Errors name the file and the field path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from admission.engine.tas.domains import Node, PodUsage
from admission.sim.sharing import EMPTY
from queues.model import (
    ANY,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    NEVER,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    PodSet,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Topology,
    Workload,
)
from queues.quantity import QuantityError, to_units

US_PER_S = 1_000_000
US_PER_MS = 1_000


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the file and the field."""


@dataclass(slots=True)
class SimWorkload:
    """One workload of a scenario: the engine object plus its timing and class."""

    workload: Workload
    arrival_us: int
    runtime_us: int
    wl_class: str
    # It saves a checkpoint every interval of run time (each one up to ±jitter off,
    # deterministically per workload); once readmitted after an eviction it resumes
    # from its last checkpoint. 0: no checkpoints, it reruns from the start.
    checkpoint_interval_us: int = 0
    checkpoint_jitter_us: int = 0
    # Given a preemption notice, it saves a checkpoint this long after it (and so
    # yields); 0: it ignores notices.
    checkpoint_on_notice_us: int = 0


@dataclass(slots=True)
class Scenario:
    """Queue objects and timed workloads (arrival order is not required)."""

    name: str
    flavors: dict[str, ResourceFlavor]
    cluster_queues: dict[str, ClusterQueue]
    cohorts: dict[str, Cohort]
    local_queues: dict[str, LocalQueue]
    workloads: list[SimWorkload]
    namespaces: dict[str, Namespace] | None = None  # None: every namespace exists
    cq_class: dict[str, str] = field(default_factory=dict)  # ClusterQueue -> class
    source: str = ""
    # Topology-aware scheduling: Topologies, Nodes (with their level labels) and the
    # bound pods that use capacity from t=0.
    topologies: dict[str, Topology] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodUsage] = field(default_factory=dict)
    # DRA objects (DeviceClasses, ResourceClaimTemplates, ...) by (kind, [ns/]name): the
    # devices a trace job's claims ask for count against quota (queues.dra)
    dra: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def class_of_cq(self, cq: str) -> str:
        return self.cq_class.get(cq, cq)


# -- the generator format ---------------------------------------------------------

_WITHIN_CQ = (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)
_RECLAIM = (NEVER, LOWER_PRIORITY, ANY)
_TOP = {"cohorts", "resourceFlavor", "topology", "dra"}
_COHORT = {"className", "count", "queuesSets"}
_QSET = {
    "className",
    "count",
    "nominalQuota",
    "borrowingLimit",
    "reclaimWithinCohort",
    "withinClusterQueue",
    "deviceNominalQuota",
    "deviceBorrowingLimit",
    "workloadsSets",
}
_WSET = {"count", "creationIntervalMs", "workloads"}
_TEMPLATE = {
    "className",
    "runtimeMs",
    "priority",
    "request",
    "podCount",
    "tasConstraint",
    "tasLevel",
    "sliceSize",
    "devices",
    "checkpointIntervalMs",
    "checkpointJitterMs",
    "checkpointOnNoticeMs",
}
_UNSUPPORTED = {
    "topology": "topology-aware scheduling is not simulated",
    "dra": "dynamic resource allocation is not simulated",
    "deviceNominalQuota": "device quotas (DRA) are not simulated",
    "deviceBorrowingLimit": "device quotas (DRA) are not simulated",
    "tasConstraint": "topology-aware scheduling is not simulated",
    "tasLevel": "topology-aware scheduling is not simulated",
    "sliceSize": "topology-aware scheduling is not simulated",
    "devices": "dynamic resource allocation is not simulated",
}


def is_generator_format(doc: Any) -> bool:
    """A generator config is a mapping with ``cohorts`` and no Kubernetes ``kind``."""
    return isinstance(doc, dict) and "cohorts" in doc and "kind" not in doc


class _Reader:
    """Typed field access that reports ``source: path: problem``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {path}: {message}")

    def mapping(self, value: Any, path: str, known: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, got {_type(value)}")
        for key in value:
            if key not in known:
                raise self.fail(f"{path}.{key}" if path else str(key), "unknown field")
            if key in _UNSUPPORTED and value[key] not in (None, "", 0, False):
                raise self.fail(
                    f"{path}.{key}" if path else key, f"not supported: {_UNSUPPORTED[key]}"
                )
        return value

    def seq(self, value: Any, path: str, *, required: bool = True) -> list[Any]:
        if value is None and not required:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {_type(value)}")
        if required and not value:
            raise self.fail(path, "must not be empty")
        return value

    def integer(
        self, value: Any, path: str, *, minimum: int = 0, default: int | None = None
    ) -> int:
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {_type(value)}")
        if value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {value}")
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, "must be a non-empty string")
        return value

    def quantity(self, value: Any, path: str, *, resource: str = "cpu") -> int:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(path, f"must be a quantity, got {_type(value)}")
        try:
            units = to_units(resource, value)
        except QuantityError as e:
            raise self.fail(path, str(e)) from None
        if units < 0:
            raise self.fail(path, f"must not be negative, got {value!r}")
        return units

    def enum(self, value: Any, path: str, allowed: tuple[str, ...]) -> str:
        if value is None or value == "":
            return NEVER
        if value not in allowed:
            raise self.fail(path, f"unsupported value {value!r}: one of {', '.join(allowed)}")
        return str(value)


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def parse_generator(doc: Any, *, source: str = "scenario", name: str = "") -> Scenario:
    """A ``Scenario`` from a Kueue scheduler-performance generator config."""
    r = _Reader(source)
    top = r.mapping(doc, "", _TOP)
    flavor_name = "rf"
    if top.get("resourceFlavor") is not None:
        rf = r.mapping(top["resourceFlavor"], "resourceFlavor", {"name", "nodeLabels"})
        flavor_name = r.name(rf.get("name"), "resourceFlavor.name")
    cohorts_doc = r.seq(top.get("cohorts"), "cohorts")
    cluster_queues: dict[str, ClusterQueue] = {}
    local_queues: dict[str, LocalQueue] = {}
    cq_class: dict[str, str] = {}
    workloads: list[SimWorkload] = []
    shapes: dict[tuple[int, int], list[PodSet]] = {}  # (pods, cpu) -> podSets
    for ci, cset in enumerate(cohorts_doc):
        cpath = f"cohorts[{ci}]"
        cset = r.mapping(cset, cpath, _COHORT)
        cclass = r.name(cset.get("className"), f"{cpath}.className")
        ccount = r.integer(cset.get("count"), f"{cpath}.count", minimum=1)
        qsets = r.seq(cset.get("queuesSets"), f"{cpath}.queuesSets")
        for cidx in range(ccount):
            cohort = f"{cclass}-{cidx}"
            for qi, qset in enumerate(qsets):
                qpath = f"{cpath}.queuesSets[{qi}]"
                _queue_set(
                    r,
                    qset,
                    path=qpath,
                    cohort=cohort,
                    set_index=qi,
                    flavor=flavor_name,
                    out_cqs=cluster_queues,
                    out_lqs=local_queues,
                    out_class=cq_class,
                    out_wls=workloads,
                    shapes=shapes,
                )
    return Scenario(
        name=name or source,
        flavors={flavor_name: ResourceFlavor(name=flavor_name)},
        cluster_queues=cluster_queues,
        cohorts={},
        local_queues=local_queues,
        workloads=workloads,
        namespaces=None,
        cq_class=cq_class,
        source=source,
    )


def _queue_set(
    r: _Reader,
    qset: Any,
    *,
    path: str,
    cohort: str,
    set_index: int,
    flavor: str,
    out_cqs: dict[str, ClusterQueue],
    out_lqs: dict[str, LocalQueue],
    out_class: dict[str, str],
    out_wls: list[SimWorkload],
    shapes: dict[tuple[int, int], list[PodSet]],
) -> None:
    qset = r.mapping(qset, path, _QSET)
    qclass = r.name(qset.get("className"), f"{path}.className")
    qcount = r.integer(qset.get("count"), f"{path}.count", minimum=1)
    if qset.get("nominalQuota") is None:
        raise r.fail(f"{path}.nominalQuota", "Required value")
    nominal = r.quantity(qset["nominalQuota"], f"{path}.nominalQuota")
    borrowing: int | None = None
    if qset.get("borrowingLimit") not in (None, ""):
        borrowing = r.quantity(qset["borrowingLimit"], f"{path}.borrowingLimit")
    policy = PreemptionPolicy(
        within_cluster_queue=r.enum(
            qset.get("withinClusterQueue"), f"{path}.withinClusterQueue", _WITHIN_CQ
        ),
        reclaim_within_cohort=r.enum(
            qset.get("reclaimWithinCohort"), f"{path}.reclaimWithinCohort", _RECLAIM
        ),
    )
    templates = _workload_sets(r, qset.get("workloadsSets"), f"{path}.workloadsSets")
    for qidx in range(qcount):
        cq_name = f"{qclass}-{set_index}-{qidx}-{cohort}"
        if cq_name in out_cqs:
            raise r.fail(path, f"ClusterQueue {cq_name} is generated twice (duplicate className)")
        out_cqs[cq_name] = ClusterQueue(
            name=cq_name,
            cohort=cohort,
            namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(
                within_cluster_queue=policy.within_cluster_queue,
                reclaim_within_cohort=policy.reclaim_within_cohort,
            ),
            resource_groups=[
                ResourceGroup(
                    covered_resources=["cpu"],
                    flavors=[
                        FlavorQuotas(
                            name=flavor,
                            resources={
                                "cpu": ResourceQuota(nominal=nominal, borrowing_limit=borrowing)
                            },
                        )
                    ],
                )
            ],
        )
        out_class[cq_name] = qclass
        lq = LocalQueue(namespace=cq_name, name=cq_name, cluster_queue=cq_name)
        out_lqs[lq.key] = lq
        for wl_set_idx, (interval_us, rounds, tmpls) in enumerate(templates):
            k = 0
            for si in range(rounds):
                for ti, (wclass, runtime_us, priority, request, pods, ckpt) in enumerate(tmpls):
                    k += 1
                    # one podSet list per (pods, request) for the whole scenario: the
                    # engine never changes one in place (admission.sim.sharing)
                    pod_sets = shapes.get((pods, request))
                    if pod_sets is None:
                        pod_sets = shapes[pods, request] = [
                            PodSet(name="main", count=pods, requests={"cpu": request})
                        ]
                    wl = Workload(
                        namespace=cq_name,
                        name=f"{wclass}-{wl_set_idx}-{si}-{ti}",
                        queue_name=cq_name,
                        priority=priority,
                        pod_sets=pod_sets,
                        creation_time=0.0,  # set by the simulator from arrival_us
                        labels=EMPTY,
                        annotations=EMPTY,
                        reclaimable_pods=EMPTY,
                    )
                    out_wls.append(
                        SimWorkload(
                            workload=wl,
                            arrival_us=k * interval_us,
                            runtime_us=runtime_us,
                            wl_class=wclass,
                            checkpoint_interval_us=ckpt[0],
                            checkpoint_jitter_us=ckpt[1],
                            checkpoint_on_notice_us=ckpt[2],
                        )
                    )


# class, runtime µs, priority, cpu request, pods, (checkpoint interval, jitter, on notice) µs
_Template = tuple[str, int, int, int, int, tuple[int, int, int]]


def _workload_sets(r: _Reader, value: Any, path: str) -> list[tuple[int, int, list[_Template]]]:
    out = []
    for wi, wset in enumerate(r.seq(value, path, required=False)):
        wpath = f"{path}[{wi}]"
        wset = r.mapping(wset, wpath, _WSET)
        count = r.integer(wset.get("count"), f"{wpath}.count", minimum=0)
        interval = r.integer(
            wset.get("creationIntervalMs"), f"{wpath}.creationIntervalMs", minimum=0, default=0
        )
        tmpls: list[_Template] = []
        for ti, t in enumerate(r.seq(wset.get("workloads"), f"{wpath}.workloads")):
            tpath = f"{wpath}.workloads[{ti}]"
            t = r.mapping(t, tpath, _TEMPLATE)
            wclass = r.name(t.get("className"), f"{tpath}.className")
            runtime = r.integer(t.get("runtimeMs"), f"{tpath}.runtimeMs", minimum=0)
            priority = t.get("priority", 0)
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise r.fail(f"{tpath}.priority", f"must be an integer, got {_type(priority)}")
            if t.get("request") is None:
                raise r.fail(f"{tpath}.request", "Required value")
            request = r.quantity(t["request"], f"{tpath}.request")
            pods = r.integer(t.get("podCount"), f"{tpath}.podCount", minimum=0, default=0) or 1
            every, jitter, on_notice = (
                r.integer(t.get(k), f"{tpath}.{k}", minimum=0, default=0) * US_PER_MS
                for k in ("checkpointIntervalMs", "checkpointJitterMs", "checkpointOnNoticeMs")
            )
            ckpt = (every, jitter, on_notice)
            if ckpt[1] and not ckpt[1] < ckpt[0]:
                raise r.fail(
                    f"{tpath}.checkpointJitterMs", "must be less than checkpointIntervalMs"
                )
            tmpls.append((wclass, runtime * US_PER_MS, priority, request, pods, ckpt))
        out.append((interval * US_PER_MS, count, tmpls))
    return out
