"""Helpers to drive the real webhook server in tests and benchmarks.

:class:`WebhookServerThread` runs :func:`webhooks.server.entry.run_webhook_server` on an
ephemeral loopback port in a background thread with its own event loop;
:class:`ReviewClient` is a blocking keep-alive HTTPS client that trusts only the test
CA; :func:`make_review` builds AdmissionReview bodies. ``python -m tests.support.webhook_server
CERT_DIR`` serves an in-memory model on an ephemeral port and prints ``ready PORT``
(the fuzz test runs the server that way so its memory can be measured alone).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import ssl
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from queues.model import ClusterQueue, LocalQueue, Namespace, PriorityClass, Workload
from webhooks.config import WebhookConfig
from webhooks.handlers.owners import OwnerSource
from webhooks.server.certs import CA_CERT_FILE, client_ssl_context, ensure_cert_dir
from webhooks.server.entry import run_webhook_server
from webhooks.server.health import WebhookState
from webhooks.server.site import ServerLimits
from webhooks.view import InMemoryView, ModelView

KINDS: dict[str, tuple[str, str, str]] = {
    "Job": ("batch", "v1", "Job"),
    "Pod": ("", "v1", "Pod"),
    **{
        k: ("kueue.x-k8s.io", "v1beta2", k)
        for k in (
            "ClusterQueue",
            "Cohort",
            "ResourceFlavor",
            "LocalQueue",
            "Topology",
            "Workload",
            "WorkloadPriorityClass",
        )
    },
}


def make_review(
    kind: str,
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    uid: str | None = None,
    namespace: str | None = None,
    username: str = "system:admin",
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 request for ``obj`` of ``kind`` (a key of :data:`KINDS`)."""
    group, version, k = KINDS[kind]
    meta = (obj or old or {}).get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": k},
        "resource": {"group": group, "version": version, "resource": k.lower() + "s"},
        "name": meta.get("name", ""),
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    ns = namespace if namespace is not None else meta.get("namespace")
    if ns:
        request["namespace"] = ns
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def decode_patch(review: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of a response ([] when there is none)."""
    response = review["response"]
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


class ReviewClient:
    """Blocking HTTPS client with one keep-alive connection, trusting only ``ca_file``."""

    def __init__(
        self,
        port: int,
        ca_file: str | Path,
        *,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        source: str | None = None,
    ) -> None:
        self.port = port
        self.host = host
        self.source = source  # the local address to connect from (another "client host")
        self.timeout = timeout
        self.context: ssl.SSLContext = client_ssl_context(ca_file)
        self._conn: http.client.HTTPSConnection | None = None

    def _connection(self) -> http.client.HTTPSConnection:
        if self._conn is None:
            self._conn = http.client.HTTPSConnection(
                self.host,
                self.port,
                context=self.context,
                timeout=self.timeout,
                source_address=(self.source, 0) if self.source else None,
            )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        *,
        retry: bool = True,
    ) -> tuple[int, bytes]:
        """One request; a kept-alive connection the server closed meanwhile is retried
        once on a new one, unless ``retry`` is false (the first failure raises)."""
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for attempt in (0, 1) if retry else (1,):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=hdrs)
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.close()
                return resp.status, data
            except (ConnectionError, http.client.HTTPException, ssl.SSLEOFError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body: dict[str, Any] | bytes) -> tuple[int, Any]:
        """POST a review; returns (status, parsed JSON for 200 else the text)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, data = self.request("POST", path, raw)
        if status == 200:
            return status, json.loads(data)
        return status, data.decode("utf-8", "replace")

    def get(self, path: str) -> tuple[int, str]:
        status, data = self.request("GET", path)
        return status, data.decode()


class WebhookServerThread:
    """The real server on 127.0.0.1:<ephemeral> in a daemon thread (context manager)."""

    def __init__(
        self,
        *,
        view: ModelView,
        config: WebhookConfig | None = None,
        cert_dir: str | Path,
        state: WebhookState | None = None,
        cert_check_interval: float = 3600.0,
        limits: ServerLimits | None = None,
        owners: OwnerSource | None = None,
    ) -> None:
        self.limits = limits
        self.owners = owners  # reads the owners of an object under review (None: none read)
        self.view = view
        self.config = config or WebhookConfig()
        self.cert_dir = Path(cert_dir)
        ensure_cert_dir(self.cert_dir)
        self.ca_file = self.cert_dir / CA_CERT_FILE
        self.state = state
        self.cert_check_interval = cert_check_interval
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="webhook-server", daemon=True)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        def ready(port: int) -> None:
            self.port = port
            self._ready.set()

        self._task = loop.create_task(
            run_webhook_server(
                view=self.view,
                config=self.config,
                cert_dir=self.cert_dir,
                host="127.0.0.1",
                port=0,
                ready_callback=ready,
                state=self.state,
                cert_check_interval=self.cert_check_interval,
                limits=self.limits,
                owners=self.owners,
            )
        )
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    def start(self) -> WebhookServerThread:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"webhook server did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(10)

    def client(self, *, source: str | None = None) -> ReviewClient:
        return ReviewClient(self.port, self.ca_file, source=source)

    def __enter__(self) -> WebhookServerThread:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def serving(
    view: ModelView, cert_dir: str | Path, config: WebhookConfig | None = None
) -> Iterator[ReviewClient]:
    """A client of the real server over ``view`` (a test fixture's whole body)."""
    with WebhookServerThread(view=view, config=config, cert_dir=cert_dir) as srv:
        client = srv.client()
        try:
            yield client
        finally:
            client.close()


