"""Building blocks of the API models: Kubernetes name, label and quantity rules.

``queues.api.kinds`` models Kueue's kinds; this module holds what those kinds share with
every Kubernetes object: the apimachinery validation rules with their exact messages,
the annotated scalar types (Quantity, Time, DNS names), the strict camelCase pydantic
base class, ObjectMeta, label selectors, taints, tolerations, conditions, and the
translation of pydantic's errors into Kubernetes-style (field path, message) pairs.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema

from queues.quantity import check_magnitude, parse_quantity

Problems = list[tuple[str, str]]
"""(field path, message) pairs, in the order found."""

# --------------------------------------------------------------------------------------
# Names, labels, quantities (k8s.io/apimachinery/pkg/util/validation)
# --------------------------------------------------------------------------------------

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUALIFIED_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"

DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    f"used for validation is '{_QUALIFIED_NAME_PART}')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE}')"
)
NEGATIVE_MSG = "must be greater than or equal to 0"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TAINT_EFFECT_MSG = "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"
_PATTERN_MESSAGES = {
    DNS1123_SUBDOMAIN: DNS1123_SUBDOMAIN_MSG,
    DNS1123_LABEL: DNS1123_LABEL_MSG,
    QUANTITY_PATTERN: QUANTITY_MSG,
}


def quantity_value(text: str) -> Fraction:
    """The exact value of a quantity string; QuantityError (a ValueError) if it is not one."""
    return parse_quantity(text)


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: an optional DNS-subdomain prefix and '/', then a 1-63 char name."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + QUALIFIED_NAME_MSG.removeprefix("name part ")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return ["prefix part must be non-empty"]
        if len(prefix) > 253:
            return ["prefix part must be no more than 253 characters"]
        if not re.fullmatch(DNS1123_SUBDOMAIN, prefix):
            return ["prefix part " + DNS1123_SUBDOMAIN_MSG]
    name = parts[-1]
    if not name:
        return ["name part must be non-empty"]
    if len(name) > 63:
        return ["name part must be no more than 63 characters"]
    if not re.fullmatch(_QUALIFIED_NAME_PART, name):
        return [QUALIFIED_NAME_MSG]
    return []


def label_value_errors(value: str) -> list[str]:
    """IsValidLabelValue."""
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not re.fullmatch(_LABEL_VALUE, value):
        return [LABEL_VALUE_MSG]
    return []


def to_quantity_text(value: Any) -> Any:
    """YAML numbers (8, 0.5) are quantities too; anything else is left for the type check."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(QUANTITY_MSG)
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return value


def _to_datetime(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f'"{value}" is not an RFC 3339 date-time') from exc
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


# --------------------------------------------------------------------------------------
# Scalar types
# --------------------------------------------------------------------------------------


def _parsable_quantity(text: str) -> str:
    """A quantity the pattern accepts but apimachinery's parser refuses (``1e1001``:
    above the exponent cap), or one beyond the 2^63-1 a ``resource.Quantity`` holds
    (``1e400``), is a field error here, not an exception in a later rule or in every
    status refresh."""
    check_magnitude(text)  # QuantityError is a ValueError: pydantic names the field
    return text


Quantity = Annotated[
    str,
    BeforeValidator(to_quantity_text),
    StringConstraints(pattern=QUANTITY_PATTERN),
    AfterValidator(_parsable_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A resource.Quantity as written: an integer, a number or a string like "512Gi"."""

Time = Annotated[
    datetime,
    BeforeValidator(_to_datetime),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""metav1.Time: an RFC 3339 string (or a YAML timestamp); naive times are UTC."""

INT32_MAX = 2**31 - 1
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX, json_schema_extra={"format": "int32"})]
NonNegInt32 = Annotated[int, Field(ge=0, le=INT32_MAX, json_schema_extra={"format": "int32"})]
Subdomain = Annotated[str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN)]
"""ClusterQueueReference, CohortReference, ResourceFlavorReference, LocalQueueName, …"""
DNSLabel = Annotated[str, StringConstraints(max_length=63, pattern=DNS1123_LABEL)]
"""PodSetReference and namespace names."""
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


class KubeJsonSchema(GenerateJsonSchema):
    """JSON schema in the shape a CRD's structural schema wants.

    Drops ``null`` alternatives and ``null`` defaults of optional fields,
    ``additionalProperties: false`` and titles; keeps everything else pydantic produces. Use as
    ``Model.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)``.
    """

    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        return _kube_schema(super().generate(schema, mode=mode))


def _kube_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_kube_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _kube_schema(v) for k, v in node.items() if k != "title"}
    if "default" in out and out["default"] is None:
        del out["default"]
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    variants = out.get("anyOf")
    if isinstance(variants, list):
        kept = [v for v in variants if v != {"type": "null"}]
        if len(kept) == 1 and len(kept) != len(variants):
            del out["anyOf"]
            out = {**kept[0], **out}
    return out


# --------------------------------------------------------------------------------------
# Base models and types shared by several kinds
# --------------------------------------------------------------------------------------


class KubeModel(BaseModel):
    """camelCase names only, unknown fields rejected, no type coercion, immutable.

    A ``null`` value means "not set", as it does for the API server.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=False,
        frozen=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class StatusModel(KubeModel):
    """Status content Quartermaster does not read is accepted and ignored."""

    model_config = ConfigDict(extra="allow")


class ObjectMeta(KubeModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    self_link: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[FreeForm] = Field(default_factory=list)
    finalizers: list[str] = Field(default_factory=list)
    managed_fields: list[FreeForm] = Field(default_factory=list)


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(KubeModel):
    """metav1.LabelSelector; ``{}`` selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class Taint(KubeModel):
    key: str
    value: str = ""
    effect: str
    time_added: Time | None = None


