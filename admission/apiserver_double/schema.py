"""What kube-apiserver does with a custom resource's schema: prune, default, validate.

* **Pruning** (D2): fields the schema does not know are dropped when a body is decoded,
  except under ``x-kubernetes-preserve-unknown-fields``.  The request's
  ``fieldValidation`` decides what the client hears: ``Warn`` (the server's default
  for clients that send none) adds a ``Warning: 299 - "unknown field \\"spec.foo\\""``
  header, ``Strict`` (kubectl's default) refuses with 400 ``strict decoding error``,
  ``Ignore`` says nothing.  Built-in kinds get the same treatment for the fields of
  the objects the service writes (ObjectMeta, JobSpec, PodTemplateSpec, PodSpec,
  Container); deeper built-in fields are not modelled and are kept.
* **Defaulting** (D5): absent properties with a ``default`` are filled, recursively,
  on every write (and so in everything the double stores and serves).
* **Validation** (D3, D4): the OpenAPI schema (type, enum, pattern, lengths, item and
  property counts, minimum/maximum, required, int-or-string) and the
  ``x-kubernetes-validations`` CEL rules, transition rules on updates only, with
  1.30+'s ratcheting (an update may keep a value that was already invalid).  Errors
  are 422 ``Invalid`` with upstream's field-error wording.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from .errors import ApiError, FieldError, GoValue, bad_request, invalid_errors
from .resources import ResourceType

Obj = dict[str, Any]
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")

# -- built-in shapes (what pruning knows of the built-in kinds) ---------------------------

OBJECT_META = (
    "annotations creationTimestamp deletionGracePeriodSeconds deletionTimestamp finalizers "
    "generateName generation labels managedFields name namespace ownerReferences "
    "resourceVersion selfLink uid"
).split()
CONTAINER = (
    "args command env envFrom image imagePullPolicy lifecycle livenessProbe name ports "
    "readinessProbe resizePolicy resources restartPolicy securityContext startupProbe stdin "
    "stdinOnce terminationMessagePath terminationMessagePolicy tty volumeDevices volumeMounts "
    "workingDir"
).split()
POD_SPEC = (
    "activeDeadlineSeconds affinity automountServiceAccountToken containers dnsConfig "
    "dnsPolicy enableServiceLinks ephemeralContainers hostAliases hostIPC hostNetwork hostPID "
    "hostUsers hostname imagePullSecrets initContainers nodeName nodeSelector os overhead "
    "preemptionPolicy priority priorityClassName readinessGates resourceClaims resources "
    "restartPolicy runtimeClassName schedulerName schedulingGates securityContext "
    "serviceAccount serviceAccountName setHostnameAsFQDN shareProcessNamespace subdomain "
    "terminationGracePeriodSeconds tolerations topologySpreadConstraints volumes"
).split()
JOB_SPEC = (
    "activeDeadlineSeconds backoffLimit backoffLimitPerIndex completionMode completions "
    "managedBy manualSelector maxFailedIndexes parallelism podFailurePolicy "
    "podReplacementPolicy selector successPolicy suspend template ttlSecondsAfterFinished"
).split()
_ANY: Obj = {"x-kubernetes-preserve-unknown-fields": True}


def _shape(names: list[str], **known: Obj) -> Obj:
    return {"type": "object", "properties": {n: known.get(n, _ANY) for n in names}}


_META = _shape(OBJECT_META)
_CONTAINERS: Obj = {"type": "array", "items": _shape(CONTAINER)}
_POD_SPEC = _shape(POD_SPEC, containers=_CONTAINERS, initContainers=_CONTAINERS)
_TEMPLATE = _shape(["metadata", "spec"], metadata=_META, spec=_POD_SPEC)
BUILTIN_SHAPES: dict[str, Obj] = {
    "jobs.batch": _shape(
        ["apiVersion", "kind", "metadata", "spec", "status"],
        metadata=_META,
        spec=_shape(JOB_SPEC, template=_TEMPLATE),
    ),
    "pods": _shape(
        ["apiVersion", "kind", "metadata", "spec", "status"], metadata=_META, spec=_POD_SPEC
    ),
}


def shape_of(rt: ResourceType) -> Obj | None:
    """The schema pruning uses: the CRD's, or the built-in shape (None: not modelled)."""
    schema = rt.schema()
    if schema is not None:
        return _with_object_meta(id(schema), schema)
    return BUILTIN_SHAPES.get(rt.key)


_META_SHAPES: dict[int, Obj] = {}


