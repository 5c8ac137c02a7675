"""Raw-dict access to the Kubernetes API through the official ``kubernetes.aio`` client.

The service needs a handful of verbs on a dozen resources, on hot paths (watches of
thousands of Workloads), with exact control over patch content types. The generated
typed API would deserialize every object into pydantic models (5-10x slower than
``json.loads``) and silently turns a dict sent as ``json-patch+json`` into a
strategic-merge patch (``kubernetes/client/rest.py`` picks the type from the body). So this module uses the
official ``ApiClient`` for what it is good at — configuration (kubeconfig, in-cluster,
token refresh), authentication, TLS and the aiohttp connection pool — through
``param_serialize`` + ``call_api``, and speaks raw JSON dicts.

:class:`KubeClient` refuses a call that :mod:`admission.kube.client.resources` does not
declare, so that table is complete by construction.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import json
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from kubernetes.aio import config as kube_config
from kubernetes.aio.client import ApiClient, Configuration

from admission.integrations.framework.addressing import Resource
from admission.kube.client.errors import ApiError, UndeclaredCall, error_from, kubeconfig_problem
from admission.kube.client.kubeconfig import KubeconfigError, load_configuration
from admission.kube.client.ratelimit import (
    HIGH,
    READ_VERBS,
    ShareCredit,
    TokenBucket,
    current_priority,
)
from admission.kube.client.resources import API_CALLS, ApiCall
from admission.kube.client.unreachable import transport_reason

try:  # orjson parses watch lines several times faster; the stdlib is the fallback
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is installed with aiohttp extras here
    _loads = json.loads  # type: ignore[assignment]

log = logging.getLogger("quartermaster.kube.client")


class _PaidTurn:
    """A token taken by :meth:`KubeClient.turn`, spent by the first request after it."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = False


_turn: contextvars.ContextVar[_PaidTurn | None] = contextvars.ContextVar("paid_turn", default=None)

Obj = dict[str, Any]

_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH)
FIELD_MANAGER = "quartermaster"
"""The name every write is recorded under in ``managedFields`` (and the User-Agent's
product token): without it the client's default, ``OpenAPI-Generator``, shows up."""
USER_AGENT = f"{FIELD_MANAGER}/0.1.0"
WRITE_QUERY = (("fieldManager", FIELD_MANAGER),)


MAX_RETRIES = 10
"""How often a request the server answered ``429`` (or a 5xx) *with* ``Retry-After`` is
sent again before the error is raised: client-go's ``rest.Request`` default
(``maxRetries``; ``checkWait`` in ``rest/with_retry.go``)."""


