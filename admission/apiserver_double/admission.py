"""Calls admission webhooks over HTTPS on writes, the way kube-apiserver does.

The webhook configurations are ordinary stored objects
(``Mutating``/``ValidatingWebhookConfiguration``), so a controller that patches its
``caBundle`` through the API changes what the double trusts, exactly as on a cluster.
For each matching webhook (rules incl. subresources, ``scope``, ``namespaceSelector``
on the namespace's labels, ``objectSelector``) an ``AdmissionReview`` v1 is POSTed;
mutating webhooks run one after another in name order and their JSONPatch is applied,
validating ones run concurrently.  Denials become kube-apiserver's ``admission webhook
"x" denied the request: ...`` errors, warnings are returned for the ``Warning`` header,
and call failures honour ``failurePolicy`` and ``timeoutSeconds``.

``clientConfig.service`` cannot be resolved on loopback, so ``service_routes`` maps
``"namespace/name"`` to a base URL such as ``https://127.0.0.1:8443``; TLS is still
verified against ``caBundle`` with the in-cluster name ``<name>.<namespace>.svc``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import logging
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import jsonpatch

from .errors import ApiError, internal
from .resources import Registry, ResourceType
from .selectors import LabelSelector, label_selector_from_dict
from .store import Store
from .strategy import relabel
from .webhook_client import post_json, webhook_session

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_TIMEOUT_SECONDS = 10


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ("system:authenticated",)

    def as_dict(self) -> Obj:
        return {"username": self.username, "groups": list(self.groups)}


@dataclass(frozen=True, slots=True)
class AdmissionAttributes:
    """What is being written: the fields of an AdmissionReview request besides objects."""

    rt: ResourceType
    version: str
    subresource: str | None
    operation: str  # CREATE, UPDATE, DELETE
    name: str
    namespace: str | None
    user: UserInfo
    dry_run: bool = False


class WebhookCallError(Exception):
    """The webhook could not be called or answered badly (subject to failurePolicy)."""


class WebhookDispatcher:
    """Finds the webhooks matching a write and calls them."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        service_routes: Mapping[str, str],
        record: bool = True,
    ) -> None:
        for key in service_routes:
            if key.count("/") != 1:
                raise ValueError(f"service_routes key {key!r} must be 'namespace/name'")
        self._store = store
        self._registry = registry
        self._routes = dict(service_routes)
        self._session: aiohttp.ClientSession | None = None
        self._ssl_contexts: dict[str, ssl.SSLContext] = {}
        self.record = record  # keep every AdmissionReview sent in ``calls`` (tests)
        self.calls: list[Obj] = []

    def set_route(self, service: str, base_url: str) -> None:
        if service.count("/") != 1:
            raise ValueError(f"service route {service!r} must be 'namespace/name'")
        self._routes[service] = base_url

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- entry points -------------------------------------------------------------------

    async def mutate(
        self, attrs: AdmissionAttributes, obj: Obj | None, old: Obj | None
    ) -> tuple[Obj | None, list[str]]:
        """Run matching mutating webhooks in order; returns the patched object and warnings."""
        warnings: list[str] = []
        for config, hook in self._webhooks("mutatingwebhookconfigurations"):
            version = self._match(hook, attrs, obj, old)
            if version is None:
                continue
            response = await self._review(config, hook, attrs, version, obj, old, mutating=True)
            if response is None:
                continue
            warnings.extend(response.get("warnings") or [])
            if response.get("patch") and obj is not None and attrs.operation != "DELETE":
                obj = self._apply_patch(hook["name"], obj, response)
        return obj, warnings

    async def validate(
        self, attrs: AdmissionAttributes, obj: Obj | None, old: Obj | None
    ) -> list[str]:
        """Run matching validating webhooks concurrently; a denial raises ApiError."""
        calls = []
        for config, hook in self._webhooks("validatingwebhookconfigurations"):
            version = self._match(hook, attrs, obj, old)
            if version is not None:
                calls.append(self._review(config, hook, attrs, version, obj, old, mutating=False))
        results = await asyncio.gather(*calls, return_exceptions=True)
        warnings: list[str] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            if result is not None:
                warnings.extend(result.get("warnings") or [])
        return warnings

    # -- matching -----------------------------------------------------------------------

    def _webhooks(self, plural: str) -> list[tuple[Obj, Obj]]:
        rt = self._registry.resolve(f"{plural}.admissionregistration.k8s.io")
        return [
            (config, hook)
            for config in self._store.list(rt)
            for hook in config.get("webhooks") or []
        ]

    def _match(
        self, hook: Obj, attrs: AdmissionAttributes, obj: Obj | None, old: Obj | None
    ) -> str | None:
        """The version to send the object at if ``hook`` applies to this write, else None."""
        where = f"webhook {hook.get('name')!r}"
        version = None
        for rule in hook.get("rules") or []:
            version = _rule_version(
                rule, attrs, equivalent=hook.get("matchPolicy", "Equivalent") == "Equivalent"
            )
            if version is not None:
                break
        if version is None:
            return None
        if not self._namespace_selector(hook, attrs, obj, where=where).matches(
            self._namespace_labels(attrs, obj, old)
        ):
            return None
        selector = label_selector_from_dict(
            hook.get("objectSelector"), where=f"{where}.objectSelector"
        )
        labels = [
            ((o or {}).get("metadata") or {}).get("labels") for o in (obj, old) if o is not None
        ]
        if selector.requirements and not any(selector.matches(lb) for lb in labels):
            return None
        return version

    def _namespace_selector(
        self, hook: Obj, attrs: AdmissionAttributes, obj: Obj | None, *, where: str
    ) -> LabelSelector:
        if not attrs.rt.namespaced and attrs.rt.plural != "namespaces":
            return LabelSelector()
        return label_selector_from_dict(
            hook.get("namespaceSelector"), where=f"{where}.namespaceSelector"
        )

    def _namespace_labels(
        self, attrs: AdmissionAttributes, obj: Obj | None, old: Obj | None
    ) -> dict[str, str]:
        if attrs.rt.plural == "namespaces":
            source = obj if obj is not None else old
            return ((source or {}).get("metadata") or {}).get("labels") or {}
        ns_rt = self._registry.resolve("namespaces")
        namespace = self._store.get(ns_rt, "", attrs.namespace or "")
        return ((namespace or {}).get("metadata") or {}).get("labels") or {}

    # -- calling ------------------------------------------------------------------------

    async def _review(
        self,
        config: Obj,
        hook: Obj,
        attrs: AdmissionAttributes,
        version: str,
        obj: Obj | None,
        old: Obj | None,
        *,
        mutating: bool,
    ) -> Obj | None:
        """Call one webhook; None when it failed and ``failurePolicy`` is Ignore."""
        name = hook.get("name", "<unnamed>")
        if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, f'admission webhook "{name}" does not support dry run')
        review = _admission_review(attrs, version, obj, old)
        if self.record:
            self.calls.append(review)
        try:
            response = await self._post(hook, review)
            if not mutating and response.get("patch"):
                raise WebhookCallError("validating webhooks may not return patches")
        except WebhookCallError as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning(
                    "ignoring failed webhook %s (%s): %s", name, config["metadata"]["name"], exc
                )
                return None
            raise internal(f'failed calling webhook "{name}": {exc}') from exc
        if not response.get("allowed"):
            raise _denied(name, response.get("status"))
        return response

    async def _post(self, hook: Obj, review: Obj) -> Obj:
        url, server_hostname = self._endpoint(hook.get("clientConfig") or {})
        context = self._ssl_context((hook.get("clientConfig") or {}).get("caBundle"))
        timeout = aiohttp.ClientTimeout(total=hook.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS))
        if self._session is None:
            self._session = webhook_session()
        try:
            status, body = await post_json(
                self._session, url, review,
                ssl_context=context, server_hostname=server_hostname, timeout=timeout,
            )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": {exc!r}') from exc
        if status != 200:
            raise WebhookCallError(f"received invalid webhook response: HTTP {status}")
        response = body.get("response") if isinstance(body, dict) else None
        if not isinstance(response, dict):
            raise WebhookCallError("webhook response was absent")
        if body.get("apiVersion") != "admission.k8s.io/v1" or body.get("kind") != "AdmissionReview":
            raise WebhookCallError(
                f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                f"{body.get('apiVersion')}, Kind={body.get('kind')}"
            )
        if response.get("uid") != review["request"]["uid"]:
            raise WebhookCallError(
                f"expected response.uid={review['request']['uid']!r}, got {response.get('uid')!r}"
            )
        return response

    def _endpoint(self, client_config: Obj) -> tuple[str, str | None]:
        if client_config.get("url"):
            url = client_config["url"]
            if not url.startswith("https://"):
                raise WebhookCallError(f"webhook url {url!r} must use https")
            return url, None
        service = client_config.get("service")
        if not isinstance(service, dict) or not service.get("name") or not service.get("namespace"):
            raise WebhookCallError(
                f"clientConfig needs url or service{{namespace,name}}: {client_config!r}"
            )
        key = f"{service['namespace']}/{service['name']}"
        base = self._routes.get(key)
        if base is None:
            raise WebhookCallError(f'service "{key}" not found (no route configured in the double)')
        path = service.get("path") or "/"
        return base.rstrip("/") + (
            path if path.startswith("/") else f"/{path}"
        ), f"{service['name']}.{service['namespace']}.svc"

    def _ssl_context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        if key not in self._ssl_contexts:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle).decode()
                    context = ssl.create_default_context(cadata=pem)
                except (binascii.Error, ValueError, ssl.SSLError) as exc:
                    raise WebhookCallError(f"invalid caBundle: {exc}") from exc
            else:
                context = ssl.create_default_context()
            self._ssl_contexts[key] = context
        return self._ssl_contexts[key]

    def _apply_patch(self, name: str, obj: Obj, response: Obj) -> Obj:
        if response.get("patchType") != "JSONPatch":
            raise internal(
                f'webhook "{name}" returned unsupported patchType {response.get("patchType")!r}'
            )
        try:
            operations = json.loads(base64.b64decode(response["patch"]))
            return jsonpatch.JsonPatch(operations).apply(copy.deepcopy(obj))
        except (
            ValueError,
            binascii.Error,
            jsonpatch.JsonPatchException,
            KeyError,
            TypeError,
        ) as exc:
            raise internal(
                f'admission webhook "{name}" returned a patch that does not apply: {exc}'
            ) from exc