class Toleration(KubeModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class FairSharing(KubeModel):
    weight: Quantity | None = None


class ResourceQuota(KubeModel):
    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(KubeModel):
    name: Subdomain
    resources: Annotated[list[ResourceQuota], Field(min_length=1, max_length=64)]


class ResourceGroup(KubeModel):
    covered_resources: Annotated[list[str], Field(min_length=1, max_length=64)]
    flavors: Annotated[list[FlavorQuotas], Field(min_length=1, max_length=64)]


ResourceGroups = Annotated[list[ResourceGroup], Field(max_length=16)]


class Condition(KubeModel):
    """metav1.Condition (reason, message and lastTransitionTime may be left out)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: Time | None = None
    observed_generation: int | None = None


# --------------------------------------------------------------------------------------
# Field paths and messages
# --------------------------------------------------------------------------------------

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def loc_path(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a field path: ``spec.nodeLabels[example.com/zone]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def join_path(path: str, part: str | int) -> str:
    """``path`` plus one field name, list index or map key."""
    if not path:
        return loc_path((part,))
    suffix = loc_path((part,))
    return path + (suffix if suffix.startswith("[") else "." + suffix)


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    dict: "object",
    list: "array",
    type(None): "null",
}
_TYPE_ERRORS = {
    "string_type": "string",
    "int_type": "integer",
    "int_from_float": "integer",
    "int_parsing": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
    "datetime_type": "string (RFC 3339 date-time)",
}
_BOUNDS = {
    "greater_than_equal": ("greater than or equal to", "ge"),
    "greater_than": ("greater than", "gt"),
    "less_than_equal": ("less than or equal to", "le"),
    "less_than": ("less than", "lt"),
}


def pydantic_message(err: Any) -> str:
    """A pydantic error (one item of ``ValidationError.errors()``) in Kubernetes' words."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "Required value"
    if kind == "literal_error":
        if not isinstance(value, str):  # e.g. an unquoted YAML True
            return f"must be of type string, got {_JSON_TYPES.get(type(value), 'value')}"
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        supported = ", ".join(f'"{a}"' for a in allowed)
        return f'Unsupported value: "{value}": supported values: {supported}'
    if kind in _TYPE_ERRORS:
        got = _JSON_TYPES.get(type(value), type(value).__name__)
        return f"must be of type {_TYPE_ERRORS[kind]}, got {got}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        rule = _PATTERN_MESSAGES.get(pattern, f"must match the regular expression '{pattern}'")
        return f'Invalid value: "{value}": {rule}'  # quote the offending string, as the API server does
    if kind == "string_too_long":
        return f"must be no more than {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must be non-empty"
        return f"must be at least {ctx.get('min_length')} characters"
    if kind == "too_long":
        what = "properties" if ctx.get("field_type") == "Dictionary" else "items"
        return (
            f"Too many: {ctx.get('actual_length')}: must have at most "
            f"{ctx.get('max_length')} {what}"
        )
    if kind == "too_short":
        if ctx.get("min_length") == 1:
            return "Required value: must have at least 1 item"
        return f"must have at least {ctx.get('min_length')} items"
    if kind in _BOUNDS:
        words, key = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])


# --------------------------------------------------------------------------------------
# Rules shared by several kinds
# --------------------------------------------------------------------------------------


def check_labels(labels: dict[str, str], path: str) -> Problems:
    """Label keys are qualified names, values valid label values."""
    problems: Problems = []
    for key, value in labels.items():
        kpath = join_path(path, key)
        problems += [(kpath, msg) for msg in qualified_name_errors(key)]
        problems += [(kpath, msg) for msg in label_value_errors(value)]
    return problems


def check_selector(selector: LabelSelector | None, path: str) -> Problems:
    """ValidateLabelSelector."""
    if selector is None:
        return []
    problems = check_labels(selector.match_labels, join_path(path, "matchLabels"))
    for i, req in enumerate(selector.match_expressions):
        rpath = f"{path}.matchExpressions[{i}]"
        problems += [(f"{rpath}.key", msg) for msg in qualified_name_errors(req.key)]
        if req.operator in ("In", "NotIn") and not req.values:
            problems.append(
                (f"{rpath}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            )
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            problems.append(
                (
                    f"{rpath}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    return problems


def check_tolerations(tolerations: list[Toleration], path: str) -> Problems:
    """The CEL rules Kueue puts on tolerations (ResourceFlavor, PodSetUpdate)."""
    problems: Problems = []
    for i, tol in enumerate(tolerations):
        tpath = f"{path}[{i}]"
        if not tol.key and tol.operator != "Exists":
            problems.append(
                (
                    tpath,
                    "operator must be Exists when 'key' is empty, which means "
                    "'match all values and all keys'",
                )
            )
        if tol.key:
            problems += [(f"{tpath}.key", msg) for msg in qualified_name_errors(tol.key)]
        if tol.toleration_seconds is not None and tol.effect != "NoExecute":
            problems.append((tpath, "effect must be 'NoExecute' when 'tolerationSeconds' is set"))
        if tol.operator is not None and tol.operator not in ("Equal", "Exists"):
            problems.append(
                (f"{tpath}.operator", "supported toleration values: 'Equal'(default), 'Exists'")
            )
        if tol.operator == "Exists" and tol.value:
            problems.append((f"{tpath}.value", "a value must be empty when 'operator' is 'Exists'"))
        if tol.effect and tol.effect not in TAINT_EFFECTS:
            problems.append((f"{tpath}.effect", TAINT_EFFECT_MSG))
    return problems
