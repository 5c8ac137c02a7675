"""One client must not stall the webhook server (hardening, issue 13 items 5-8),
over real HTTPS: compressed bodies are refused unread, idle and slow connections
are closed in seconds, concurrent connections are capped, bad requests are logged
as one rate-limited line, and an absurd quantity is a field error."""

from __future__ import annotations

import json
import logging
import resource
import socket
import ssl
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review, sample_view
from webhooks.server import app as webhook_app
from webhooks.server.ratelog import RateLimitedLog
from webhooks.server.site import ServerLimits, raise_open_files_limit

MUTATE = "/mutate-batch-v1-job"
CQ = "/validate-kueue-x-k8s-io-v1beta2-clusterqueue"


def _tls(srv: WebhookServerThread) -> ssl.SSLSocket:
    ctx = srv.client().context
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def raw_exchange(srv: WebhookServerThread, data: bytes, wait: float = 5.0) -> tuple[bytes, bool]:
    """Send ``data`` on a fresh TLS connection (without finishing the body it
    announces), read what comes back; True when the server closed the connection."""
    s = _tls(srv)
    s.settimeout(wait)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass
    out = b""
    closed = False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except (ConnectionResetError, ssl.SSLError, OSError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        out += chunk
    s.close()
    return out, closed


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {},
    }


LIMITS = ServerLimits(
    idle_timeout=0.5, reviewer_idle_timeout=2.0, handshake_timeout=0.5, max_connections=8
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServerThread]:
    with WebhookServerThread(
        view=sample_view(), cert_dir=tmp_path_factory.mktemp("certs"), limits=LIMITS
    ) as s:
        yield s


@pytest.fixture()
def client(srv: WebhookServerThread) -> Iterator[ReviewClient]:
    c = srv.client()
    yield c
    c.close()


# ---------------------------------------------------------------- item 5: compressed bodies


