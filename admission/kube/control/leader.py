"""Leader election with a ``coordination.k8s.io/v1`` Lease (client-go's algorithm).

Every replica serves webhooks; only the Lease holder schedules and writes. A candidate
reads the Lease; it may take it when nobody holds it, when it holds it already, or
when the record has not changed for ``lease_duration`` seconds *as observed locally*
(clocks of different machines are never compared). Every write is an update pinned to
the resourceVersion read, so two candidates can never both win. The holder renews
every ``retry_period``; if it cannot renew for ``renew_deadline`` it steps down — at
that instant, even while a renewal request hangs: as in client-go, every attempt is
bounded by what is left of the renew deadline, and each Lease request by a timeout
well below ``lease_duration - renew_deadline``, so the old leader has stopped before
any other replica can take the Lease over. :meth:`LeaderElector.holds` is the fence
the controller checks before each cycle's writes.
On shutdown the holder releases the Lease (empty holderIdentity, duration 1 s), so
another replica takes over at its next retry instead of waiting out the lease —
something the official ``leaderelection`` package does not do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import LEASES
from admission.kube.client.rest import KubeClient

log = logging.getLogger("quartermaster.kube.leader")

DEFAULT_LEASE_NAME = "quartermaster-leader-election"


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        identity: str,
        name: str = DEFAULT_LEASE_NAME,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.monotonic = monotonic
        self.wall = wall
        self.is_leader = asyncio.Event()
        self.lost = asyncio.Event()
        self._observed: Any = None
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self.transitions = 0
        self._renewed_at = -float("inf")  # monotonic time of the last successful renewal
        # no Lease request may outlive the margin a successor waits beyond our deadline
        self.request_timeout = max(0.1, min(retry_period, (lease_duration - renew_deadline) / 2))

    def holds(self) -> bool:
        """True while this replica may act as the leader: it holds the Lease and its
        last renewal is younger than ``renew_deadline`` (checked against the clock, not
        only when the renewal loop notices)."""
        return self.is_leader.is_set() and (
            self.monotonic() - self._renewed_at < self.renew_deadline
        )

    def _spec(self, acquire_time: str | None, transitions: int) -> dict[str, Any]:
        now = kobj.micro_time(self.wall())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        timeout = self.request_timeout
        try:
            lease = await self.client.get(
                LEASES, self.name, namespace=self.namespace, timeout=timeout
            )
        except ApiError as err:
            if not err.not_found:
                log.warning("reading Lease %s/%s: %s", self.namespace, self.name, err)
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, 0),
            }
            try:
                self._lease = await self.client.create(
                    LEASES, body, namespace=self.namespace, timeout=timeout
                )
            except ApiError as err2:
                log.info("creating Lease: %s", err2)
                return False
            self._note(self._lease)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._note(lease)
        expired = self.monotonic() >= self._observed_at + float(
            spec.get("leaseDurationSeconds") or self.lease_duration
        )
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = holder == self.identity
        new = dict(lease)
        new["spec"] = self._spec(
            spec.get("acquireTime") if mine else None, transitions + (0 if mine else 1)
        )
        try:
            self._lease = await self.client.replace(
                LEASES, self.name, new, namespace=self.namespace, timeout=timeout
            )
        except ApiError as err:
            if not err.conflict:
                log.warning("updating Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        self._note(self._lease)
        if not mine:
            self.transitions += 1
        return True

    def _note(self, lease: dict[str, Any]) -> None:
        record = (lease.get("spec") or {}).copy()
        if record != self._observed:
            self._observed = record
            self._observed_at = self.monotonic()

    async def _attempt(self, budget: float) -> bool:
        """One acquire/renew attempt that gives up after ``budget`` seconds.

        ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` returns the
        result of an attempt that finishes as the task is cancelled and drops the
        cancellation (bpo-42130, fixed in 3.12), so a stopping replica went on renewing its
        Lease for good and its shutdown never returned."""
        try:
            async with asyncio.timeout(max(0.0, budget)):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.warning("Lease %s/%s: no answer within %.1fs", self.namespace, self.name, budget)
            return False

    async def run(self) -> None:
        """Acquire, then renew until the Lease is lost (``lost`` is set) or cancelled."""
        while True:
            started = self.monotonic()
            if await self._attempt(self.renew_deadline):
                self._renewed_at = started
                break
            await asyncio.sleep(self.retry_period)
        log.info("%s became the leader (Lease %s/%s)", self.identity, self.namespace, self.name)
        self.is_leader.set()
        while True:
            await asyncio.sleep(self.retry_period)
            if not self.is_leader.is_set():
                return  # released (shutting down): never renew after that
            started = self.monotonic()
            left = self._renewed_at + self.renew_deadline - started
            if left > 0 and await self._attempt(left):
                self._renewed_at = started  # the renewal was sent no earlier than this
                continue
            if self.monotonic() - self._renewed_at >= self.renew_deadline:
                log.error(
                    "%s lost the Lease (no renewal for %.1fs)", self.identity, self.renew_deadline
                )
                self.is_leader.clear()
                self.lost.set()
                return

    async def release(self) -> bool:
        """Give the Lease up (only if we hold it) so a successor need not wait it out.

        A renewal may be in flight when this runs (the loop is stopped by clearing
        ``is_leader``, which it checks before every attempt): if that renewal moved the
        Lease's resourceVersion, the release conflicts, so it re-reads the Lease once and
        releases it if it is still ours."""
        if not self.is_leader.is_set() or self._lease is None:
            return False
        self.is_leader.clear()
        lease: dict[str, Any] | None = self._lease
        for attempt in range(2):
            assert lease is not None
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return False
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = kobj.micro_time(self.wall())
            try:
                await self.client.replace(
                    LEASES, self.name, {**lease, "spec": spec}, namespace=self.namespace
                )
            except ApiError as err:
                if err.conflict and attempt == 0:
                    try:
                        lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
                    except ApiError as err2:
                        log.warning("releasing Lease %s/%s: %s", self.namespace, self.name, err2)
                        return False
                    continue
                log.warning("releasing Lease %s/%s: %s", self.namespace, self.name, err)
                return False
            log.info("%s released the Lease", self.identity)
            return True
        return False
