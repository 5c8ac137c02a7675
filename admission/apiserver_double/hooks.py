"""Test hooks of the API-server double: fault injection and request recording.

Controllers must survive a flaky API server: 500s, throttling (429 with Retry-After),
conflicts.  :class:`FaultInjector` makes the next N matching requests fail with a
chosen code before they touch the store, so a test can assert that the controller
re-reads instead of blindly retrying.  The answers are kube-apiserver's: a 429 with
neither ``message`` nor ``retry_after`` is its max-in-flight refusal (plain text,
``Retry-After: 1``: what a busy server sends); any other fault is a ``Status``, and
``retry_after`` > 0 puts ``details.retryAfterSeconds`` and the ``Retry-After`` header on
it, as ``ErrorNegotiated`` does (never for 0: the field is ``omitempty``).  :class:`RequestRecorder` keeps every request
(verb, resource, path, query, content type, response code) so tests and benchmarks
can count API calls per admission.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .errors import REASONS, ApiError, too_many_requests_in_flight

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    verb: str  # Kubernetes verb, or "discovery"/"other" for non-resource paths
    resource: str  # plural, "plural/subresource", or "" for non-resource paths
    namespace: str
    name: str
    user: str
    status: int = 0  # HTTP status of the answer (0 while in flight)


def resource_matches(wanted: str, actual: str) -> bool:
    """``plural`` matches the resource and its subresources; ``plural/sub`` only itself."""
    return actual == wanted or ("/" not in wanted and actual.partition("/")[0] == wanted)


@dataclass(slots=True)
class FaultRule:
    """Fail the next ``remaining`` requests that match every given filter."""

    remaining: int
    code: int
    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    message: str | None = None
    retry_after: int | None = None
    fired: int = 0

    def matches(self, request: RecordedRequest) -> bool:
        if self.verb is not None and request.verb != self.verb:
            return False
        if self.resource is not None and not resource_matches(self.resource, request.resource):
            return False
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        return self.name is None or request.name == self.name

    def error(self, request: RecordedRequest) -> ApiError:
        message = (
            self.message
            or f"injected fault: {self.code} on {request.verb} {request.resource or request.path}"
        )
        if self.code == 429 and self.message is None and self.retry_after is None:
            return too_many_requests_in_flight()
        headers, details = {}, None
        if self.retry_after:  # ErrorNegotiated: the header only for retryAfterSeconds > 0
            headers = {"Retry-After": str(self.retry_after)}
            details = {"retryAfterSeconds": self.retry_after}
        reason = REASONS.get(self.code, "InternalError")
        return ApiError(self.code, message, reason=reason, details=details, headers=headers)


class FaultInjector:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    def add(
        self,
        count: int = 1,
        *,
        code: int = 500,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
    ) -> FaultRule:
        if count < 1:
            raise ValueError(f"fault count must be >= 1, got {count}")
        if not 400 <= code <= 599:
            raise ValueError(f"fault code must be an HTTP error (400-599), got {code}")
        if verb is not None and verb not in VERBS:
            raise ValueError(f"fault verb {verb!r} is not one of {VERBS}")
        rule = FaultRule(count, code, verb, resource, namespace, name, message, retry_after)
        self.rules.append(rule)
        return rule

    def check(self, request: RecordedRequest) -> ApiError | None:
        """The error to answer ``request`` with, consuming one shot of the first matching rule."""
        for rule in self.rules:
            if rule.remaining > 0 and rule.matches(request):
                rule.remaining -= 1
                rule.fired += 1
                if rule.remaining == 0:
                    self.rules.remove(rule)
                return rule.error(request)
        return None

    def clear(self) -> None:
        self.rules.clear()


@dataclass(slots=True)
class RequestRecorder:
    requests: list[RecordedRequest] = field(default_factory=list)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    enabled: bool = True

    def record(self, request: RecordedRequest) -> None:
        self.counts[(request.verb, request.resource)] += 1
        if self.enabled:
            self.requests.append(request)

    def count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        """Requests so far, optionally of one verb and/or resource (``plural[/sub]``)."""
        return sum(
            n
            for (v, r), n in self.counts.items()
            if (verb is None or v == verb) and (resource is None or resource_matches(resource, r))
        )

    def clear(self) -> None:
        self.requests.clear()
        self.counts.clear()