def test_a_compressed_body_is_refused_with_415_before_it_is_read(srv: WebhookServerThread) -> None:
    bomb = zlib.compress(b"{" + b" " * (64 << 20))  # 64 MiB of JSON whitespace, ~64 KiB
    head = (
        f"POST {MUTATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: deflate\r\nContent-Length: {len(bomb) * 100}\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    answer, closed = raw_exchange(srv, head + bomb[:4096])  # most of the body never sent
    assert time.monotonic() - t0 < 2
    assert answer.startswith(b"HTTP/1.1 415"), answer[:200]
    assert b"Content-Encoding" in answer
    assert closed  # closed, not drained


def test_gzip_is_refused_too_and_identity_is_fine(
    srv: WebhookServerThread, client: ReviewClient
) -> None:
    body = json.dumps(make_review("Job", _job())).encode()
    status, _ = client.request("POST", MUTATE, zlib.compress(body), {"Content-Encoding": "gzip"})
    assert status == 415
    status, _ = client.request("POST", MUTATE, body, {"Content-Encoding": "identity"})
    assert status == 200


# ---------------------------------------------------------------- item 6: slow and idle clients


def test_a_silent_connection_is_closed_within_seconds(srv: WebhookServerThread) -> None:
    t0 = time.monotonic()
    answer, closed = raw_exchange(srv, b"", wait=5)
    assert closed and answer == b""
    assert time.monotonic() - t0 < 2.5


def test_headers_that_never_finish_are_cut_off(srv: WebhookServerThread) -> None:
    s = _tls(srv)
    s.settimeout(5)
    t0 = time.monotonic()
    s.sendall(b"POST " + MUTATE.encode() + b" HTTP/1.1\r\nHost: x\r\n")  # and then nothing
    try:
        assert s.recv(1024) == b""
    except (ConnectionResetError, ssl.SSLError):
        pass
    assert time.monotonic() - t0 < 2.5
    s.close()


def _closed_within(client: ReviewClient, seconds: float) -> bool:
    """Whether the server closes the client's kept-alive connection within ``seconds``."""
    conn = client._connection()
    assert conn.sock is not None
    conn.sock.settimeout(seconds)
    try:
        return conn.sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def test_an_idle_keepalive_connection_is_closed(client: ReviewClient) -> None:
    """After an answer that is not a valid review (here a 400), ``idle_timeout``."""
    assert client.post(MUTATE, b"{}")[0] == 400
    t0 = time.monotonic()
    assert _closed_within(client, 3)
    assert time.monotonic() - t0 < 1.5


def test_the_api_servers_idle_connection_is_kept_until_it_closes_it(
    client: ReviewClient,
) -> None:
    """After a valid review, ``reviewer_idle_timeout``: longer than the API server keeps
    an idle connection in its pool (90 s), so that it closes it first, never sending a
    review on a connection the server is closing (EOF, and the review fails)."""
    assert client.post(MUTATE, make_review("Job", _job()))[0] == 200
    sock = client._connection().sock
    t0 = time.monotonic()
    assert not _closed_within(client, 1.2)  # well past idle_timeout
    assert client.post(MUTATE, make_review("Job", _job()))[0] == 200
    assert client._connection().sock is sock  # on the same connection
    assert _closed_within(client, 5)
    assert 1.5 < time.monotonic() - t0 < 5


def test_a_stalled_tls_handshake_is_dropped(srv: WebhookServerThread) -> None:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    t0 = time.monotonic()
    try:
        assert sock.recv(1) == b""  # no ClientHello sent: the server gives up
    except ConnectionResetError:
        pass
    assert time.monotonic() - t0 < 2.5
    sock.close()


def test_connections_beyond_the_cap_are_closed_at_once(srv: WebhookServerThread) -> None:
    held = []
    try:
        for _ in range(LIMITS.max_connections):
            c = srv.client()
            assert c.post(MUTATE, make_review("Job", _job()))[0] == 200
            held.append(c)
        extra = srv.client()
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            extra.request("POST", MUTATE, json.dumps(make_review("Job", _job())).encode())
            raise ConnectionError("second attempt also refused")  # request() retries once
        extra.close()
    finally:
        for c in held:
            c.close()
    time.sleep(0.2)
    c = srv.client()
    assert c.post(MUTATE, make_review("Job", _job()))[0] == 200  # freed slots are reused
    c.close()


def test_the_open_files_soft_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        got = raise_open_files_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        assert got == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_tls_connection_gets_a_small_read_buffer_and_large_reviews_still_pass(
    client: ReviewClient,
) -> None:
    """asyncio's 256 KiB per-connection TLS buffer made 2,000 idle connections cost
    ~600 MiB (bench/stress.py); the server starts with one TLS record's worth, and a
    review far larger than the buffer is still read whole."""
    from asyncio import sslproto

    assert sslproto.SSLProtocol.max_size == ServerLimits().tls_read_buffer == 17 * 1024
    job = _job()
    job["metadata"]["annotations"] = {f"a{i}": "x" * 1000 for i in range(900)}  # ~0.9 MB
    status, body = client.request("POST", MUTATE, json.dumps(make_review("Job", job)).encode())
    assert status == 200 and json.loads(body)["response"]["uid"]


def test_a_request_body_is_waited_for_as_long_as_an_api_server_waits_for_the_answer() -> None:
    """The body deadline counts this server's own turns too (a busy loop reads a large
    body one TLS record per turn): shorter than the API server's wait, it refused
    reviews the API server was still waiting for (HTTP 408 under CPU load). The API
    server waits ``timeoutSeconds``, at most 30 (admissionregistration/v1), and the
    shipped configurations ask for no more than the deadline."""
    from pathlib import Path

    import yaml

    shipped = Path(__file__).resolve().parents[3] / "manifests" / "base" / "webhooks.yaml"
    assert ServerLimits().body_timeout >= 30
    for doc in yaml.safe_load_all(shipped.read_text()):
        for hook in (doc or {}).get("webhooks") or []:
            assert hook["timeoutSeconds"] <= ServerLimits().body_timeout


# ---------------------------------------------------------------- item 7: logging bad requests


def test_bad_requests_are_logged_as_one_rate_limited_line(
    client: ReviewClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_app, "_bad_request_log", RateLimitedLog(burst=3))
    caplog.set_level(logging.DEBUG, logger="quartermaster.webhooks")
    for _ in range(20):
        assert client.post(MUTATE, b"{not json")[0] == 400
    lines = [r for r in caplog.records if r.getMessage().startswith("bad request on ")]
    assert len(lines) == 3
    for r in lines:
        assert r.exc_info is None and "\n" not in r.getMessage()
        assert "malformed JSON" in r.getMessage()


# ---------------------------------------------------------------- item 8: absurd quantities


def test_a_quantity_above_the_exponent_cap_is_a_field_error(client: ReviewClient) -> None:
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "huge"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [{"name": "cpu", "nominalQuota": "1e1001"}],
                        }
                    ],
                }
            ],
        },
    }
    status, body = client.post(CQ, make_review("ClusterQueue", cq))
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] != 500, response
    message = response["status"]["message"]
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in message, message
    assert "1e1001" in message
    assert "Traceback" not in message


def test_plan_names_the_object_and_field_of_a_quantity_above_the_exponent_cap(
    tmp_path: Any,
) -> None:
    import yaml

    from tests.support.scenario_runner import run_plan_cli
    from tests.support.webhook_server import cluster_queue_doc

    f = tmp_path / "cq.yaml"
    f.write_text(yaml.safe_dump(cluster_queue_doc("huge", cohort="c", nominal="1e1001")))
    code, _doc, err = run_plan_cli(["-f", str(f)])
    assert code == 2, err
    assert "ClusterQueue huge" in err
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in err
    assert "1e1001" in err and "Traceback" not in err
