"""One worker for all the Workloads of one object: a LeaderWorkerSet's groups (Kueue's
``MultiKueueMultiWorkloadAdapter`` and the start of ``nominateAndSynchronizeWorkers``,
pkg/controller/admissionchecks/multikueue/workload.go).

A LeaderWorkerSet makes one Workload per group and a single copy of itself on a
worker, so its groups must all run on the same one. Before the dispatcher nominates
workers for a group's Workload (:class:`ComponentNomination` wraps it):

1. the set is read; until a Workload exists for each of its ``spec.replicas`` groups
   (named as the pod webhook names them, owned by the set), nothing is nominated;
2. when another group's Workload already runs on a worker (``status.clusterName``),
   this one is nominated there and nowhere else (two different workers is an error:
   nothing is nominated);
3. else only the primary — the group of the lowest index — goes to the dispatcher; the
   others wait for it to be admitted on a worker.

A waiting Workload looks again every :data:`WAIT` seconds, and its check's message says
what it waits for. A set whose ``spec.replicas`` cannot be read gets its check's message
naming the set and the field, and nothing is dispatched. Any other Workload goes to the
dispatcher directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from admission.integrations.framework.fields import IntegrationError, meta_of
from admission.kube.client.rest import Obj
from admission.kube.multikueue.dispatch import Group
from admission.kube.multikueue.dispatchers import Nomination, Patch
from admission.kube.multikueue.serving import ServingAdapter, owner_uid, serving_owner

WAIT = 2.0
"""Seconds before a waiting group's Workload looks again."""

Nominate = Callable[[Group], Awaitable[Nomination]]
ReadOwner = Callable[[str, str], Awaitable[Obj | None]]  # (plural, namespace/name)
ReadWorkload = Callable[[str], Obj | None]  # namespace/name -> the manager's Workload


class ComponentNomination:
    """The dispatcher's nomination, with the rules of objects of several Workloads."""

    def __init__(
        self,
        nominate: Nominate,
        *,
        read_owner: ReadOwner,
        workload: ReadWorkload,
        patch: Patch,
    ) -> None:
        self.inner = nominate
        self.read_owner = read_owner
        self.workload = workload
        self.patch = patch

    async def __call__(self, group: Group) -> Nomination:
        found = serving_owner(group.local)
        if found is None or not found[0].multi_workload:
            return await self.inner(group)
        adapter, name = found
        uid = owner_uid(group.local, adapter)
        if not uid:
            return await self.inner(group)  # no owner to share a worker with (Kueue)
        what = f"{adapter.kind} {group.namespace}/{name}"
        owner = await self.read_owner(adapter.resource.plural, f"{group.namespace}/{name}")
        if owner is None or meta_of(owner).get("uid") != uid:
            return None, WAIT, (f"waiting for its {what}",)
        try:
            names = adapter.workload_names(owner)
        except IntegrationError as err:
            return None, None, (str(err),)
        members = self._members(group, adapter, uid, names)
        if len(members) < len(names):
            return None, WAIT, (
                f"waiting for the Workloads of all {len(names)} groups of {what}: "
                f"{len(members)} exist",
            )  # fmt: skip
        workers = sorted({c for n, wl in members.items() if n != group.name
                          and (c := _cluster_name(wl))})  # fmt: skip
        if len(workers) > 1:
            return None, WAIT, (
                f"the Workloads of {what} run on different workers: {', '.join(workers)}",
            )  # fmt: skip
        if workers:
            return await self._follow(group, workers[0], what)
        index = names.index(group.name) if group.name in names else -1
        if index != 0:
            return None, WAIT, (
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
            return None, WAIT, (
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
