"""``plan`` across clusters: where each workload of a MultiKueue manager would run, and why.

The manager's plan runs first (:func:`admission.drivers.plan.run_plan`): a workload of
a ClusterQueue with a MultiKueue AdmissionCheck reserves quota there and its check is
Pending. Then, one at a time in the order the manager reserved quota (workloads loaded
holding quota first, by admission time), each is dispatched as the service would
dispatch it (docs/semantics.md §6.1):

* its check's MultiKueueConfig names the workers, in order; a worker is usable when it
  has a MultiKueueCluster in the manager's files and its files were given
  (``--worker``): the others are "not connected";
* the dispatcher of the Configuration (``multiKueue.dispatcherName``) nominates workers:
  AllAtOnce every usable one; Incremental ``stepSize`` more in the config's order per
  round (a round lasts 5 minutes: the next round is taken when no copy of the previous
  one was admitted); the ``fits`` dispatcher runs the service's own choice
  (:mod:`queues.multikueue_fit`) on each worker's ClusterQueue as the worker's plan has
  it now; an external dispatcher nominates nothing plan can know;
* a copy already on a worker (a Workload of the same name labelled
  ``kueue.x-k8s.io/multikueue-origin``, from an earlier dispatch) is the workload's copy
  there, and when it holds quota the workload runs there without a new nomination; a
  Workload of that name without the label is the worker's own, and no copy can go there;
* a copy of the Workload goes to each nominated worker, and that worker's scheduler runs
  over its own objects plus the copies so far (each worker's plan starts from its own
  files, run until nothing changes). The first worker that admits the copy runs it; when
  several admit it at once, the race is settled in the MultiKueueConfig's order. The
  other copies are removed (what they preempted is readmitted if it can be). Copies no
  worker admits stay queued on their workers, as on the clusters.

Every worker uses the same ``--config`` as the manager. A what-if (a manager's or a
worker's objects replaced) runs the whole of it twice.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from admission.config.multikueue import ALL_AT_ONCE, FITS, INCREMENTAL, MultiKueueSettings
from admission.config.schema import Config
from admission.drivers.inputs import Inputs
from admission.drivers.multicluster_inputs import ManagerInputs, WorkerInputs
from admission.drivers.plan import PlanResult, pending_report, run_cycles, run_plan
from admission.engine.cache import Cache
from queues.api.labels import MULTIKUEUE_ORIGIN
from queues.api.multikueue import CONTROLLER_NAME
from queues.model import Workload
from queues.multikueue_fit import Fit, choose, fit_in, unfit
from queues.quantity import format_quantity, parse_quantity

ADMITTED = "Admitted"  # a worker admitted the copy: the workload runs there
PENDING_ON_MANAGER = "PendingOnManager"  # no quota on the manager yet
NO_WORKER_ADMITS = "NoWorkerAdmits"  # copies nominated, none admitted
NO_USABLE_WORKER = "NoUsableWorker"
EXTERNAL_DISPATCHER = "ExternalDispatcher"
BAD_CONFIG = "BadConfig"  # the check's parameters name no MultiKueueConfig of the files
CONFLICT = "conflict"  # a copy's outcome: the worker has a Workload of that name of its own


@dataclass(slots=True)
class Dispatch:
    """What happened to one manager workload of a ClusterQueue with a MultiKueue check."""

    workload: str
    cluster_queue: str | None
    check: str
    reason: str
    message: str
    worker: str | None = None
    nominated: list[str] = field(default_factory=list)
    dispatcher_reasons: tuple[str, ...] = ()
    round: int | None = None
    copies: dict[str, dict[str, Any]] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": self.workload,
            "clusterQueue": self.cluster_queue,
            "admissionCheck": self.check,
            "worker": self.worker,
            "reason": self.reason,
            "message": self.message,
            "nominated": list(self.nominated),
            "dispatcherReasons": list(self.dispatcher_reasons),
        }
        if self.round is not None:
            out["round"] = self.round
        if self.copies:
            out["copies"] = {w: dict(c) for w, c in sorted(self.copies.items())}
        return out


@dataclass(slots=True)
class ClustersResult:
    manager: PlanResult
    dispatcher: str
    workers: dict[str, PlanResult]
    paths: dict[str, list[str]]
    dispatches: list[Dispatch]


class _Worker:
    """One worker cluster's plan, kept running as copies arrive and leave."""

    def __init__(self, name: str, result: PlanResult) -> None:
        self.name = name
        self.result = result
        assert result.cache is not None and result.scheduler is not None
        self.cache: Cache = result.cache
        self.scheduler = result.scheduler

    def run(self) -> None:
        r = self.result
        r.cycles += run_cycles(
            self.scheduler,
            cycles=None,
            admitted=r.admitted,
            preempted=r.preempted,
            requeues=r.requeues,
        )

    def fit(self, wl: Workload) -> Fit:
        """The fits dispatcher's view of this worker for ``wl`` (its ClusterQueue as the
        service would read it: quota, and reservations as ``status.flavorsReservation``)."""
        lq = self.cache.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is None:
            return unfit(self.name, f"has no LocalQueue {wl.queue_name}")
        if lq.cluster_queue not in self.cache.cluster_queues:  # the service reads it: 404
            return unfit(self.name, f"has no LocalQueue {wl.queue_name}")
        return fit_in(self.name, cluster_queue_object(self.cache, lq.cluster_queue), _request(wl))

    def outcome(self, key: str) -> dict[str, Any]:
        """What became of the copy ``key`` here."""
        cq = self.cache.admitted.get(key)
        if cq is not None:
            wl = self.cache.workloads[key]
            assert wl.admission is not None
            flavors = sorted(
                {f for p in wl.admission.pod_set_assignments for f in p.flavors.values()}
            )
            return {"outcome": "admitted", "clusterQueue": cq, "flavors": flavors}
        if key not in self.cache.workloads:
            return {"outcome": "removed"}
        cq_name, status = pending_report_one(self.cache, key)
        return {"outcome": "pending", "clusterQueue": cq_name, "reason": str(status[0]),
                "message": status[1]}  # fmt: skip


