"""The harness's own requests retry what a real API server asks to be retried.

kube-apiserver answers ``429`` with a ``Retry-After`` header when it wants a request
sent again later: max-in-flight and priority-and-fairness throttling under load, and
"storage is (re)initializing" for a moment after a CustomResourceDefinition is
installed or changed. client-go sends such a request again (``rest.Request``'s
``checkWait``, up to ten times), so ``kubectl`` and the service's client already do;
the harness's plain HTTPS requests (test setup, reads, and the cleanup between tests)
and its ``kubectl`` runs do the same here, instead of failing a test in its cleanup.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

MAX_RETRIES = 10
"""As client-go's ``maxRetries``."""
RETRY_AFTER_CAP = 5.0
"""The longest wait for one retry (seconds); kube-apiserver itself sends 1."""
THROTTLED = (
    "TooManyRequests",
    "storage is (re)initializing",
    "the server has received too many requests",
)
"""What ``kubectl`` prints when its own retries of a 429 ran out."""


def retry_after(err: urllib.error.HTTPError) -> float | None:
    """Seconds the server asked to wait before retrying, when it asked: a ``429`` (or a
    5xx) carrying ``Retry-After`` (client-go retries exactly these)."""
    if err.code != 429 and err.code < 500:
        return None
    value = err.headers.get("Retry-After") if err.headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, min(float(value), RETRY_AFTER_CAP))
    except ValueError:
        return None


def urlopen(
    req: urllib.request.Request,
    *,
    context: Any = None,
    timeout: float = 30,
    sleep: Callable[[float], None] | None = None,
) -> Any:
    """``urllib.request.urlopen``, sending the request again while the server answers
    429 (or 5xx) with ``Retry-After``, at most :data:`MAX_RETRIES` times."""
    for attempt in range(MAX_RETRIES + 1):
        try:
            return urllib.request.urlopen(req, context=context, timeout=timeout)
        except urllib.error.HTTPError as err:
            wait = retry_after(err)
            if wait is None or attempt == MAX_RETRIES:
                raise
            err.close()
            (sleep or time.sleep)(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def run_kubectl(
    cmd: Sequence[str],
    *,
    input: str | None = None,
    timeout: float = 120,
    sleep: Callable[[float], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``kubectl``; run it again (after a second) when it failed because the server
    kept answering 429. Every command the harness runs is safe to repeat after such a
    refusal: the server did not carry it out."""
    for attempt in range(MAX_RETRIES + 1):
        res = subprocess.run(
            list(cmd), capture_output=True, text=True, input=input, timeout=timeout
        )
        throttled = res.returncode != 0 and any(t in res.stderr for t in THROTTLED)
        if not throttled or attempt == MAX_RETRIES:
            return res
        (sleep or time.sleep)(1.0)
    raise AssertionError("unreachable")  # pragma: no cover
