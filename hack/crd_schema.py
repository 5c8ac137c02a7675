"""JSON schema (pydantic) -> structural OpenAPI v3 schema, with each kind's additions.

The API server accepts only structural schemas in a CRD; pydantic's JSON schema has
``$ref``s, ``anyOf``s and untyped nodes. ``build_schema`` inlines and reshapes a model's
schema, applies the additions its ``Kind`` declares (``hack/crd_kinds.py``) at their
schema paths, and refuses with ``SchemaError`` what cannot be made structural or a patch
that names no schema node, so ``hack/gen_crds.py`` never writes a CRD the server refuses.

Imported by ``hack/gen_crds.py``, which puts hack/ and the repository on ``sys.path``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from crd_kinds import Kind, Schema
from crd_structural import METADATA, structural_problems

from queues.api.fields import KubeJsonSchema, KubeModel

ROOT_DESCRIPTIONS = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object.",
    "kind": "Kind is a string value representing the REST resource this object represents.",
}


class SchemaError(ValueError):
    """The model's schema cannot be made structural, or a patch names no schema node."""


def model_schema(model: type[KubeModel]) -> Schema:
    """The model's JSON schema in CRD shape, before the per-kind additions."""
    raw = model.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)
    raw.pop("description", None)  # the model's docstring; the root gets Kind.description
    defs = raw.pop("$defs", {})
    schema = _structural(_inline(raw, defs, model.__name__), model.__name__)
    props = schema["properties"]
    props["metadata"] = dict(METADATA)  # ObjectMeta is validated by the API server
    for key, text in ROOT_DESCRIPTIONS.items():
        props[key] = {"type": "string", "description": text}
    required = [r for r in schema.get("required", []) if r not in (*ROOT_DESCRIPTIONS, "metadata")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    return schema


def _inline(node: Any, defs: dict[str, Schema], where: str) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, where) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        if name not in defs:
            raise SchemaError(f"{where}: unresolvable $ref {node['$ref']}")
        # A model's docstring is for developers; a field's description is for kubectl explain.
        target = {k: v for k, v in defs[name].items() if k != "description"}
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **siblings}, defs, where)
    return {k: _inline(v, defs, where) for k, v in node.items()}


def _structural(node: Schema, path: str) -> Schema:
    out: Schema = {}
    for key, value in node.items():
        if key in ("title", "const"):
            continue  # const is only on `kind`, which the API server checks
        if key == "properties":
            out[key] = {name: _structural(sub, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = _structural(value, f"{path}[]")
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _structural(value, f"{path}{{}}")
        elif key == "additionalProperties" and value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True  # status content we don't read
        elif key == "anyOf":
            if not node.get("x-kubernetes-int-or-string"):
                raise SchemaError(f"{path}: anyOf is only allowed for int-or-string quantities")
            out[key] = value
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        raise SchemaError(f"{path}: properties and additionalProperties are mutually exclusive")
    return out


def schema_node(schema: Schema, path: str) -> Schema:
    """The node of ``schema`` at a schema path (see ``Kind``); SchemaError if none."""
    node = schema
    for part in _path_parts(path):
        if part == "[]":
            child = node.get("items")
        elif part == "{}":
            child = node.get("additionalProperties")
        else:
            child = node.get("properties", {}).get(part)
        if not isinstance(child, dict):
            raise SchemaError(f"schema path {path!r}: no node at {part!r}")
        node = child
    return node


def _path_parts(path: str) -> Iterator[str]:
    yield from re.findall(r"\[\]|\{\}|[^.\[\]{}]+", path)


def build_schema(kind: Kind) -> Schema:
    """The full openAPIV3Schema of one kind."""
    schema = model_schema(kind.model)
    schema["description"] = kind.description
    for path, extra in kind.patches.items():
        node = schema_node(schema, path)
        node.update(copy.deepcopy(extra))
        if "pattern" in extra and "anyOf" not in node and node.get("type") != "string":
            raise SchemaError(f"{kind.kind}: {path}: pattern on a non-string node")
    for path, rules in kind.rules.items():
        node = schema_node(schema, path)
        node.setdefault("x-kubernetes-validations", []).extend(copy.deepcopy(list(rules)))
    problems = structural_problems(schema)
    if problems:
        raise SchemaError(f"{kind.kind}: not a structural schema:\n  " + "\n  ".join(problems))
    return schema
