"""Kueue's visibility API (``visibility.kueue.x-k8s.io``), served from the live queues.

The same answers as Kueue's visibility server (``pkg/visibility``, ``apis/visibility``):

* ``GET /apis/visibility.kueue.x-k8s.io/{v1beta1,v1beta2}/clusterqueues/{name}/pendingworkloads``
* ``GET .../namespaces/{ns}/localqueues/{name}/pendingworkloads``

with ``offset`` (default 0) and ``limit`` (default 1000, at most 100,000), each item a
``PendingWorkload``: metadata (name, namespace, creationTimestamp, ownerReferences),
``priority``, ``localQueueName``, ``positionInClusterQueue``, ``positionInLocalQueue``
— computed by :mod:`.queueview` from the scheduler's own queues, so they are what the
next cycles will take, in that order.

It is an *aggregated* API server: registered with an ``APIService``
(``manifests/base/visibility.yaml``), reached through kube-apiserver, so ``kubectl get
--raw /apis/visibility.kueue.x-k8s.io/v1beta1/...`` works as with Kueue. Every request
but the health checks is authenticated and authorized by delegation
(:mod:`admission.kube.client.delegated_auth`): the aggregator's front-proxy certificate and its
``X-Remote-*`` headers, client certificates, or a bearer token (TokenReview); then a
SubjectAccessReview for ``get`` on ``clusterqueues/pendingworkloads`` (cluster scope) or
``localqueues/pendingworkloads`` in the namespace. So a user granted the LocalQueue
viewer role in one namespace sees that namespace's LocalQueues and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from admission.engine.cache import Cache
from admission.kube.client.delegated_auth import Attributes, DelegatedAuth, User
from admission.kube.controller import Controller
from admission.kube.objects import rfc3339

from .queueview import LqUsage, PendingEntry, positions

log = logging.getLogger("quartermaster.visibility")

GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # preferred first, as Kueue registers them
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
Obj = dict[str, Any]


@dataclass(slots=True)
class VisibilitySource:
    """What the endpoints read: the live cache, and how to wait for a quiet moment."""

    cache: Cache
    cache_ready: Callable[[], Awaitable[None]]  # no scheduling cycle runs after this
    lq_usage: Callable[[str], LqUsage]  # ClusterQueue -> admission fair sharing order
    owner_references: Callable[[str], list[Obj]]  # workload key -> its ownerReferences


class ApiStatusError(Exception):
    """An error answered as a ``metav1.Status``."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def response(self) -> web.Response:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return web.json_response(body, status=self.code)


def _not_found(kind: str, name: str) -> ApiStatusError:
    # errors.NewNotFound(visibility.Resource("clusterqueue"), name)
    return ApiStatusError(
        404,
        "NotFound",
        f'{kind}.{GROUP} "{name}" not found',
        {"name": name, "group": GROUP, "kind": kind},
    )


def _forbidden(user: User, attrs: Attributes, reason: str) -> ApiStatusError:
    """The generic apiserver's forbidden message (``responsewriters.forbiddenMessage``)."""
    if attrs.path:
        msg = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        details: Obj | None = None
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = (
            f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        )
        msg = (
            f'{attrs.resource}.{GROUP} "{attrs.name}" is forbidden: User "{user.name}" cannot '
            f'{attrs.verb} resource "{resource}" in API group "{GROUP}" {scope}'
        )
        details = {"name": attrs.name, "group": GROUP, "kind": attrs.resource}
    if reason:
        msg += f": {reason}"
    return ApiStatusError(403, "Forbidden", msg, details)


