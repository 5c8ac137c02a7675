"""Validate Kubernetes objects against the generated CRDs the way the API server does.

The tests of ``manifests/crd/`` (tests/unit/queues/test_crds*.py, tests/unit/cli/test_crds_install.py) need to
know what a cluster with our CRDs would refuse, without a cluster: the CRD's
openAPIV3Schema after defaulting, with unknown fields refused (kubectl's default strict
field validation), ``x-kubernetes-list-type: map`` keys unique, and the
``x-kubernetes-validations`` CEL rules evaluated (with cel-python; transition rules only
on updates). Problems come back as (field path, message) pairs.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import celpy
import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
CRD_DIR = MANIFESTS / "crd"
EXAMPLES = MANIFESTS / "examples"
SCENARIOS = REPO / "tests" / "scenarios"
SCENARIO_BASES = REPO / "tests" / "support" / "scenario_bases"
README = MANIFESTS / "README.md"
GROUP = "kueue.x-k8s.io"
V1BETA2 = f"{GROUP}/v1beta2"
SERVED_KINDS = (
    "AdmissionCheck",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "MultiKueueCluster",
    "MultiKueueConfig",
    "ResourceFlavor",
    "Topology",
    "Workload",
    "WorkloadPriorityClass",
)
K8S_OLDEST, K8S_NEWEST = "1.30.0", "1.37.0"
"""The Kubernetes minors we validate against (stated in manifests/README.md)."""

Obj = dict[str, Any]
Problem = tuple[str, str]


@cache
def gen() -> ModuleType:
    """hack/gen_crds.py as a module (hack/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_crds", REPO / "hack" / "gen_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_crds"] = module
    spec.loader.exec_module(module)
    return module


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_all(path: Path) -> list[Obj]:
    text = path.read_text(encoding="utf-8")
    return [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]


@cache
def checked_in_crds() -> dict[str, Obj]:
    """Kind -> CRD, read from manifests/crd/ as listed by its kustomization."""
    kust = load_all(CRD_DIR / "kustomization.yaml")[0]
    crds: dict[str, Obj] = {}
    for name in kust["resources"]:
        for doc in load_all(CRD_DIR / name):
            crds[doc["spec"]["names"]["kind"]] = doc
    return crds


def served_schema(kind: str) -> Obj:
    (version,) = [v for v in checked_in_crds()[kind]["spec"]["versions"] if v["served"]]
    return version["schema"]["openAPIV3Schema"]


# ------------------------------------------------------------ validating like the API server


def _strict(node: Obj) -> Obj:
    """A CRD schema node as plain JSON schema that refuses unknown fields.

    The API server prunes unknown fields, and with strict field validation (kubectl's
    default) refuses them; JSON schema needs ``additionalProperties: false`` for that.
    ``x-kubernetes-*`` keywords are left out (CEL rules are evaluated separately).
    """
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if "properties" in node:
        out["properties"] = {name: _strict(sub) for name, sub in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = _strict(node["items"])
    return out


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = _strict(served_schema(kind))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def _schema_problems(kind: str, obj: Obj) -> list[Problem]:
    problems: list[Problem] = []
    for err in _validator(kind).iter_errors(obj):
        where = list(err.absolute_path)
        if err.validator == "additionalProperties":
            for name in re.findall(r"'([^']+)'", err.message.split(" were unexpected")[0]):
                if name not in (err.schema.get("properties") or {}):
                    problems.append((_path([*where, name]), f'unknown field "{name}"'))
        elif err.validator == "required":
            missing = re.findall(r"^'([^']+)'", err.message)
            problems.append((_path(where + missing), "Required value"))
        elif err.validator == "enum":
            allowed = ", ".join(f'"{v}"' for v in err.validator_value)
            problems.append(
                (_path(where), f'Unsupported value: "{err.instance}": supported values: {allowed}')
            )
        elif err.validator == "anyOf" and err.validator_value == INT_OR_STRING:
            problems.append((_path(where), _int_or_string_message(err.instance)))
        else:
            problems.append((_path(where), err.message))
    return sorted(problems)


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def _int_or_string_message(value: Any) -> str:
    if isinstance(value, float):  # YAML 0.5: plan accepts it, the API server does not
        return (
            f"must be an integer or a string, got the number {value}: "
            f'the API server refuses it, quote it ("{value}")'
        )
    return f"must be an integer or a string, got {type(value).__name__} {value!r}"


def apply_defaults(schema: Obj, value: Any) -> Any:
    """Structural defaulting: fill absent properties that have a default, recursively."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


_CEL = celpy.Environment()


@cache
def _program(expr: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(expr))


def _cel_problems(schema: Obj, value: Any, old: Any, path: str) -> list[Problem]:
    """Evaluate every x-kubernetes-validations rule that applies to ``value``.

    Rules using ``oldSelf`` (transition rules) run only when there is an old value at
    the same place, as on the API server (updates, not creates).
    """
    problems: list[Problem] = []
    for entry in schema.get("x-kubernetes-validations", []):
        expr = entry["rule"]
        if "oldSelf" in expr and old is None:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(expr).evaluate(activation)
        if isinstance(result, celpy.CELEvalError) or not bool(result):
            problems.append((path or "<root>", entry.get("message", f"failed rule: {expr}")))
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                old_sub = old.get(name) if isinstance(old, dict) else None
                sub_path = f"{path}.{name}" if path else name
                problems += _cel_problems(sub, value[name], old_sub, sub_path)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, sub_value in value.items():
                old_sub = old.get(key) if isinstance(old, dict) else None
                problems += _cel_problems(extra, sub_value, old_sub, f"{path}[{key}]")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys")
        old_items: dict[tuple[Any, ...], Any] = {}
        if keys and isinstance(old, list):
            old_items = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            old_item = None
            if keys and isinstance(item, dict):
                old_item = old_items.get(tuple(item.get(k) for k in keys))
            problems += _cel_problems(schema["items"], item, old_item, f"{path}[{i}]")
    return problems


def _list_map_problems(schema: Obj, value: Any, path: str) -> list[Problem]:
    """x-kubernetes-list-type: map lists may not repeat a key (the API server refuses)."""
    problems: list[Problem] = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys")
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            if keys and isinstance(item, dict):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    problems.append(
                        (f"{path}[{i}]", f"Duplicate value: {dict(zip(keys, key, strict=True))}")
                    )
                seen.add(key)
            problems += _list_map_problems(schema["items"], item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                problems += _list_map_problems(sub, value[name], f"{path}.{name}" if path else name)
    return problems


def crd_problems(obj: Obj, old: Obj | None = None) -> list[Problem]:
    """What the API server, given our CRDs, would refuse in ``obj`` (an update if ``old``)."""
    kind = obj["kind"]
    assert obj["apiVersion"] == V1BETA2, obj["apiVersion"]
    schema = served_schema(kind)
    value = apply_defaults(schema, copy.deepcopy(obj))
    problems = _schema_problems(kind, value)
    if problems:  # CEL rules assume the schema holds; report the schema's complaint
        return problems
    old_value = None if old is None else apply_defaults(schema, copy.deepcopy(old))
    return _list_map_problems(schema, value, "") + _cel_problems(schema, value, old_value, "")


def assert_valid(obj: Obj, where: str) -> None:
    problems = crd_problems(obj)
    name = obj.get("metadata", {}).get("name")
    assert not problems, f"{where}: {obj['kind']} {name}: {problems}"
