"""One worker cluster as the manager sees it: a client made from its kubeconfig, an
informer of the Workloads this manager created there (label
``kueue.x-k8s.io/multikueue-origin: <origin>``), and whether it answers.

A Workload copy this manager created counts as there (:meth:`RemoteCluster.workload`)
from the create's answer until the informer brings it, and one it deleted as gone until
the informer shows its deletion, each at most ``CREATED_TTL`` seconds: a reconcile that
the other workers' events start meanwhile does not create or delete it again.

A worker that stops answering (its probe fails or times out) is *lost*: ``connected``
turns False and ``lost_since`` keeps when, so that the dispatch can wait
``workerLostTimeout`` before it gives the workloads admitted there to another worker,
as Kueue's ``connectionState`` does. The informer keeps retrying meanwhile; the first
probe answered makes the worker connected again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from admission.integrations.framework.addressing import Resource
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.client.rest import KubeClient, Obj
from admission.kube.multikueue.serving import copied_set, workload_keys
from admission.kube.watch.informer import DELETED, Informer
from queues.api.labels import MULTIKUEUE_ORIGIN

log = logging.getLogger("quartermaster.kube.multikueue")

CREATED_TTL = 30.0


class RemoteCluster:
    """A connected (or lost) worker; ``on_change(key)`` hears its Workloads' events (and
    its job copies', by the manager's Workloads they run), ``on_set(kind, key)`` the
    events of its copies of a set of several Workloads (a LeaderWorkerSet: by the
    manager's set) and ``on_state()`` a change of ``connected``."""

    def __init__(
        self,
        name: str,
        client: KubeClient,
        *,
        origin: str,
        on_change: Callable[[str], None],
        on_state: Callable[[], None],
        on_set: Callable[[str, str], None] = lambda _kind, _key: None,
        probe_interval: float = 5.0,
        probe_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.client = client
        self.origin = origin
        self.clock = clock
        self.on_state = on_state
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.connected = False
        self.lost_since: float | None = None
        self.last_error = ""
        self.workloads = Informer(
            client,
            WORKLOADS,
            label_selector=f"{MULTIKUEUE_ORIGIN}={origin}",
            rng=random.Random(name),
            backoff_cap=5.0,
            handler=self._on_workload,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.on_change = on_change
        self.on_set = on_set
        self.jobs: dict[str, Informer] = {}  # plural -> the job copies of that kind
        self._created: dict[str, tuple[float, Obj]] = {}  # key -> (when, copy) not seen yet
        self._deleted: dict[str, float] = {}  # key -> when, until the informer says more

    def _on_workload(self, event: str, key: str, new: Obj | None, _old: Obj | None) -> None:
        self._created.pop(key, None)
        if event == DELETED or (new is not None and kobj.deleting(new)):
            self._deleted.pop(key, None)  # the deletion is seen (an older event is not)
        self.on_change(key)

    def created(self, key: str, copy_: Obj) -> None:
        """This manager created the Workload copy ``key`` here (``copy_``: as answered)."""
        self._deleted.pop(key, None)
        if key not in self.workloads.store:
            self._created[key] = (self.clock(), copy_)

    def forget(self, key: str) -> None:
        """The copy ``key`` was deleted here."""
        self._created.pop(key, None)
        self._deleted[key] = self.clock()

    def job_informer(self, resource: Resource) -> Informer:
        """The informer of this manager's job copies of one kind (started on first use:
        a worker need not serve every kind); an event names the Workloads it runs on
        (Kueue's ``WorkloadKeysFor``), or the manager's set it is a copy of."""
        inf = self.jobs.get(resource.plural)
        if inf is None:

            def handler(_event: str, _key: str, new: Obj | None, old: Obj | None) -> None:
                obj = new or old or {}
                for wl_key in workload_keys(resource.kind, obj):
                    self.on_change(wl_key)
                if (set_key := copied_set(resource.kind, obj)) is not None:
                    self.on_set(resource.kind, set_key)

            inf = Informer(
                self.client,
                resource,
                label_selector=f"{MULTIKUEUE_ORIGIN}={self.origin}",
                rng=random.Random(f"{self.name}/{resource.plural}"),
                backoff_cap=5.0,
                handler=handler,
            )
            self.jobs[resource.plural] = inf
            self._tasks.append(
                asyncio.create_task(inf.run(), name=f"mk-{self.name}-{resource.plural}")
            )
        return inf

    def job(self, resource: Resource, key: str) -> tuple[bool, Obj | None]:
        """(known, the job copy ``key``): known is False until its informer listed."""
        inf = self.job_informer(resource)
        if not inf.synced.is_set():
            return False, None
        return True, inf.store.get(key)

    async def owns(self, resource: Resource, namespace: str, name: str) -> bool:
        """Whether the job ``namespace/name`` here is a copy this manager made (label
        ``multikueue-origin: <origin>``; Kueue's ``ValidateRemoteObjectOwnership``): a
        worker's own object of the same name is never deleted. The informer of the kind
        answers when it lists the copy, else one read does (which a delete of a copy
        that is not there would cost too)."""
        inf = self.jobs.get(resource.plural)
        if inf is not None and inf.synced.is_set() and f"{namespace}/{name}" in inf.store:
            return True
        try:
            obj = await self.client.get(resource, name, namespace=namespace)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MULTIKUEUE_ORIGIN) == self.origin:
            return True
        log.info("worker %s: %s %s/%s is not this manager's copy: left alone",
                 self.name, resource.kind, namespace, name)  # fmt: skip
        return False

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.workloads.run(), name=f"mk-{self.name}-workloads"),
            asyncio.create_task(self._probe_loop(), name=f"mk-{self.name}-probe"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.client.close()

    def workload(self, key: str) -> Obj | None:
        """The remote copy of the manager's Workload ``key`` (None: none, or not known)."""
        if not self.connected:
            return None
        deleted = self._deleted.get(key)
        if deleted is not None:
            if self.clock() - deleted <= CREATED_TTL:
                return None
            del self._deleted[key]
        copy_ = self.workloads.store.get(key)
        if copy_ is not None:
            return copy_
        created = self._created.get(key)
        if created is None:
            return None
        if self.clock() - created[0] > CREATED_TTL:
            del self._created[key]
            return None
        return created[1]

    async def probe(self) -> bool:
        """One request to the worker; updates ``connected``."""
        try:
            await asyncio.wait_for(
                self.client.list(
                    WORKLOADS, label_selector=f"{MULTIKUEUE_ORIGIN}={self.origin}", limit=1
                ),
                timeout=self.probe_timeout,
            )
            ok = self.workloads.synced.is_set()
            self.last_error = "" if ok else "the worker's Workloads are not listed yet"
        except (ApiError, TimeoutError, OSError) as err:
            ok = False
            self.last_error = _describe(err)
        self._set(ok)
        return ok

    def _set(self, ok: bool) -> None:
        if ok == self.connected and (ok or self.lost_since is not None):
            return
        was = self.connected
        self.connected = ok
        if ok:
            self.lost_since = None
        elif self.lost_since is None:
            self.lost_since = self.clock()
        if was != ok:
            log.info("worker %s %s", self.name, "connected" if ok else "lost")
        self.on_state()

    async def _probe_loop(self) -> None:
        while True:
            await self.workloads.synced.wait()
            await self.probe()
            await asyncio.sleep(self.probe_interval)


def _describe(err: BaseException) -> str:
    """What went wrong, without anything of the request (no credentials)."""
    if isinstance(err, ApiError):
        return f"the worker answered {err.status or 'nothing'}: {err.reason}"
    if isinstance(err, TimeoutError):
        return "the worker did not answer in time"
    return f"the worker is unreachable: {type(err).__name__}"
