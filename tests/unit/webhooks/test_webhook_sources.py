"""The webhook port under a multi-source attack, over real TLS on loopback: idle
connections from several source addresses fill the global cap, and the source that
sends valid AdmissionReviews (the API server) is still answered, every time
(webhooks.server.connections). Small caps keep the test cheap."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.webhook_server import WebhookServerThread, make_review, sample_view
from webhooks.server.certs import client_ssl_context
from webhooks.server.connections import ConnectionTable
from webhooks.server.site import ServerLimits

MUTATE = "/mutate-batch-v1-job"
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 8)]  # six source addresses
PER_SOURCE = 4
CAP = 12  # half of what the attackers can open within their per-source caps
LIMITS = ServerLimits(
    idle_timeout=60.0,
    handshake_timeout=60.0,
    max_connections=CAP,
    max_connections_per_source=PER_SOURCE,
)


def _job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"}, "spec": {}}  # fmt: skip


_BODY = json.dumps(make_review("Job", _job())).encode()


@pytest.fixture
def srv(tmp_path: Any) -> Iterator[WebhookServerThread]:
    with WebhookServerThread(view=sample_view(), cert_dir=tmp_path, limits=LIMITS) as s:
        yield s


def _review_once(srv: WebhookServerThread, source: str) -> int | str:
    """One review on a new connection from ``source``, no retry: the HTTP status, or
    the error that stopped it."""
    client = srv.client(source=source)
    try:
        return client.request("POST", MUTATE, _BODY, retry=False)[0]
    except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        client.close()


def _idle_tls(srv: WebhookServerThread, source: str) -> ssl.SSLSocket | None:
    """A TLS connection from ``source`` that never sends a request (None if refused)."""
    try:
        raw = socket.create_connection(
            ("127.0.0.1", srv.port), timeout=30, source_address=(source, 0)
        )
    except OSError:
        return None
    try:
        return client_ssl_context(srv.ca_file).wrap_socket(raw, server_hostname="127.0.0.1")
    except (OSError, ssl.SSLError):
        raw.close()
        return None


def _flood(srv: WebhookServerThread, held: list[Any]) -> int:
    """Every attacker source opens idle connections up to its per-source cap (TLS
    ones and silent TCP ones); returns how many the server let through."""
    opened = 0
    for source in ATTACKERS:
        for i in range(PER_SOURCE):
            if i % 2:
                try:
                    raw = socket.create_connection(
                        ("127.0.0.1", srv.port), timeout=30, source_address=(source, 0)
                    )
                except OSError:
                    continue  # refused at once
                held.append(raw)  # silent: not even a ClientHello
                opened += 1
            else:
                s = _idle_tls(srv, source)
                if s is not None:
                    held.append(s)
                    opened += 1
    return opened


def _close_all(held: list[Any]) -> None:
    for s in held:
        s.close()


def test_a_source_with_recent_valid_reviews_is_answered_while_others_fill_the_cap(
    srv: WebhookServerThread,
) -> None:
    assert _review_once(srv, "127.0.0.1") == 200  # the API server, before the attack
    held: list[Any] = []
    try:
        _flood(srv, held)
        answers = []
        for _ in range(5):
            _flood(srv, held)  # the attackers reconnect between reviews
            answers.append(_review_once(srv, "127.0.0.1"))
        assert answers == [200] * 5
        # its idle keep-alive connection is not taken by attackers either
        keep = srv.client(source="127.0.0.1")
        for _ in range(3):
            assert keep.request("POST", MUTATE, _BODY, retry=False)[0] == 200
            _flood(srv, held)
        keep.close()
    finally:
        _close_all(held)


def test_a_source_that_holds_no_connection_gets_in_when_the_port_is_full(
    srv: WebhookServerThread,
) -> None:
    """No source has reviewed yet (a restarted API server): the port is shared among
    sources, so a newcomer takes an idle place of the source holding the most."""
    held: list[Any] = []
    try:
        _flood(srv, held)
        assert [_review_once(srv, "127.0.0.1") for _ in range(3)] == [200] * 3
    finally:
        _close_all(held)


def test_sources_at_an_even_share_do_not_take_each_others_places() -> None:
    """The port's table: a newcomer whose source already holds as many connections as
    any other is refused (cheaply, before TLS), so attackers that are even do not
    churn; a recent reviewer's idle connections never give way to a non-reviewer's."""
    now = [0.0]
    table = ConnectionTable(trust_window=10.0, clock=lambda: now[0])
    for source in ("a", "b", "c"):
        for _ in range(2):
            table.add(source)
    assert table.victim("a") is None
    assert table.victim("d") is not None  # holds none: takes a place of a largest source
    reviewer = table.add("api")
    table.bind("api-conn", reviewer)
    table.end(table.begin("api-conn"), valid_review=True)
    table.add("api")
    table.add("api")  # the reviewer holds the most, all idle
    assert table.is_reviewer("api")
    victim = table.victim("d")
    assert victim is not None and victim.source != "api"
    assert table.victim("api") is not None  # a reviewer takes an attacker's place
    now[0] = 11.0  # its reviews are old: it is one source among others again
    assert not table.is_reviewer("api")
    victim = table.victim("d")
    assert victim is not None and victim.source == "api"


def test_a_connection_whose_handshake_ends_late_is_the_newest_idle_one_of_its_source() -> None:
    """A connection counts as idle from its handshake's end (``bind``), and takes its
    place then behind its source's connections idle for longer: the sweep, which stops
    at the first connection idle for less than the timeout, still closes those, and a
    newcomer on a full port takes the place of the least recently active one."""
    now = [0.0]
    table = ConnectionTable(clock=lambda: now[0])
    slow = table.add("a")  # accepted first, its handshake drags on
    quick = table.add("a")
    now[0] = 1.0
    table.bind("quick", quick, close=lambda: None)
    now[0] = 20.0
    table.bind("slow", slow, close=lambda: None)
    now[0] = 40.0  # quick has been idle 39 s, slow 20 s
    assert table.expired(idle_timeout=30.0, reviewer_idle_timeout=300.0) == [quick]
    table.add("a")
    assert table.victim("b") is quick


def test_the_stress_benchmarks_multi_source_attacker_holds_the_port_from_every_source(
    srv: WebhookServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m bench stress-sources``'s attacker, scaled down: its sources together
    try to hold more than the port takes, and hold at least the global cap."""
    from bench import stress

    monkeypatch.setattr(stress, "IDLE_PER_SOURCE", PER_SOURCE + 2)
    assert _review_once(srv, "127.0.0.1") == 200
    sources = ",".join(ATTACKERS)
    out = stress.attack(srv.port, 3.0, ("multi-idle",), sources)
    assert out["source"] == sources
    assert out["idleRefused"] > 0  # more than the port holds
    assert CAP <= out["idleHeldMax"] <= len(ATTACKERS) * PER_SOURCE
