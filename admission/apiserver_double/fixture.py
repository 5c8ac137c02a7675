"""Ways to run the API-server double: in a thread, or on the caller's loop.

Synchronous callers (and code that runs its own event loop, such as a controller
under test started with ``asyncio.run``) use :func:`start_apiserver`, which runs the
server on a private loop in a daemon thread and returns an :class:`ApiServerThread`
whose hook methods are marshalled onto that loop.  Asyncio code that wants the server
on its own loop uses ``async with running_apiserver() as server``.  Client side:
:func:`write_kubeconfig` writes a kubeconfig file for ``kubectl`` and for the service.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .authn import ADMIN_TOKEN
from .certs import make_client_cert, make_serving_cert
from .delegation import FRONT_PROXY_NAME, ProxyClientCert
from .hooks import FaultRule, RecordedRequest
from .server import ApiServer

T = TypeVar("T")


def _tls_kwargs(tls: bool, kwargs: dict[str, Any]) -> bytes | None:
    if not tls:
        return None
    cert = make_serving_cert(["localhost"], ip_addresses=("127.0.0.1",))
    kwargs["ssl_context"] = cert.server_ssl_context()
    return cert.ca_pem


class ApiServerThread:
    """A running :class:`ApiServer` on its own loop in a daemon thread (thread-safe hooks)."""

    def __init__(self, *, tls: bool = False, **server_kwargs: Any) -> None:
        self.ca_pem = _tls_kwargs(tls, server_kwargs)
        self._kwargs = server_kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="apiserver-double", daemon=True)
        self._ready: Future[ApiServer] = Future()
        self._server: ApiServer | None = None
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def boot() -> ApiServer:
            server = ApiServer(**self._kwargs)
            await server.start()
            return server

        try:
            server = self._loop.run_until_complete(boot())
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._ready.set_exception(exc)
            return
        self._ready.set_result(server)
        self._loop.run_forever()

    def start(self) -> ApiServerThread:
        self._thread.start()
        self._server = self._ready.result(timeout=30)
        self.url = self._server.url
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self._server = None

    def __enter__(self) -> ApiServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def server(self) -> ApiServer:
        """The underlying server; touch it only through :meth:`call`."""
        if self._server is None:
            raise RuntimeError("the API-server double is not running")
        return self._server

    def call(self, fn: Callable[[ApiServer], T]) -> T:
        """Run ``fn(server)`` on the server's loop and return its result."""
        server = self.server
        if threading.current_thread() is self._thread:
            return fn(server)
        result: Future[T] = Future()

        def run() -> None:
            try:
                result.set_result(fn(server))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                result.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return result.result(timeout=30)

    # -- hooks (see ApiServer for their meaning) -------------------------------------------

    def fail_next(self, count: int = 1, *, code: int = 500, **filters: Any) -> FaultRule:
        return self.call(lambda s: s.fail_next(count, code=code, **filters))

    def clear_faults(self) -> None:
        self.call(lambda s: s.clear_faults())

    def drop_watches(self, *, abrupt: bool = False) -> int:
        return self.call(lambda s: s.drop_watches(abrupt=abrupt))

    def compact(self) -> None:
        self.call(lambda s: s.compact())

    def pause(self) -> None:
        self.call(lambda s: s.pause())

    def resume(self) -> None:
        self.call(lambda s: s.resume())

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.call(lambda s: list(s.requests))

    def request_count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        return self.call(lambda s: s.request_count(verb=verb, resource=resource))

    def clear_requests(self) -> None:
        self.call(lambda s: s.clear_requests())

    def set_service_route(self, service: str, base_url: str) -> None:
        self.call(lambda s: s.set_service_route(service, base_url))

    @property
    def resource_version(self) -> int:
        return self.call(lambda s: s.resource_version)

    @property
    def webhook_calls(self) -> list[dict[str, Any]]:
        """Every AdmissionReview the double sent, oldest first."""
        return self.call(lambda s: list(s.webhook_calls))

    def put_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.call(lambda s: s.put_object(obj))

    def get_object(
        self, resource: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        return self.call(lambda s: s.get_object(resource, name, namespace))

    def list_objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.call(lambda s: s.list_objects(resource, namespace))

    def delete_object(self, resource: str, name: str, namespace: str | None = None) -> bool:
        return self.call(lambda s: s.delete_object(resource, name, namespace))

    # -- client configuration -----------------------------------------------------------

    def write_kubeconfig(self, path: Path, *, token: str | None = ADMIN_TOKEN) -> Path:
        return write_kubeconfig(path, self.url, token=token, ca_pem=self.ca_pem)


def start_apiserver(*, tls: bool = False, **server_kwargs: Any) -> ApiServerThread:
    """Start the double in a background thread; use as ``with start_apiserver() as api:``.

    ``server_kwargs`` go to :class:`ApiServer` (``objects``, ``webhook_configurations``,
    ``service_routes``, ``tokens``, ``watch_window``, ``bookmark_interval``, ...).
    With ``tls=True`` it serves HTTPS with a fresh CA (``handle.ca_pem``).
    """
    return ApiServerThread(tls=tls, **server_kwargs).start()


@asynccontextmanager
async def running_apiserver(*, tls: bool = False, **server_kwargs: Any) -> AsyncIterator[ApiServer]:
    """Run the double on the current event loop for the duration of the block."""
    ca_pem = _tls_kwargs(tls, server_kwargs)
    server = ApiServer(**server_kwargs)
    server.ca_pem = ca_pem
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def enable_aggregation(server: ApiServer) -> None:
    """Give ``server`` kube-apiserver's aggregation layer: a front-proxy PKI of its own
    and the ``kube-system/extension-apiserver-authentication`` ConfigMap that tells the
    aggregated servers it proxies to (:meth:`.delegation.Aggregator.register`) which
    client CA and names to trust."""
    pki = make_client_cert(FRONT_PROXY_NAME)
    server.aggregator.proxy_cert = ProxyClientCert(pki.ca_pem, pki.cert_pem, pki.key_pem)
    server.put_object(server.aggregator.auth_configmap())


WEBHOOK_CONFIGURATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def load_webhook_configurations(
    path: Path, *, ca_bundle: str | None = None
) -> list[dict[str, Any]]:
    """The webhook configurations in a (multi-document) manifest file, e.g. from
    ``manifests/``; ``ca_bundle`` fills every ``clientConfig.caBundle`` when given."""
    configs = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not isinstance(doc, dict) or doc.get("kind") not in WEBHOOK_CONFIGURATION_KINDS:
            continue
        for i, hook in enumerate(doc.get("webhooks") or []):
            if not isinstance(hook, dict) or not isinstance(hook.get("clientConfig"), dict):
                name = (doc.get("metadata") or {}).get("name")
                raise ValueError(
                    f"{path}: {doc['kind']} {name!r} webhooks[{i}]: needs a clientConfig"
                )
            if ca_bundle is not None:
                hook["clientConfig"]["caBundle"] = ca_bundle
        configs.append(doc)
    return configs


def write_kubeconfig(
    path: Path,
    url: str,
    *,
    token: str | None = ADMIN_TOKEN,
    ca_pem: bytes | None = None,
    namespace: str = "default",
) -> Path:
    """Write a one-context kubeconfig for ``kubectl --kubeconfig path`` (the admin token
    unless given another; ``None`` for an anonymous kubeconfig)."""
    cluster: dict[str, Any] = {"server": url}
    if ca_pem:
        import base64

        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    user: dict[str, Any] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "double", "cluster": cluster}],
        "users": [{"name": "double", "user": user}],
        "contexts": [
            {
                "name": "double",
                "context": {"cluster": "double", "user": "double", "namespace": namespace},
            }
        ],
        "current-context": "double",
    }
    path.write_text(yaml.safe_dump(config))
    return path
