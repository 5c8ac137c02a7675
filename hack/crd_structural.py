"""The structural-schema rules of apiextensions-apiserver, as far as a generator can break them.

The API server refuses a CRD whose openAPIV3Schema is not structural, and then nothing
is installed. ``hack/gen_crds.py`` runs ``structural_problems`` on every schema it
generates and writes nothing when a problem is found, so a model change that cannot be
expressed in a CRD (a union type, a ``$ref``, an open-ended dict next to fixed fields)
fails at generation time with the path of the offending node.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]
METADATA = {"type": "object"}
"""The only schema a CRD may give the root ``metadata`` (the API server validates it)."""


ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "format",
        "properties",
        "additionalProperties",
        "items",
        "required",
        "enum",
        "default",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "anyOf",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema: Schema) -> list[str]:
    """Why the API server would refuse ``schema`` as a structural schema (empty if fine).

    Checks: only keywords an apiextensions/v1 JSONSchemaProps has and a structural
    schema allows (no $ref, const, allOf/oneOf/not, title, nullable); every node typed,
    except int-or-string nodes whose only anyOf is integer|string; properties and
    additionalProperties never together, additionalProperties never a boolean; metadata
    at the root only ``{type: object}``; list-map keys are required or defaulted
    scalars; list and map types only on arrays and objects; CEL rules non-empty with a
    one-line message.
    """
    problems: list[str] = []
    meta = schema.get("properties", {}).get("metadata")
    if meta != METADATA:
        problems.append("metadata: must be only {type: object} (the API server validates it)")
    _check_node(schema, "openAPIV3Schema", problems)
    return problems


def _check_node(node: Schema, path: str, problems: list[str]) -> None:
    def bad(message: str) -> None:
        problems.append(f"{path}: {message}")

    for key in node:
        if key not in ALLOWED_KEYWORDS:
            bad(f"keyword {key!r} is not allowed in a structural schema")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string:
        if "type" in node:
            bad("x-kubernetes-int-or-string must have no type")
        if node.get("anyOf", INT_OR_STRING) != INT_OR_STRING:
            bad("x-kubernetes-int-or-string allows only anyOf [integer, string]")
    elif "anyOf" in node:
        bad("anyOf is only allowed with x-kubernetes-int-or-string")
    elif node.get("type") not in TYPES:
        bad(f"type must be one of {sorted(TYPES)}, got {node.get('type')!r}")
    if "properties" in node and "additionalProperties" in node:
        bad("properties and additionalProperties are mutually exclusive")
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
        bad("additionalProperties must be a schema")
    if ("properties" in node or "additionalProperties" in node) and node.get("type") != "object":
        bad("properties/additionalProperties need type object")
    if "items" in node and node.get("type") != "array":
        bad("items needs type array")
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        bad("an array needs an items schema")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            bad(f"required property {name!r} is not defined")
    if "x-kubernetes-map-type" in node and node.get("type") != "object":
        bad("x-kubernetes-map-type needs type object")
    list_type = node.get("x-kubernetes-list-type")
    if list_type is not None:
        if node.get("type") != "array" or list_type not in ("atomic", "set", "map"):
            bad("x-kubernetes-list-type must be atomic, set or map on an array")
    keys = node.get("x-kubernetes-list-map-keys", [])
    if list_type == "map":
        items = node.get("items", {})
        if not keys or items.get("type") != "object":
            bad("a map list needs x-kubernetes-list-map-keys and object items")
        for key in keys:
            prop = items.get("properties", {}).get(key)
            if prop is None or prop.get("type") in ("object", "array"):
                bad(f"list map key {key!r} must be a scalar property of the items")
            elif key not in items.get("required", []) and "default" not in prop:
                bad(f"list map key {key!r} must be required or have a default")
    elif keys:
        bad("x-kubernetes-list-map-keys needs x-kubernetes-list-type map")
    for i, entry in enumerate(node.get("x-kubernetes-validations", [])):
        if set(entry) - {"rule", "message"} or not str(entry.get("rule", "")).strip():
            bad(f"x-kubernetes-validations[{i}] needs a rule (and only rule/message)")
        if "\n" in entry.get("message", "") or "\n" in entry.get("rule", ""):
            bad(f"x-kubernetes-validations[{i}] must be one line")
    for name, sub in node.get("properties", {}).items():
        _check_node(sub, f"{path}.properties[{name}]", problems)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], f"{path}.items", problems)
    if isinstance(node.get("additionalProperties"), dict):
        _check_node(node["additionalProperties"], f"{path}.additionalProperties", problems)
