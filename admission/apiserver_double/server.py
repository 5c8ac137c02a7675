"""The API-server double's HTTP layer: routing, reads, watches and the test-hook API.

:class:`ApiServer` is an aiohttp application on 127.0.0.1 that speaks the Kubernetes
REST protocol well enough for the official ``kubernetes.aio`` client and ``kubectl``:
discovery, CRUD on the resources in :mod:`.resources`, the patch types, the status
subresource, selectors, watches, and admission webhooks.  Its public methods
(``fail_next``, ``drop_watches``, ``compact``, ``pause``, ``put_object`` ...) are the
hooks tests use; they must be called on the server's event loop -- from other threads
use the :class:`~.fixture.ApiServerThread` handle, which marshals them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from admission.apiserver_double import builtin, openapi, schema

from .admission import UserInfo, WebhookDispatcher
from .crds import CRD_DIR, TEST_CRD_DIR, custom_resources, load_crds
from .crdstate import CustomResourceDefinitions
from .delegation import REVIEW_PATHS, Aggregator, subject_access_review, token_review
from .errors import ApiError, bad_request
from .hooks import FaultInjector, FaultRule, RecordedRequest, RequestRecorder
from .operations import Operations, WriteContext
from .patches import PATCH_TYPES, parse_patch_body
from .resources import Registry, ResourceType, registry_with
from .responses import error_response, json_response, table, wants_table
from .selectors import parse_field_selector, parse_label_selector
from .store import Store
from .strategy import list_item, prepare_for_create, relabel, validate
from .watch import WatchOptions, stream_error, stream_watch

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_USER = UserInfo("system:admin", ("system:masters", "system:authenticated"))
ADMIN_TOKEN = "double-admin-token"
""":data:`DEFAULT_USER`'s (``system:masters``) token unless the server is given another
(``admin_token``).  The client helpers in :mod:`.fixture` send it unless given another."""
ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))
#: what RBAC's ``system:public-info-viewer`` lets everyone (anonymous too) read
PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
#: ``anonymous``: "refuse" is the real server (system:anonymous, 403 under RBAC);
#: "admin" treats requests without credentials as :data:`DEFAULT_USER`, because kubectl
#: (client-go) sends no bearer token over plain HTTP; "auto" is "refuse" when serving
#: HTTPS and "admin" over plain HTTP.
ANONYMOUS_MODES = ("auto", "refuse", "admin")
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-quartermaster-double",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_NOT_FOUND = ApiError(404, "the server could not find the requested resource")


@dataclass(frozen=True, slots=True)
class Target:
    """A resource request decoded from its URL."""

    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


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
        :data:`DEFAULT_USER` (a secret one where others can reach the port)."""
        if anonymous not in ANONYMOUS_MODES:
            raise ValueError(f"anonymous must be one of {ANONYMOUS_MODES}, got {anonymous!r}")
        if anonymous == "auto":
            anonymous = "refuse" if ssl_context is not None else "admin"
        self.anonymous = anonymous
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
        self._users = {admin_token: DEFAULT_USER}
        self._users.update({token: _user(token, spec) for token, spec in (tokens or {}).items()})
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
        self._users[token] = UserInfo(username, (*groups, "system:authenticated"))

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
                user = self._authenticate(request)
                record.user = user.username
                special = self._special(request)
                target = None if special is not None else self._parse_target(request.path)
                if target is not None:
                    record.verb = _verb(request, target)
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
                _refuse_anonymous(request, target, record.verb)
            await self._running.wait()
            fault = self.faults.check(record)
            if fault is not None:
                raise fault
            if special is not None:
                response = await special(user)
            elif target is None:
                response = self._non_resource(request)
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
                body = await _json_body(request)
                if not isinstance(body, dict) or body.get("kind") != record_kind:
                    raise bad_request(f"expected a {record_kind}")
                if record_kind == "TokenReview":
                    return json_response(token_review(body, self._users), status=201)
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

    def _authenticate(self, request: web.Request) -> UserInfo:
        """Bearer tokens as ``--token-auth-file``: a known token is its user, an unknown
        one 401; no credentials at all is ``system:anonymous`` (anonymous auth is on)."""
        header = request.headers.get("Authorization", "")
        if not header:
            return ANONYMOUS if self.anonymous == "refuse" else DEFAULT_USER
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        user = self._users.get(token)
        if user is None:
            raise ApiError(401, "Unauthorized")
        return user

    def _parse_target(self, path: str) -> Target | None:
        segments = [s for s in path.split("/") if s]
        if len(segments) >= 3 and segments[0] == "api":
            group, version, rest = "", segments[1], segments[2:]
        elif len(segments) >= 4 and segments[0] == "apis":
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return None
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            scoped = self.registry.lookup(group, version, rest[2])
            if scoped is not None and scoped.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise _NOT_FOUND
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if (namespace is not None and not rt.namespaced) or (
            rt.namespaced and name and namespace is None
        ):
            raise _NOT_FOUND
        if subresource is not None and subresource not in rt.subresources():
            raise _NOT_FOUND
        return Target(rt, version, namespace, name, subresource)

    def _non_resource(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            raise ApiError(405, f"{request.method} is not allowed on {request.path}")
        segments = [s for s in request.path.split("/") if s]
        body: Obj | None = None
        if segments == ["api"]:
            body = self.registry.api_versions(request.host)
        elif segments == ["apis"]:
            body = self.registry.api_group_list()
        elif len(segments) == 2 and segments[0] == "api":
            body = self.registry.api_resource_list("", segments[1])
        elif len(segments) == 2 and segments[0] == "apis":
            body = self.registry.api_group(segments[1])
        elif len(segments) == 3 and segments[0] == "apis":
            body = self.registry.api_resource_list(segments[1], segments[2])
        elif segments == ["version"]:
            body = VERSION_INFO
        elif segments and segments[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        elif segments[:2] == ["openapi", "v3"]:
            body = openapi.document(self.registry, segments[2:])
        if body is None:
            raise _NOT_FOUND
        return json_response(body)

    async def _resource(
        self, request: web.Request, target: Target, verb: str, user: UserInfo
    ) -> web.StreamResponse:
        query = request.query
        ctx = WriteContext(
            rt=target.rt,
            version=target.version,
            namespace=target.namespace,
            name=target.name,
            subresource=target.subresource,
            user=user,
            dry_run="All" in query.getall("dryRun", []),
            field_validation=schema.field_validation(query.get("fieldValidation")),
        )
        rt, version = target.rt, target.version
        if verb == "watch":
            return await self._watch(request, target)
        if verb == "list":
            return self._list(request, target)
        if verb == "get":
            obj = relabel(
                self.store.require(rt, target.namespace or "", target.name or ""), rt, version
            )
            if wants_table(request.headers.get("Accept", "")):
                return json_response(
                    table(
                        [obj], resource_version=str(self.store.revision),
                        columns=rt.printer_columns.get(version, ()),
                    )
                )  # fmt: skip
            return json_response(obj)
        if verb == "create":
            result = await self.operations.create(ctx, await _json_body(request))
        elif verb == "update":
            result = await self.operations.update(ctx, await _json_body(request))
        elif verb == "patch":
            content_type = request.content_type
            if content_type not in PATCH_TYPES:
                raise ApiError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
                )
            patch = parse_patch_body(content_type, await request.read())
            result = await self.operations.patch(
                ctx, content_type, patch, field_manager=query.get("fieldManager")
            )
        elif verb == "delete":
            result = await self.operations.delete(ctx, await _delete_options(request))
            if result.removed and not rt.builtin:
                return json_response(_success_status(rt, result.obj), warnings=result.warnings)
        elif verb == "deletecollection":
            return await self._delete_collection(request, target, ctx)
        else:
            raise ApiError(405, f"{request.method} is not supported on {request.path}")
        return json_response(
            relabel(result.obj, rt, version), status=result.status, warnings=result.warnings
        )

    def _selected(self, request: web.Request, target: Target) -> list[Obj]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(
            request.query.get("fieldSelector"), supported=target.rt.field_labels
        )
        return [
            obj
            for obj in self.store.list(target.rt, target.namespace)
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
        ]

    def _list(self, request: web.Request, target: Target) -> web.Response:
        rt, version = target.rt, target.version
        items = self._selected(request, target)
        metadata: Obj = {"resourceVersion": str(self.store.revision)}
        items = _paginate(request, items, metadata)
        if wants_table(request.headers.get("Accept", "")):
            return json_response(
                table(
                    items, resource_version=metadata["resourceVersion"],
                    columns=rt.printer_columns.get(version, ()),
                )
            )  # fmt: skip
        return json_response(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version(version),
                "metadata": metadata,
                "items": [list_item(obj, rt, version) for obj in items],
            }
        )

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), supported=target.rt.field_labels)
        timeout = self.max_watch_seconds  # --min-request-timeout when the client sets none
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])  # honoured as asked, even if longer
            except ValueError:
                raise bad_request(
                    f"timeoutSeconds: invalid value {query['timeoutSeconds']!r}"
                ) from None
        try:
            watcher = self.store.watch(
                target.rt, namespace=target.namespace, labels=labels, fields=fields,
                since=query.get("resourceVersion"),
            )  # fmt: skip
        except ApiError as error:
            if error.code != 410:
                raise
            return await stream_error(request, error)
        options = WatchOptions(
            version=target.version,
            timeout=timeout,
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            bookmark_interval=self.bookmark_interval,
            bookmark_before_timeout=self.bookmark_before_timeout,
        )
        return await stream_watch(
            request, store=self.store, watcher=watcher, rt=target.rt, options=options,
            gate=self._running.wait,
        )  # fmt: skip

    async def _delete_collection(
        self, request: web.Request, target: Target, ctx: WriteContext
    ) -> web.Response:
        options = await _delete_options(request)
        deleted = []
        warnings: list[str] = []
        for obj in self._selected(request, target):
            one = WriteContext(
                rt=ctx.rt, version=ctx.version, namespace=obj["metadata"].get("namespace"),
                name=obj["metadata"]["name"], subresource=None, user=ctx.user, dry_run=ctx.dry_run,
            )  # fmt: skip
            result = await self.operations.delete(one, options)
            warnings += result.warnings
            deleted.append(list_item(result.obj, ctx.rt, ctx.version))
        body = {
            "kind": f"{ctx.rt.kind}List",
            "apiVersion": ctx.rt.api_version(ctx.version),
            "metadata": {"resourceVersion": str(self.store.revision)},
            "items": deleted,
        }
        return json_response(body, warnings=warnings)


