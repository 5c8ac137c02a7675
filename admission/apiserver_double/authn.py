"""Who a request comes from, and RBAC's answer when it comes from nobody.

kube-apiserver authenticates every request before it routes it: a bearer token from
``--token-auth-file`` is its user, an unknown token is 401, and no credentials at all
is ``system:anonymous``, whom RBAC lets read only the public-info paths.  The double
does the same with :class:`Authenticator`, and admits one departure for kubectl, which
sends no bearer token over plain HTTP (:data:`ANONYMOUS_MODES`).  Authenticated users
are not authorized by RBAC: every token may do everything (the shipped RBAC is tested
on the real backend).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from .admission import UserInfo
from .errors import ApiError
from .request import Target

Obj = dict[str, Any]

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


class Authenticator:
    """The server's users by bearer token, and what a request without one is."""

    def __init__(
        self,
        *,
        anonymous: str,
        https: bool,
        admin_token: str,
        tokens: Mapping[str, str | tuple[str, Iterable[str]]] | None,
    ) -> None:
        """``anonymous``: one of :data:`ANONYMOUS_MODES` ("auto" decided by ``https``);
        ``tokens``: a username, or (username, groups), by token, besides ``admin_token``
        for :data:`DEFAULT_USER`."""
        if anonymous not in ANONYMOUS_MODES:
            raise ValueError(f"anonymous must be one of {ANONYMOUS_MODES}, got {anonymous!r}")
        if anonymous == "auto":
            anonymous = "refuse" if https else "admin"
        self.anonymous = anonymous
        self.users = {admin_token: DEFAULT_USER}
        self.users.update(
            {token: user_from_spec(token, spec) for token, spec in (tokens or {}).items()}
        )

    def add_user(self, token: str, username: str, groups: Iterable[str] = ()) -> None:
        """Accept ``token`` as ``username`` (in ``groups`` and system:authenticated)."""
        self.users[token] = UserInfo(username, (*groups, "system:authenticated"))

    def authenticate(self, request: web.Request) -> UserInfo:
        """Bearer tokens as ``--token-auth-file``: a known token is its user, an unknown
        one 401; no credentials at all is ``system:anonymous`` (anonymous auth is on)."""
        header = request.headers.get("Authorization", "")
        if not header:
            return ANONYMOUS if self.anonymous == "refuse" else DEFAULT_USER
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        user = self.users.get(token)
        if user is None:
            raise ApiError(401, "Unauthorized")
        return user


def user_from_spec(token: str, spec: str | tuple[str, Iterable[str]]) -> UserInfo:
    """A ``tokens`` entry: a username, or (username, groups)."""
    if isinstance(spec, str):
        return UserInfo(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return UserInfo(spec[0], tuple(spec[1]))
    raise ValueError(f"tokens[{token!r}]: expected a username or (username, groups), got {spec!r}")


def refuse_anonymous(request: web.Request, target: Target | None, verb: str) -> None:
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
