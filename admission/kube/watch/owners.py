"""Reading the owners up an object's controller-owner chain (the walk of
:mod:`admission.integrations.ownership`), for the reconciler and the webhooks.

An owner of an enabled integration is read from its informer's store when there
(objects that name a queue, or every object with ``manageJobsWithoutQueueName``);
otherwise — an owner that names no queue, a disabled integration's kind, a
ReplicaSet — it is read from the API server (one GET per hop, only for objects that
have such an owner). An external framework's object (``externalFrameworks``) is not
read, as its resource is not known here: it stands for itself, managed (Kueue reads
its metadata; so an external owner that names no queue is taken as managed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.ownership import REPLICA_SET, OwnerRef, stand_in
from admission.integrations.registry import BY_KIND, Frameworks
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import REPLICA_SETS
from admission.kube.client.rest import KubeClient, Resource
from admission.kube.watch.informer import Informer


class OwnerReader:
    """``OwnerRef`` → the owner object (None: it does not exist); raises ApiError on a
    failed read."""

    def __init__(
        self, *, client: KubeClient, informers: Mapping[str, Informer], frameworks: Frameworks
    ) -> None:
        self.client = client
        self.informers = informers
        self.frameworks = frameworks

    def resource(self, ref: OwnerRef) -> Resource | None:
        integ = BY_KIND.get((ref.api_version, ref.kind))
        if integ is not None:
            return integ.resource
        return REPLICA_SETS if (ref.api_version, ref.kind) == REPLICA_SET else None

    async def __call__(self, ref: OwnerRef) -> Mapping[str, Any] | None:
        return await self.read(ref, cached=True)

    async def fresh(self, ref: OwnerRef) -> Mapping[str, Any] | None:
        """The owner as the API server has it now: when a cached owner disowns its
        child, the cache may only lag a write (a Job just started)."""
        return await self.read(ref, cached=False)

    async def read(self, ref: OwnerRef, *, cached: bool) -> Mapping[str, Any] | None:
        res = self.resource(ref)
        if res is None:
            if (ref.api_version, ref.kind) in self.frameworks.external:
                return stand_in(ref)
            return None
        inf = self.informers.get(res.plural) if cached else None
        if inf is not None:
            have = inf.store.get(f"{ref.namespace}/{ref.name}")
            if have is not None and (have.get("metadata") or {}).get("uid") == ref.uid:
                return have
        try:
            return await self.client.get(res, ref.name, namespace=ref.namespace)
        except ApiError as err:
            if err.not_found:
                return None
            raise