def _int_param(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiStatusError(
            400, "BadRequest", f'{name}: invalid value "{raw}": must be an integer'
        ) from None


def bounded_limit_offset(limit: int, offset: int) -> tuple[int, int]:
    """Kueue's ``boundedLimitOffset`` after its defaulting (limit 0 means the default)."""
    if limit == 0:
        limit = DEFAULT_LIMIT
    return min(max(limit, 0), MAX_LIMIT), max(offset, 0)


def pending_workload(entry: PendingEntry, owners: list[Obj], *, position_in_lq: int) -> Obj:
    """One ``PendingWorkload`` (``pkg/visibility/storage/utils.go newPendingWorkload``)."""
    wl = entry.workload
    meta: Obj = {
        "name": wl.name,
        "namespace": wl.namespace,
        "creationTimestamp": rfc3339(wl.creation_time) if wl.creation_time else None,
    }
    refs = [
        {k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref} for ref in owners
    ]
    if refs:
        meta["ownerReferences"] = refs
    return {
        "metadata": meta,
        "priority": wl.priority,
        "localQueueName": wl.queue_name,
        "positionInClusterQueue": entry.position_in_cluster_queue,
        "positionInLocalQueue": position_in_lq,
    }


def summary(version: str, items: list[Obj]) -> Obj:
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{GROUP}/{version}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def cluster_queue_pending(
    source: VisibilitySource, name: str, *, version: str, offset: int, limit: int
) -> Obj:
    cache = source.cache
    if name not in cache.cluster_queues:
        raise _not_found("clusterqueue", name)
    items = []
    for entry in positions(cache, name, lq_usage=source.lq_usage(name)):
        i = entry.position_in_cluster_queue
        if i >= offset + limit:
            break
        if i >= offset:
            owners = source.owner_references(entry.workload.key)
            items.append(
                pending_workload(entry, owners, position_in_lq=entry.position_in_local_queue)
            )
    return summary(version, items)


def local_queue_pending(
    source: VisibilitySource, namespace: str, name: str, *, version: str, offset: int, limit: int
) -> Obj:
    cache = source.cache
    lq = cache.local_queues.get(f"{namespace}/{name}")
    if lq is None:
        raise _not_found("localqueue", name)
    items: list[Obj] = []
    skipped = 0
    for entry in positions(cache, lq.cluster_queue, lq_usage=source.lq_usage(lq.cluster_queue)):
        if len(items) >= limit:
            break
        wl = entry.workload
        if wl.namespace != namespace or wl.queue_name != name:
            continue
        if skipped < offset:
            skipped += 1
            continue
        owners = source.owner_references(wl.key)
        items.append(pending_workload(entry, owners, position_in_lq=len(items) + offset))
    return summary(version, items)


# -- discovery ------------------------------------------------------------------------------


def api_group() -> Obj:
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def api_resource_list(version: str) -> Obj:
    def res(name: str, singular: str, namespaced: bool, verbs: list[str]) -> Obj:
        return {
            "name": name,
            "singularName": singular,
            "namespaced": namespaced,
            "kind": "PendingWorkloadsSummary",
            "verbs": verbs,
        }

    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": [
            res("clusterqueues", "clusterqueue", False, []),
            res("clusterqueues/pendingworkloads", "", False, ["get"]),
            res("localqueues", "localqueue", True, []),
            res("localqueues/pendingworkloads", "", True, ["get"]),
        ],
    }


# -- the HTTP layer -------------------------------------------------------------------------


def _route(path: str) -> tuple[Attributes, Callable[..., Obj]] | None:
    """The request's authorization attributes and the function that answers it."""
    seg = [s for s in path.split("/") if s]
    if seg == ["apis"]:
        group = {k: v for k, v in api_group().items() if k not in ("kind", "apiVersion")}
        group_list = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
        return Attributes("get", path=path), lambda **_: group_list
    if len(seg) < 2 or seg[0] != "apis" or seg[1] != GROUP:
        return None
    if len(seg) == 2:
        return Attributes("get", path=path), lambda **_: api_group()
    version = seg[2]
    if version not in VERSIONS:
        return None
    rest = seg[3:]
    if not rest:
        return Attributes("get", path=path), lambda **_: api_resource_list(version)
    if len(rest) == 3 and rest[0] == "clusterqueues" and rest[2] == "pendingworkloads":
        name = rest[1]
        attrs = Attributes("get", GROUP, version, "clusterqueues", "pendingworkloads", name)
        return attrs, lambda source, offset, limit: cluster_queue_pending(
            source, name, version=version, offset=offset, limit=limit
        )
    if (
        len(rest) == 5
        and rest[0] == "namespaces"
        and rest[2] == "localqueues"
        and rest[4] == "pendingworkloads"
    ):
        ns, name = rest[1], rest[3]
        attrs = Attributes("get", GROUP, version, "localqueues", "pendingworkloads", name, ns)
        return attrs, lambda source, offset, limit: local_queue_pending(
            source, ns, name, version=version, offset=offset, limit=limit
        )
    return None


