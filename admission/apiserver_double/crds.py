"""The custom resources the double serves, read from ``manifests/crd/`` and checked the
way apiextensions-apiserver checks a CustomResourceDefinition.

kube-apiserver serves a custom resource only after accepting its CRD, and it refuses
CRDs whose schemas are not *structural* or whose root ``metadata`` schema says more
than ``type: object``.  The double reads the checked-in CRDs (as listed by
``manifests/crd/kustomization.yaml``), runs :func:`crd_errors` on each -- a CRD a real
server would refuse makes every test that starts the double fail -- and builds the
served :class:`~.resources.ResourceType` from it: group, served versions, scope,
names and short names, categories (only if declared), the status subresource, and
the schema used for pruning, defaulting and validation (:mod:`.schema`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .errors import FieldError, GoValue, invalid_errors
from .resources import BUILTIN_RESOURCES, ResourceType

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "manifests" / "crd"
TEST_CRD_DIR = REPO / "tests" / "support" / "crds"
"""The CRDs of the job kinds' operators (JobSet, Kubeflow, Ray …): test fixtures, one
file each, every ``*.yaml`` of the directory served (no kustomization to edit)."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: JSON-schema keywords apiextensions forbids in CRD schemas (``validateOpenAPISchema``)
FORBIDDEN_KEYWORDS = {
    "$ref": "$ref is not supported",
    "definitions": "definitions are not supported",
    "id": "id is not supported",
    "dependencies": "dependencies are not supported",
    "patternProperties": "patternProperties is not supported",
    "additionalItems": "additionalItems is not supported",
}
#: what a value validation under allOf/anyOf/oneOf/not may not carry (structural rule)
JUNCTOR_FORBIDDEN = (
    "type",
    "default",
    "description",
    "nullable",
    "title",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
)
INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
METADATA_NAME_KEYS = {"type", "pattern", "maxLength", "minLength", "format", "enum"}


# -- loading ------------------------------------------------------------------------------


def _mtimes(directory: Path) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((p.name, p.stat().st_mtime) for p in directory.glob("*.yaml")))


def load_crds(directory: Path = CRD_DIR) -> list[Obj]:
    """The CRDs of ``directory``'s kustomization, in its order: read once while the files
    are unchanged, and a copy of their own for every caller, who may change them (the
    served types are built from the read ones)."""
    return copy.deepcopy(_load(directory, _mtimes(directory)))


@cache
def _load(directory: Path, _stamp: tuple[tuple[str, float], ...]) -> list[Obj]:
    kustomization_file = directory / "kustomization.yaml"
    if kustomization_file.exists():
        kustomization = yaml.load(kustomization_file.read_text(), Loader=_LOADER)
        files = list(kustomization.get("resources") or [])
    else:
        files = sorted(p.name for p in directory.glob("*.yaml"))
    crds = []
    for name in files:
        text = (directory / name).read_text(encoding="utf-8")
        for doc in yaml.load_all(text, Loader=_LOADER):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


def resource_types(crds: Iterable[Obj]) -> tuple[ResourceType, ...]:
    """Served types for ``crds``; a CRD the real server would refuse raises ApiError."""
    types = []
    for crd in crds:
        check_crd(crd)
        types.append(resource_type(crd))
    return tuple(types)


def custom_resources(directory: Path = CRD_DIR) -> tuple[ResourceType, ...]:
    """The checked, served types of ``directory``'s CRDs (cached while the files are
    unchanged)."""
    return _checked(directory, _mtimes(directory))


def default_resources() -> tuple[ResourceType, ...]:
    """The built-in kinds plus the custom resources of ``manifests/crd/`` and of the
    job kinds' test CRDs in ``tests/support/crds/`` (checked): what a default double serves."""
    return BUILTIN_RESOURCES + custom_resources() + custom_resources(TEST_CRD_DIR)


@cache
def _checked(directory: Path, stamp: tuple[tuple[str, float], ...]) -> tuple[ResourceType, ...]:
    return resource_types(_load(directory, stamp))


def resource_type(crd: Obj) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    versions = spec["versions"]
    storage = next(v for v in versions if v.get("storage"))
    served = [storage["name"]] if storage.get("served") else []
    served += [v["name"] for v in versions if v.get("served") and v is not storage]
    schemas = {
        v["name"]: ((v.get("schema") or {}).get("openAPIV3Schema") or {})
        for v in versions
        if v.get("served")
    }
    return ResourceType(
        group=spec["group"],
        versions=tuple(served),
        plural=names["plural"],
        kind=names["kind"],
        namespaced=spec.get("scope") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        status_subresource="status" in (storage.get("subresources") or {}),
        builtin=False,
        categories=tuple(names.get("categories") or ()),
        field_labels=tuple(
            f.get("jsonPath", "").lstrip(".") for f in storage.get("selectableFields") or []
        ),
        schemas=schemas,
        printer_columns={
            v["name"]: tuple(v.get("additionalPrinterColumns") or ())
            for v in versions
            if v.get("served")
        },
    )