def _user(token: str, spec: str | tuple[str, Iterable[str]]) -> UserInfo:
    if isinstance(spec, str):
        return UserInfo(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return UserInfo(spec[0], tuple(spec[1]))
    raise ValueError(f"tokens[{token!r}]: expected a username or (username, groups), got {spec!r}")


def _refuse_anonymous(request: web.Request, target: Target | None, verb: str) -> None:
    """RBAC's answer to ``system:anonymous``: no binding grants it anything but the
    public-info paths (``system:discovery`` is bound to authenticated users only)."""
    if target is None:
        path = request.path.rstrip("/") or "/"
        if any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS):
            return
        raise ApiError(
            403,
            f'forbidden: User "system:anonymous" cannot {request.method.lower()} path '
            f'"{request.path}"',
            details={},
        )
    rt = target.rt
    resource = rt.plural + (f"/{target.subresource}" if target.subresource else "")
    subject = rt.qualified() + (f' "{target.name}"' if target.name else "")
    where = f' in the namespace "{target.namespace}"' if target.namespace else ""
    details: Obj = {"kind": rt.plural}
    if target.name:
        details["name"] = target.name
    if rt.group:
        details["group"] = rt.group
    raise ApiError(
        403,
        f'{subject} is forbidden: User "system:anonymous" cannot {verb} resource '
        f'"{resource}" in API group "{rt.group}"{where}',
        details=details,
    )