def _rule_version(rule: Obj, attrs: AdmissionAttributes, *, equivalent: bool) -> str | None:
    def listed(values: list[str] | None, value: str) -> bool:
        return values is not None and len(values) > 0 and ("*" in values or value in values)

    if not listed(rule.get("operations"), attrs.operation):
        return None
    if not listed(rule.get("apiGroups"), attrs.rt.group):
        return None
    if not _resource_listed(rule.get("resources") or [], attrs.rt.plural, attrs.subresource):
        return None
    scope = rule.get("scope", "*")
    if (
        scope == "Cluster"
        and attrs.rt.namespaced
        or scope == "Namespaced"
        and not attrs.rt.namespaced
    ):
        return None
    versions = rule.get("apiVersions") or []
    if "*" in versions or attrs.version in versions:
        return attrs.version
    if equivalent:
        return next((v for v in versions if v in attrs.rt.versions), None)
    return None


def _resource_listed(resources: list[str], plural: str, subresource: str | None) -> bool:
    for entry in resources:
        res, _, sub = entry.partition("/")
        if res not in ("*", plural):
            continue
        if subresource is None and not sub:
            return True
        if subresource is not None and sub in ("*", subresource):
            return True
    return False


def _admission_review(
    attrs: AdmissionAttributes, version: str, obj: Obj | None, old: Obj | None
) -> Obj:
    rt = attrs.rt
    kind = {"group": rt.group, "version": version, "kind": rt.kind}
    resource = {"group": rt.group, "version": version, "resource": rt.plural}
    options_kind = {
        "CREATE": "CreateOptions",
        "UPDATE": "UpdateOptions",
        "DELETE": "DeleteOptions",
    }[attrs.operation]
    request: Obj = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": {**kind, "version": attrs.version},
        "requestResource": {**resource, "version": attrs.version},
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": attrs.user.as_dict(),
        "object": relabel(obj, rt, version) if obj is not None else None,
        "oldObject": relabel(old, rt, version) if old is not None else None,
        "dryRun": attrs.dry_run,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _denied(name: str, status: Any) -> ApiError:
    """kube-apiserver's webhookerrors.ToStatusErr."""
    status = status if isinstance(status, dict) else {}
    code = status.get("code") or 0
    code = code if isinstance(code, int) and code >= 400 else 400
    denied_by = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    return ApiError(code, message, reason=status.get("reason") or "", details=status.get("details"))
