"""The webhook port's TLS site: what one client may cost (:class:`ServerLimits`) and
the aiohttp site whose listening socket admits connections before their handshake
(:mod:`webhooks.server.listener`), sharing the port among sources (:mod:`webhooks.server.connections`).
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from webhooks.server.connections import ConnectionTable
from webhooks.server.listener import GuardedListener
from webhooks.server.ratelog import RateLimitedLog

log = logging.getLogger("quartermaster.webhooks")


@dataclass(slots=True)
class ServerLimits:
    """What one client may cost the server (hardening: a slow or idle connection, a
    compressed body, a flood of connections must not stall the event loop).

    ``idle_timeout`` closes a connection that has not sent complete request headers
    that long after its handshake or after its last response, unless that response
    answered a valid review: then ``reviewer_idle_timeout``, longer than the API server
    keeps an idle connection (kube-apiserver's webhook client: 90 s), so that the API
    server closes its connections and never sends a review on one this server is
    closing (:mod:`webhooks.server.connections`); ``body_timeout`` bounds the read of
    one request body: as long as the longest an API server waits for a webhook
    (``timeoutSeconds`` is at most 30), so a review it still waits for is never refused
    because this server was slow to read it (a busy loop reads a large body one TLS
    record per turn). Before its
    TLS handshake a connection is admitted by source (:mod:`webhooks.server.listener`): beyond
    ``max_connections_per_source`` open from one address that have not served a valid
    review yet (the API server's pooled connections have) it is closed at once, and
    beyond ``max_connections`` in all unless an idle connection of another source gives
    way to it (:mod:`webhooks.server.connections`, ``trust_window``); a handshake takes at most
    ``handshake_timeout``; ``accept_batch`` connections are accepted per wake-up.
    """

    idle_timeout: float = 5.0
    reviewer_idle_timeout: float = 120.0
    handshake_timeout: float = 5.0
    body_timeout: float = 30.0
    max_connections: int = 1000
    # One hostile pod must not take the port; the API server keeps a pool of
    # connections per webhook host (HTTP/1.1: a few hundred under a burst of reviews),
    # and each counts against this only until it has served a review.
    max_connections_per_source: int = 250
    accept_batch: int = 32
    # asyncio gives every TLS connection a read buffer of sslproto.SSLProtocol.max_size
    # (256 KiB), allocated at connect and held while the connection lives, idle or not.
    # A TLS record is at most 16 KiB (plus a header and tag): one record per read loses
    # nothing but a few more reads of a large body (process-wide: set at server start).
    tls_read_buffer: int = 17 * 1024
    what_if_mode: str | None = None  # webhooks.handlers.offloop: "process" (default) or "thread"
    # When the port is full, sources that sent a valid review within this many seconds
    # take the places of idle connections of sources that did not (webhooks.server.connections).
    trust_window: float = 600.0

    def handler_kwargs(self) -> dict[str, Any]:
        return {
            # the idle timeouts are the listener's (per connection); this is their bound
            "keepalive_timeout": max(self.idle_timeout, self.reviewer_idle_timeout) + 1.0,
            "lingering_time": 0,  # never drain a body we refused (or did not finish)
            "auto_decompress": False,  # never inflate: Content-Encoding is refused (415)
        }


_refused_log = RateLimitedLog()


def _log_refused(source: str, why: str) -> None:
    _refused_log(logging.WARNING, "connection from %s closed before TLS: %s", source, why)


def _listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as err:  # worded as asyncio's create_server words it
        sock.close()
        raise OSError(
            err.errno,
            f"error while attempting to bind on address {(host, port)!r}: "
            f"{(err.strerror or str(err)).lower()}",
        ) from None
    except BaseException:
        sock.close()
        raise
    return sock


class GuardedSite(web.BaseSite):
    """A TLS site whose connections are admitted before their handshake
    (:class:`webhooks.server.listener.GuardedListener`)."""

    __slots__ = ("_host", "_port", "_limits", "_table", "listener")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: Any,
        backlog: int,
        limits: ServerLimits,
        table: ConnectionTable | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port, self._limits = host, port, limits
        self._table = table
        self.listener: GuardedListener | None = None

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        from asyncio import sslproto

        if self._limits.tls_read_buffer > 0:
            sslproto.SSLProtocol.max_size = self._limits.tls_read_buffer  # type: ignore[attr-defined]
        server = self._runner.server
        assert server is not None and self._ssl_context is not None
        listener = GuardedListener(
            _listening_socket(self._host, self._port, self._backlog),
            ssl_context=self._ssl_context,
            limits=self._limits,
            protocol_factory=server,
            on_refused=_log_refused,
            table=self._table,
        )
        # aiohttp's Server hears of every closed connection (RequestHandler tells its
        # manager); the listener must too, to free the connection's place.
        forward = server.connection_lost

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            listener.connection_ended(handler)
            forward(handler, exc)

        server.connection_lost = connection_lost  # type: ignore[method-assign]
        listener.start()
        self.listener = listener
        self._server = listener  # type: ignore[assignment]


def raise_open_files_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (every connection is an fd;
    the common soft limit of 1024 stops accept() long before memory runs out)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise RLIMIT_NOFILE from %d to %d: %s", soft, hard, exc)
    return soft, hard