# -- validating a CRD -----------------------------------------------------------------------


def check_crd(crd: Obj) -> None:
    """Raise the 422 kube-apiserver answers to ``kubectl apply`` of an invalid CRD."""
    errors = crd_errors(crd)
    if errors:
        name = (crd.get("metadata") or {}).get("name", "")
        raise invalid_errors(
            kind="CustomResourceDefinition", group="apiextensions.k8s.io", name=name,
            errors=errors,
        )  # fmt: skip


def crd_errors(crd: Obj) -> list[FieldError]:
    """The subset of ``ValidateCustomResourceDefinition`` that matters for our CRDs:
    names, versions, structural schemas, the root metadata rule, list-map keys,
    defaults outside metadata, and CEL rules that compile."""
    errors: list[FieldError] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name") or ""
    if not group:
        errors.append(FieldError.required("spec.group"))
    if not plural:
        errors.append(FieldError.required("spec.names.plural"))
    if not names.get("kind"):
        errors.append(FieldError.required("spec.names.kind"))
    if group and plural and name != f"{plural}.{group}":
        errors.append(
            FieldError.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            FieldError(
                "Unsupported value", "spec.scope", 'supported values: "Cluster", "Namespaced"',
                spec.get("scope"),
            )
        )  # fmt: skip
    versions = spec.get("versions") or []
    if not versions:
        errors.append(FieldError.required("spec.versions", "must have at least one version"))
    storage = [v for v in versions if v.get("storage")]
    if versions and len(storage) != 1:
        errors.append(
            FieldError.invalid(
                "spec.versions", GoValue(f"[]apiextensions.CustomResourceDefinitionVersion{{...{len(versions)} versions...}}"),
                "must have exactly one version marked as storage version",
            )
        )  # fmt: skip
    for i, version in enumerate(versions):
        where = f"spec.versions[{i}]"
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errors.append(
                FieldError.required(f"{where}.schema.openAPIV3Schema", "schemas are required")
            )
            continue
        errors += schema_errors(schema, f"{where}.schema.openAPIV3Schema")
    return errors


def schema_errors(schema: Obj, path: str) -> list[FieldError]:
    """Structural-schema and apiextensions schema rules for one version's schema."""
    errors: list[FieldError] = []
    if schema.get("type") != "object":
        if not schema.get("type"):
            errors.append(FieldError.required(f"{path}.type", "must not be empty at the root"))
        else:
            errors.append(
                FieldError.invalid(f"{path}.type", schema["type"], "must be object at the root")
            )
    metadata = (schema.get("properties") or {}).get("metadata")
    if isinstance(metadata, dict) and not _metadata_is_implicit(metadata):
        errors.append(
            FieldError.forbidden(
                f"{path}.properties[metadata]",
                "must not specify anything other than name and generateName, but metadata is "
                "implicitly specified",
            )
        )
    errors += _node_errors(schema, path, level="root")
    return errors


def _metadata_is_implicit(metadata: Obj) -> bool:
    """Root ``metadata`` may be ``{type: object}`` plus restrictions of name/generateName."""
    rest = {k: v for k, v in metadata.items() if k not in ("type", "properties")}
    if rest or metadata.get("type") not in (None, "object"):
        return False
    props = metadata.get("properties") or {}
    if set(props) - {"name", "generateName"}:
        return False
    return all(
        isinstance(p, dict) and set(p) <= METADATA_NAME_KEYS and p.get("type") in (None, "string")
        for p in props.values()
    )


