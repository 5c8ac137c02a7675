"""What a failed API request raises: :class:`ApiError` with the server's status, reason
and ``Retry-After``, and the messages for a request the adapter never declared or a
kubeconfig it cannot use.
"""

from __future__ import annotations

import json
import os

RETRY_AFTER_CAP = 30.0
"""The longest one such wait (seconds). client-go sleeps whatever the header says; a
cap keeps a misconfigured proxy from parking a decision for an hour (kube-apiserver
itself sends 1: max-in-flight's constant, and APF's estimate)."""


class ApiError(Exception):
    """A failed API request: HTTP status, Kubernetes reason and message, and the
    server's ``Retry-After`` (seconds) when it sent one."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        call: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.call = call
        self.retry_after = retry_after
        super().__init__(f"{call}: {status} {reason}: {message}" if call else message)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def retryable(self) -> bool:
        """Transient: throttling, server errors, transport failures (status 0)."""
        return self.status in (0, 429) or self.status >= 500

    @property
    def throttled(self) -> bool:
        """``429 TooManyRequests``: the server refused the request before acting on it
        (max-in-flight, API Priority and Fairness): it was certainly not applied."""
        return self.status == 429

    @property
    def wait(self) -> float | None:
        """Seconds to wait before sending the same request again, when the server
        asked for it: a 429 or a 5xx with ``Retry-After`` (client-go's ``checkWait``)."""
        if self.retry_after is None or not (self.status == 429 or self.status >= 500):
            return None
        return min(RETRY_AFTER_CAP, self.retry_after)


class UndeclaredCall(RuntimeError):
    """The adapter tried a call missing from API_CALLS (a bug, caught by tests)."""


def error_from(status: int, raw: bytes, call: str, retry_after: str | None = None) -> ApiError:
    """The error of a non-2xx answer: a ``Status`` body (most errors), or plain text
    (kube-apiserver's max-in-flight and APF 429s: Go's ``http.Error``)."""
    reason, message = "", raw.decode("utf-8", "replace").strip()[:500]
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or message)
    return ApiError(
        status,
        reason or _REASONS.get(status, "Unknown"),
        message,
        call=call,
        retry_after=_retry_after_seconds(retry_after),
    )


def _retry_after_seconds(header: str | None) -> float | None:
    """``Retry-After`` as client-go reads it (``retryAfterSeconds``): whole seconds,
    anything else (an HTTP date, garbage) is no header at all."""
    if header is None:
        return None
    try:
        return float(max(0, int(header.strip())))
    except ValueError:
        return None


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def kubeconfig_problem(kubeconfig: str | None, err: BaseException) -> str:
    """One line: which kubeconfig, and what is wrong with it."""
    detail = str(err).strip().rstrip(".") or type(err).__name__
    if kubeconfig is not None:
        if isinstance(err, FileNotFoundError):
            return f"--kubeconfig {kubeconfig}: no such file"
        return f"--kubeconfig {kubeconfig}: not a usable kubeconfig: {detail}"
    env = os.environ.get("KUBECONFIG")
    where = f"KUBECONFIG={env}" if env else "~/.kube/config"
    return (
        f"no cluster to talk to: not running in a pod (no service account) and {where} "
        f"is not a usable kubeconfig ({detail}); pass --kubeconfig FILE"
    )
