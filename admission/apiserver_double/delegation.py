"""What an aggregated API server needs from kube-apiserver, in the double.

* ``TokenReview`` (``authentication.k8s.io/v1``): a token the double knows is its user.
* ``SubjectAccessReview`` (``authorization.k8s.io/v1``): decided by RBAC over the
  ``Role``/``ClusterRole``/``RoleBinding``/``ClusterRoleBinding`` objects stored in the
  double (``system:masters`` is always allowed, as kube-apiserver's authorizer chain
  does), so the shipped roles are what decide, as on a cluster. The double still does
  not authorize its *own* requests (README, D20); only these reviews evaluate RBAC.
* The aggregation layer: :meth:`Aggregator.register` routes ``/apis/<group>/...`` to an
  aggregated server (an ``APIService``'s backend) over TLS, verifying its certificate
  against the APIService's CA with the name ``<service>.<namespace>.svc``, presenting
  the front-proxy client certificate and naming the authenticated user in
  ``X-Remote-User``/``X-Remote-Group``, as kube-aggregator's proxy does; and the
  ``kube-system/extension-apiserver-authentication`` ConfigMap that tells aggregated
  servers which CA and names to trust (:meth:`Aggregator.auth_configmap`).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from .admission import UserInfo
from .errors import ApiError

Obj = dict[str, Any]
REVIEW_PATHS = {
    "/apis/authentication.k8s.io/v1/tokenreviews": "TokenReview",
    "/apis/authorization.k8s.io/v1/subjectaccessreviews": "SubjectAccessReview",
}
FRONT_PROXY_NAME = "front-proxy-client"


@dataclass(frozen=True, slots=True)
class ProxyClientCert:
    """The front-proxy PKI: a CA the aggregated servers trust and kube-apiserver's
    client certificate signed by it (``--proxy-client-cert-file``)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


@dataclass(slots=True)
class _Backend:
    url: str
    server_name: str
    ca_pem: bytes