class VisibilityServer:
    """The aiohttp application and its TLS listener."""

    def __init__(self, source: VisibilitySource, *, auth: DelegatedAuth) -> None:
        self.source = source
        self.auth = auth
        self.requests = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in HEALTH_PATHS:
            return web.Response(text="ok")
        self.requests += 1
        try:
            user = await self.auth.authenticate(
                peer_cert_der=_peer_cert(request), headers=request.headers
            )
            if user is None:
                raise ApiStatusError(401, "Unauthorized", "Unauthorized")
            routed = _route(path)
            if routed is None:
                raise ApiStatusError(
                    404, "NotFound", "the server could not find the requested resource"
                )
            attrs, answer = routed
            if request.method not in ("GET", "HEAD"):
                raise ApiStatusError(
                    405, "MethodNotAllowed", f"{request.method} is not supported on {path}"
                )
            decision = await self.auth.authorize(user, attrs)
            if not decision.allowed:
                raise _forbidden(user, attrs, decision.reason)
            offset = _int_param(request, "offset", 0)
            limit = _int_param(request, "limit", DEFAULT_LIMIT)
            limit, offset = bounded_limit_offset(limit, offset)
            await self.source.cache_ready()
            return web.json_response(answer(source=self.source, offset=offset, limit=limit))
        except ApiStatusError as err:
            return err.response()
        except Exception as err:  # noqa: BLE001 - an API server answers, it does not crash
            log.exception("visibility request %s failed", path)
            return ApiStatusError(
                500, "InternalError", f"Internal error occurred: {err}"
            ).response()

    async def serve(
        self,
        *,
        host: str,
        port: int,
        cert_dir: str,
        ready: Callable[[int], None] = lambda _p: None,
        refresh_seconds: float = 60.0,
    ) -> None:
        """Serve HTTPS until cancelled; re-read the trust anchors and the serving
        certificate every ``refresh_seconds`` (rotation without a restart)."""
        await self.auth.refresh()
        ctx = _server_context(cert_dir)
        _trust(ctx, self.auth)
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, ssl_context=ctx)
            await site.start()
            ready(runner.addresses[0][1])
            while True:
                await asyncio.sleep(refresh_seconds)
                with contextlib.suppress(Exception):
                    if await self.auth.refresh():
                        _trust(ctx, self.auth)
                    _load_chain(ctx, cert_dir)
        finally:
            await runner.cleanup()


def _peer_cert(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der or None


def _load_chain(ctx: ssl.SSLContext, cert_dir: str) -> None:
    directory = Path(cert_dir)
    ctx.load_cert_chain(str(directory / "tls.crt"), str(directory / "tls.key"))


def _server_context(cert_dir: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cert_dir)
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _trust(ctx: ssl.SSLContext, auth: DelegatedAuth) -> None:
    """Ask for client certificates signed by the published CAs (the aggregator's
    front-proxy CA and the client CA). Which CA signed a certificate, and whether its
    name is allowed, is decided per request against the *current* anchors."""
    bundle = auth.anchors.pem_bundle
    if bundle:
        ctx.load_verify_locations(cadata=bundle)
        ctx.verify_mode = ssl.CERT_OPTIONAL


def source_of(controller: Controller) -> VisibilitySource:
    """The visibility source of a running :class:`admission.kube.controller.Controller`:
    its cache, its scheduler's admission-fair-sharing order (the leader's; a follower,
    which runs no scheduler, orders without it), the Workload informer's owners."""
    workloads = controller.informers["workloads"]

    def lq_usage(cq: str) -> LqUsage:
        sched = controller.scheduler
        tracker = sched.usage if sched is not None else None
        return tracker.lq_order_function(cq) if tracker is not None else None

    def owners(key: str) -> list[Obj]:
        obj = workloads.get(key) or {}
        return list((obj.get("metadata") or {}).get("ownerReferences") or [])

    return VisibilitySource(controller.cache, controller.cache_ready, lq_usage, owners)
