"""The webhook port admits connections by source before their TLS handshake (issue 13
item 6, the stress benchmark's stall): over real HTTPS, a source over its cap is closed
before any handshake while other sources are served (unless its valid reviews were
answered: the API server), places are freed when connections close, and silent
connections do not hold up the handshakes of others."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review, sample_view
from webhooks.server.site import ServerLimits

MUTATE = "/mutate-batch-v1-job"
PER_SOURCE = 3
LIMITS = ServerLimits(
    idle_timeout=30.0, handshake_timeout=30.0, max_connections=40, max_connections_per_source=3
)


def _job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"}, "spec": {}}  # fmt: skip


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServerThread]:
    with WebhookServerThread(
        view=sample_view(), cert_dir=tmp_path_factory.mktemp("certs"), limits=LIMITS
    ) as s:
        yield s


def _held(
    srv: WebhookServerThread, source: str, n: int, *, reviews: bool = True
) -> list[ReviewClient]:
    """``n`` kept-alive connections from ``source``, each answered once: a valid review,
    or (``reviews`` false) a request that is not one (a 400)."""
    clients = []
    for _ in range(n):
        c = srv.client(source=source)
        if reviews:
            assert c.post(MUTATE, make_review("Job", _job()))[0] == 200
        else:
            assert c.post(MUTATE, b"{}")[0] == 400
        clients.append(c)
    return clients


def _server_closes(sock: socket.socket, wait: float = 10.0) -> bool:
    """True when the server closes ``sock`` (EOF or RST) within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_source_over_its_cap_is_closed_before_tls_while_others_are_served(
    srv: WebhookServerThread,
) -> None:
    held = _held(srv, "127.0.0.2", PER_SOURCE, reviews=False)
    try:
        # the same source once more: closed without a handshake (no ServerHello: the
        # server closes a connection that has sent nothing at all)
        raw = socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.2", 0))
        assert _server_closes(raw)
        raw.close()
        extra = srv.client(source="127.0.0.2")
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            extra.request("POST", MUTATE, json.dumps(make_review("Job", _job())).encode())
        extra.close()
        # another source is served meanwhile, and the held connections keep working
        other = srv.client(source="127.0.0.3")
        assert other.post(MUTATE, make_review("Job", _job()))[0] == 200
        other.close()
        for c in held:
            assert c.post(MUTATE, b"{}")[0] == 400
    finally:
        for c in held:
            c.close()


def test_the_api_servers_pool_is_not_held_to_the_per_source_cap(
    srv: WebhookServerThread,
) -> None:
    """Connections that served a valid review (the API server's pool: one address, a
    connection per concurrent call, kept) no longer count against their source's cap:
    it keeps three times as many, each answered. Connections from that address that
    have not served one (silent here) are still held to the cap."""
    held = _held(srv, "127.0.0.7", 3 * PER_SOURCE)
    silent: list[socket.socket] = []
    try:
        for c in held:
            assert c.post(MUTATE, make_review("Job", _job()))[0] == 200
        silent = [
            socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.7", 0))
            for _ in range(PER_SOURCE)
        ]
        refused = socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.7", 0))
        assert _server_closes(refused)
        refused.close()
        assert not _server_closes(silent[0], wait=0.5)
    finally:
        for c in held:
            c.close()
        for s in silent:
            s.close()


def test_proven_connections_of_one_address_hold_at_most_half_the_port(
    srv: WebhookServerThread,
) -> None:
    """Anyone may send a valid review: an address whose connections have all served one
    still gets no more than half the port (20 of 40 here), so it cannot hold every place
    the API server needs."""
    cap = LIMITS.max_connections // 2
    held = _held(srv, "127.0.0.8", cap)
    try:
        refused = socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.8", 0))
        assert _server_closes(refused)
        refused.close()
        other = srv.client(source="127.0.0.9")  # another address is served meanwhile
        assert other.post(MUTATE, make_review("Job", _job()))[0] == 200
        other.close()
    finally:
        for c in held:
            c.close()


def test_an_admitted_connection_waits_for_its_handshake_a_refused_one_does_not(
    srv: WebhookServerThread,
) -> None:
    """A silent TCP connection within the cap is given its handshake timeout (30 s
    here); one over the cap is closed at once: the cap is applied before TLS."""
    admitted = [
        socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.4", 0))
        for _ in range(PER_SOURCE)
    ]
    try:
        refused = socket.create_connection(("127.0.0.1", srv.port), source_address=("127.0.0.4", 0))
        assert _server_closes(refused)
        refused.close()
        assert not _server_closes(admitted[0], wait=0.5)  # still waiting for a ClientHello
    finally:
        for s in admitted:
            s.close()


def test_places_are_freed_when_connections_close(srv: WebhookServerThread) -> None:
    for _round in range(3):  # three times the cap, in turn, from one source
        for c in _held(srv, "127.0.0.5", PER_SOURCE):
            c.close()
        # the server hears of the closes asynchronously: a fresh client retries once
        c = srv.client(source="127.0.0.5")
        for attempt in range(50):
            try:
                assert c.post(MUTATE, make_review("Job", _job()))[0] == 200
                break
            except (ConnectionError, ssl.SSLError, OSError):
                c.close()
                if attempt == 49:
                    raise
                asyncio.run(asyncio.sleep(0.05))
        c.close()


def test_silent_connections_do_not_hold_up_other_handshakes(srv: WebhookServerThread) -> None:
    """Connections that never send a ClientHello (each within its source's cap, from
    many sources) wait out their handshake timeout without delaying anyone else: a
    handshake is not a scarce slot that a silent client can hold."""
    silent = [
        socket.create_connection(("127.0.0.1", srv.port), source_address=(f"127.0.1.{i}", 0))
        for i in range(1, 10)
        for _ in range(PER_SOURCE - 1)
    ]
    try:
        c = srv.client(source="127.0.0.6")
        assert c.post(MUTATE, make_review("Job", _job()))[0] == 200
        c.close()
    finally:
        for s in silent:
            s.close()