def pending_report_one(cache: Cache, key: str) -> tuple[str | None, tuple[str, str]]:
    """Why the workload ``key`` is pending on ``cache`` (the plan's pending entry)."""
    cq, st = pending_report(cache).get(key, (None, None))
    if st is None:
        return cq, ("Pending", "")
    return cq, (str(st.reason), st.message)


def cluster_queue_object(cache: Cache, name: str) -> dict[str, Any]:
    """ClusterQueue ``name`` as the API server would serve it: its quota in ``spec`` and
    what the admitted workloads reserve in ``status.flavorsReservation``."""
    cq = cache.cluster_queues[name]
    groups = []
    for rg in cq.resource_groups:
        flavors = []
        for fq in rg.flavors:
            resources = []
            for res, q in fq.resources.items():
                r: dict[str, Any] = {"name": res, "nominalQuota": format_quantity(res, q.nominal)}
                if q.borrowing_limit is not None:
                    r["borrowingLimit"] = format_quantity(res, q.borrowing_limit)
                resources.append(r)
            flavors.append({"name": fq.name, "resources": resources})
        groups.append({"coveredResources": list(rg.covered_resources), "flavors": flavors})
    spec: dict[str, Any] = {"resourceGroups": groups}
    if cq.cohort:
        spec["cohortName"] = cq.cohort
    node = cache.tree.queues.get(name)
    reserved: dict[str, list[dict[str, str]]] = {}
    for (flavor, res), used in sorted((node.usage if node is not None else {}).items()):
        reserved.setdefault(flavor, []).append({"name": res, "total": format_quantity(res, used)})
    status = {"flavorsReservation": [{"name": f, "resources": r} for f, r in reserved.items()]}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def _request(wl: Workload) -> dict[str, Fraction]:
    """The workload's total requests (each podSet's count times its pod's requests)."""
    units: dict[str, int] = {}
    for ps in wl.pod_sets:
        for res, v in ps.requests.items():
            units[res] = units.get(res, 0) + ps.count * v
    return {res: parse_quantity(format_quantity(res, v)) for res, v in units.items()}


def _copy(wl: Workload, origin: str) -> Workload:
    """The Workload copy a worker gets: the spec and the origin label, nothing of the
    manager's status."""
    c = copy.copy(wl)
    c.pod_sets = [replace(ps, requests=dict(ps.requests)) for ps in wl.pod_sets]
    c.labels = {**wl.labels, MULTIKUEUE_ORIGIN: origin}
    c.annotations = dict(wl.annotations)
    c.admission = None
    c.admission_time = None
    c.admitted = False
    c.admission_checks = ()
    c.requeue_time = None
    c.requeue_count = 0
    c.noticed_at = None
    c.eviction_deadline = None
    c.reclaimable_pods = {}
    c.active = True
    return c


