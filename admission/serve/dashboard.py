"""A read-only, live web dashboard of the service's own model (KueueViz's questions).

``serve --dashboard-port N`` (off by default; bound to loopback unless
``--dashboard-host`` says otherwise, so in a pod it is reached with ``kubectl
port-forward``) serves one page (``static/``) and a small JSON API, all read from the
same in-memory model the scheduler uses — never by polling the API server:

* ``/api/summary``: the cohort tree, each ClusterQueue's usage against nominal quota,
  borrowing (usage above the subtree's quota) and lending limits per flavor and
  resource, pending/admitted counts, the fair-sharing weighted share and, with cohort
  credits configured, credits; Cohort rows aggregate their subtree; the recent
  admissions, preemptions, evictions and finishes;
* ``/api/pending?cq=&offset=&limit=``: a page of a ClusterQueue's pending workloads
  with both positions (:mod:`.queueview`, the visibility API's order) and the pending
  reason and message in numbers; ``/api/admitted?cq=...``: a page of its admissions
  (a reservation waiting for its AdmissionChecks lists them with their states);
* ``/events``: Server-Sent Events — a full ``summary`` event when a client connects,
  then, whenever the model changed (informer events and scheduling decisions,
  coalesced), a ``delta`` event with only the tree rows that changed, the totals and
  the recent events (a full ``summary`` again when the tree's shape changed or a slow
  client missed an update). A summary of a large tree is costly to build on the event
  loop the webhooks share (``python -m bench dashboard-scale`` measures it): a delta is
  a few KB, and pushes are spaced so that building them takes at most a tenth of the
  loop's CPU (``PUSH_LOOP_SHARE``), at most 1 s apart.

The page renders only the rows in view (virtualised lists) and pages the pending list
from the server, so 1,000 ClusterQueues and 50,000 pending workloads stay readable:
the tree collapses by Cohort with aggregated usage, the pending list is fetched a
window at a time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from aiohttp import web

from admission.config.schema import Config
from admission.engine.admission_checks import waiting_on
from admission.engine.cache import Cache
from admission.kube.controller import Controller
from queues.api.conditions import condition
from queues.fairshare import dominant_resource_share
from queues.quantity import format_quantity
from queues.quota_node import QuotaNode

from .queueview import LqUsage, positions

log = logging.getLogger("quartermaster.dashboard")

Obj = dict[str, Any]
PUSH_INTERVAL = 0.25
PUSH_LOOP_SHARE = 0.1  # pushes are spaced so building them takes at most this share
PUSH_MAX_INTERVAL = 1.0  # ... of the loop's CPU, but never further apart than this
RECENT = 200
RECENT_MESSAGE_CHARS = 4000  # bounds the recent events' memory (RECENT of them)
MAX_PAGE = 500


@dataclass(slots=True)
class DashboardSource:
    cache: Cache
    cache_ready: Callable[[], Awaitable[None]]
    lq_usage: Callable[[str], LqUsage]
    credits: Callable[[str, bool], float | None]  # (name, is cohort) -> credit, or None
    clock: Callable[[], float] = time.time
    # workload -> its failed nodes awaiting a replacement or an eviction
    unhealthy: Callable[[str], list[str]] = lambda _key: []


@dataclass(slots=True)
class Recent:
    """The last admissions, preemptions, evictions and finishes (from Workload events)."""

    events: collections.deque[Obj] = field(default_factory=lambda: collections.deque(maxlen=RECENT))

    def observe(self, plural: str, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        if plural != "workloads" or new is None:
            return
        for type_, kind in (
            ("QuotaReserved", "admitted"),
            ("Evicted", "evicted"),
            ("Finished", "finished"),
        ):
            now_c, was_c = condition(new, type_) or {}, condition(old, type_) or {}
            if now_c.get("status") == "True" and was_c.get("status") != "True":
                reason = now_c.get("reason") or ""
                if kind == "evicted" and reason == "Preempted":
                    kind = "preempted"
                cq = ((new.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
                self.events.appendleft(
                    {
                        "time": now_c.get("lastTransitionTime") or "",
                        "kind": kind,
                        "workload": key,
                        "clusterQueue": cq,
                        "reason": reason,
                        "message": _bounded(now_c.get("message") or ""),
                    }
                )


def _bounded(message: str) -> str:
    """A condition message as the page shows it: whole (Kueue's run to a few hundred
    characters), only a pathological one cut, and then visibly."""
    if len(message) <= RECENT_MESSAGE_CHARS:
        return message
    return message[: RECENT_MESSAGE_CHARS - 1] + "…"


NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
"""What every node has; any other resource (GPUs, MIG slices, ...) is an accelerator."""


def _display_order(node: QuotaNode) -> list[tuple[str, str]]:
    """The node's (flavor, resource) pairs as a person reads them: flavors in the order
    of the node's own quota (a ClusterQueue's flavors in the order they are tried), then
    the rest of its subtree's by name; within a flavor, accelerators first."""
    flavors = list(dict.fromkeys(f for f, _ in node.quotas))
    flavors += sorted({f for f, _ in node.subtree_quota} - set(flavors))
    rank = {f: i for i, f in enumerate(flavors)}

    def key(fr: tuple[str, str]) -> tuple[int, int, str]:
        flavor, resource = fr
        kind = NODE_RESOURCES.index(resource) + 1 if resource in NODE_RESOURCES else 0
        return rank[flavor], kind, resource

    return sorted(node.subtree_quota, key=key)


