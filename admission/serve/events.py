"""Kubernetes Events from the service: best effort, fire and forget, rate-limited.

Like client-go's event recorder, the service writes Events through a token bucket of its
own (burst :data:`EVENT_BURST`, :data:`EVENT_QPS` per second) and not out of the client's
budget for decisions (``KubeClient.own_budget``): a busy cluster drops Events rather than
spending on them the requests that admit and stop workloads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from admission.kube.client.ratelimit import low_priority
from admission.kube.client.resources import EVENTS
from admission.kube.client.rest import KubeClient
from admission.kube.objects import rfc3339

EVENT_BURST, EVENT_QPS = 50, 10.0
EVENT_CALL = "create core/events"
MAX_PENDING = 256
"""Events in flight beyond which new ones are dropped."""


class EventRecorder:
    """``record(obj, type, reason, message)``: one Event about ``obj``, or none."""

    def __init__(self) -> None:
        self.client: KubeClient | None = None  # set once the service has connected
        self._pending: set[asyncio.Future[Any]] = set()
        self._tokens = float(EVENT_BURST)
        self._stamp = time.monotonic()

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if self.client is None or len(self._pending) >= MAX_PENDING:
            return
        now_m = time.monotonic()
        self._tokens = min(EVENT_BURST, self._tokens + (now_m - self._stamp) * EVENT_QPS)
        self._stamp = now_m
        if self._tokens < 1:
            return
        self._tokens -= 1
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        now = rfc3339(time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": ns},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": ns,
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "quartermaster"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "quartermaster",
        }
        with low_priority():  # (when events share the decisions' budget, they wait behind)
            task = asyncio.ensure_future(self.client.create(EVENTS, body, namespace=ns))
        self._pending.add(task)
        task.add_done_callback(_done(self._pending))


def _done(pending: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    def done(task: asyncio.Future[Any]) -> None:
        pending.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an event that fails is not worth a log line

    return done


def no_event(*_a: Any, **_k: Any) -> None:
    """The recorder when Events are off."""
    return None
