"""Informer events → the engine's ``Cache``: the service's in-memory truth.

Every replica runs this (followers need a current model for their webhooks); only the
leader also writes. The rules that keep the cache equal to what the API says, without
ever charging a workload twice or dropping a quota it holds:

* Queue objects (flavors, ClusterQueues, Cohorts, LocalQueues, namespaces, priority
  classes) are parsed once per change (``queues.api.parse.parse_model``) into model dicts;
  ``flush_objects`` hands them to ``Cache.update_objects`` in one batch.
* A Workload with ``QuotaReserved=True`` and ``status.admission`` is charged (Kueue's
  admitted workloads, rebuilt from the API on start — restart safety); without them it
  is queued; ``Finished`` or deleted releases its quota once (``Cache.finish``) — the
  leader calls this with its own ``Finished`` write, so release does not wait for the
  informer, yet the API never shows a quota free that a Workload still holds.
* Workloads this process is writing are *in flight* (an assumed admission whose status
  write is pending): their events are ignored until the write settles. After a write
  succeeds, events older than the written resourceVersion are ignored too
  (:class:`.read_your_writes.StaleEvents`), so a stale copy can never undo it.
* A workload in requeue backoff (``status.requeueState.requeueAt`` in the future) is
  kept out of the queues until then.
* While a scheduling cycle runs in a worker thread (:meth:`CacheSync.pause`), every
  change is queued and replayed, in order, when it returns: the cycle sees a frozen
  cache, the event loop keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from admission.engine.cache import Cache
from admission.kube import objects as kobj
from admission.kube.watch.packing import ModelInterner
from admission.kube.watch.read_your_writes import StaleEvents
from admission.kube.watch.slim import without_digests
from queues import model as m
from queues.api.conditions import condition, is_true
from queues.api.parse import InputError, parse_model
from queues.api.progress import ProgressError, without_progress, workload_progress

log = logging.getLogger("quartermaster.kube.cache")

Obj = dict[str, Any]
QUEUE_KINDS = (
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "Namespace",
    "WorkloadPriorityClass",
    "PriorityClass",
    "Topology",
    "AdmissionCheck",
)
ARRIVALS_KEPT = 64  # per ClusterQueue: far more than arrive while an admission waits
_BY_GENERATION = {"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor"}


class CacheSync:
    """Applies informer events to a ``Cache`` (see the module docstring for the rules)."""

    def __init__(
        self,
        cache: Cache,
        *,
        clock: Callable[[], float],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.cache = cache
        self.clock = clock
        self.on_change = on_change
        self.flavors: dict[str, m.ResourceFlavor] = {}
        self.cluster_queues: dict[str, m.ClusterQueue] = {}
        self.cohorts: dict[str, m.Cohort] = {}
        self.local_queues: dict[str, m.LocalQueue] = {}
        self.namespaces: dict[str, m.Namespace] = {}
        self.workload_priority_classes: dict[str, m.PriorityClass] = {}
        self.priority_classes: dict[str, m.PriorityClass] = {}
        self.topologies: dict[str, m.Topology] = {}
        self.admission_checks: dict[str, m.AdmissionCheck] = {}
        self._sigs: dict[tuple[str, str], Any] = {}
        self.invalid: dict[str, str] = {}  # "Kind key" -> error, for logs and status
        self.objects_dirty = False
        self.inflight: set[str] = set()
        # The newest event of each in-flight workload, applied when its write settles
        self._held: dict[str, Obj | None] = {}
        self.own_writes = StaleEvents()  # fed by the writer (control.context.Writer)
        self.wl_sigs: dict[str, tuple] = {}
        self.admitted_gen: dict[str, int] = {}  # charged workload -> generation last parsed
        self.backoff: dict[str, float] = {}
        self.stale_events = 0
        self.share = ModelInterner()  # equal podSets and names stored once
        self._sigs_seen: dict[tuple, tuple] = {}
        # Pending workloads as they arrive (or change), per ClusterQueue, newest last,
        # each with its number in ``arrival_seq``: what a cycle started at a given
        # number had not seen (an admission waiting for its write looks for a newcomer
        # that would preempt it: reconcilers.admit)
        self.arrival_seq = 0
        self.arrivals: dict[str, deque[tuple[int, m.Workload]]] = {}
        # While a scheduling cycle runs off the event loop, cache changes wait here.
        self.paused = False
        self._deferred: list[Callable[[], object]] = []

    # -- cycles off the event loop ----------------------------------------------------------

    def pause(self) -> None:
        """A cycle is about to run in a worker thread: queue cache changes until resume."""
        self.paused = True

    def resume(self) -> None:
        """Replay what arrived during the cycle, in order."""
        self.paused = False
        while self._deferred:
            batch, self._deferred = self._deferred, []
            for fn in batch:
                fn()

    def apply(self, fn: Callable[[], object]) -> None:
        """Run a cache change now, or right after the running cycle."""
        if self.paused:
            self._deferred.append(fn)
        else:
            fn()

    # -- queue objects ----------------------------------------------------------------------

    def _table(self, kind: str) -> dict[str, Any]:
        tables: dict[str, dict[str, Any]] = {
            "ResourceFlavor": self.flavors,
            "ClusterQueue": self.cluster_queues,
            "Cohort": self.cohorts,
            "LocalQueue": self.local_queues,
            "Namespace": self.namespaces,
            "WorkloadPriorityClass": self.workload_priority_classes,
            "PriorityClass": self.priority_classes,
            "Topology": self.topologies,
            "AdmissionCheck": self.admission_checks,
        }
        return tables[kind]

    def queue_object(self, kind: str, key: str, obj: Obj | None) -> None:
        """A queue object was added, changed or deleted."""
        table = self._table(kind)
        if obj is None:
            self._sigs.pop((kind, key), None)
            self.invalid.pop(f"{kind} {key}", None)
            if table.pop(key, None) is not None:
                self._changed(kind)
            return
        sig = (kobj.generation(obj), kobj.deleting(obj)) if kind in _BY_GENERATION else kobj.rv(obj)
        if self._sigs.get((kind, key)) == sig:
            return  # a status-only change (our own status writes)
        self._sigs[(kind, key)] = sig
        try:
            model = parse_model(obj)
        except InputError as err:
            self.invalid[f"{kind} {key}"] = str(err)
            log.error("ignoring invalid %s %s: %s", kind, key, err)
            if table.pop(key, None) is not None:
                self._changed(kind)
            return
        self.invalid.pop(f"{kind} {key}", None)
        if kind == "ClusterQueue" and kobj.deleting(obj):
            # Terminating: admits nothing new; its admitted workloads keep their quota
            model = dataclasses.replace(model, stop_policy="Hold")  # type: ignore[type-var, arg-type]
        table[key] = model
        self._changed(kind)

    def _changed(self, kind: str) -> None:
        if kind not in ("WorkloadPriorityClass", "PriorityClass"):
            self.objects_dirty = True
            self.on_change()

    def flush_objects(self) -> bool:
        """Apply pending queue-object changes to the cache; True when something changed."""
        if not self.objects_dirty or self.paused:
            return False
        self.objects_dirty = False
        self.cache.set_topologies(self.topologies)
        self.cache.update_objects(
            flavors=self.flavors,
            cluster_queues=self.cluster_queues,
            cohorts=self.cohorts,
            local_queues=self.local_queues,
            namespaces=self.namespaces,
            admission_checks=self.admission_checks,
        )
        return True

    # -- workloads --------------------------------------------------------------------------

    def settle(self, key: str) -> None:
        """The admission write of ``key`` landed or failed: it is no longer in flight,
        and the newest event that arrived meanwhile is applied now (an older version
        than what we wrote is ignored as usual, see :attr:`own_writes`)."""
        self.inflight.discard(key)
        if key in self._held:
            self.workload(key, self._held.pop(key))

    def workload(self, key: str, obj: Obj | None) -> None:
        """Bring the cache in line with the latest version of one Workload."""
        if self.paused:
            self._deferred.append(lambda: self.workload(key, obj))
            return
        if key in self.inflight:
            # Its admission is being written: the cache holds the assumption until the
            # write settles. Keep the newest event for then (:meth:`settle`): a finish
            # can come before a slow write's response, and dropping it would leave the
            # finished workload's quota charged for good.
            self._held[key] = obj
            return
        if self.own_writes.stale(key, obj):
            self.stale_events += 1
            return
        cache = self.cache
        if obj is None or kobj.deleting(obj) or kobj.is_finished(obj):
            self._drop(key)
            return
        holds = kobj.has_quota(obj)
        if (
            holds
            and key in cache.admitted
            and self.admitted_gen.get(key, kobj.generation(obj)) == kobj.generation(obj)
            and _reclaimable(obj) == _reclaimable(cache.workloads.get(key))
        ):  # already charged and its spec unchanged (status writes): nothing to parse
            self.backoff.pop(key, None)
            if is_true(obj, kobj.EVICTED):
                cache.mark_evicting(key)
            held = cache.workloads.get(key)
            if held is not None and (held.admission_checks or not held.admitted):
                # what its AdmissionChecks' controllers wrote (list, why, status counts)
                held.admission_checks = kobj.check_states(obj)
                held.admitted = is_true(obj, kobj.ADMITTED)
            self.wl_sigs.pop(key, None)  # "unchanged" shortcuts apply to pending ones only
            return
        sig = self._sig(obj)
        if (
            not holds
            and key not in cache.admitted
            and key in cache.workloads
            and self.wl_sigs.get(key) == sig
            and key not in self.backoff
        ):
            return  # unchanged pending workload (e.g. our own condition write)
        try:
            workload_progress(obj)
        except ProgressError:  # a bad checkpoint never drops the workload (kube.notices)
            obj = without_progress(obj)
        try:
            wl = self.share(parse_model(without_digests(obj)))
        except InputError as err:
            self.invalid[f"Workload {key}"] = str(err)
            log.error("ignoring invalid Workload %s: %s", key, err)
            self._drop(key)
            return
        self.invalid.pop(f"Workload {key}", None)
        assert isinstance(wl, m.Workload)
        if wl.admission is not None:
            # first sight, or its spec changed (e.g. spec.priority): the cache replaces
            # the charge, so preemption sees the new priority (Kueue's cache update)
            self.backoff.pop(key, None)
            self.admitted_gen[key] = kobj.generation(obj)
            cache.remove_pending(key)
            cache.add_workload(wl)
            if is_true(obj, kobj.EVICTED):
                cache.mark_evicting(key)
            self.wl_sigs.pop(key, None)
            self.on_change()
            return
        self.admitted_gen.pop(key, None)
        if key in cache.admitted:
            cache.finish(key)  # its admission was cleared: release, then queue again
        if len(self._sigs_seen) > 10_000:
            self._sigs_seen.clear()
        self.wl_sigs[key] = self._sigs_seen.setdefault(sig, sig)  # most are alike
        at = kobj.requeue_at(obj)
        if at is not None and at > self.clock() and wl.active:
            cache.park(key)
            self.backoff[key] = at
            return
        self.backoff.pop(key, None)
        cache.remove_pending(key)
        cache.add_workload(wl)
        self._arrived(wl)
        self.on_change()

    def _arrived(self, wl: m.Workload) -> None:
        self.arrival_seq += 1
        lq = self.cache.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is None or not wl.active:
            return
        kept = self.arrivals.get(lq.cluster_queue)
        if kept is None:
            kept = self.arrivals[lq.cluster_queue] = deque(maxlen=ARRIVALS_KEPT)
        kept.append((self.arrival_seq, wl))

    def _drop(self, key: str) -> None:
        cache = self.cache
        self.wl_sigs.pop(key, None)
        self.admitted_gen.pop(key, None)
        self.backoff.pop(key, None)
        if key in cache.workloads or key in cache.admitted:
            cache.finish(key)
            self.on_change()

    @staticmethod
    def _sig(obj: Obj) -> tuple:
        ev = condition(obj, kobj.EVICTED) or {}
        return (
            kobj.generation(obj),
            ev.get("status"),
            ev.get("lastTransitionTime"),
            ((obj.get("status") or {}).get("requeueState") or {}).get("requeueAt"),
            _reclaimable(obj),
        )

    def due_backoffs(self, now: float) -> list[str]:
        """Workloads whose requeue backoff has ended (to be re-synced)."""
        due = [k for k, at in self.backoff.items() if at <= now]
        for k in due:
            self.wl_sigs.pop(k, None)
        return due


def _reclaimable(wl: Obj | m.Workload | None) -> tuple[tuple[str, int], ...]:
    """``status.reclaimablePods`` (of an API object or a model): a change re-charges an
    admitted workload — the pods that finished no longer hold quota."""
    if isinstance(wl, m.Workload):
        return tuple(sorted(wl.reclaimable_pods.items()))
    items = ((wl or {}).get("status") or {}).get("reclaimablePods") or []
    return tuple(sorted(
        (i["name"], i["count"]) for i in items
        if isinstance(i, dict) and isinstance(i.get("name"), str)
        and isinstance(i.get("count"), int) and not isinstance(i.get("count"), bool)
        and i["count"] > 0
    ))  # fmt: skip


class CacheView:
    """The webhooks' ``ModelView`` over the live model (read-only)."""

    def __init__(self, sync: CacheSync) -> None:
        self._sync = sync

    @property
    def cluster_queues(self) -> Mapping[str, m.ClusterQueue]:
        return self._sync.cluster_queues

    @property
    def cohorts(self) -> Mapping[str, m.Cohort]:
        return self._sync.cohorts

    @property
    def flavors(self) -> Mapping[str, m.ResourceFlavor]:
        return self._sync.flavors

    @property
    def local_queues(self) -> Mapping[str, m.LocalQueue]:
        return self._sync.local_queues

    @property
    def workloads(self) -> Mapping[str, m.Workload]:
        return self._sync.cache.workloads

    @property
    def admission_checks(self) -> Mapping[str, m.AdmissionCheck]:
        """The AdmissionChecks (webhooks.handlers.managed_by: MultiKueue's queues)."""
        return self._sync.admission_checks

    @property
    def dra(self) -> Any:
        """The cache's DRA accounting (webhooks.handlers.dra_warnings)."""
        return self._sync.cache.dra

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self._sync.local_queues

    def workload_priority_class_exists(self, name: str) -> bool:
        return name in self._sync.workload_priority_classes

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        ns = self._sync.namespaces.get(namespace)
        labels = dict(ns.labels) if ns is not None else {}
        labels["kubernetes.io/metadata.name"] = namespace
        return labels
