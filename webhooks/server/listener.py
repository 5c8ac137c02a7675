"""The webhook port's listener: which TCP connections get a TLS handshake, and when.

The listening socket is read by us rather than by asyncio's TLS server, which would
handshake every connection it accepts before any code of ours sees it, and run all the
handshakes of one wake-up back to back on the event loop. Here each accepted
connection is admitted or refused by its *source address* before any TLS work: beyond
``max_connections_per_source`` unproven connections from one address (a connection that
has served a valid review no longer counts: the API server's pool; no address holds
more than half the port all told), or
``max_connections`` in all when no idle connection of another source gives way to it
(:mod:`webhooks.server.connections`), it is closed at once (an RST, a few
microseconds). At most ``accept_batch`` connections are accepted per wake-up, so a
burst's handshakes are spread over loop iterations and the API server's reviews,
``/healthz`` and the Lease renewal do not wait behind them; a handshake must finish
within ``handshake_timeout``. Established connections idle for longer than they may be
are closed a few times per ``idle_timeout``
(:meth:`~webhooks.server.connections.ConnectionTable.expired`).

Handshakes are not otherwise rationed: a slot held for a handshake is held while the
server waits for the client, so a few silent connections could hold every slot.

In a cluster the API server's connections come from the control plane's addresses and a
hostile pod's from its own (the NetworkPolicy refuses them first where it is enforced);
the per-source cap is what keeps one pod from taking the connection budget of all, and
when several sources together fill the port, the idle connections of some give way to
newcomers from others (:mod:`webhooks.server.connections`): sources that send valid reviews
(the API server) keep being served.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any, Protocol

from webhooks.server.connections import Connection, ConnectionTable

_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST, no TIME_WAIT


class ListenerLimits(Protocol):
    handshake_timeout: float
    idle_timeout: float
    reviewer_idle_timeout: float
    max_connections: int
    max_connections_per_source: int
    accept_batch: int


class GuardedListener:
    """A listening socket whose connections are admitted by source before their TLS
    handshake (see the module docstring). Quacks like the ``asyncio.Server`` aiohttp's
    sites keep (``sockets``, ``close``, ``wait_closed``)."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        ssl_context: ssl.SSLContext,
        limits: ListenerLimits,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        on_refused: Callable[[str, str], None] = lambda source, why: None,
        table: ConnectionTable | None = None,
    ) -> None:
        self.sockets = [sock]
        self._sock = sock
        self._ssl = ssl_context
        self._limits = limits
        self._factory = protocol_factory
        self._on_refused = on_refused
        self.table = table if table is not None else ConnectionTable()
        self.refused = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock.setblocking(False)
        self._loop.add_reader(self._sock.fileno(), self._on_readable)
        self._sweep()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for t in self._tasks:
            t.cancel()

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def connection_ended(self, key: Any) -> None:
        """The established connection ``key`` (the protocol) is gone: free its place."""
        self.table.ended(key)

    # -- idle connections -------------------------------------------------------------------

    def _sweep(self) -> None:
        """Close the connections idle for longer than they may be (:meth:`ConnectionTable.expired`),
        a few times per ``idle_timeout``."""
        limits = self._limits
        for conn in self.table.expired(
            idle_timeout=limits.idle_timeout, reviewer_idle_timeout=limits.reviewer_idle_timeout
        ):
            self.table.close_idle(conn)
        assert self._loop is not None
        period = min(1.0, max(0.05, limits.idle_timeout / 4))
        self._sweeper = self._loop.call_later(period, self._sweep)

    # -- accepting ------------------------------------------------------------------------

    def _on_readable(self) -> None:
        limits = self._limits
        for _ in range(max(1, limits.accept_batch)):
            try:
                conn, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._on_refused("(listener)", f"accept failed: {exc.strerror}; pausing 0.1 s")
                    self._pause(0.1)  # the fd stays readable: do not spin on it
                return
            source = str(addr[0]) if isinstance(addr, tuple) else "local"
            table = self.table
            held = table.unproven.get(source, 0)
            if held >= limits.max_connections_per_source:
                self._refuse(conn, source, f"{held} connections open from {source} "
                             "that have not served a review")  # fmt: skip
                continue
            held = table.count.get(source, 0)
            if held >= source_cap(limits):
                self._refuse(conn, source, f"{held} connections open from {source}")
                continue
            if table.total >= limits.max_connections:
                victim = table.victim(source)
                if victim is None:
                    self._refuse(conn, source, f"{table.total} connections open (the cap)")
                    continue
                table.shed_for(victim)
            conn.setblocking(False)
            entry = table.add(source)
            task = asyncio.ensure_future(self._handshake(conn, entry))
            entry.abort = _canceller(task)  # until the handshake is done
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _pause(self, seconds: float) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._sock.fileno())

        def resume() -> None:
            if not self._closed:
                assert self._loop is not None
                self._loop.add_reader(self._sock.fileno(), self._on_readable)

        self._loop.call_later(seconds, resume)

    def _refuse(self, conn: socket.socket, source: str, why: str) -> None:
        self.refused += 1
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        except OSError:
            pass
        conn.close()
        self._on_refused(source, why)

    async def _handshake(self, conn: socket.socket, entry: Connection) -> None:
        assert self._loop is not None
        timeout = self._limits.handshake_timeout
        try:  # the transport owns conn from here on (and closes it on failure)
            transport, protocol = await self._loop.connect_accepted_socket(
                self._factory, sock=conn, ssl=self._ssl, ssl_handshake_timeout=timeout
            )
        except (OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError):
            conn.close()  # a no-op when the transport closed it already
            self.table.release(entry)
            return
        except BaseException:
            conn.close()
            self.table.release(entry)
            raise
        if protocol.transport is None or entry.released:  # type: ignore[attr-defined]
            transport.abort()  # lost already, or shed while its handshake finished
            self.table.release(entry)
        else:
            entry.abort = transport.abort
            self.table.bind(protocol, entry, close=transport.close)


def source_cap(limits: ListenerLimits) -> int:
    """The most connections one address may hold, those that served a review included:
    anyone may send a valid review, so proven connections are not trusted with the
    whole port; half of it leaves the API server's pool room for a burst's few hundred."""
    return max(limits.max_connections_per_source, limits.max_connections // 2)


def _canceller(task: asyncio.Task[None]) -> Callable[[], None]:
    def cancel() -> None:
        task.cancel()

    return cancel