def _accelerators_first(item: tuple[tuple[str, str], int]) -> tuple[bool, str, str]:
    (flavor, resource), _ = item
    return resource in NODE_RESOURCES, flavor, resource


def _quantities(node: QuotaNode) -> list[Obj]:
    rows = []
    for flavor, resource in _display_order(node):
        quota = node.subtree_quota[(flavor, resource)]
        used = node.usage.get((flavor, resource), 0)
        q = node.quotas.get((flavor, resource))
        row: Obj = {
            "flavor": flavor,
            "resource": resource,
            "accelerator": resource not in NODE_RESOURCES,
            "used": used,
            "quota": quota,
            "usedText": format_quantity(resource, used),
            "quotaText": format_quantity(resource, quota),
            "borrowed": format_quantity(resource, max(0, used - quota)),
        }
        if q is not None and q.borrowing_limit is not None:
            row["borrowingLimit"] = format_quantity(resource, q.borrowing_limit)
        if q is not None and q.lending_limit is not None:
            row["lendingLimit"] = format_quantity(resource, q.lending_limit)
        rows.append(row)
    return rows


def summary(source: DashboardSource, recent: Recent) -> Obj:
    cache = source.cache
    tree = cache.tree
    nodes: list[Obj] = []
    pending_total = 0

    def row_of(node: QuotaNode, depth: int) -> Obj:
        """The node's row, without its subtree's counts."""
        nonlocal pending_total
        row: Obj = {
            "name": node.name,
            "kind": "Cohort" if node.is_cohort else "ClusterQueue",
            "depth": depth,
            "parent": node.parent.name if node.parent is not None else None,
            "quantities": _quantities(node),
            "weightedShare": dominant_resource_share(node).rounded() if node.parent else 0,
        }
        credit = source.credits(node.name, node.is_cohort)
        if credit is not None:
            row["credit"] = round(credit, 3)
        if node.is_cohort:
            row["pending"] = row["admitted"] = 0  # summed from its children below
        else:
            q = cache.queues.get(node.name)
            row["pending"] = len(q) if q is not None else 0
            row["admitted"] = len(cache.by_cq.get(node.name, {}))
            pending_total += row["pending"]
            cq = cache.cluster_queues.get(node.name)
            row["stopPolicy"] = cq.stop_policy if cq is not None else ""
            inactive = cache.inactive.get(node.name)
            row["inactive"] = inactive.message if inactive is not None else ""
        return row

    def order(nodes: Iterable[QuotaNode]) -> list[QuotaNode]:
        return sorted(nodes, key=lambda c: (not c.is_cohort, c.name))

    # Rows in depth-first order, walked with a stack of its own (a Cohort chain of any
    # depth); then each Cohort's counts summed from its children, deepest first.
    parent_row: list[int | None] = []
    stack: list[tuple[QuotaNode, int, int | None]] = [
        (root, 0, None) for root in reversed(order(tree.roots()))
    ]
    while stack:
        node, depth, up = stack.pop()
        parent_row.append(up)
        nodes.append(row_of(node, depth))
        at = len(nodes) - 1
        stack.extend((c, depth + 1, at) for c in reversed(order(node.children)))
    for i in range(len(nodes) - 1, -1, -1):
        up = parent_row[i]
        if up is not None:
            nodes[up]["pending"] += nodes[i]["pending"]
            nodes[up]["admitted"] += nodes[i]["admitted"]
    return {
        "time": source.clock(),
        "clusterQueues": len(cache.cluster_queues),
        "cohorts": len(tree.cohorts),
        "pending": pending_total,
        "unroutable": len(cache.unroutable),
        "admitted": len(cache.admitted),
        "evicting": len(cache.evicting),
        "nodes": nodes,
        "recent": list(recent.events)[:50],
    }


