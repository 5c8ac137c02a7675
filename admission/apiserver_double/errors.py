"""Kubernetes ``Status`` error objects for the API-server test double.

The real API server answers nearly every failure with a ``Status`` body whose ``code``,
``reason`` and ``message`` clients (and our controller) branch on.  Every error the
double raises is an :class:`ApiError`; the HTTP layer turns it into that body, so the
message formats here copy kube-apiserver's wording.  The exception is a request its
filters refuse before any handler runs: max-in-flight (and APF) answer ``429`` with
Go's ``http.Error`` — a plain-text line and ``Retry-After: 1``
(:func:`too_many_requests_in_flight`).
"""

from __future__ import annotations

import json
from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request failure carried as a Kubernetes ``Status`` object."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "Unknown")
        self.details = details
        self.headers = dict(headers or {})
        self.text = text  # a plain-text body instead of a Status (Go's http.Error)

    def status(self) -> dict[str, Any]:
        """The ``Status`` body kube-apiserver would send for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(qualified: str, name: str) -> dict[str, Any]:
    plural, _, group = qualified.partition(".")
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(qualified: str, name: str) -> ApiError:
    return ApiError(404, f'{qualified} "{name}" not found', details=_details(qualified, name))


def already_exists(qualified: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(qualified, name),
    )


def conflict(qualified: str, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version and try again"
    )
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        reason="Conflict",
        details=_details(qualified, name),
    )


def invalid(*, kind: str, group: str, name: str, field: str, value: Any, why: str) -> ApiError:
    """422 Invalid with one cause, worded like apimachinery's field errors."""
    kind_group = f"{kind}.{group}" if group else kind
    cause = f"Invalid value: {_quote(value)}: {why}" if value is not None else why
    message = f'{kind_group} "{name}" is invalid: {field}: {cause}'
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": field}],
    }
    if group:
        details["group"] = group
    return ApiError(422, message, details=details)


def _quote(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def expired(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


MAX_IN_FLIGHT_MESSAGE = "Too many requests, please try again later."


def too_many_requests_in_flight() -> ApiError:
    """What kube-apiserver's max-in-flight filter (``WithMaxInFlightLimit``, and APF's
    rejection alike) answers when its seats are taken: ``tooManyRequests`` sets
    ``Retry-After: 1`` and calls ``http.Error`` — status 429, ``text/plain`` and the
    message plus a newline, no ``Status`` object."""
    return ApiError(
        429, MAX_IN_FLIGHT_MESSAGE, headers={"Retry-After": "1"}, text=MAX_IN_FLIGHT_MESSAGE + "\n"
    )


def internal(message: str) -> ApiError:
    return ApiError(500, f"Internal error occurred: {message}", reason="InternalError")


# -- field errors (apimachinery's field.ErrorList) ------------------------------------------

_CAUSE_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
    "Unsupported value": "FieldValueNotSupported",
    "Duplicate value": "FieldValueDuplicate",
    "Too many": "FieldValueTooMany",
    "Too long": "FieldValueTooLong",
}


class FieldError:
    """One ``field.Error``: ``kind`` is its type string ("Invalid value", "Forbidden", ...)."""

    __slots__ = ("detail", "field", "kind", "value")
    _NO_VALUE = object()

    def __init__(self, kind: str, field: str, detail: str, value: Any = _NO_VALUE) -> None:
        self.kind = kind
        self.field = field
        self.detail = detail
        self.value = value

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls("Invalid value", field, detail, value)

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls("Forbidden", field, detail)

    @classmethod
    def required(cls, field: str, detail: str = "") -> FieldError:
        return cls("Required value", field, detail)

    def body(self) -> str:
        """``ErrorBody()``: the type, the value for Invalid, and the detail."""
        text = self.kind
        if self.value is not self._NO_VALUE:
            text += f": {_go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def __repr__(self) -> str:
        return f"FieldError({self})"


def _go_value(value: Any) -> str:
    """How ``field.Error`` prints a bad value: quoted strings, bare scalars, else %#v."""
    if isinstance(value, GoValue):
        return value.text
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return '"null"'
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class GoValue:
    """A bad value already rendered (e.g. ``core.PodTemplateSpec{...}``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def invalid_errors(*, kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """``errors.NewInvalid``: 422 with one cause per field error, message as upstream
    (one error inline, several in brackets)."""
    kind_group = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        summary = str(errors[0])
    else:
        summary = "[" + ", ".join(str(e) for e in errors) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [
            {
                "reason": _CAUSE_REASONS.get(e.kind, "FieldValueInvalid"),
                "message": e.body(),
                "field": e.field,
            }
            for e in errors
        ],
    }
    if group:
        details["group"] = group
    return ApiError(422, f'{kind_group} "{name}" is invalid: {summary}', details=details)
