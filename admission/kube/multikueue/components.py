"""One worker for all the Workloads of one object: a LeaderWorkerSet's groups (Kueue's
``MultiKueueMultiWorkloadAdapter`` and the start of ``nominateAndSynchronizeWorkers``,
pkg/controller/admissionchecks/multikueue/workload.go).

A LeaderWorkerSet makes one Workload per group and a single copy of itself on a
worker, so its groups must all run on the same one. Before the dispatcher nominates
workers for a group's Workload (:class:`ComponentNomination` wraps it):

1. the set, as the reconcile read it (:attr:`.dispatch.Group.job`: the manager does not
   watch the kind, and reads it once per reconcile); until a Workload exists for each of
   its ``spec.replicas`` groups (named as the pod webhook names them, owned by the set),
   nothing is nominated;
2. when another group's Workload already runs on a worker (``status.clusterName``),
   this one is nominated there and nowhere else (two different workers is an error:
   nothing is nominated);
3. else only the primary — the group of the lowest index — goes to the dispatcher; the
   others wait for it to be admitted on a worker.

A waiting Workload is reconciled again on the events it waits for, as Kueue's
``enqueueComponentWorkloads`` re-queues the other groups: an event of another Workload
owned by the same set that brings news (the Workload created, its ``status.clusterName``
set or changed) wakes the groups of that set that wait
(:meth:`ComponentNomination.waiting_siblings`); looking again after :data:`WAIT` seconds
is only a safety net. Its check's message says what it waits for. Only the keys of the
groups waiting now are kept, each dropped when its group is nominated or its Workload is
gone (:meth:`ComponentNomination.forget`). Any other Workload goes to the dispatcher
directly.

A set that cannot be read — its GET fails (the manager's reconcile: a 403, a 5xx, a
timeout), or its ``spec.replicas`` is malformed — gets its check's message naming the set
(and the field), nothing is dispatched, and the Workload is looked at again with a
per-Workload exponential backoff (:class:`Backoff`: :data:`RETRY` seconds, doubled after
each consecutive failure, at most :data:`WAIT`), as controller-runtime's rate limiter
requeues a failed item. No event would bring it back sooner: the manager does not watch
the sets (their kinds are read up the pods' owners), so an edit that makes the set valid
again, or the API answering again, produces nothing the manager hears. The backoff is
reset by a reconcile that reads the set, and dropped with the Workload.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from admission.integrations.framework.fields import IntegrationError, meta_of
from admission.kube.client.rest import Obj
from admission.kube.multikueue.dispatch import Group
from admission.kube.multikueue.dispatchers import Nomination, Patch
from admission.kube.multikueue.serving import ServingAdapter, owner_uid, serving_owner

WAIT = 300.0
"""Seconds before a waiting group's Workload looks again without an event (a safety net)."""

RETRY = 2.0
"""Seconds before the first look again at a Workload whose set cannot be read."""

Nominate = Callable[[Group], Awaitable[Nomination]]
ReadWorkload = Callable[[str], Obj | None]  # namespace/name -> the manager's Workload