def pending_page(source: DashboardSource, cq: str, offset: int, limit: int) -> Obj:
    cache = source.cache
    items = []
    total = len(cache.queues[cq]) if cq in cache.queues else 0
    for entry in positions(cache, cq, lq_usage=source.lq_usage(cq)):
        i = entry.position_in_cluster_queue
        if i < offset:
            continue
        if i >= offset + limit:
            break
        wl = entry.workload
        st = cache.inactive.get(cq) or cache.status_of(wl, cq)
        items.append(
            {
                "workload": wl.key,
                "localQueue": wl.queue_name,
                "priority": wl.priority,
                "priorityClass": wl.priority_class or "",
                "positionInClusterQueue": i,
                "positionInLocalQueue": entry.position_in_local_queue,
                "parked": entry.parked,
                "reason": st.reason if st is not None else "",
                "message": st.message if st is not None else "not yet nominated",
            }
        )
    return {"clusterQueue": cq, "total": total, "offset": offset, "items": items}


def admitted_page(source: DashboardSource, cq: str, offset: int, limit: int) -> Obj:
    cache = source.cache
    keys = list(cache.by_cq.get(cq, {}))
    items = []
    for key in keys[offset : offset + limit]:
        usage = cache.usage_of.get(key, {})
        wl = cache.workloads.get(key)
        items.append(
            {
                "workload": key,
                "priority": wl.priority if wl is not None else 0,
                "priorityClass": (wl.priority_class or "") if wl is not None else "",
                "evicting": key in cache.evicting,
                # a reservation waiting for its AdmissionChecks: which, in what state
                "waitingFor": [
                    {"name": s.name, "state": s.state, "message": _bounded(s.message)}
                    for s in (waiting_on(wl) if wl is not None else ())
                ],
                "unhealthyNodes": source.unhealthy(key),
                "usage": ", ".join(
                    f"{f}/{r} {format_quantity(r, v)}"
                    for (f, r), v in sorted(usage.items(), key=_accelerators_first)
                ),
            }
        )
    return {"clusterQueue": cq, "total": len(keys), "offset": offset, "items": items}


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: must be an integer") from None


