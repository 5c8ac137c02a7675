"""The demo's moving parts: a stand-in for the Job controller, and a trickle of Jobs.

The API-server double has no kube-controller-manager, so nothing would ever run an
admitted Job: quota would stay taken and the dashboard would stand still. The
:class:`JobRunner` plays the Job controller for every Job in the cluster, through the
API: a Job the service unsuspends starts (``startTime``), runs for a while and
completes in the controller's order of status writes; a started Job suspended again
(preempted) has its ``startTime`` reset, as the controller does. The
:class:`JobStream` submits a Job now and then to the example organisation's queues
(``manifests/examples/``), and stops submitting while enough of its Jobs wait.
Finished Jobs of the stream are deleted after a while (their Workloads go with them),
so a demo left running keeps a bounded number of objects.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from admission.apiserver_double.jobcontroller import finish_patches, start_patch, suspend_patch
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import JOBS
from admission.kube.client.rest import KubeClient
from queues.api.conditions import is_true
from queues.api.labels import PRIORITY_CLASS, QUEUE_NAME

log = logging.getLogger("quartermaster.demo")
Obj = dict[str, Any]
SUBMIT_EVERY = 4.0  # seconds between new Jobs (off the webhook server's 5 s idle timeout)
RUN_SECONDS = (20.0, 60.0)  # how long an admitted Job runs, drawn uniformly
STREAM_LABEL = "demo.quartermaster.dev/stream"
"""Marks the Jobs :class:`JobStream` submitted (only those are deleted when finished)."""


@dataclass(frozen=True, slots=True)
class JobShape:
    """One kind of Job the stream submits: where, at what priority, how big."""

    namespace: str
    queue: str
    priority_class: str
    prefix: str
    pods: int
    requests: tuple[tuple[str, str], ...]

    def job(self) -> Obj:
        requests = dict(self.requests)
        limits = {r: q for r, q in self.requests if r.startswith("nvidia.com/")}
        container: Obj = {
            "name": "main",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "resources": {"requests": requests, **({"limits": limits} if limits else {})},
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "generateName": self.prefix,
                "namespace": self.namespace,
                "labels": {
                    QUEUE_NAME: self.queue,
                    PRIORITY_CLASS: self.priority_class,
                    STREAM_LABEL: "true",
                },
            },
            "spec": {
                "suspend": True,
                "parallelism": self.pods,
                "completions": self.pods,
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            },
        }


GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
STREAM: tuple[JobShape, ...] = (
    JobShape("llm-research", "team-queue", "research", "llm-finetune-", 2,
             (("cpu", "32"), ("memory", "256Gi"), (GPU, "8"))),
    JobShape("vision-research", "team-queue", "development", "vision-debug-", 1,
             (("cpu", "8"), ("memory", "64Gi"), (GPU, "2"))),
    JobShape("inference-prod", "team-queue", "production-high", "embed-batch-", 2,
             (("cpu", "4"), ("memory", "16Gi"), (MIG, "2"))),
    JobShape("llm-research", "default", "research", "tokenize-", 2,
             (("cpu", "16"), ("memory", "64Gi"))),
    JobShape("training-prod", "team-queue", "production", "recsys-train-", 1,
             (("cpu", "64"), ("memory", "512Gi"), (GPU, "8"))),
    JobShape("vision-research", "team-queue", "research", "vision-train-", 2,
             (("cpu", "32"), ("memory", "256Gi"), (GPU, "4"))),
)  # fmt: skip


def _suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def _finished(job: Obj) -> bool:
    return is_true(job, "Complete") or is_true(job, "Failed")


def _streamed(job: Obj) -> bool:
    return (job.get("metadata") or {}).get("labels", {}).get(STREAM_LABEL) == "true"


async def _all_jobs(client: KubeClient) -> list[Obj]:
    jobs: list[Obj] = []
    token: str | None = None
    while True:
        page = await client.list(JOBS, continue_token=token)
        jobs += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return jobs


class JobRunner:
    """The Job controller's part for every Job: start, run ``run_seconds``, complete."""

    def __init__(
        self,
        client: KubeClient,
        *,
        rng: random.Random,
        run_seconds: tuple[float, float] = RUN_SECONDS,
        keep_finished_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._rng = rng
        self._run_seconds = run_seconds
        self._keep_finished = keep_finished_seconds
        self._clock = clock
        self._ends: dict[str, float] = {}  # uid -> when the running Job completes
        self._finished_at: dict[str, float] = {}  # uid -> when it was seen finished

    async def step(self) -> None:
        """Look at every Job once and write what the controller would."""
        now = self._clock()
        seen = set()
        for job in await _all_jobs(self._client):
            uid = job["metadata"]["uid"]
            seen.add(uid)
            try:
                await self._advance(job, uid, now)
            except ApiError as err:
                if err.status == 0 or err.status >= 500:
                    raise
                # changed meanwhile (a preemption, a deletion): looked at again next step
                log.debug("Job %s: %s", job["metadata"]["name"], err)
        for table in (self._ends, self._finished_at):
            for uid in [u for u in table if u not in seen]:
                del table[uid]

    async def _advance(self, job: Obj, uid: str, now: float) -> None:
        meta = job["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if _finished(job):
            self._ends.pop(uid, None)
            since = self._finished_at.setdefault(uid, now)
            if _streamed(job) and now - since >= self._keep_finished:
                await self._client.delete(JOBS, name, namespace=namespace, uid=uid)
            return
        if _suspended(job):
            self._ends.pop(uid, None)
            patch = suspend_patch(job)
            if patch is not None:
                await self._status(job, patch)
            return
        if uid not in self._ends:
            self._ends[uid] = now + self._rng.uniform(*self._run_seconds)
            patch = start_patch(job)
            if patch is not None:
                await self._status(job, patch)
            return
        if now >= self._ends[uid]:
            for patch in finish_patches(job):
                await self._status(job, patch)
            self._ends.pop(uid)

    async def _status(self, job: Obj, patch: Obj) -> None:
        meta = job["metadata"]
        await self._client.patch(
            JOBS, meta["name"], patch, namespace=meta["namespace"], subresource="status"
        )


class JobStream:
    """Submits the next of :data:`STREAM`'s shapes, unless ``max_waiting`` of its Jobs
    still wait for admission."""

    def __init__(
        self,
        client: KubeClient,
        *,
        rng: random.Random,
        shapes: tuple[JobShape, ...] = STREAM,
        max_waiting: int = 6,
    ) -> None:
        self._client = client
        self._rng = rng
        self._shapes = shapes
        self._max_waiting = max_waiting

    async def step(self, jobs: list[Obj] | None = None) -> Obj | None:
        """Create one Job (returned), or None while enough of the stream's Jobs wait."""
        if jobs is None:
            jobs = await _all_jobs(self._client)
        waiting = sum(1 for j in jobs if _streamed(j) and _suspended(j) and not _finished(j))
        if waiting >= self._max_waiting:
            return None
        shape = self._rng.choice(self._shapes)
        return await self._client.create(JOBS, shape.job(), namespace=shape.namespace)


async def run_jobs(
    client: KubeClient,
    *,
    stop: asyncio.Event,
    seed: int | None = None,
    submit_every: float = SUBMIT_EVERY,
    tick: float = 1.0,
) -> None:
    """Run admitted Jobs and submit new ones every ``submit_every`` seconds until
    ``stop``; a failed step is logged and tried again on the next tick."""
    rng = random.Random(seed)
    runner = JobRunner(client, rng=rng)
    stream = JobStream(client, rng=rng)
    loop = asyncio.get_running_loop()
    next_submit = loop.time()
    while not stop.is_set():
        try:
            await runner.step()
            if loop.time() >= next_submit:
                next_submit = loop.time() + submit_every
                await stream.step()
        except (ApiError, OSError) as err:
            log.warning("demo Jobs: %s (tried again in %.0f s)", err, tick)
        try:
            await asyncio.wait_for(stop.wait(), timeout=tick)
        except TimeoutError:
            pass