class Backoff:
    """Per-Workload exponential backoff for a set that cannot be read: ``start`` seconds
    after the first failure, doubled after each consecutive one, never more than ``cap``.
    Only the Workloads failing now are kept: the manager resets one whose reconcile read
    its set (:meth:`reset`), and forgets one whose Workload is gone."""

    def __init__(self, start: float = RETRY, cap: float = WAIT) -> None:
        self.start = start
        self.cap = cap
        self._failures: dict[str, int] = {}  # Workload key -> consecutive failures

    def failed(self, key: str) -> float:
        """One more consecutive failure of ``key``: the seconds before it looks again."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return min(self.cap, self.start * 2.0 ** min(n, 64))

    def failures(self, key: str) -> int:
        """How many consecutive failures ``key`` has had (0: none, or reset)."""
        return self._failures.get(key, 0)

    def reset(self, key: str) -> None:
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._failures)


class ComponentNomination:
    """The dispatcher's nomination, with the rules of objects of several Workloads."""

    def __init__(
        self,
        nominate: Nominate,
        *,
        workload: ReadWorkload,
        patch: Patch,
        retry: Backoff | None = None,
    ) -> None:
        self.inner = nominate
        self.workload = workload
        self.patch = patch
        self.wait = WAIT
        self.retry = retry if retry is not None else Backoff()  # shared with the manager
        self._waiting: dict[str, set[str]] = {}  # owner UID -> keys of its waiting groups
        self._owner_of: dict[str, str] = {}  # a waiting group's key -> its owner's UID

    def waiting_siblings(self, key: str, new: Obj | None, old: Obj | None) -> set[str]:
        """The reconciles a Workload event wakes: the other waiting groups of the set that
        owns it, when it appeared (or its owner did) or its ``status.clusterName`` moved."""
        if not self._waiting or new is None:
            return set()
        found = serving_owner(new)
        if found is None or not found[0].multi_workload:
            return set()
        uid = owner_uid(new, found[0])
        keys = self._waiting.get(uid)
        if not keys or (
            old is not None
            and owner_uid(old, found[0]) == uid
            and _cluster_name(old) == _cluster_name(new)
        ):
            return set()
        return keys - {key}

    def forget(self, key: str) -> None:
        """The Workload ``key`` is gone or no longer MultiKueue's: it waits no more."""
        self.retry.reset(key)
        uid = self._owner_of.pop(key, None)
        if uid is not None:
            self._drop(uid, key)

    def _add(self, uid: str, key: str) -> None:
        if (was := self._owner_of.get(key)) is not None and was != uid:
            self._drop(was, key)  # a set made again under the same name
        self._owner_of[key] = uid
        self._waiting.setdefault(uid, set()).add(key)

    def _drop(self, uid: str, key: str) -> None:
        keys = self._waiting.get(uid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._waiting[uid]
        if self._owner_of.get(key) == uid:
            del self._owner_of[key]

    async def __call__(self, group: Group) -> Nomination:
        found = serving_owner(group.local)
        if found is None or not found[0].multi_workload:
            return await self.inner(group)
        adapter, name = found
        uid = owner_uid(group.local, adapter)
        if not uid:
            return await self.inner(group)  # no owner to share a worker with (Kueue)
        # registered before its siblings are read: an event from here on wakes it again
        self._add(uid, group.key)
        nomination = await self._nominate(group, adapter, name, uid)
        if nomination[0] is not None or nomination[1] is None:
            self._drop(uid, group.key)  # nominated, or nothing to wait for
        return nomination

    async def _nominate(
        self, group: Group, adapter: ServingAdapter, name: str, uid: str
    ) -> Nomination:
        what = f"{adapter.kind} {group.namespace}/{name}"
        owner = group.job  # the reconcile read it (the kind is not watched)
        m = meta_of(owner)
        if owner is None or (m.get("name"), m.get("uid")) != (name, uid):
            return None, self.wait, (f"waiting for its {what}",)
        try:
            names = adapter.workload_names(owner)
        except IntegrationError as err:  # no event follows its edit: looked at on backoff
            return None, self.retry.failed(group.key), (str(err),)
        members = self._members(group, adapter, uid, names)
        if len(members) < len(names):
            return None, self.wait, (
                f"waiting for the Workloads of all {len(names)} groups of {what}: "
                f"{len(members)} exist",
            )  # fmt: skip
        workers = sorted({c for n, wl in members.items() if n != group.name
                          and (c := _cluster_name(wl))})  # fmt: skip
        if len(workers) > 1:
            return None, self.wait, (
                f"the Workloads of {what} run on different workers: {', '.join(workers)}",
            )  # fmt: skip
        if workers:
            return await self._follow(group, workers[0], what)
        index = names.index(group.name) if group.name in names else -1
        if index != 0:
            return None, self.wait, (
                f"waiting for the first group of {what} to be admitted on a worker",
            )  # fmt: skip
        return await self.inner(group)

    def _members(
        self, group: Group, adapter: ServingAdapter, uid: str, names: list[str]
    ) -> dict[str, Obj]:
        """The existing Workloads of the owner's groups (owned by it), by name."""
        out: dict[str, Obj] = {}
        for n in names:
            wl = group.local if n == group.name else self.workload(f"{group.namespace}/{n}")
            if wl is not None and owner_uid(wl, adapter) == uid:
                out[n] = wl
        return out

    async def _follow(self, group: Group, worker: str, what: str) -> Nomination:
        """Kueue's ``syncToSingleCluster``: the worker of the other groups, only."""
        if worker not in group.remotes:
            return None, self.wait, (
                f'the worker "{worker}" that runs the other groups of {what} is not connected',
            )  # fmt: skip
        current = list((group.local.get("status") or {}).get("nominatedClusterNames") or [])
        if (
            current != [worker]
            and await self.patch(group, {"nominatedClusterNames": [worker]}) is None
        ):
            return None, None, ()
        return [worker], None, ()


def _cluster_name(wl: Obj) -> str:
    return str((wl.get("status") or {}).get("clusterName") or "")