def _node_errors(node: Any, path: str, *, level: str) -> list[FieldError]:
    if not isinstance(node, dict):
        return [FieldError.invalid(path, str(node), "must be a schema object")]
    errors: list[FieldError] = []
    for key, why in FORBIDDEN_KEYWORDS.items():
        if key in node:
            errors.append(FieldError.forbidden(f"{path}.{key}", why))
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if preserve is False:
        errors.append(
            FieldError.invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields", False, "must be true or undefined"
            )
        )
    type_ = node.get("type")
    if not type_ and not int_or_string and not node.get("x-kubernetes-embedded-resource"):
        if level == "root" or not preserve:
            detail = {
                "root": "must not be empty at the root",
                "items": "must not be empty for specified array items",
                "field": "must not be empty for specified object fields",
            }[level]
            if level != "root":  # the root's own check is in schema_errors
                errors.append(FieldError.required(f"{path}.type", detail))
    if int_or_string and type_:
        errors.append(
            FieldError.invalid(
                f"{path}.type", type_, "must be empty if x-kubernetes-int-or-string is true"
            )
        )
    if "properties" in node and "additionalProperties" in node:
        errors.append(
            FieldError.forbidden(
                f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
            )
        )  # fmt: skip
    if node.get("additionalProperties") is False:
        errors.append(
            FieldError.forbidden(
                f"{path}.additionalProperties", "additionalProperties cannot be set to false"
            )
        )
    if node.get("uniqueItems") is True:
        errors.append(
            FieldError.forbidden(
                f"{path}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    if type_ == "array" and not isinstance(node.get("items"), dict):
        errors.append(FieldError.required(f"{path}.items", "must be specified"))
    errors += _list_map_errors(node, path)
    errors += _cel_errors(node, path)
    for name, sub in (node.get("properties") or {}).items():
        if level == "root" and name == "metadata":
            continue  # checked by the root metadata rule
        errors += _node_errors(sub, f"{path}.properties[{name}]", level="field")
    if isinstance(node.get("additionalProperties"), dict):
        errors += _node_errors(
            node["additionalProperties"], f"{path}.additionalProperties", level="field"
        )
    if isinstance(node.get("items"), dict):
        errors += _node_errors(node["items"], f"{path}.items", level="items")
    for junctor in ("allOf", "anyOf", "oneOf"):
        if junctor == "anyOf" and int_or_string and node.get("anyOf") == INT_OR_STRING_ANY_OF:
            continue  # the one typed junctor structural schemas allow
        for i, sub in enumerate(node.get(junctor) or []):
            errors += _junctor_errors(sub, f"{path}.{junctor}[{i}]")
    if isinstance(node.get("not"), dict):
        errors += _junctor_errors(node["not"], f"{path}.not")
    return errors


def _junctor_errors(node: Any, path: str) -> list[FieldError]:
    if not isinstance(node, dict):
        return []
    return [
        FieldError.forbidden(f"{path}.{key}", "must be empty to be structural")
        for key in JUNCTOR_FORBIDDEN
        if key in node
    ]


def _list_map_errors(node: Obj, path: str) -> list[FieldError]:
    list_type = node.get("x-kubernetes-list-type")
    keys = node.get("x-kubernetes-list-map-keys")
    errors: list[FieldError] = []
    if keys is not None and list_type != "map":
        errors.append(
            FieldError.forbidden(
                f"{path}.x-kubernetes-list-map-keys",
                "must not be set if x-kubernetes-list-type is not map",
            )
        )
    if list_type is None:
        return errors
    if list_type not in ("atomic", "set", "map"):
        errors.append(
            FieldError(
                "Unsupported value", f"{path}.x-kubernetes-list-type",
                'supported values: "atomic", "map", "set"', list_type,
            )
        )  # fmt: skip
    if node.get("type") != "array":
        errors.append(
            FieldError.invalid(f"{path}.type", node.get("type"), "must be array if x-kubernetes-list-type is specified")
        )  # fmt: skip
    if list_type != "map":
        return errors
    items: Obj = node["items"] if isinstance(node.get("items"), dict) else {}
    if items.get("type") != "object":
        errors.append(
            FieldError.invalid(
                f"{path}.items.type", items.get("type"),
                'must be object if parent array\'s x-kubernetes-list-type is "map"',
            )
        )  # fmt: skip
    if not keys:
        errors.append(
            FieldError.required(
                f"{path}.x-kubernetes-list-map-keys",
                "must not be empty if x-kubernetes-list-type is map",
            )
        )
        return errors
    props = items.get("properties") or {}
    required = set(items.get("required") or [])
    for i, key in enumerate(keys):
        where = f"{path}.x-kubernetes-list-map-keys[{i}]"
        if key not in props:
            errors.append(
                FieldError.invalid(where, key, "entries must all be names of item properties")
            )
        elif key not in required and "default" not in props[key]:
            errors.append(
                FieldError.invalid(
                    where, key,
                    "all map keys must be required or have a default value",
                )
            )  # fmt: skip
    return errors


def _cel_errors(node: Obj, path: str) -> list[FieldError]:
    rules = node.get("x-kubernetes-validations") or []
    if not rules:
        return []
    import celpy

    env = celpy.Environment()
    errors: list[FieldError] = []
    for i, rule in enumerate(rules):
        where = f"{path}.x-kubernetes-validations[{i}].rule"
        text = rule.get("rule") if isinstance(rule, dict) else None
        if not text:
            errors.append(FieldError.required(where))
            continue
        try:
            env.compile(text)
        except Exception as exc:  # noqa: BLE001 - any compile failure is the CRD's fault
            errors.append(FieldError.invalid(where, text, f"compilation failed: {exc}"))
    return errors