def sample_view() -> InMemoryView:
    """A small model: LocalQueues team-a/default and team-a/queue-a, WPC ``default``."""
    return InMemoryView(
        local_queues={
            "team-a/default": LocalQueue("team-a", "default", "cq-a"),
            "team-a/queue-a": LocalQueue("team-a", "queue-a", "cq-a"),
        },
        workload_priority_classes={"default": PriorityClass("default", 100)},
        namespaces={"team-a": Namespace("team-a", {"team": "a"})},
    )


def _main(argv: list[str]) -> None:
    cert_dir = argv[0]
    ensure_cert_dir(cert_dir)

    async def main() -> None:
        def ready(port: int) -> None:
            print(f"ready {port}", flush=True)

        await run_webhook_server(
            view=sample_view(),
            config=WebhookConfig(),
            cert_dir=cert_dir,
            host="127.0.0.1",
            port=0,
            ready_callback=ready,
        )

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    _main(sys.argv[1:])


def cluster_queue_doc(name: str, *, cohort: str, nominal: str = "20") -> dict[str, Any]:
    """A one-flavor (``default``), cpu-only ClusterQueue in ``cohort``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
                    ],
                }
            ],
        },
    }


def pending_view(workloads: int, *, cluster_queues: int = 100, cohorts: int = 10) -> InMemoryView:
    """A model with ``workloads`` pending single-pod workloads spread over
    ``cluster_queues`` ClusterQueues (namespace and LocalQueue ``<cq>/lq`` each), every
    queue already full, so the impact what-if has the whole backlog to go through."""
    from queues.api import parse as api
    from queues.model import ResourceFlavor

    view = sample_view()
    view.flavors["default"] = ResourceFlavor("default")
    names = [f"cq-{i}" for i in range(cluster_queues)]
    for i, name in enumerate(names):
        doc = cluster_queue_doc(name, cohort=f"cohort-{i % cohorts}", nominal="0")
        view.cluster_queues[name] = cast(ClusterQueue, api.parse_model(doc))
        view.local_queues[f"{name}/lq"] = LocalQueue(name, "lq", name)
        view.namespaces[name] = Namespace(name, {})
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    for i in range(workloads):
        ns = names[i % len(names)]
        doc = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"wl-{i}",
                "namespace": ns,
                "uid": f"uid-{i}",
                "creationTimestamp": f"2026-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}Z",
            },
            "spec": {
                "queueName": "lq",
                "podSets": [{"name": "main", "count": 1, "template": template}],
            },
        }
        wl = cast(Workload, api.parse_model(doc))
        view.workloads[wl.key] = wl
    return view
