"""The real-server harness sends again what the API server asks to be sent again.

Right after a CRD is installed, and under load, kube-apiserver answers ``429`` with
``Retry-After`` ("storage is (re)initializing", throttling); client-go retries those,
and so do the harness's own requests (reads, setup, the cleanup between tests) and its
``kubectl`` runs (``tests/support/realserver/retry.py``). Runs without a real server: a local
HTTP stub plays the API server, a stub script plays ``kubectl``.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.realserver import retry
from tests.support.realserver.cluster import ApiRequestError, RealServerView

INITIALIZING = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "storage is (re)initializing",
    "reason": "TooManyRequests",
    "code": 429,
}


class StubApiServer:
    """Answers each request with the next of ``answers`` (status, Retry-After, body);
    the last one repeats."""

    def __init__(self, answers: list[tuple[int, str | None, Any]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                stub.seen.append((self.command, self.path))
                status, after, body = stub.answers[min(len(stub.seen), len(stub.answers)) - 1]
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if after is not None:
                    self.send_header("Retry-After", after)
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_DELETE = do_PATCH = do_POST = _answer

            def log_message(self, *_args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def ssl_context(self) -> None:
        return None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    return slept


@pytest.fixture
def api() -> Iterator[Any]:
    servers: list[StubApiServer] = []

    def start(answers: list[tuple[int, str | None, Any]]) -> StubApiServer:
        servers.append(StubApiServer(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_429_with_retry_after_is_sent_again(api: Any, no_sleep: list[float]) -> None:
    ns = {"kind": "Namespace", "metadata": {"name": "team-a"}}
    server = api([(429, "1", INITIALIZING), (429, "1", INITIALIZING), (200, None, ns)])
    view = RealServerView(server)  # type: ignore[arg-type]
    assert view.get_object("namespaces", "team-a") == ns
    assert len(server.seen) == 3
    assert no_sleep == [1.0, 1.0]


def test_a_429_without_retry_after_is_an_error(api: Any, no_sleep: list[float]) -> None:
    server = api([(429, None, INITIALIZING)])
    view = RealServerView(server)  # type: ignore[arg-type]
    with pytest.raises(ApiRequestError) as err:
        view.get_object("namespaces", "team-a")
    assert err.value.status == 429 and len(server.seen) == 1


def test_the_cleanup_between_tests_survives_a_reinitializing_storage(
    api: Any, no_sleep: list[float]
) -> None:
    listed = {
        "kind": "ClusterQueueList",
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "items": [{"metadata": {"name": "cq"}}],
    }
    server = api([(200, None, listed), (429, "1", INITIALIZING), (200, None, {"kind": "Status"})])
    RealServerView(server).delete_all("clusterqueues")  # type: ignore[arg-type]
    assert [m for m, _ in server.seen] == ["GET", "DELETE", "DELETE"]


def test_kubectl_is_run_again_when_the_server_kept_answering_429(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    stub = tmp_path / "kubectl"
    stub.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{count}"\n'
        f'if [ "$(wc -l < "{count}")" -lt 2 ]; then\n'
        '  echo "Error from server (TooManyRequests): storage is (re)initializing" >&2\n'
        "  exit 1\n"
        "fi\n"
        'echo "customresourcedefinition.apiextensions.k8s.io/jobsets.jobset.x-k8s.io created"\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    res = retry.run_kubectl([str(stub), "apply", "-f", "x.yaml"], sleep=lambda _s: None)
    assert res.returncode == 0, res.stderr
    assert "created" in res.stdout
    assert count.read_text().count("x") == 2
    assert os.access(stub, os.X_OK)