class KubeClient:
    """Dict-in, dict-out requests over one ``kubernetes.aio`` ApiClient."""

    def __init__(
        self, api: ApiClient, *, request_timeout: float = 30.0, strict: bool = True
    ) -> None:
        self.api = api
        self.request_timeout = request_timeout
        self.strict = strict  # refuse calls missing from API_CALLS (tests' own clients: False)
        self.counts: Counter[str] = Counter()  # "verb group/resource[/sub]" -> requests
        self.errors: Counter[int] = Counter()
        self.on_request: Callable[[str], None] | None = None  # e.g. a metrics counter
        # (call, status) of every request sent again after a Retry-After answer
        self.on_retry: Callable[[str, int], None] | None = None
        self.retries: Counter[str] = Counter()
        # (call, status) of every answer that was not 2xx (status 0: no answer)
        self.on_error: Callable[[str, int], None] | None = None
        self.sleep: Callable[[float], Any] = asyncio.sleep  # the Retry-After waits
        self.limiter: TokenBucket | None = None  # clientConnection.qps/burst (see .ratelimit)
        # calls with a budget of their own, outside ``limiter`` (client-go gives the
        # event recorder its own client and rate limit: Events never delay decisions)
        self.own_budget: frozenset[str] = frozenset()
        # low-priority writes' share while decisions are written (see .ratelimit)
        self.share = ShareCredit()

    # -- construction -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        configuration: Configuration | None = None,
        context: str | None = None,
        strict: bool = True,
    ) -> KubeClient:
        """From an explicit configuration, a kubeconfig file, the default kubeconfig,
        or the in-cluster service account (in that order of preference)."""
        if configuration is None:
            configuration = Configuration()
            try:
                await load_configuration(configuration, kubeconfig=kubeconfig, context=context)
            except KubeconfigError:
                raise
            except (kube_config.ConfigException, OSError, ValueError) as err:
                raise KubeconfigError(kubeconfig_problem(kubeconfig, err)) from None
        if (
            not any(os.environ.get(v) for v in _PROXY_ENV)
            and getattr(configuration, "client_session_kwargs", None) is None
        ):
            # aiohttp's trust_env costs two thread hops per request (netrc, proxy
            # lookup); without proxy variables there is nothing to find.
            configuration.client_session_kwargs = {"trust_env": False}
        api = ApiClient(configuration=configuration)
        api.user_agent = USER_AGENT
        return cls(api, strict=strict)

    async def close(self) -> None:
        await self.api.close()

    # -- the raw request ------------------------------------------------------------------

    def _check(self, verb: str, res: Resource, sub: str | None) -> str:
        call = ApiCall(verb, res.group, res.plural, sub or "")
        if call not in API_CALLS and self.strict:
            raise UndeclaredCall(
                f"{call} is not declared in admission.kube.client.resources.API_CALLS"
            )
        return str(call)

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for the rate limit *before* deciding what to send.

        Inside the block the first request goes without waiting again; if none is sent
        (the caller found, on the state it sees once its turn came, that nothing needs
        writing), the token is refunded. A decision taken before a long wait for the
        budget is a decision on stale state: this is how a waiting write is replaced by
        a newer one, or dropped."""
        if self.limiter is None:
            yield
            return
        await self.limiter.acquire()
        paid = _PaidTurn()
        token = _turn.set(paid)
        try:
            yield
        finally:
            _turn.reset(token)
            if not paid.spent:
                self.limiter.refund()

    async def _admit(self, call: str) -> None:
        """Wait for the rate limit (unless a :meth:`turn` paid for it), then count the
        request as sent."""
        if self.limiter is not None and call not in self.own_budget:
            paid = _turn.get()
            if paid is not None and not paid.spent:
                paid.spent = True  # one token, one request (a task spawned inside shares it)
            else:
                await self.limiter.acquire(read=call.split(" ", 1)[0] in READ_VERBS)
        if call not in self.own_budget and current_priority() == HIGH:
            self.share.earn()
        self.counts[call] += 1
        if self.on_request is not None:
            self.on_request(call)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        call: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | aiohttp.ClientTimeout | None = None,
    ) -> Any:
        """One request, sent again (up to :data:`MAX_RETRIES` times) while the server
        answers 429 or a 5xx with ``Retry-After``, after the wait it asks for — as
        client-go's ``rest.Request`` does. Every attempt goes through the rate limit
        (client-go: "this request should also be throttled with the client-internal
        rate limiter"): a retry takes a new token, at the caller's priority, and is
        counted as a request. A throttled write was not applied, so sending the same
        body again is safe; a conditional one (pinned to a resourceVersion) answers
        409 if the object moved meanwhile, and the caller decides again as usual.
        With an explicit ``timeout`` the attempts share it (client-go's request
        context): no retry starts that could not finish within it."""
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if isinstance(timeout, (int, float)) else None
        attempt_timeout = timeout or self.request_timeout
        await self._admit(call)
        retries = 0
        while True:
            try:
                # the body is plain JSON already: skip the client's model sanitizing walk
                m, url, hdrs, _, post = await self.api.param_serialize(
                    method,
                    path,
                    query_params=query or None,
                    header_params=headers,
                    auth_settings=["BearerToken"],
                )
                resp = await self.api.call_api(
                    m, url, hdrs, body, post, _request_timeout=attempt_timeout
                )
                raw = await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self.errors[0] += 1
                if self.on_error is not None:
                    self.on_error(call, 0)
                raise ApiError(0, "TransportError", transport_reason(exc), call=call) from exc
            if 200 <= resp.status <= 299:
                return _loads(raw) if raw else None
            self.errors[resp.status] += 1
            if self.on_error is not None:
                self.on_error(call, resp.status)
            err = error_from(resp.status, raw, call, resp.getheader("Retry-After"))
            wait = err.wait
            if wait is None or retries >= MAX_RETRIES:
                raise err
            if deadline is not None:
                left = deadline - loop.time() - wait
                if left <= 0:
                    raise err
                attempt_timeout = left
            retries += 1
            self.retries[call] += 1
            if self.on_retry is not None:
                self.on_retry(call, resp.status)
            log.debug("%s: %s %s, sent again in %.1fs", call, err.status, err.reason, wait)
            await self.sleep(wait)
            await self._admit(call)

    # -- verbs ----------------------------------------------------------------------------

    async def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        call = self._check("get", res, None)
        path = res.path(namespace=namespace, name=name)
        return await self._send("GET", path, call=call, timeout=timeout)

    async def get_status(self, res: Resource, name: str, *, namespace: str | None = None) -> Obj:
        call = self._check("get", res, "status")
        path = res.path(namespace=namespace, name=name, subresource="status")
        return await self._send("GET", path, call=call)

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
    ) -> Obj:
        """One page of a list (``metadata.continue`` says whether more follow)."""
        call = self._check("list", res, None)
        query: list[tuple[str, Any]] = [("limit", limit)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if continue_token:
            query.append(("continue", continue_token))
        return await self._send("GET", res.path(namespace=namespace), call=call, query=query)

    async def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        call = self._check("create", res, None)
        return await self._send(
            "POST",
            res.path(namespace=namespace),
            call=call,
            query=list(WRITE_QUERY),
            body=body,
            content_type="application/json",
            timeout=timeout,
        )

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        *,
        namespace: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        """PUT: an update pinned to ``body.metadata.resourceVersion`` (409 when stale)."""
        call = self._check("update", res, None)
        return await self._send(
            "PUT",
            res.path(namespace=namespace, name=name),
            call=call,
            query=list(WRITE_QUERY),
            body=body,
            content_type="application/json",
            timeout=timeout,
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        body: Obj | builtins.list[Obj],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        """PATCH with an explicit content type (a list body must be a JSON patch)."""
        if content_type not in PATCH_TYPES:
            raise ValueError(f"unsupported patch content type {content_type!r}")
        if (content_type == JSON_PATCH) != isinstance(body, list):
            raise ValueError("a JSON patch is a list of operations; other patches are objects")
        call = self._check("patch", res, subresource)
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        return await self._send(
            "PATCH", path, call=call, query=list(WRITE_QUERY), body=body, content_type=content_type
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        propagation: str = "Background",
        grace_period_seconds: int | None = None,
    ) -> None:
        call = self._check("delete", res, None)
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        await self._send(
            "DELETE",
            res.path(namespace=namespace, name=name),
            call=call,
            body=body,
            content_type="application/json",
        )

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[Obj]:
        """Watch events (``{"type", "object"}`` dicts) until the server ends the stream.

        HTTP errors raise :class:`ApiError` (410 included); an ``ERROR`` event is
        yielded as is for the caller to interpret.
        """
        call = self._check("watch", res, None)
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        headers = {"Accept": "application/json"}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_seconds + 60)
        await self._admit(call)
        try:
            m, url, hdrs, data, post = await self.api.param_serialize(
                "GET",
                res.path(),
                query_params=query,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            resp = await self.api.call_api(m, url, hdrs, data, post, _request_timeout=timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.errors[0] += 1
            raise ApiError(0, "TransportError", transport_reason(exc), call=call) from exc
        raw_resp = resp.response
        try:
            if not 200 <= resp.status <= 299:
                self.errors[resp.status] += 1
                raw = await resp.read()
                raise error_from(resp.status, raw, call, resp.getheader("Retry-After"))
            while True:
                try:
                    line = await raw_resp.content.readline()
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                    raise ApiError(0, "TransportError", transport_reason(exc), call=call) from exc
                if not line:
                    return
                line = line.strip()
                if line:
                    yield _loads(line)
        finally:
            raw_resp.close()  # a half-read stream must not go back to the pool
