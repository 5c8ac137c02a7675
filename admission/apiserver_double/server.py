"""The API-server double itself: its state, lifecycle, test hooks and request pipeline.

:class:`ApiServer` is an aiohttp application on 127.0.0.1 that speaks the Kubernetes
REST protocol well enough for the official ``kubernetes.aio`` client and ``kubectl``:
discovery, CRUD on the resources in :mod:`.resources`, the patch types, the status
subresource, selectors, watches, and admission webhooks.  Every request passes the same
pipeline here -- recorded, authenticated (:mod:`.authn`), decoded (:mod:`.request`),
held while paused, failed if a fault matches -- and is then answered by one of the
endpoints: :mod:`.discovery`, :mod:`.handlers`, :mod:`.watch`, the review APIs and
aggregated groups of :mod:`.delegation`.  Its public methods (``fail_next``,
``drop_watches``, ``compact``, ``pause``, ``put_object`` ...) are the hooks tests use;
they must be called on the server's event loop -- from other threads use the
:class:`~.fixture.ApiServerThread` handle, which marshals them.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from admission.apiserver_double import builtin, schema

from .admission import UserInfo, WebhookDispatcher
from .authn import ADMIN_TOKEN, ANONYMOUS, Authenticator, refuse_anonymous
from .crds import CRD_DIR, TEST_CRD_DIR, custom_resources, load_crds
from .crdstate import CustomResourceDefinitions
from .delegation import REVIEW_PATHS, Aggregator, subject_access_review, token_review
from .discovery import non_resource
from .errors import ApiError, bad_request
from .handlers import serve_resource
from .hooks import FaultInjector, FaultRule, RecordedRequest, RequestRecorder
from .operations import Operations
from .request import Target, json_body, parse_target, request_verb, write_context
from .resources import Registry, ResourceType, registry_with
from .responses import error_response, json_response
from .store import Store
from .strategy import prepare_for_create, validate
from .watch import serve_watch

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ApiServer:
    """A Kubernetes API server double bound to the event loop it is started on."""

    def __init__(
        self,
        *,
        extra_resources: Iterable[ResourceType] = (),
        objects: Iterable[Obj] = (),
        webhook_configurations: Iterable[Obj] = (),
        service_routes: Mapping[str, str] | None = None,
        tokens: Mapping[str, str | tuple[str, Iterable[str]]] | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        watch_window: int = 1000,
        bookmark_interval: float = 60.0,
        bookmark_before_timeout: float = 2.0,
        max_watch_seconds: float = 1800.0,
        ssl_context: ssl.SSLContext | None = None,
        record_requests: bool = True,
        anonymous: str = "auto",
        third_party_crds: bool = True,
        admin_token: str = ADMIN_TOKEN,
    ) -> None:
        """``third_party_crds``: install the job kinds' operator CRDs of ``tests/support/crds/``
        besides the project's own (``manifests/crd/``, always installed); False starts
        from a plain cluster, where a test installs the CRDs it needs as objects.
        ``record_requests``: keep every request and every AdmissionReview sent (the
        ``requests`` and ``webhook_calls`` of tests); False keeps only the counts, so a
        long-running double's memory stays bounded. ``admin_token``: the bearer token of
        :data:`.authn.DEFAULT_USER` (a secret one where others can reach the port)."""
        self.authn = Authenticator(
            anonymous=anonymous,
            https=ssl_context is not None,
            admin_token=admin_token,
            tokens=tokens,
        )
        if bookmark_interval <= 0 or max_watch_seconds <= 0:
            raise ValueError("bookmark_interval and max_watch_seconds must be positive")
        self.registry: Registry = registry_with(extra_resources)
        self.store = Store(self.registry, window=watch_window)
        self.dispatcher = WebhookDispatcher(
            store=self.store,
            registry=self.registry,
            service_routes=service_routes or {},
            record=record_requests,
        )
        self.operations = Operations(
            store=self.store, registry=self.registry, dispatcher=self.dispatcher
        )
        self.crds = CustomResourceDefinitions(self.registry, self.store)
        directories = (CRD_DIR, TEST_CRD_DIR) if third_party_crds else (CRD_DIR,)
        for directory in directories:
            custom_resources(directory)  # checked (cached): a refused CRD fails every start
            for crd in load_crds(directory):
                self.put_object(crd)
        self.faults = FaultInjector()
        self.aggregator = Aggregator()  # APIServices: register(group, url, ...)
        self.recorder = RequestRecorder(enabled=record_requests)  # counts are always kept
        self.bookmark_interval = bookmark_interval
        self.bookmark_before_timeout = bookmark_before_timeout
        self.max_watch_seconds = max_watch_seconds
        self._ssl_context = ssl_context
        self._running = asyncio.Event()
        self._running.set()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.ca_pem: bytes | None = None  # the CA to trust when serving HTTPS (set by fixtures)
        for name in namespaces:
            self.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for obj in [*objects, *webhook_configurations]:
            self.put_object(obj)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, *, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host`` (an ephemeral port by default); returns the base URL."""
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=0.5,
            handler_cancellation=True,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self._ssl_context)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        bound_port = sockets[0].getsockname()[1]
        scheme = "https" if self._ssl_context else "http"
        self.url = f"{scheme}://{host}:{bound_port}"
        return self.url

    async def stop(self) -> None:
        self.resume()
        self.store.drop_watches()
        await self.dispatcher.close()
        await self.aggregator.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- test hooks ------------------------------------------------------------------------

    def fail_next(self, count: int = 1, *, code: int = 500, **filters: Any) -> FaultRule:
        """Answer the next ``count`` requests matching ``filters`` (verb, resource,
        namespace, name; resource is ``plural`` or ``plural/status``) with ``code``."""
        return self.faults.add(count, code=code, **filters)

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch (cleanly, or by killing the connection); returns how many."""
        return self.store.drop_watches(abrupt=abrupt)

    def compact(self) -> None:
        """Expire the watch event window: resuming from any older revision gets 410."""
        self.store.compact()

    def pause(self) -> None:
        """Hold every new request and every watch delivery until :meth:`resume`."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.recorder.requests

    def request_count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        return self.recorder.count(verb=verb, resource=resource)

    def clear_requests(self) -> None:
        self.recorder.clear()

    def add_user(self, token: str, username: str, groups: Iterable[str] = ()) -> None:
        """Accept ``token`` as ``username`` (in ``groups`` and system:authenticated)."""
        self.authn.add_user(token, username, groups)

    def set_service_route(self, service: str, base_url: str) -> None:
        """Route webhook ``clientConfig.service`` ``"namespace/name"`` to ``base_url``."""
        self.dispatcher.set_route(service, base_url)

    @property
    def resource_version(self) -> int:
        return self.store.revision

    @property
    def webhook_calls(self) -> list[Obj]:
        """Every AdmissionReview sent to a webhook, oldest first."""
        return self.dispatcher.calls

    def put_object(self, obj: Obj) -> Obj:
        """Create or overwrite an object directly (no admission; ``status`` is kept).

        The object is still decoded and validated as a request would be: an unknown
        field or a value the CRD's schema or CEL rules refuse raises ApiError, as
        ``kubectl apply`` would fail on a cluster."""
        rt = self._type_of(obj)
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if rt.namespaced else None)
        existing = self.store.get(rt, namespace or "", meta.get("name", ""))
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {}).pop("resourceVersion", None)
        if existing is None:
            new = prepare_for_create(rt, body, namespace=namespace)
            builtin.prepare_create(rt, new)
            if "status" in obj:
                new["status"] = copy.deepcopy(obj["status"])
            schema.decode(rt, new, directive="Strict", version=rt.storage_version)
            schema.settle(rt, new)
            validate(rt, new)
            schema.validate(rt, new, None)
            return copy.deepcopy(self.store.insert(rt, new))
        new = builtin.apply_defaults(
            rt, {**body, "apiVersion": existing["apiVersion"], "kind": rt.kind}
        )
        for key in ("uid", "creationTimestamp", "generation", "namespace", "name"):
            if key in existing["metadata"]:
                new["metadata"][key] = existing["metadata"][key]
        schema.decode(rt, new, directive="Strict", version=rt.storage_version)
        schema.settle(rt, new)
        validate(rt, new)
        schema.validate(rt, new, existing)
        replaced = self.store.replace(rt, new, expected_rv=existing["metadata"]["resourceVersion"])
        return copy.deepcopy(replaced)

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        """A deep copy of a stored object, or None; ``resource`` as in kubectl (``jobs``,
        ``workloads.kueue.x-k8s.io``, ``wl``)."""
        rt = self.registry.resolve(resource)
        obj = self.store.get(rt, namespace or "", name)
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return copy.deepcopy(self.store.list(self.registry.resolve(resource), namespace))

    def delete_object(self, resource: str, name: str, namespace: str | None = None) -> bool:
        """Delete as the garbage collector would (finalizers honoured, no admission);
        the controllers' follow-up (dependents, a namespace's contents, the kubelet's
        confirmation) happens before this returns."""
        rt = self.registry.resolve(resource)
        obj = self.store.get(rt, namespace or "", name)
        if obj is None:
            return False
        self.operations.remove_or_mark(rt, obj, policy="Background")
        self.operations.controllers.run_now()
        return True

    def _type_of(self, obj: Obj) -> ResourceType:
        if not isinstance(obj, dict):
            raise ValueError(f"object must be a dict, got {type(obj).__name__}")
        group, _, version = (obj.get("apiVersion") or "").rpartition("/")
        for rt in self.registry:
            if rt.group == group and version in rt.versions and rt.kind == obj.get("kind"):
                return rt
        raise ValueError(
            f"object {obj.get('metadata', {}).get('name')!r}: the double serves no kind "
            f"{obj.get('kind')!r} in apiVersion {obj.get('apiVersion')!r}"
        )

    # -- request handling ------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            content_type=request.headers.get("Content-Type", ""),
            verb="other",
            resource="",
            namespace="",
            name="",
            user="",
        )
        try:
            user = ANONYMOUS
            special = None
            try:
                user = self.authn.authenticate(request)
                record.user = user.username
                special = self._special(request)
                target = None if special is not None else parse_target(self.registry, request.path)
                if target is not None:
                    record.verb = request_verb(request, target)
                    record.resource = target.rt.plural + (
                        f"/{target.subresource}" if target.subresource else ""
                    )
                    record.namespace = target.namespace or ""
                    record.name = target.name or ""
                elif request.path.startswith(("/api", "/openapi", "/version")):
                    record.verb = "discovery"
            finally:
                self.recorder.record(record)
            if user is ANONYMOUS:
                refuse_anonymous(request, target, record.verb)
            await self._running.wait()
            fault = self.faults.check(record)
            if fault is not None:
                raise fault
            if special is not None:
                response = await special(user)
            elif target is None:
                response = non_resource(request, self.registry)
            else:
                if record.verb == "watch":
                    record.status = 200  # the stream is open; updated if it fails to start
                response = await self._resource(request, target, record.verb, user)
        except ApiError as error:
            response = error_response(error)
        except Exception as exc:  # a bug in the double must still answer like a server
            log.exception("API-server double failed on %s %s", request.method, request.path)
            response = error_response(ApiError(500, f"Internal error occurred: {exc!r}"))
        record.status = response.status
        return response

    def _special(self, request: web.Request) -> Any:
        """TokenReview/SubjectAccessReview, or a request for an aggregated API group."""
        kind = REVIEW_PATHS.get(request.path)
        if kind is not None:
            record_kind = kind

            async def review(user: UserInfo) -> web.Response:
                if request.method != "POST":
                    raise ApiError(405, f"{request.method} is not allowed on {request.path}")
                body = await json_body(request)
                if not isinstance(body, dict) or body.get("kind") != record_kind:
                    raise bad_request(f"expected a {record_kind}")
                if record_kind == "TokenReview":
                    return json_response(token_review(body, self.authn.users), status=201)
                objects = [
                    o
                    for plural in ("clusterroles", "clusterrolebindings", "roles", "rolebindings")
                    for o in self.store.list(self.registry.resolve(plural), None)
                ]
                return json_response(subject_access_review(body, objects), status=201)

            return review
        backend = self.aggregator.backend_for(request.path)
        if backend is not None:
            return lambda user: self.aggregator.proxy(request, user, backend)
        return None

    async def _resource(
        self, request: web.Request, target: Target, verb: str, user: UserInfo
    ) -> web.StreamResponse:
        ctx = write_context(request, target, user)  # its query is checked on every verb
        if verb == "watch":
            return await serve_watch(
                request, target, store=self.store, max_seconds=self.max_watch_seconds,
                bookmark_interval=self.bookmark_interval,
                bookmark_before_timeout=self.bookmark_before_timeout, gate=self._running.wait,
            )  # fmt: skip
        return await serve_resource(
            request, target, verb=verb, ctx=ctx, store=self.store, operations=self.operations
        )


__all__ = ["DEFAULT_NAMESPACES", "ApiServer"]
