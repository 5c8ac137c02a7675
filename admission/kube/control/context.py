"""What the controller's parts share: its options and the :class:`Context` every
reconciler is built with (the API, the engine's cache, the controller's signals).

The work items and their queue are in :mod:`.work`, the write primitive in
:mod:`.writer`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from admission.integrations.registry import ALL, Frameworks
from admission.kube.client.rest import KubeClient
from admission.kube.control.work import Item
from admission.kube.control.writer import Writer
from admission.kube.watch.informer import Informer
from queues.backoff import BackoffPolicy
from queues.model import LabelSelector
from queues.node_health import NodeFailurePolicy

if TYPE_CHECKING:
    from admission.engine.cache import Cache
    from admission.kube.control.metrics import Metrics
    from admission.kube.watch.cachesync import CacheSync

Obj = dict[str, Any]

# Context.informers holds one informer per resource plural, and two more of pods:
BOUND_PODS = "boundpods"  # every pod bound to a node (its node's usage, for TAS)
TAS_PODS = "taspods"  # the pods of started job kinds (waiting for their topology domain)


@dataclass(slots=True)
class PodsReadyOptions:
    """waitForPodsReady (Kueue defaults: enabled, 30 minutes, backoff 60 s·2ⁿ⁻¹ ≤ 3600 s)."""

    enabled: bool = True
    timeout: float = 1800.0
    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    backoff_limit: int | None = None
    requeue_by_creation: bool = False

    @property
    def backoff(self) -> BackoffPolicy:
        return BackoffPolicy(base=self.backoff_base, cap=self.backoff_max)


@dataclass(slots=True)
class ControllerOptions:
    manage_jobs_without_queue_name: bool = False
    managed_namespaces: LabelSelector | None = None  # None: every namespace but the exclusions
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    workers: int = 8
    pending_writers: int = 4
    # seconds a pending reason must hold before it is written: most heads that miss a
    # cycle are admitted within a second or two (docs/benchmarks.md, pending reasons)
    pending_delay: float = 2.0
    # ... and, while decisions are written and the low_share is spent, at most this long
    pending_max_hold: float = 300.0
    # a changed message with the same reason (only the numbers moved): at most this often
    # per workload; a changed reason is written once it held for pending_delay
    pending_refresh: float = 60.0
    # a cycle waits while more decisions wait for the client's budget than it can send
    # in this many seconds (qps × decision_lead): admissions hold quota from the moment
    # they are decided, so a cycle far ahead of the writes makes heads inadmissible and
    # preemptors evict for quota nobody is using yet (0: no back-pressure)
    decision_lead: float = 0.5
    schedule_batch: float = 0.01  # coalesce events this long before a scheduling pass
    cycle_in_thread: bool = True  # run schedule() in a worker thread (the loop stays live)
    status_interval: float = 1.0
    # while decisions are written, queue statuses (other than status.significant
    # changes) and pending reasons take at most this share of the requests decisions
    # make (ratelimit.ShareCredit)
    low_share: float = 0.04
    status_budget: int = 100  # queue status writes per interval at most (big clusters)
    tick: float = 0.5
    events: bool = True
    retry_base: float = 0.1  # first retry of a failed reconcile, doubled per failure
    retry_cap: float = 300.0  # ... up to this (controller-runtime: 5 ms .. 1000 s)
    pods_ready: PodsReadyOptions = field(default_factory=PodsReadyOptions)
    node_failures: NodeFailurePolicy = field(default_factory=NodeFailurePolicy)
    frameworks: Frameworks = ALL  # the integrations enabled (integrations.frameworks)


async def _ready() -> None:
    return None


class JobIndex:
    """(kind, object key) -> the keys of its Workloads: one, nearly always, kept as a
    plain string then (a set per pending job costs more than the rest of the entry)."""

    def __init__(self) -> None:
        self._index: dict[tuple[str, str], str | set[str]] = {}

    def add(self, job: tuple[str, str], wkey: str) -> None:
        have = self._index.get(job)
        if have is None or have == wkey:
            self._index[job] = wkey
        elif isinstance(have, str):
            self._index[job] = {have, wkey}
        else:
            have.add(wkey)

    def get(self, job: tuple[str, str]) -> set[str]:
        have = self._index.get(job)
        if have is None:
            return set()
        return {have} if isinstance(have, str) else set(have)

    def pop(self, job: tuple[str, str]) -> set[str]:
        have = self._index.pop(job, None)
        if have is None:
            return set()
        return {have} if isinstance(have, str) else have

    def __contains__(self, job: object) -> bool:
        return job in self._index


@dataclass(slots=True, kw_only=True)
class Context:
    """The shared pieces every controller part works with, in four groups."""

    # The API: requests, the watch caches (by resource plural, BOUND_PODS, TAS_PODS),
    # the writes (with read-your-writes) and Events
    client: KubeClient
    informers: dict[str, Informer]
    writer: Writer
    record_event: Callable[..., None] = lambda *a, **k: None

    # The engine's side: its cache, the sync that feeds it informer events, and
    # (integration's ``what``, job object key) -> the keys of that object's Workloads
    cache: Cache
    sync: CacheSync
    job_index: JobIndex = field(default_factory=JobIndex)

    # The controller's signals (set by the Controller; ``fence`` by leader election)
    wake: Callable[[], None]  # something changed: run a scheduling pass
    enqueue: Callable[[Item], None]  # reconcile this (while leading)
    cache_ready: Callable[[], Awaitable[None]] = field(default=lambda: _ready())
    # True while admissions or evictions are being written or wait for the client's
    # budget: queue statuses and pending reasons then take the back seat (they cost the
    # tokens and the CPU the decisions need)
    deciding: Callable[[], bool] = lambda: False
    # True while this replica may write decisions (the Lease is held and fresh): checked
    # before every admission and preemption write, so a leader whose renewals hang stops
    # at its renew deadline, before a successor can take over
    fence: Callable[[], bool] = lambda: True

    # Configuration and reporting
    options: ControllerOptions
    clock: Callable[[], float]
    metrics: Metrics