def run_clusters(
    manager: ManagerInputs,
    workers: list[WorkerInputs],
    *,
    config: Config,
    cycles: int | None = None,
) -> ClustersResult:
    """The manager's plan, each worker's, and the dispatch of every workload that holds
    quota on the manager with a MultiKueue check (see the module docstring)."""
    plan = run_plan(_fresh(manager.inputs), cycles=cycles, config=config)
    assert plan.cache is not None
    mcache = plan.cache
    running = {w.name: _Worker(w.name, run_plan(_fresh(w.inputs), config=config)) for w in workers}
    settings = config.multikueue
    checks = {
        name: ac
        for name, ac in manager.inputs.admission_checks.items()
        if ac.controller_name == CONTROLLER_NAME
    }
    sim = _Dispatcher(manager, running, settings)
    out: list[Dispatch] = []
    for key in _reserved_order(plan):
        cq = mcache.admitted[key]
        wl = mcache.workloads[key]
        if wl.admitted:
            continue  # every check Ready: it runs on the worker its check names
        mk = [c for c in mcache.checks_for(cq, wl.admission) if c in checks]
        if mk:
            out.append(sim.dispatch(wl, cq, mk[0], checks[mk[0]].parameters))
    for key, (cq_name, st) in sorted(plan.pending.items()):
        spec = mcache.cluster_queues.get(cq_name) if cq_name else None
        mk = [c for c in (spec.admission_checks if spec else {}) if c in checks]
        if mk:
            out.append(
                Dispatch(key, cq_name, mk[0], PENDING_ON_MANAGER, f"{st.reason}: {st.message}")
            )
    for w in running.values():
        w.result.pending = pending_report(w.cache)
    return ClustersResult(
        manager=plan,
        dispatcher=settings.dispatcher,
        workers={n: w.result for n, w in running.items()},
        paths={w.name: list(w.paths) for w in workers},
        dispatches=sorted(out, key=lambda d: d.workload),
    )


def _fresh(inputs: Inputs) -> Inputs:
    """The same objects, every workload shallow-copied: a run changes what it holds
    (``admission``, ``admitted``), never the inputs, so a what-if can run them twice."""
    return replace(inputs, workloads=[copy.copy(wl) for wl in inputs.workloads])


def _reserved_order(plan: PlanResult) -> list[str]:
    """Workloads holding quota on the manager, in the order they reserved it: those
    loaded holding it (by admission time, then key), then this run's, by cycle."""
    assert plan.cache is not None
    admitted = plan.cache.admitted
    ran: dict[str, None] = {}
    for d in plan.admitted:
        ran.pop(d.workload.key, None)
        ran[d.workload.key] = None
    loaded = sorted(
        (k for k in admitted if k not in ran),
        key=lambda k: (plan.cache.workloads[k].admission_time or 0.0, k),  # type: ignore[union-attr]
    )
    return loaded + [k for k in ran if k in admitted]


