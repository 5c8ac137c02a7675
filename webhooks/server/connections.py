"""Who holds the webhook port's connections, and whose give way when it is full.

The caps of :mod:`webhooks.server.listener` (``max_connections_per_source`` from one address,
``max_connections`` in all) keep one source in check, but a few sources together can
fill the global cap with idle TLS connections that reconnect as the idle timeout
closes them; a cap that is full refuses everyone alike, the API server included. So
when the port is full a newcomer may take the place of an **idle** connection (one
with no complete request yet, or an idle keep-alive connection; never one whose
request is being answered), the least recently active first:

* from a source **without recent valid reviews**, when the newcomer's source has
  sent a valid AdmissionReview within ``trust_window`` seconds (the API server, as
  soon as it has been answered once); the connections of such reviewers are never
  taken for a newcomer without;
* otherwise, from the source holding the most connections, when it holds at least
  two more than the newcomer's source: the port is shared equally among sources that
  want more than their share (a source that has none, such as a restarted API
  server, always gets in), and sources that are already even do not churn each other.

``max_connections_per_source`` counts a source's *unproven* connections only: those
that have not yet answered a valid review (:attr:`ConnectionTable.unproven`). The API
server is one address that opens a connection per concurrent call over HTTP/1.1 and
keeps them, hundreds under a burst, and a call refused is a create refused; its
connections stop counting against its source's cap once they served a review, while a
source that never sends one (idle, slow or bombing connections, from wherever) stays
held to it. Anyone may send a valid review, so a proven connection is held to the global
cap still, and when the port is full proven connections share it as everyone else does.
Refusing (no victim) stays cheap: the connection is closed before its handshake.

How long an established connection may stay idle (no complete request) is decided here
too (:meth:`ConnectionTable.expired`, swept by the listener): ``idle_timeout`` before its
first request and after an answer that was not a valid review (slow and idle clients),
``reviewer_idle_timeout`` after a valid review. The latter is longer than the API server
keeps an idle connection in its pool (90 s), so that it is always the API server that
closes one: a server that closes a pooled connection as the client sends a review on it
fails that review with EOF, and the client does not send it again (a POST).

Every connection is one :class:`Connection` (slotted: a few hundred bytes) in a table
that orders each source's idle connections by when they became idle, so finding the
oldest one costs O(1) and a full port costs a scan of its sources, not of its
connections.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any

_MAX_REVIEWERS = 4096  # sources remembered as recent reviewers (oldest forgotten first)


class Connection:
    """One admitted connection: its source, whether a request is being answered on
    it, since when it is idle, whether its last answer was a valid review, and how to
    close it (set by the listener once it has a transport)."""

    __slots__ = ("source", "busy", "abort", "close", "released", "since", "reviewed", "proven")

    def __init__(self, source: str, since: float) -> None:
        self.source = source
        self.busy = False
        self.abort: Callable[[], None] = lambda: None
        self.close: Callable[[], None] | None = None  # set once established
        self.released = False
        self.since = since
        self.reviewed = False  # its last answer was a valid review
        self.proven = False  # it has answered a valid review


class ConnectionTable:
    """The open connections of one listening socket, per source (see the module
    docstring). ``clock`` is ``time.monotonic`` unless a test gives its own."""

    def __init__(self, *, trust_window: float = 600.0, clock: Callable[[], float] = monotonic):
        self.trust_window = trust_window
        self._clock = clock
        self.count: dict[str, int] = {}
        self.unproven: dict[str, int] = {}  # per source, its connections not proven yet
        self.total = 0
        # per source, its idle connections in the order they became idle (dicts keep order)
        self._idle: dict[str, dict[Connection, None]] = {}
        self._reviewed: dict[str, float] = {}  # source -> last valid review (clock)
        self._by_key: dict[Any, Connection] = {}  # established: its protocol -> it
        self.shed = 0

    # -- reviewers --------------------------------------------------------------------

    def reviewed(self, source: str) -> None:
        """``source`` has just sent a valid AdmissionReview."""
        self._reviewed.pop(source, None)
        self._reviewed[source] = self._clock()  # most recent last
        if len(self._reviewed) > _MAX_REVIEWERS:
            del self._reviewed[next(iter(self._reviewed))]

    def is_reviewer(self, source: str) -> bool:
        seen = self._reviewed.get(source)
        return seen is not None and self._clock() - seen <= self.trust_window

    # -- admission --------------------------------------------------------------------

    def add(self, source: str) -> Connection:
        """Count a new (idle) connection from ``source``."""
        conn = Connection(source, self._clock())
        self.count[source] = self.count.get(source, 0) + 1
        self.unproven[source] = self.unproven.get(source, 0) + 1
        self.total += 1
        self._idle.setdefault(source, {})[conn] = None
        return conn

    def victim(self, source: str) -> Connection | None:
        """The idle connection a newcomer from ``source`` may take the place of when the
        port is full, or None (the newcomer is refused)."""
        mine = self.count.get(source, 0)
        reviewer = self.is_reviewer(source)
        best: tuple[bool, int] | None = None
        chosen: Connection | None = None
        for other, idle in self._idle.items():
            if other == source or not idle:
                continue
            other_reviewer = self.is_reviewer(other)
            if other_reviewer and not reviewer:
                continue  # a reviewer's connections never give way to a non-reviewer
            held = self.count.get(other, 0)
            if not (reviewer and not other_reviewer) and held < mine + 2:
                continue  # even already: no churn
            # non-reviewers' connections first, then the source holding the most
            rank = (not other_reviewer, held)
            if best is None or rank > best:
                best, chosen = rank, next(iter(idle))
        return chosen

    def release(self, conn: Connection) -> None:
        """``conn`` is closed (or refused after all): free its place. Idempotent."""
        if conn.released:
            return
        conn.released = True
        source = conn.source
        if not conn.proven:
            self._prove(conn)
        left = self.count[source] - 1
        self.total -= 1
        idle = self._idle.get(source)
        if idle is not None:
            idle.pop(conn, None)
        if left <= 0:
            del self.count[source]
            self._idle.pop(source, None)
        else:
            self.count[source] = left

    def _prove(self, conn: Connection) -> None:
        """``conn`` no longer counts as unproven (it answered a valid review, or is gone)."""
        conn.proven = True
        left = self.unproven.get(conn.source, 0) - 1
        if left > 0:
            self.unproven[conn.source] = left
        else:
            self.unproven.pop(conn.source, None)

    def shed_for(self, victim: Connection) -> None:
        """Close ``victim`` to make room (its place is free at once)."""
        self.shed += 1
        self.release(victim)
        victim.abort()

    # -- established connections and their requests -------------------------------------

    def bind(self, key: Any, conn: Connection, *, close: Callable[[], None] | None = None) -> None:
        """``conn``'s handshake is done; ``key`` (its protocol) names it from now on, and
        ``close`` ends it gracefully once it has been idle too long."""
        self._by_key[key] = conn
        conn.close = close
        conn.since = self._clock()  # idle from now: the newest idle one of its source
        idle = self._idle.get(conn.source)
        if idle is not None and idle.pop(conn, 0) is None:
            idle[conn] = None

    def ended(self, key: Any) -> None:
        """The established connection ``key`` is gone: free its place."""
        conn = self._by_key.pop(key, None)
        if conn is not None:
            self.release(conn)

    def begin(self, key: Any) -> Connection | None:
        """A request's headers are in on connection ``key``: it is busy until :meth:`end`.
        None for a connection this table does not hold (an app served without it)."""
        conn = self._by_key.get(key)
        if conn is not None:
            conn.busy = True
            idle = self._idle.get(conn.source)
            if idle is not None:
                idle.pop(conn, None)
        return conn

    def end(self, conn: Connection | None, *, valid_review: bool) -> None:
        """The response is ready: ``conn`` is idle again (the most recently active one)."""
        if conn is None:
            return
        conn.busy = False
        conn.reviewed = valid_review
        conn.since = self._clock()
        if valid_review:
            self.reviewed(conn.source)
            if not conn.proven:
                self._prove(conn)
        if not conn.released:
            self._idle.setdefault(conn.source, {})[conn] = None

    def expired(self, *, idle_timeout: float, reviewer_idle_timeout: float) -> list[Connection]:
        """The established connections idle for longer than they may be (see the module
        docstring): each source's idle connections are in the order they became idle,
        so the scan stops at the first one idle for less than ``idle_timeout``."""
        now = self._clock()
        out: list[Connection] = []
        for idle in self._idle.values():
            for conn in idle:
                waited = now - conn.since
                if waited < idle_timeout:
                    break
                if conn.close is not None and (
                    not conn.reviewed or waited >= reviewer_idle_timeout
                ):
                    out.append(conn)
        return out

    def close_idle(self, conn: Connection) -> None:
        """Close the idle ``conn`` gracefully (its place is freed when it is gone)."""
        idle = self._idle.get(conn.source)
        if idle is not None:
            idle.pop(conn, None)  # no longer a victim, nor swept again
        if conn.close is not None:
            conn.close()

    def track(self, route: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        """``route`` (an aiohttp handler of AdmissionReviews) marking its connection busy
        while it answers, and its source a recent reviewer when the answer is a review's
        (HTTP 200: allowed or denied; a request that is not a usable review gets 4xx)."""

        async def tracked(request: Any) -> Any:
            conn = self.begin(request.protocol)
            valid = False
            try:
                response = await route(request)
                valid = response.status == 200
                return response
            finally:
                self.end(conn, valid_review=valid)

        return tracked