class Dashboard:
    """The dashboard's app, its change detection and its SSE clients."""

    def __init__(self, source: DashboardSource) -> None:
        self.source = source
        self.recent = Recent()
        self.version = 0
        self._changed = asyncio.Event()
        self._clients: set[asyncio.Queue[bytes]] = set()
        self.pushes = 0
        self.deltas = 0
        # the last pushed state, which deltas are relative to: row JSON by node, in order
        self._rows: dict[tuple[str, str], str] | None = None
        self._full: bytes | None = None  # that state as one summary event

    @classmethod
    def of_controller(cls, controller: Controller, *, config: Config) -> Dashboard:
        def lq_usage(cq: str) -> LqUsage:
            sched = controller.scheduler
            tracker = sched.usage if sched is not None else None
            return tracker.lq_order_function(cq) if tracker is not None else None

        def credits(name: str, cohort: bool) -> float | None:
            sched = controller.scheduler
            tracker = sched.usage if sched is not None else None
            if tracker is None or tracker.credits_cfg is None:
                return None
            return float(tracker.credit_of_node(name, cohort=cohort))

        def unhealthy(key: str) -> list[str]:
            return sorted(controller.unhealthy_hosts(key))

        dashboard = cls(
            DashboardSource(
                controller.cache, controller.cache_ready, lq_usage, credits, unhealthy=unhealthy
            )
        )
        controller.observers.append(dashboard.observe)
        return dashboard

    def observe(self, plural: str, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        self.recent.observe(plural, event, key, new, old)
        self._changed.set()

    def _fingerprint(self) -> tuple[int, ...]:
        """Changes the scheduler makes before any event arrives (assumed admissions)."""
        c = self.source.cache
        return (len(c.admitted), len(c.evicting), sum(len(q) for q in c.queues.values()))

    # -- HTTP ---------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/summary", self._summary)
        app.router.add_get("/api/pending", self._pending)
        app.router.add_get("/api/admitted", self._admitted)
        app.router.add_get("/events", self._events)
        app.router.add_get("/healthz", _ok)
        return app

    async def _index(self, _request: web.Request) -> web.Response:
        return web.Response(text=_asset("index.html"), content_type="text/html")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        types = {"app.js": "application/javascript", "app.css": "text/css"}
        if name not in types:
            raise web.HTTPNotFound()
        return web.Response(text=_asset(name), content_type=types[name])

    async def _summary(self, _request: web.Request) -> web.Response:
        await self.source.cache_ready()
        return web.json_response(summary(self.source, self.recent))

    def _page_args(self, request: web.Request) -> tuple[str, int, int]:
        cq = request.query.get("cq", "")
        if cq not in self.source.cache.cluster_queues:
            raise web.HTTPNotFound(text=f"no ClusterQueue {cq!r}")
        offset = max(0, _int(request, "offset", 0))
        limit = min(MAX_PAGE, max(0, _int(request, "limit", 100)))
        return cq, offset, limit

    async def _pending(self, request: web.Request) -> web.Response:
        await self.source.cache_ready()
        return web.json_response(pending_page(self.source, *self._page_args(request)))

    async def _admitted(self, request: web.Request) -> web.Response:
        await self.source.cache_ready()
        return web.json_response(admitted_page(self.source, *self._page_args(request)))

    async def _events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=2)
        try:
            await self.source.cache_ready()
            if self._full is None:
                self._push_state()  # the baseline the next delta is relative to
            assert self._full is not None
            self._clients.add(queue)
            await resp.write(self._full)
            self._changed.set()  # the model may have moved on since that state
            while True:
                try:
                    data = await asyncio.wait_for(queue.get(), timeout=15)
                except TimeoutError:
                    await resp.write(b": keep-alive\n\n")
                    continue
                await resp.write(data)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(queue)
        return resp

    def _push_state(self) -> bytes | None:
        """Build the current summary, make it the new baseline, and return the delta
        event from the previous baseline (None: the tree's shape changed, or there was
        no baseline — clients need the full ``summary``)."""
        doc = summary(self.source, self.recent)
        rows = {(n["kind"], n["name"]): json.dumps(n, separators=(",", ":")) for n in doc["nodes"]}
        nodes = ",".join(rows.values())
        head = {k: v for k, v in doc.items() if k != "nodes"}
        full = json.dumps({**head, "nodes": []}, separators=(",", ":"))
        full = full.replace('"nodes":[]', f'"nodes":[{nodes}]', 1)
        previous, self._rows = self._rows, rows
        self._full = _sse(full)
        if previous is None or list(previous) != list(rows):
            return None
        changed = [r for key, r in rows.items() if previous[key] != r]
        delta = json.dumps({**head, "changed": []}, separators=(",", ":"))
        delta = delta.replace('"changed":[]', f'"changed":[{",".join(changed)}]', 1)
        return _sse(delta, event="delta")

    async def _broadcast(self) -> None:
        """Push what changed to every client when the model changed (coalesced)."""
        last = self._fingerprint()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=PUSH_INTERVAL)
            fp = self._fingerprint()
            if not self._changed.is_set() and fp == last:
                continue
            self._changed.clear()
            last = fp
            self.version += 1
            if not self._clients:
                continue
            await self.source.cache_ready()
            started = time.thread_time()  # the loop's own CPU, not the machine's load
            delta = self._push_state()
            cost = time.thread_time() - started
            self.pushes += 1
            full = self._full
            assert full is not None
            if delta is not None:
                self.deltas += 1
            for q in list(self._clients):
                if q.full():  # a slow client missed updates: it gets the whole state
                    with contextlib.suppress(asyncio.QueueEmpty):
                        while True:
                            q.get_nowait()
                    q.put_nowait(full)
                else:
                    q.put_nowait(full if delta is None else delta)
            await asyncio.sleep(min(PUSH_MAX_INTERVAL, max(PUSH_INTERVAL, cost / PUSH_LOOP_SHARE)))

    async def serve(
        self, *, host: str, port: int, ready: Callable[[int], None] = lambda _p: None
    ) -> None:
        runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await runner.setup()
        pusher = asyncio.create_task(self._broadcast(), name="dashboard-push")
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            ready(runner.addresses[0][1])
            await asyncio.Event().wait()
        finally:
            pusher.cancel()
            await asyncio.gather(pusher, return_exceptions=True)
            await runner.cleanup()


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _sse(data: str, *, event: str = "summary") -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


def _asset(name: str) -> str:
    return resources.files("admission.serve").joinpath("static", name).read_text()