def _verb(request: web.Request, target: Target) -> str:
    method = request.method
    if method == "GET":
        if target.name is not None:
            return "get"
        return "watch" if request.query.get("watch") in ("true", "1") else "list"
    verbs = {
        ("POST", False): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }
    verb = verbs.get((method, target.name is not None))
    if verb is None:
        raise ApiError(405, f"{method} is not supported on {request.path}")
    return verb


JSON_MEDIA_TYPES = ("application/json", "application/yaml", "")


async def _json_body(request: web.Request) -> Any:
    """The JSON request body; protobuf/CBOR are 415, so client-go falls back to JSON."""
    if request.content_type not in JSON_MEDIA_TYPES and request.can_read_body:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types "
            f"include: application/json, application/yaml (got {request.content_type})",
        )
    raw = await request.read()
    try:
        if request.content_type == "application/yaml":
            return yaml.safe_load(raw) if raw else None
        return json.loads(raw) if raw else None
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"the request body is not valid {request.content_type}: {exc}") from exc


async def _delete_options(request: web.Request) -> Obj:
    body = await _json_body(request)
    if body is not None and not isinstance(body, dict):
        raise bad_request("DeleteOptions must be a JSON object")
    options = dict(body or {})
    for key in ("propagationPolicy", "orphanDependents"):
        if key in request.query and key not in options:
            value = request.query[key]
            options[key] = value == "true" if key == "orphanDependents" else value
    return options


def _success_status(rt: ResourceType, obj: Obj) -> Obj:
    meta = obj["metadata"]
    details: Obj = {"name": meta["name"], "kind": rt.plural, "uid": meta.get("uid")}
    if rt.group:
        details["group"] = rt.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _paginate(request: web.Request, items: list[Obj], metadata: Obj) -> list[Obj]:
    """``limit``/``continue`` over the (namespace, name)-sorted list (served from the latest state)."""
    token = request.query.get("continue")
    if token:
        try:
            start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise bad_request(f"continue: invalid token {token!r}") from None
        items = [
            o for o in items if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] >= start
        ]
    limit = request.query.get("limit")
    if limit:
        try:
            size = int(limit)
        except ValueError:
            raise bad_request(f"limit: invalid value {limit!r}") from None
        if 0 < size < len(items):
            nxt = items[size]["metadata"]
            start = [nxt.get("namespace", ""), nxt["name"]]
            metadata["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": start}).encode()
            ).decode()
            metadata["remainingItemCount"] = len(items) - size
            items = items[:size]
    return items


__all__ = ["ADMIN_TOKEN", "ANONYMOUS", "DEFAULT_NAMESPACES", "DEFAULT_USER", "ApiServer"]
