"""The requests Kueue's runner sends, and the wire formats it reads.

One :class:`Api` over a plain aiohttp session: creates that retry until the object
exists, and a list-then-watch that relists on 410, as an informer does; it counts its
requests and errors for the summary (the runner is not rate-limited).  Timestamps
(RFC 3339, seconds) and cpu quantities (milli-units) are decoded here, so the parts
read numbers.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import aiohttp

from queues.times import rfc3339_seconds

try:
    from orjson import loads
except ImportError:  # pragma: no cover
    loads = json.loads

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
Obj = dict[str, Any]


def milli(quantity: Any) -> int:
    """A quantity's MilliValue (cpu here: "20" -> 20000, "500m" -> 500)."""
    from queues.quantity import parse_quantity

    if quantity in (None, ""):
        return 0
    return int(parse_quantity(str(quantity)) * 1000)


def parse_ts(text: Any) -> float | None:
    return rfc3339_seconds(str(text)) if text else None


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    """The few requests the runner sends; counts them (the runner is not rate-limited)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url.rstrip("/")
        self.requests = 0
        self.errors = 0

    async def send(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        self.requests += 1
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with self.http.request(
                method, self.url + path, data=data, headers=headers
            ) as resp:
                raw = await resp.read()
                doc = loads(raw) if raw else None
                if resp.status >= 400:
                    self.errors += 1
                return resp.status, doc
        except (aiohttp.ClientError, TimeoutError) as err:
            self.errors += 1
            return 0, {"message": repr(err)}

    async def create(self, path: str, body: Obj) -> None:
        for attempt in range(20):
            status, doc = await self.send("POST", path, body)
            if status in (200, 201, 409):
                return
            await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
        raise RuntimeError(f"create {path} failed: {status} {doc}")

    async def watch(self, plural: str, on_event: Any) -> None:
        """List, then watch from the list's resourceVersion; relist on 410 (an informer)."""
        path = f"{KUEUE}/{plural}"
        while True:
            status, doc = await self.send("GET", path)
            if status != 200:
                await asyncio.sleep(0.5)
                continue
            for obj in doc.get("items") or []:
                on_event("ADDED", obj)
            rv = doc["metadata"]["resourceVersion"]
            while rv is not None:
                rv = await self._watch_once(path, rv, on_event)

    async def _watch_once(self, path: str, rv: str, on_event: Any) -> str | None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "600"}  # fmt: skip
        self.requests += 1
        try:
            async with self.http.get(
                self.url + path, params=params, timeout=aiohttp.ClientTimeout(total=None)
            ) as resp:
                if resp.status == 410:
                    return None
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        return None if obj.get("code") == 410 else rv
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        on_event(event["type"], obj)
        except (TimeoutError, aiohttp.ClientError):
            await asyncio.sleep(0.1)
        return rv