def _with_object_meta(key: int, schema: Obj) -> Obj:
    """A CRD schema whose root also knows apiVersion, kind and ObjectMeta's fields."""
    cached = _META_SHAPES.get(key)
    if cached is None or cached["_source"] is not schema:
        props = dict(schema.get("properties") or {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = _META
        cached = {**schema, "properties": props, "_source": schema}
        _META_SHAPES[key] = cached
    return cached


# -- pruning ------------------------------------------------------------------------------


def prune(schema: Obj, value: Any, path: str = "") -> list[str]:
    """Drop unknown fields from ``value`` in place; returns their paths."""
    pruned: list[str] = []
    if isinstance(value, dict):
        if schema.get("x-kubernetes-embedded-resource"):
            known = {"apiVersion", "kind", "metadata"}
        else:
            known = set()
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        for key in list(value):
            sub_path = f"{path}.{key}" if path else key
            if props is not None and key in props:
                pruned += prune(props[key], value[key], sub_path)
            elif isinstance(extra, dict):
                pruned += prune(extra, value[key], sub_path)
            elif extra is True or preserve or key in known:
                continue
            elif props is not None or schema.get("type") == "object":
                del value[key]
                pruned.append(sub_path)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            pruned += prune(schema["items"], item, f"{path}[{i}]")
    return pruned


def field_validation(query_value: str | None) -> str:
    """The request's ``fieldValidation`` (Warn when absent, as the server defaults)."""
    if not query_value:
        return "Warn"
    if query_value not in FIELD_VALIDATION:
        raise bad_request(
            f'fieldValidation: Unsupported value: "{query_value}": supported values: '
            '"Ignore", "Strict", "Warn"'
        )
    return query_value


def decode(
    rt: ResourceType, obj: Any, *, directive: str, version: str, patch: bool = False
) -> list[str]:
    """Prune ``obj`` as decoding it would; the warnings to send, or 400 when Strict."""
    shape = shape_of(rt)
    if shape is None or not isinstance(obj, dict):
        return []
    unknown = [f'unknown field "{p}"' for p in prune(shape, obj)]
    if not unknown or directive == "Ignore":
        return []
    if directive == "Strict":
        detail = "strict decoding error: " + ", ".join(unknown)
        if patch:
            raise bad_request(detail)
        raise bad_request(
            f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {detail}'
        )
    return unknown


def settle(rt: ResourceType, obj: Obj) -> Obj:
    """Silently prune and default an object (a webhook's output, a stored object)."""
    shape = shape_of(rt)
    if shape is not None:
        prune(shape, obj)
    schema = rt.schema()
    if schema is not None:
        apply_defaults(schema, obj)
    return obj


# -- defaulting ------------------------------------------------------------------------------


def apply_defaults(schema: Obj, value: Any) -> Any:
    """Structural defaulting: fill absent properties that have a default, recursively."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)
    return value


# -- validation -----------------------------------------------------------------------------

_MISSING = object()


def _lookup(obj: Any, parts: tuple[Any, ...]) -> Any:
    for part in parts:
        if isinstance(part, int) and isinstance(obj, list) and 0 <= part < len(obj):
            obj = obj[part]
        elif isinstance(part, str) and isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return _MISSING
    return obj


def _path(parts: tuple[Any, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Schema and CEL validation of a custom resource; 422 on failure."""
    schema = rt.schema()
    if schema is None:
        return
    errors = _schema_errors(schema, obj, old)
    if not errors:
        errors = _cel_errors(schema, obj, old, ())
    if errors:
        name = obj["metadata"].get("name", "")
        raise invalid_errors(kind=rt.kind, group=rt.group, name=name, errors=errors)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _type_ok(type_: str, value: Any) -> bool:
    actual = _type_name(value)
    return actual == type_ or (type_ == "number" and actual == "integer")


def _schema_errors(schema: Obj, obj: Obj, old: Obj | None) -> list[FieldError]:
    errors: list[tuple[tuple[Any, ...], FieldError]] = []
    _walk(schema, obj, (), errors)
    kept = []
    for parts, error in errors:
        if old is not None and parts and _lookup(old, parts) == _lookup(obj, parts):
            continue  # ratcheting: an unchanged value may stay invalid
        kept.append(error)
    return kept


def _walk(
    node: Obj, value: Any, parts: tuple[Any, ...], out: list[tuple[tuple[Any, ...], FieldError]]
) -> None:
    where = _path(parts)

    def add(error: FieldError) -> None:
        out.append((parts, error))

    if value is None:
        if not node.get("nullable") and parts:
            add(
                FieldError.invalid(
                    where,
                    GoValue('"null"'),
                    f'{where} in body must be of type {node.get("type", "object")}: "null"',
                )
            )
        return
    if node.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            add(
                FieldError.invalid(
                    where,
                    value,
                    f'{where} in body must be of type integer,string: "{_type_name(value)}"',
                )
            )
            return
    type_ = node.get("type")
    if type_ and not _type_ok(type_, value):
        add(
            FieldError.invalid(
                where,
                GoValue(f'"{_type_name(value)}"'),
                f'{where} in body must be of type {type_}: "{_type_name(value)}"',
            )
        )
        return
    if "enum" in node and value not in node["enum"]:
        allowed = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in node["enum"])
        add(FieldError("Unsupported value", where, f"supported values: {allowed}", value))
    if isinstance(value, str):
        if "maxLength" in node and len(value.encode()) > node["maxLength"]:
            add(FieldError("Too long", where, f"may not be more than {node['maxLength']} bytes"))
        if "minLength" in node and len(value) < node["minLength"]:
            add(
                FieldError.invalid(
                    where,
                    value,
                    f"{where} in body should be at least {node['minLength']} chars long",
                )
            )
        if "pattern" in node and not _regex(node["pattern"]).search(value):
            add(
                FieldError.invalid(
                    where, value, f"{where} in body should match '{node['pattern']}'"
                )
            )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            add(
                FieldError.invalid(
                    where,
                    value,
                    f"{where} in body should be greater than or equal to {node['minimum']}",
                )
            )
        if "maximum" in node and value > node["maximum"]:
            add(
                FieldError.invalid(
                    where,
                    value,
                    f"{where} in body should be less than or equal to {node['maximum']}",
                )
            )
    if isinstance(value, list):
        if "maxItems" in node and len(value) > node["maxItems"]:
            add(
                FieldError(
                    "Too many", where, f"must have at most {node['maxItems']} items", len(value)
                )
            )
        if "minItems" in node and len(value) < node["minItems"]:
            add(
                FieldError.invalid(
                    where,
                    len(value),
                    f"{where} in body should have at least {node['minItems']} items",
                )
            )
        keys = node.get("x-kubernetes-list-map-keys")
        seen: set[tuple[Any, ...]] = set()
        items = node.get("items")
        for i, item in enumerate(value):
            if keys and isinstance(item, dict):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    shown = GoValue(
                        "{"
                        + ", ".join(f'"{k}":{_quoted(v)}' for k, v in zip(keys, key, strict=True))
                        + "}"
                    )
                    out.append(
                        ((*parts, i), FieldError("Duplicate value", _path((*parts, i)), "", shown))
                    )
                seen.add(key)
            if isinstance(items, dict):
                _walk(items, item, (*parts, i), out)
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for req in node.get("required") or []:
            if req not in value:
                out.append(((*parts, req), FieldError.required(_path((*parts, req)))))
        if "maxProperties" in node and len(value) > node["maxProperties"]:
            add(
                FieldError(
                    "Too many",
                    where,
                    f"must have at most {node['maxProperties']} items",
                    len(value),
                )
            )
        extra = node.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                if parts == () and key == "metadata":
                    continue
                _walk(props[key], sub, (*parts, key), out)
            elif isinstance(extra, dict):
                _walk(extra, sub, (*parts, key), out)


def _quoted(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# -- CEL -------------------------------------------------------------------------------------


@cache
def _cel_program(expr: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expr))


def _cel_errors(node: Obj, value: Any, old: Any, parts: tuple[Any, ...]) -> list[FieldError]:
    """Every ``x-kubernetes-validations`` rule at or under ``node`` (transition rules only
    where there is an old value; a rule whose value did not change is not re-checked)."""
    import celpy

    errors: list[FieldError] = []
    rules = node.get("x-kubernetes-validations") or []
    if rules and not (old is not None and old == value):  # ratcheting
        for rule in rules:
            expr = rule["rule"]
            if "oldSelf" in expr and old is None:
                continue
            activation = {"self": celpy.json_to_cel(value)}
            if old is not None:
                activation["oldSelf"] = celpy.json_to_cel(old)
            try:
                result = _cel_program(expr).evaluate(activation)
            except Exception as exc:  # noqa: BLE001 - an evaluation error fails the rule
                result = exc
            if isinstance(result, celpy.CELEvalError | Exception) or not bool(result):
                where = _path(parts) or "<nil>"
                message = rule.get("message") or f"failed rule: {expr}"
                field = where
                if rule.get("fieldPath"):
                    field = (_path(parts) or "") + rule["fieldPath"]
                    field = field.lstrip(".")
                errors.append(FieldError.invalid(field, GoValue(f'"{_type_name(value)}"'), message))
    if isinstance(value, dict):
        for name, sub in (node.get("properties") or {}).items():
            if name in value and not (parts == () and name == "metadata"):
                old_sub = old.get(name) if isinstance(old, dict) else None
                errors += _cel_errors(sub, value[name], old_sub, (*parts, name))
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for key, sub_value in value.items():
                old_sub = old.get(key) if isinstance(old, dict) else None
                errors += _cel_errors(extra, sub_value, old_sub, (*parts, key))
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        keys = node.get("x-kubernetes-list-map-keys")
        old_items: dict[tuple[Any, ...], Any] = {}
        if keys and isinstance(old, list):
            old_items = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            old_item = None
            if keys and isinstance(item, dict):
                old_item = old_items.get(tuple(item.get(k) for k in keys))
            errors += _cel_errors(node["items"], item, old_item, (*parts, i))
    return errors


__all__ = [
    "ApiError",
    "apply_defaults",
    "decode",
    "field_validation",
    "prune",
    "settle",
    "shape_of",
    "validate",
]
