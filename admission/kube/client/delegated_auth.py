"""Delegated authentication and authorization for the aggregated visibility API.

kube-apiserver forwards ``/apis/visibility.kueue.x-k8s.io/...`` to our server (an
``APIService``), over TLS, presenting its *front-proxy* client certificate and naming
the user it authenticated in headers (``X-Remote-User``, ``X-Remote-Group``,
``X-Remote-Extra-*``). An aggregated server must not trust those headers from anyone
else, so — like every server built on ``k8s.io/apiserver`` (Kueue's visibility server,
metrics-server) with ``DelegatingAuthenticationOptions`` — it reads the trust anchors
the cluster publishes in ``kube-system/extension-apiserver-authentication``:

* ``requestheader-client-ca-file`` + ``requestheader-allowed-names``: a client
  certificate issued by that CA (and, when names are listed, with one of those common
  names) is the aggregator; only then are the ``requestheader-*-headers`` believed;
* ``client-ca-file``: other client certificates (user = CN, groups = O);
* anything else with a bearer token is checked with a ``TokenReview``.

Every request that is not a health check is then authorized with a
``SubjectAccessReview`` (the API server's own RBAC decides), as the delegating
authorizer does. Decisions are cached briefly (10 s, the delegating options' default)
so a page of pending workloads costs the API server nothing on a hot path.

The ConfigMap is re-read periodically, so a rotated front-proxy CA is picked up without
a restart. Without it (a cluster with no aggregation layer configured) only bearer
tokens authenticate, which is what the generic apiserver does too.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from admission.kube.client.errors import ApiError
from admission.kube.client.resources import CONFIG_MAPS, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS
from admission.kube.client.rest import KubeClient

log = logging.getLogger("quartermaster.kube.delegated")

AUTH_CONFIGMAP_NAMESPACE = "kube-system"
AUTH_CONFIGMAP_NAME = "extension-apiserver-authentication"
CACHE_TTL = 10.0


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated caller, as the API server described it."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request asks to do (a SubjectAccessReview's resource or non-resource part)."""

    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""  # a non-resource request (discovery) when set


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass(slots=True)
class TrustAnchors:
    """The contents of ``extension-apiserver-authentication`` that matter here."""

    client_cas: list[x509.Certificate] = field(default_factory=list)
    requestheader_cas: list[x509.Certificate] = field(default_factory=list)
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ()
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ()
    extra_prefixes: tuple[str, ...] = ()

    @property
    def pem_bundle(self) -> str:
        """Every CA (both kinds), for the TLS layer to request and verify client certs."""
        from cryptography.hazmat.primitives.serialization import Encoding

        return "".join(
            c.public_bytes(Encoding.PEM).decode()
            for c in (*self.requestheader_cas, *self.client_cas)
        )


def _json_list(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _certs(pem: str | None) -> list[x509.Certificate]:
    if not pem:
        return []
    try:
        return x509.load_pem_x509_certificates(pem.encode())
    except ValueError as err:
        log.warning("ignoring an unreadable CA bundle in %s: %s", AUTH_CONFIGMAP_NAME, err)
        return []


def anchors_from_configmap(data: Mapping[str, str]) -> TrustAnchors:
    return TrustAnchors(
        client_cas=_certs(data.get("client-ca-file")),
        requestheader_cas=_certs(data.get("requestheader-client-ca-file")),
        allowed_names=_json_list(data.get("requestheader-allowed-names")),
        username_headers=_json_list(data.get("requestheader-username-headers")),
        uid_headers=_json_list(data.get("requestheader-uid-headers")),
        group_headers=_json_list(data.get("requestheader-group-headers")),
        extra_prefixes=_json_list(data.get("requestheader-extra-headers-prefix")),
    )


def _issued_by(cert: x509.Certificate, cas: list[x509.Certificate], now: datetime) -> bool:
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return False
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, Exception):  # noqa: BLE001 - InvalidSignature et al.
            continue
        if ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
            return True
    return False


def _common_name(cert: x509.Certificate) -> str:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