@dataclass(slots=True)
class Aggregator:
    proxy_cert: ProxyClientCert | None = None
    backends: dict[str, _Backend] = field(default_factory=dict)  # group -> backend
    _session: aiohttp.ClientSession | None = None
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)

    def register(self, group: str, url: str, *, service: str, ca_pem: bytes) -> None:
        """Route ``/apis/<group>`` to ``url``; ``service`` is ``"namespace/name"``."""
        ns, name = service.split("/", 1)
        self.backends[group] = _Backend(url.rstrip("/"), f"{name}.{ns}.svc", ca_pem)

    def auth_configmap(self, *, client_ca_pem: bytes = b"") -> Obj:
        """``extension-apiserver-authentication`` as kube-apiserver publishes it."""
        data = {"client-ca-file": client_ca_pem.decode()} if client_ca_pem else {}
        if self.proxy_cert is not None:
            data.update(
                {
                    "requestheader-client-ca-file": self.proxy_cert.ca_pem.decode(),
                    "requestheader-allowed-names": f'["{FRONT_PROXY_NAME}"]',
                    "requestheader-username-headers": '["X-Remote-User"]',
                    "requestheader-group-headers": '["X-Remote-Group"]',
                    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
                    "requestheader-uid-headers": '["X-Remote-Uid"]',
                }
            )
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": data,
        }

    def backend_for(self, path: str) -> _Backend | None:
        seg = [s for s in path.split("/") if s]
        if len(seg) >= 2 and seg[0] == "apis":
            return self.backends.get(seg[1])
        return None

    def _context(self, backend: _Backend) -> ssl.SSLContext:
        ctx = self._contexts.get(backend.url)
        if ctx is None:
            ctx = ssl.create_default_context(cadata=backend.ca_pem.decode())
            if self.proxy_cert is not None:
                import os
                import tempfile

                with tempfile.TemporaryDirectory() as d:
                    cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
                    with open(cert, "wb") as f:
                        f.write(self.proxy_cert.cert_pem)
                    with open(key, "wb") as f:
                        f.write(self.proxy_cert.key_pem)
                    ctx.load_cert_chain(cert, key)
            self._contexts[backend.url] = ctx
        return ctx

    async def proxy(self, request: web.Request, user: UserInfo, backend: _Backend) -> web.Response:
        ctx = self._context(backend)
        headers = {"X-Remote-User": user.username, "Accept": request.headers.get("Accept", "*/*")}
        if self._session is None:
            self._session = aiohttp.ClientSession()
        # one X-Remote-Group header per group, as the aggregator sends them
        multi = [("X-Remote-Group", g) for g in user.groups]
        url = backend.url + request.path_qs
        try:
            async with self._session.request(
                request.method,
                url,
                headers=[*headers.items(), *multi],
                data=await request.read() or None,
                ssl=ctx,
                server_hostname=backend.server_name,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp:
                body = await resp.read()
                return web.Response(
                    body=body, status=resp.status, content_type=resp.content_type or None
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise ApiError(503, f"error trying to reach service: {err}") from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- reviews ----------------------------------------------------------------------------------


def token_review(body: Obj, users: dict[str, UserInfo]) -> Obj:
    token = ((body.get("spec") or {}).get("token")) or ""
    user = users.get(token)
    status: Obj = {"authenticated": user is not None}
    if user is not None:
        status["user"] = {"username": user.username, "groups": list(user.groups)}
    return {**body, "status": status}


def subject_access_review(body: Obj, objects: Iterable[Obj]) -> Obj:
    spec = body.get("spec") or {}
    user = str(spec.get("user") or "")
    groups = tuple(spec.get("groups") or ())
    allowed, reason = authorize(user, groups, spec, list(objects))
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {**body, "status": status}


def _subject_matches(subject: Obj, user: str, groups: tuple[str, ...], namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return user == f"system:serviceaccount:{ns}:{subject.get('name')}"
    return False


def _rule_allows(rule: Obj, spec: Obj) -> bool:
    def has(values: Iterable[str] | None, want: str) -> bool:
        values = list(values or [])
        return "*" in values or want in values

    nra = spec.get("nonResourceAttributes")
    if nra is not None:
        urls = rule.get("nonResourceURLs") or []
        path = nra.get("path") or ""
        ok = any(u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in urls)
        return ok and has(rule.get("verbs"), nra.get("verb") or "")
    ra = spec.get("resourceAttributes") or {}
    resource = ra.get("resource") or ""
    if ra.get("subresource"):
        resource += "/" + ra["subresource"]
    names = rule.get("resourceNames") or []
    return (
        has(rule.get("apiGroups"), ra.get("group") or "")
        and has(rule.get("resources"), resource)
        and has(rule.get("verbs"), ra.get("verb") or "")
        and (not names or (ra.get("name") or "") in names)
    )


def authorize(
    user: str, groups: tuple[str, ...], spec: Obj, objects: list[Obj]
) -> tuple[bool, str]:
    """RBAC's decision for one review (no aggregation rules, no escalation checks)."""
    if "system:masters" in groups:
        return True, ""
    roles = {
        (o["kind"], (o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    ra = spec.get("resourceAttributes")
    req_ns = (ra or {}).get("namespace") or ""
    for b in objects:
        kind = b.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bns = b["metadata"].get("namespace") or ""
        if kind == "RoleBinding" and (ra is None or bns != req_ns):
            continue  # a RoleBinding grants only inside its namespace, never non-resource URLs
        if not any(_subject_matches(s, user, groups, bns) for s in b.get("subjects") or []):
            continue
        ref = b.get("roleRef") or {}
        role = roles.get(
            (ref.get("kind"), bns if ref.get("kind") == "Role" else "", ref.get("name"))
        )
        if role is None:
            continue
        if any(_rule_allows(rule, spec) for rule in role.get("rules") or []):
            return True, f'RBAC: allowed by {kind} "{b["metadata"]["name"]}"'
    return False, ""
