"""The write primitive: the one way the controller changes Workloads and job objects.

:meth:`Writer.update_status` computes a Workload's new status from the object it last
saw, sends it as a JSON merge patch pinned to that object's resourceVersion (optimistic
concurrency), and on ``409 Conflict`` re-reads and recomputes: the compute function
decides whether the write still makes sense, it is never blindly retried. Every
successful write is remembered (:mod:`admission.kube.watch.read_your_writes`) so a
reconcile that runs before the informer delivers our own change does not act on the
stale copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.client.rest import MERGE_PATCH, KubeClient, Obj, Resource
from admission.kube.watch.informer import Informer
from admission.kube.watch.read_your_writes import LastWrites, newer, read_back
from admission.kube.watch.slim import PackedStore

if TYPE_CHECKING:
    from admission.kube.watch.cachesync import CacheSync

CONFLICT_WAIT = 1.0  # seconds a 409 waits for the watch before reading the object


class Abandon(Exception):
    """The compute function decided the write no longer applies."""


class Writer:
    """RV-pinned status writes with re-read on conflict, and read-your-writes."""

    def __init__(
        self,
        client: KubeClient,
        *,
        workloads: Informer,
        objects: dict[str, Informer],
        sync: CacheSync,
    ) -> None:
        self.client = client
        self.workloads = workloads
        self.sync = sync
        self.latest: LastWrites[tuple[str, str]] = LastWrites()  # (plural, key)
        # Workloads and the job objects the reconciler writes (one informer per kind)
        self._stores = {WORKLOADS.plural: workloads, **objects}

    # -- read-your-writes ---------------------------------------------------------------------

    def current(self, res: Resource, key: str) -> Obj | None:
        """The newer of the informer's copy and our last write (Workloads and job objects)."""
        informer = self._stores.get(res.plural)
        if informer is None:
            raise ValueError(f"Writer keeps no {res.plural}: only workloads and job objects")
        return self.latest.read((res.plural, key), informer.get(key))

    def workload(self, key: str) -> Obj | None:
        return self.current(WORKLOADS, key)

    def stamp(self, res: Resource, key: str) -> tuple[Any, Any]:
        """What :meth:`current` reads ``key`` from, without reading it: the informer's
        stored record and our pending write. Both are replaced, never changed, so a
        stamp whose parts are the same objects (``is``) as an earlier one's means the
        object is unchanged since; a scan that runs every tick compares stamps instead
        of unpacking every object."""
        informer = self._stores.get(res.plural)
        if informer is None:
            raise ValueError(f"Writer keeps no {res.plural}: only workloads and job objects")
        store = informer.store
        stored = store.record(key) if isinstance(store, PackedStore) else store.get(key)
        return stored, self.latest.mine((res.plural, key))

    def remember(self, res: Resource, key: str, obj: Obj) -> None:
        informer = self._stores.get(res.plural)
        slim = getattr(informer, "slim", None)  # kept as the informer keeps it (.slim)
        self.latest.remember((res.plural, key), slim(obj) if slim is not None else obj)
        if res is WORKLOADS:
            self.sync.own_writes.written(key, obj)

    def forget_object(self, res: Resource, key: str) -> None:
        self.latest.forget((res.plural, key))

    # -- writes ---------------------------------------------------------------------------------

    async def reread(self, key: str) -> Obj | None:
        ns, name = kobj.split_key(key)
        try:
            obj = await self.client.get(WORKLOADS, name, namespace=ns)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        obj.setdefault("apiVersion", WORKLOADS.api_version)
        obj.setdefault("kind", WORKLOADS.kind)
        return newer(obj, self.workload(key))

    async def read_back(
        self, key: str, landed: Callable[[Obj], bool], *, attempts: int
    ) -> bool | None:
        """Whether a Workload write that failed ambiguously landed: ``landed`` of the
        Workload read back (:func:`admission.kube.watch.read_your_writes.read_back`)."""
        return await read_back(
            lambda: self.reread(key),
            landed,
            lambda obj: self.remember(WORKLOADS, key, obj),
            attempts=attempts,
        )

    async def _newer_than(self, key: str, stale: Obj) -> Obj | None:
        """The Workload after a 409 on ``stale``: the server holds a newer version, which
        our watch delivers moments later at no cost; only when it does not within
        ``CONFLICT_WAIT`` is it read (a GET spends a token of the rate limit)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFLICT_WAIT
        while loop.time() < deadline:
            await asyncio.sleep(0.01)
            current = self.workload(key)
            if current is None:
                break  # deleted, or never delivered: ask the server
            if kobj.rv(current) != kobj.rv(stale):
                return current
        return await self.reread(key)

    async def update_status(
        self, key: str, compute: Callable[[Obj], Obj | None], *, attempts: int = 3
    ) -> Obj | None:
        """Write ``compute(obj)`` as the Workload's status (merge patch pinned to obj's RV).

        ``compute`` runs once this write's turn at the client's rate limit has come
        (``KubeClient.turn``), on the freshest copy we have then: a write that became
        unnecessary while it waited (the victim finished, the workload was admitted)
        is never sent, and its token goes back. Returns the written object, or the
        current one when ``compute`` returned None, or None when the Workload is gone.
        ``compute`` may raise :class:`Abandon`. Raises :class:`ApiError` on other
        failures (409 after ``attempts``).
        """
        ns, name = kobj.split_key(key)
        reread: Obj | None = None
        for attempt in range(attempts):
            async with self.client.turn():
                obj = self.workload(key) if reread is None else newer(reread, self.workload(key))
                if obj is None:
                    return None
                status = compute(obj)
                if status is None:
                    return obj
                body = {"metadata": {"resourceVersion": kobj.rv(obj)}, "status": status}
                try:
                    new = await self.client.patch(
                        WORKLOADS,
                        name,
                        body,
                        namespace=ns,
                        subresource="status",
                        content_type=MERGE_PATCH,
                    )
                except ApiError as err:
                    if err.not_found:
                        return None
                    if not (err.conflict and attempt + 1 < attempts):
                        raise
                    new = None
            if new is None:  # 409: our copy was stale; get the current one, decide again
                reread = await self._newer_than(key, obj)
                if reread is None:
                    return None
                continue
            new.setdefault("apiVersion", WORKLOADS.api_version)
            new.setdefault("kind", WORKLOADS.kind)
            self.remember(WORKLOADS, key, new)
            return new
        raise AssertionError("unreachable")

    async def patch_object(
        self, res: Resource, key: str, body: Obj, *, subresource: str | None = None
    ) -> Obj | None:
        """Merge-patch a job object; the written object (remembered), None when gone."""
        ns, name = kobj.split_key(key)
        try:
            new = await self.client.patch(
                res, name, body, namespace=ns, subresource=subresource, content_type=MERGE_PATCH
            )
        except ApiError as err:
            if err.not_found:
                return None
            raise
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        self.remember(res, key, new)
        return new