class _Dispatcher:
    """The dispatch of one workload after another over the running workers."""

    def __init__(
        self, manager: ManagerInputs, workers: dict[str, _Worker], settings: MultiKueueSettings
    ) -> None:
        self.manager = manager
        self.origin = settings.origin
        self.workers = workers
        self.name = settings.dispatcher
        self.step = settings.step_size
        self.waiting: dict[str, tuple[Dispatch, list[str]]] = {}  # copies queued, no winner

    def dispatch(
        self, wl: Workload, cq: str, check: str, params: tuple[str, str, str] | None
    ) -> Dispatch:
        d = Dispatch(wl.key, cq, check, NO_WORKER_ADMITS, "")
        config = params[2] if params and params[1] == "MultiKueueConfig" else None
        order = self.manager.configs.get(config or "")
        if order is None:
            d.reason = BAD_CONFIG
            d.message = (
                f"AdmissionCheck {check}: Cannot load the AdmissionChecks parameters: "
                f'multikueueconfigs.kueue.x-k8s.io "{config or ""}" not found'
            )
            return d
        usable = [w for w in order if w in self.workers and w in self.manager.clusters]
        if not usable:
            d.reason = NO_USABLE_WORKER
            d.message = f"no worker of MultiKueueConfig {config} is connected: " + ", ".join(
                f"{w}: {self._absent(w)}" for w in order
            )
            return d
        for name in usable:  # copies already on the workers (an earlier dispatch)
            if MULTIKUEUE_ORIGIN in getattr(
                self.workers[name].cache.workloads.get(wl.key), "labels", {}
            ):
                d.copies[name] = self.workers[name].outcome(wl.key)
        if d.copies:
            self.waiting[wl.key] = (d, order)
            self._settle()
            if d.worker is not None:
                d.dispatcher_reasons = (f"its copy on {d.worker} holds quota there already",)
                return d
        if self.name == ALL_AT_ONCE:
            rounds = [sorted(usable)]
            reasons: tuple[str, ...] = ("AllAtOnce: nominated every connected worker",)
        elif self.name == INCREMENTAL:
            rounds = [order[: self.step * (i + 1)] for i in range(-(-len(order) // self.step))]
            reasons = ()
        elif self.name == FITS:
            fits = [self.workers[w].fit(wl) if w in usable else unfit(w, "is not connected")
                    for w in order]  # fmt: skip
            names, reasons = choose(fits, usable)
            rounds = [names]
        else:
            d.reason = EXTERNAL_DISPATCHER
            d.message = (
                f"dispatcher {self.name} is external: a controller of yours writes "
                "status.nominatedClusterNames; plan does not run it"
            )
            return d
        d.dispatcher_reasons = reasons
        for i, names in enumerate(rounds):
            d.nominated = list(names)
            if self.name == INCREMENTAL:
                d.round = i + 1
                d.dispatcher_reasons = (
                    f"Incremental: round {i + 1} (a round lasts 5m0s): nominated "
                    + ", ".join(names),
                )
            self._send(wl, d, [n for n in names if n in usable], order)
            if d.worker is not None:
                break
        if d.worker is None:
            d.message = "; ".join(f"{w}: {self._copy_text(d, w, usable)}" for w in order)
        return d

    def _copy_text(self, d: Dispatch, worker: str, usable: list[str]) -> str:
        if worker in d.copies:
            return _why(d.copies[worker])
        return "not nominated" if worker in usable else self._absent(worker)

    def _absent(self, worker: str) -> str:
        if worker not in self.manager.clusters:
            return "no MultiKueueCluster of this name"
        return "is not connected (no --worker files given)"

    def _send(self, wl: Workload, d: Dispatch, names: list[str], order: list[str]) -> None:
        for name in names:
            if name in d.copies:
                continue
            w = self.workers[name]
            if wl.key in w.cache.workloads:
                d.copies[name] = {"outcome": CONFLICT,
                                  "message": f"the worker already has a Workload {wl.key}"}  # fmt: skip
                continue
            w.cache.add_workload(_copy(wl, self.origin))
            w.run()
            d.copies[name] = w.outcome(wl.key)
        self.waiting[wl.key] = (d, order)
        self._settle()

    def _settle(self) -> None:
        """Give every waiting workload admitted somewhere its worker (the first in its
        config's order) and remove its other copies, until nothing changes."""
        changed = True
        while changed:
            changed = False
            for key, (d, order) in list(self.waiting.items()):
                held = [
                    w for w in order if d.copies.get(w, {}).get("outcome") not in (None, CONFLICT)
                ]
                won = [w for w in held if key in self.workers[w].cache.admitted]
                if not won:
                    for w in d.copies:
                        if d.copies[w]["outcome"] != CONFLICT:
                            d.copies[w] = self.workers[w].outcome(key)
                    continue
                del self.waiting[key]
                changed = True
                d.worker, d.reason = won[0], ADMITTED
                d.message = f'The workload was admitted on "{won[0]}"'
                for w in d.copies:
                    if w != won[0] and d.copies[w]["outcome"] != CONFLICT:
                        self.workers[w].cache.finish(key)
                        self.workers[w].run()
                        d.copies[w] = {"outcome": "removed"}
                d.copies[won[0]] = self.workers[won[0]].outcome(key)


def _why(copy_outcome: dict[str, Any]) -> str:
    if copy_outcome["outcome"] == "pending":
        return f"{copy_outcome['reason']}: {copy_outcome['message']}"
    return copy_outcome.get("message") or copy_outcome["outcome"]