class DelegatedAuth:
    """Authenticates and authorizes requests the way an aggregated API server must."""

    def __init__(
        self,
        client: KubeClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        cache_ttl: float = CACHE_TTL,
    ) -> None:
        self.client = client
        self.clock = clock
        self.cache_ttl = cache_ttl
        self.anchors = TrustAnchors()
        self.loaded = False
        self._tokens: dict[str, tuple[float, User | None]] = {}
        self._decisions: dict[tuple[Any, ...], tuple[float, Decision]] = {}
        self.stats = {"token_reviews": 0, "access_reviews": 0}

    # -- trust anchors ------------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Re-read the ConfigMap; True when the anchors changed."""
        try:
            cm = await self.client.get(
                CONFIG_MAPS, AUTH_CONFIGMAP_NAME, namespace=AUTH_CONFIGMAP_NAMESPACE
            )
        except ApiError as err:
            if not self.loaded:
                log.warning(
                    "%s/%s not readable (%s): only bearer tokens authenticate until it is",
                    AUTH_CONFIGMAP_NAMESPACE,
                    AUTH_CONFIGMAP_NAME,
                    err,
                )
            self.loaded = True
            return False
        anchors = anchors_from_configmap(cm.get("data") or {})
        changed = anchors.pem_bundle != self.anchors.pem_bundle or anchors != self.anchors
        self.anchors = anchors
        self.loaded = True
        return changed

    # -- authentication -----------------------------------------------------------------------

    async def authenticate(
        self, *, peer_cert_der: bytes | None, headers: Any, now: datetime | None = None
    ) -> User | None:
        """The caller, or None (401). ``headers``: aiohttp's ``CIMultiDictProxy``."""
        now = now or datetime.now(UTC)
        a = self.anchors
        if peer_cert_der:
            cert = x509.load_der_x509_certificate(peer_cert_der)
            if a.requestheader_cas and _issued_by(cert, a.requestheader_cas, now):
                cn = _common_name(cert)
                if a.allowed_names and cn not in a.allowed_names:
                    log.warning("front-proxy certificate CN %r is not an allowed name", cn)
                    return None
                return self._from_headers(headers)
            if a.client_cas and _issued_by(cert, a.client_cas, now):
                orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
                return User(
                    _common_name(cert),
                    (*(str(o.value) for o in orgs), "system:authenticated"),
                )
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip():
            return await self._review_token(auth[7:].strip())
        return None

    def _from_headers(self, headers: Any) -> User | None:
        a = self.anchors
        name = next((headers.get(h) for h in a.username_headers if headers.get(h)), None)
        if not name:
            return None
        uid = next((headers.get(h) for h in a.uid_headers if headers.get(h)), "") or ""
        groups: list[str] = []
        for h in a.group_headers:
            groups.extend(headers.getall(h, []))
        extra: dict[str, tuple[str, ...]] = {}
        for prefix in a.extra_prefixes:
            for key in headers.keys():
                if key.lower().startswith(prefix.lower()):
                    from urllib.parse import unquote

                    extra[unquote(key[len(prefix) :]).lower()] = tuple(headers.getall(key))
        return User(name, tuple(groups), uid, extra)

    async def _review_token(self, token: str) -> User | None:
        hit = self._tokens.get(token)
        if hit is not None and self.clock() - hit[0] < self.cache_ttl:
            return hit[1]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        self.stats["token_reviews"] += 1
        result = await self.client.create(TOKEN_REVIEWS, body)
        status = result.get("status") or {}
        user: User | None = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = User(
                str(info.get("username") or ""),
                tuple(info.get("groups") or ()),
                str(info.get("uid") or ""),
                {k: tuple(v) for k, v in (info.get("extra") or {}).items()},
            )
        self._remember(self._tokens, token, user)
        return user

    # -- authorization ------------------------------------------------------------------------

    async def authorize(self, user: User, attrs: Attributes) -> Decision:
        key = (user.name, user.groups, user.uid, tuple(sorted(user.extra.items())), attrs)
        hit = self._decisions.get(key)
        if hit is not None and self.clock() - hit[0] < self.cache_ttl:
            return hit[1]
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        if attrs.path:
            spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
        else:
            res: dict[str, Any] = {
                "verb": attrs.verb,
                "group": attrs.group,
                "version": attrs.version,
                "resource": attrs.resource,
            }
            for k, v in (
                ("subresource", attrs.subresource),
                ("name", attrs.name),
                ("namespace", attrs.namespace),
            ):
                if v:
                    res[k] = v
            spec["resourceAttributes"] = res
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        self.stats["access_reviews"] += 1
        result = await self.client.create(SUBJECT_ACCESS_REVIEWS, body)
        status = result.get("status") or {}
        decision = Decision(
            bool(status.get("allowed")) and not status.get("denied"),
            str(status.get("reason") or ""),
        )
        self._remember(self._decisions, key, decision)
        return decision

    def _remember(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        if len(table) > 4096:  # bounded: expire everything old at once
            now = self.clock()
            for k in [k for k, (t, _) in table.items() if now - t >= self.cache_ttl]:
                del table[k]
            if len(table) > 4096:
                table.clear()
        table[key] = (self.clock(), value)
