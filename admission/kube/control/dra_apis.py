"""The DRA objects quota reads, watched when the cluster serves ``resource.k8s.io/v1``.

A pod's ResourceClaimTemplate and the template's DeviceClass decide how many devices
its Workload is charged (queues.dra); a DeviceClass's ``extendedResourceName`` decides
which extended resources DRA serves; ResourceSlices carry the devices that a request's
CEL selectors must find in the cluster and the counters that counter sources charge. Each kind has its informer; every event updates the cache's catalog and
counts the DRA devices of the workloads without quota again (``Cache.dra_changed``), so
a workload waiting for a template that did not exist yet is admitted once it does.

ResourceClaims are not watched: a pod that names one (a claim shared by pods) is
inadmissible whatever the claim says (Kueue's rule), so its content is never read.

DRA is GA since Kubernetes 1.34, but a cluster may not serve it (an older server, the
API disabled). Like an integration whose CRD is missing (:mod:`.integrationgate`), an
API that is not served is logged once, naming it, and does not hold back readiness; it
is asked again every :data:`RETRY` seconds and watched from the moment it is served.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from admission.kube.client.errors import ApiError
from admission.kube.client.resources import (
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
)
from admission.kube.client.rest import KubeClient, Obj, Resource
from admission.kube.watch.cachesync import CacheSync
from admission.kube.watch.informer import DELETED, Informer, strip_managed_fields

log = logging.getLogger("quartermaster.kube.dra")

RETRY = 60.0
"""Seconds between two checks of whether an API that was not served is served now."""

OnObject = Callable[[str, str, Obj | None], None]
"""(kind, key, object or None when deleted)."""


class DraApis:
    """The informers of the DRA kinds, each started once its API is served."""

    def __init__(
        self,
        client: KubeClient,
        *,
        slices: bool,
        on_object: OnObject | None = None,
        rng: random.Random | None = None,
        retry: float = RETRY,
    ) -> None:
        self.client = client
        self.on_object: OnObject = on_object or (lambda _kind, _key, _obj: None)
        self.retry = retry
        rng = rng or random.Random()
        kinds = [DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES] + ([RESOURCE_SLICES] if slices else [])
        self.informers: dict[str, Informer] = {
            res.plural: Informer(
                client, res, rng=random.Random(rng.random()), transform=strip_managed_fields
            )
            for res in kinds
        }
        for inf in self.informers.values():
            inf.handler = self._handler(inf.resource.kind)
        self.not_served: set[str] = set()
        self.synced = asyncio.Event()
        self._settled: set[str] = set()  # synced, or found not served

    def _handler(self, kind: str) -> Callable[[str, str, Obj | None, Obj | None], None]:
        def handle(event: str, key: str, new: Obj | None, _old: Obj | None) -> None:
            self.on_object(kind, key, None if event == DELETED else new)

        return handle

    def _settle(self, plural: str) -> None:
        self._settled.add(plural)
        if self._settled >= set(self.informers):
            self.synced.set()

    async def run(self) -> None:
        await asyncio.gather(*(self._run(inf) for inf in self.informers.values()))

    async def _run(self, inf: Informer) -> None:
        res = inf.resource
        while not await self._served(res):
            if res.plural not in self.not_served:
                self.not_served.add(res.plural)
                log.warning(
                    "%s/%s/%s is not served: DRA claims of this kind cannot be counted "
                    "(workloads using them wait); watching it once it is served",
                    res.group, res.version, res.plural,
                )  # fmt: skip
            self._settle(res.plural)
            await asyncio.sleep(self.retry)
        if res.plural in self.not_served:
            self.not_served.discard(res.plural)
            log.info("%s/%s/%s is served now: watching it", res.group, res.version, res.plural)
        watching = asyncio.create_task(inf.run(), name=f"informer-{res.plural}")
        try:
            await inf.synced.wait()
            self._settle(res.plural)
            await watching
        finally:
            watching.cancel()

    async def _served(self, res: Resource) -> bool:
        """Whether the API server serves ``res`` (a one-item list; 404: not served).
        Any other error counts as served: the informer retries and logs it."""
        try:
            await self.client.list(res, limit=1)
        except ApiError as err:
            if err.status == 404:
                return False
        return True


def feed(sync: CacheSync) -> OnObject:
    """The catalog update of one DRA object, applied between scheduling cycles: the
    cache's workloads without quota are counted again and the scheduler woken."""

    def on_object(kind: str, key: str, obj: Obj | None) -> None:
        cache = sync.cache

        def change() -> None:
            if cache.dra is not None:
                cache.dra.catalog.set(kind, key, obj)
                cache.dra_changed()

        sync.apply(change)
        sync.on_change()

    return on_object
