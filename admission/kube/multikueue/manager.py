"""MultiKueue's loop on the manager: it starts when the first AdmissionCheck with
``spec.controllerName: kueue.x-k8s.io/multikueue`` appears (a cluster without one pays
nothing), then keeps

* the workers (:class:`~.clusters.Clusters`, from an informer of MultiKueueClusters,
  and their Secrets read again every ``resync`` seconds) and their ``Active``
  conditions;
* each MultiKueue AdmissionCheck's ``Active`` condition, as Kueue's ``ACReconciler``:
  ``True`` (``Active``, or ``SomeActiveClusters`` naming the others) while one of its
  MultiKueueConfig's workers is active, ``False`` (``NoUsableClusters``, or
  ``BadConfig`` when the config is missing);
* every Workload that has an entry for such a check, reconciled by
  :class:`~.dispatch.Dispatch` on its own events, its copies' events on the workers,
  its job's events on the manager and on the worker (informers of the copies this
  manager made there), the events of the other groups of its LeaderWorkerSet while it
  waits for them (:mod:`.components`), a worker's loss or return, and every ``resync``
  seconds as a safety net; one whose set (a StatefulSet or LeaderWorkerSet, not watched
  here) cannot be read is looked at again on a backoff instead (:mod:`.components`); up
  to ``CONCURRENCY`` Workloads at once, each started as soon as a slot frees and in the
  order they were marked (never two reconciles of one Workload at once, and none waits
  for another's round trips to the workers);
* the garbage collection every ``gcInterval``: copies on a worker, created by this
  manager (its ``origin``), whose Workload no longer exists on the manager are
  removed with their jobs.

It acts only while the service leads (``leading()``); the informers run regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import random
from collections.abc import Callable
from typing import Any

from admission.config.multikueue import MultiKueueSettings
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import (
    ADMISSION_CHECKS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    WORKLOADS,
)
from admission.kube.client.rest import KubeClient, Obj
from admission.kube.control.context import Context
from admission.kube.multikueue.adapters import ADAPTERS
from admission.kube.multikueue.clusters import Clusters
from admission.kube.multikueue.components import Backoff, ComponentNomination
from admission.kube.multikueue.dispatch import Dispatch, Group
from admission.kube.multikueue.dispatchers import Dispatchers
from admission.kube.multikueue.pods import PodGroupAdapter, adapter_for, group_of, owner_name
from admission.kube.multikueue.pods import owner_kind as kind_of
from admission.kube.multikueue.remote import RemoteCluster
from admission.kube.multikueue.serving import SERVING, set_of
from admission.kube.reconcilers.admission_checks import admitted, admitting_conditions
from admission.kube.watch.grouped_pods import GroupedPods
from admission.kube.watch.informer import DELETED, Informer
from queues.api.conditions import condition
from queues.api.labels import MULTIKUEUE_CONTROLLER

log = logging.getLogger("quartermaster.kube.multikueue")

CONCURRENCY = 16
_JOB_KINDS = {a.resource.plural: a.kind.lower() for a in ADAPTERS.values()}
_UNWATCHED = {a.resource.plural: a for a in SERVING.values()}


class MultiKueue:
    def __init__(
        self,
        ctx: Context,
        settings: MultiKueueSettings,
        *,
        namespace: str,
        leading: Callable[[], bool],
        resync: float = 30.0,
        probe_interval: float = 5.0,
    ) -> None:
        self.ctx = ctx
        self.client: KubeClient = ctx.client
        self.settings = settings
        self.leading = leading
        self.resync = resync
        self.probe_interval = probe_interval
        self.clock = ctx.clock
        self.clusters = Clusters(
            self.client, namespace=namespace, make_remote=self._make_remote, clock=self.clock
        )
        rng = random.Random(7)
        self.cluster_informer = Informer(
            self.client, MULTIKUEUE_CLUSTERS, rng=rng, handler=self._on_cluster
        )
        self.config_informer = Informer(
            self.client, MULTIKUEUE_CONFIGS, rng=rng, handler=self._on_config
        )
        self.dispatchers = Dispatchers(settings, self._patch, self.clock)
        # the Workloads whose set cannot be read (:mod:`.components`), looked at on backoff
        self.retry = Backoff()
        self.components = ComponentNomination(
            self.dispatchers.nominate,
            workload=ctx.writer.workload,
            patch=self._patch,
            retry=self.retry,
        )
        self.dispatch = Dispatch(
            self.client,
            origin=settings.origin,
            worker_lost_timeout=settings.worker_lost_timeout,
            nominate=self.components,
            record_event=lambda *a: ctx.record_event(*a),
            clock=self.clock,
            full=self._full_workload,
            full_job=self._full_job,
            written=lambda key, obj: ctx.writer.remember(WORKLOADS, key, obj),
            group_pods=self._group_pods,
            admit_with=functools.partial(admitting_conditions, ctx),
            admitted=functools.partial(admitted, ctx),
        )
        self.pod_groups = GroupedPods("pods")  # group key -> the manager's pods
        self.reasons: dict[str, tuple[str, ...]] = {}  # Workload key -> the last nomination's
        self._known: set[str] = set()  # keys of the Workloads with a MultiKueue check
        # the known groups of each set of several Workloads ((kind, namespace/name) of a
        # LeaderWorkerSet -> keys), and the set of each such key: a worker's copy of the
        # set wakes them without naming one Workload per replica
        self._groups: dict[tuple[str, str], set[str]] = {}
        self._set_of: dict[str, tuple[str, str]] = {}
        self._dirty: dict[str, None] = {}  # keys to reconcile, oldest first
        self._running: dict[str, asyncio.Task[None]] = {}  # key -> its reconcile
        self._dirty_clusters: set[str] = set()
        self._later: dict[str, float] = {}  # key -> when to look again
        self._heap: list[tuple[float, str]] = []  # (when, key), stale entries skipped
        self._wake = asyncio.Event()
        self._started = False
        self._tasks: list[asyncio.Task[Any]] = []

    # -- events -----------------------------------------------------------------------------

    def _checks(self) -> dict[str, Obj]:
        inf = self.ctx.informers.get(ADMISSION_CHECKS.plural)
        return dict(inf.store) if inf is not None else {}

    def our_checks(self) -> dict[str, Obj]:
        """The AdmissionChecks of MultiKueue, by name."""
        return {
            k: ac
            for k, ac in self._checks().items()
            if (ac.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER
        }

    def _our_entry(self, wl: Obj | None) -> str:
        ours = self.our_checks()
        for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
            if entry.get("name") in ours:
                return str(entry["name"])
        return ""

    def observe(self, plural: str, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        """The controller's informer events (a :attr:`Controller.observers` entry)."""
        if plural == ADMISSION_CHECKS.plural:
            if not self._started and self.our_checks():
                self._start()
            self._mark_all()
        elif plural == "workloads" and self._started:
            if event == DELETED or key in self._known or self._our_entry(new):
                self._mark(key)
            for sibling in self.components.waiting_siblings(key, new, old):
                self._mark(sibling)  # a group of the same set waits for this one
        elif plural == "pods" and self._started:  # a group's pods (the Workload's key)
            gkey = group_of(new or old)
            if gkey:
                self.pod_groups.on_event(event, key, gkey)
                if gkey in self._known:
                    self._mark(gkey)
        elif self._started and plural in _JOB_KINDS:  # e.g. the manager's job started
            for wkey in self.ctx.job_index.get((_JOB_KINDS[plural], key)):
                if wkey in self._known:
                    self._mark(wkey)

    def _mark(self, key: str) -> None:
        self._dirty[key] = None
        self._wake.set()

    def _on_remote_set(self, kind: str, key: str) -> None:
        """A worker's copy of the set ``key`` changed: its groups this manager dispatched
        are looked at again (the copy runs them all)."""
        for wkey in self._groups.get((kind, key), ()):
            self._mark(wkey)

    def _know(self, key: str, wl: Obj) -> None:
        """The Workload ``key`` has a MultiKueue check (and is indexed by its set)."""
        found = set_of(wl)
        if found != self._set_of.get(key):
            self._unknow(key)
            if found is not None:
                self._set_of[key] = found
                self._groups.setdefault(found, set()).add(key)
        self._known.add(key)

    def _unknow(self, key: str) -> None:
        self._known.discard(key)
        found = self._set_of.pop(key, None)
        if found is not None:
            keys = self._groups[found]
            keys.discard(key)
            if not keys:
                del self._groups[found]

    def _on_remote(self, key: str) -> None:
        """A worker's copy changed: its manager Workload ``key`` is looked at again when it
        is one of ours (a copy's labels are the worker's to write: keys this manager never
        dispatched are left to the garbage collection)."""
        if key in self._known:
            self._mark(key)

    def _mark_all(self) -> None:
        self._dirty.update(dict.fromkeys(self._known))
        self._dirty_clusters.add("")  # "": the checks' conditions
        self._wake.set()

    def _on_cluster(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        self._dirty_clusters.add(key)
        self._wake.set()

    def _on_config(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        self._mark_all()

    def _make_remote(self, name: str, client: KubeClient) -> RemoteCluster:
        def on_state() -> None:
            self._dirty_clusters.add(name)
            self._mark_all()

        return RemoteCluster(
            name,
            client,
            origin=self.settings.origin,
            on_change=self._on_remote,
            on_set=self._on_remote_set,
            on_state=on_state,
            probe_interval=self.probe_interval,
            clock=self.clock,
        )

    # -- running ----------------------------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        for key in self.ctx.informers["workloads"].store:
            self._mark(key)
        pods = self.ctx.informers.get("pods")
        for key, pod in (pods.store if pods is not None else {}).items():
            if gkey := group_of(pod):
                self.pod_groups.on_event("ADDED", key, gkey)
        self._tasks = [
            asyncio.create_task(self.cluster_informer.run(), name="mk-clusters"),
            asyncio.create_task(self.config_informer.run(), name="mk-configs"),
            asyncio.create_task(self._loop(), name="mk-loop"),
            asyncio.create_task(self._periodic(), name="mk-periodic"),
        ]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.clusters.stop()

    async def _periodic(self) -> None:
        last_gc = self.clock()
        while True:
            await asyncio.sleep(min(self.resync, self.settings.gc_interval or self.resync))
            self._dirty_clusters |= set(self.cluster_informer.store) | {""}
            gc = self.settings.gc_interval
            if gc and self.clock() - last_gc >= gc and self.leading():
                last_gc = self.clock()
                with contextlib.suppress(ApiError, OSError, TimeoutError):
                    await self.collect_garbage()
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            timeout = None
            if self._heap:
                timeout = max(0.0, self._heap[0][0] - self.clock())
            if not self._startable() and not self._dirty_clusters:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
            if not self.leading():
                await asyncio.sleep(0.2)
                continue
            self._mark_due()
            names, self._dirty_clusters = self._dirty_clusters, set()
            for name in sorted(names):
                await self._guard(self._reconcile_cluster(name), f"cluster {name}")
            self._start_reconciles()

    def _mark_due(self) -> None:
        """Mark the Workloads whose time to look again (:meth:`_look_again`) has come."""
        now = self.clock()
        while self._heap and self._heap[0][0] <= now:
            at, key = heapq.heappop(self._heap)
            if self._later.get(key) == at:
                del self._later[key]
                self._dirty[key] = None

    def _startable(self) -> bool:
        """Whether a marked Workload can start now (a free slot, not running already)."""
        if len(self._running) >= CONCURRENCY:
            return False
        return any(key not in self._running for key in self._dirty)

    def _start_reconciles(self) -> None:
        for key in list(self._dirty):
            if len(self._running) >= CONCURRENCY:
                return
            if key in self._running:
                continue  # marked again while it runs: once it ends
            del self._dirty[key]
            task = asyncio.create_task(self._reconcile_guarded(key))
            self._running[key] = task
            task.add_done_callback(functools.partial(self._finished, key))

    async def _reconcile_guarded(self, key: str) -> None:
        await self._guard(self._reconcile(key), key)

    def _finished(self, key: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(key, None)
        self._wake.set()

    def _look_again(self, key: str, after: float) -> None:
        at = self.clock() + after
        self._later[key] = at
        heapq.heappush(self._heap, (at, key))

    async def _guard(self, coro: Any, what: str) -> None:
        try:
            await coro
        except (ApiError, OSError, TimeoutError) as err:
            log.info("multikueue: %s: %s; trying again", what, err)
            if not what.startswith("cluster "):
                self._look_again(what, 1.0)
        except Exception:  # a bug must not stop the others' reconciles
            log.exception("multikueue: %s failed; trying again", what)
            if not what.startswith("cluster "):
                self._look_again(what, 1.0)

    # -- clusters and checks ----------------------------------------------------------------

    async def _reconcile_cluster(self, name: str) -> None:
        if name:
            await self.clusters.reconcile(name, self.cluster_informer.store.get(name))
            return
        for ac_name, ac in self.our_checks().items():
            await self._check_condition(ac_name, ac)

    async def _check_condition(self, name: str, ac: Obj) -> None:
        params = (ac.get("spec") or {}).get("parameters") or {}
        config = self.config_informer.store.get(str(params.get("name") or ""))
        status, reason, message = True, "Active", "The admission check is active"
        if config is None or params.get("kind") != "MultiKueueConfig":
            status, reason = False, "BadConfig"
            message = (
                "Cannot load the AdmissionChecks parameters: "
                f'multikueueconfigs.kueue.x-k8s.io "{params.get("name", "")}" not found'
            )
        else:
            workers = list((config.get("spec") or {}).get("clusters") or [])
            missing = [w for w in workers if w not in self.cluster_informer.store]
            inactive = [w for w in workers if w not in missing and not self.clusters.active(w)]
            if missing or inactive:
                parts = []
                if missing:
                    parts.append(f"Missing clusters: [{' '.join(missing)}]")
                if inactive:
                    parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
                message = ", ".join(parts)
                if len(missing) + len(inactive) < len(workers):
                    reason = "SomeActiveClusters"
                else:
                    status, reason = False, "NoUsableClusters"
        old = condition(ac, "Active") or {}
        if (old.get("status"), old.get("reason"), old.get("message")) == (
            "True" if status else "False",
            reason,
            message,
        ):
            return
        conds = kobj.set_condition(
            list(((ac.get("status") or {}).get("conditions")) or []),
            type_="Active",
            status=status,
            reason=reason,
            message=message,
            now=self.clock(),
            observed_generation=kobj.generation(ac),
        )
        await self.client.patch(
            ADMISSION_CHECKS, name, {"status": {"conditions": conds}}, subresource="status"
        )

    # -- workloads --------------------------------------------------------------------------

    async def _full_workload(self, key: str) -> Obj | None:
        return await self.ctx.informers["workloads"].full(key)

    async def _full_job(self, plural: str, key: str) -> Obj | None:
        """The manager's whole job; a kind not watched here (a StatefulSet, a
        LeaderWorkerSet: read up their pods' owners) is read from the API."""
        inf = self.ctx.informers.get(plural)
        if inf is not None:
            return await inf.full(key)
        adapter = _UNWATCHED.get(plural)
        if adapter is None:
            return None
        ns, _, name = key.partition("/")
        try:
            return await self.client.get(adapter.resource, name, namespace=ns)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    def _group_pods(self, key: str) -> list[Obj]:
        return self.pod_groups.pods(self.ctx.informers, key)

    async def _patch(self, group: Group, status: Obj) -> Obj | None:
        return await self.dispatch.patch_status(group, status)

    def _group(self, key: str, wl: Obj, check: str) -> Group | None:
        ac = self.our_checks().get(check) or {}
        params = (ac.get("spec") or {}).get("parameters") or {}
        config = self.config_informer.store.get(str(params.get("name") or ""))
        if config is None:
            return None
        workers = [str(w) for w in (config.get("spec") or {}).get("clusters") or []]
        entry = next(
            e for e in (wl.get("status") or {}).get("admissionChecks") or []
            if e.get("name") == check
        )  # fmt: skip
        group = Group(key=key, local=wl, check=check, state=entry, workers=workers, remotes={})
        for w in workers:
            remote = self.clusters.remote(w)
            if remote is not None and remote.connected:
                group.remotes[w] = remote
                copy_ = remote.workload(key)
                if copy_ is not None:
                    group.copies[w] = copy_
            else:
                group.unavailable.append(w)
                if remote is not None and remote.lost_since is not None:
                    group.lost[w] = remote.lost_since
        return group

    async def _reconcile(self, key: str) -> None:
        wl = self.ctx.writer.workload(key)
        check = self._our_entry(wl)
        if wl is None or not check:
            if key in self._known or wl is None:
                await self._remove_everywhere(key)
            self._unknow(key)
            self.dispatchers.forget(key)
            self.components.forget(key)
            self.reasons.pop(key, None)
            return
        self._know(key, wl)
        group = self._group(key, wl, check)
        if group is None:
            return
        failures = self.retry.failures(key)
        owner = owner_name(wl)
        adapter = adapter_for(wl)
        job = None
        if isinstance(adapter, PodGroupAdapter) and not owner:  # a group: its first pod
            job = next(iter(self._group_pods(key)), None)
        elif adapter is not None and owner:
            inf = self.ctx.informers.get(adapter.resource.plural)
            if inf is not None:  # slim: the whole job is read only to copy it
                job = inf.get(f"{group.namespace}/{owner}")
            else:  # not watched: read once, and passed along (:attr:`Group.job`)
                try:
                    job = await self._full_job(
                        adapter.resource.plural, f"{group.namespace}/{owner}"
                    )
                except (ApiError, OSError, TimeoutError) as err:
                    await self._unreadable(group, f"{adapter.kind} {group.namespace}/{owner}", err)
                    return
                group.job = job
        outcome = await self.dispatch.reconcile(group, job, adapter)
        await self._explain(group, outcome.reasons)
        if self.retry.failures(key) == failures:
            self.retry.reset(key)  # its set was read (and understood, :mod:`.components`)
        after = outcome.after
        if (group.state.get("state") == "Ready" or group.copies) and not kobj.is_finished(wl):
            net = self.resync * 10  # events drive it; this is a safety net
            after = min(after or net, net)
        if after is not None:
            self._look_again(key, after)

    async def _explain(self, group: Group, reasons: tuple[str, ...]) -> None:
        """An event and the check's message (while Pending) when the reasons changed."""
        if reasons and reasons != self.reasons.get(group.key):
            message = "; ".join(reasons)
            self.ctx.record_event(group.local, "Normal", "MultiKueue", message)
            await self.dispatch.explain(group, message)
            self.reasons[group.key] = reasons

    async def _unreadable(self, group: Group, what: str, err: BaseException) -> None:
        """The GET of the Workload's set failed: nothing is dispatched, the check's message
        names the set, and the Workload is looked at again on backoff (the sets are not
        watched: no event would bring it back). A failing write of the message (the API
        may be failing as a whole) is tried again then, not sooner."""
        after = self.retry.failed(group.key)
        log.info("multikueue: %s: cannot read its %s: %s; again in %.0fs", group.key, what,
                 err, after)  # fmt: skip
        self._look_again(group.key, after)
        reason = f"cannot read its {what}: {str(err) or type(err).__name__}"
        with contextlib.suppress(ApiError, OSError, TimeoutError):
            await self._explain(group, (reason,))

    async def _remove_everywhere(self, key: str) -> None:
        for remote in list(self.clusters.remotes.values()):
            copy_ = remote.workload(key)
            if copy_ is not None:
                await self.dispatch.remove_remote(remote, key, kind_of(copy_))

    async def collect_garbage(self) -> None:
        """Remove the copies whose manager Workload is gone (Kueue's ``runGC``)."""
        local = self.ctx.informers["workloads"]
        if not local.synced.is_set():
            return
        for remote in list(self.clusters.remotes.values()):
            if not remote.connected:
                continue
            for key in list(remote.workloads.store):
                if local.get(key) is None:
                    log.info("multikueue: collecting %s's orphan %s", remote.name, key)
                    copy_ = remote.workloads.store.get(key)
                    await self.dispatch.remove_remote(remote, key, kind_of(copy_))
