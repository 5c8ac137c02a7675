"""Generate ``admission/drivers/builtin_fields.json``: the fields of the built-in kinds.

``kubectl apply`` asks the API server for strict field validation: a Job with
``spec.paralellism`` is refused with ``strict decoding error: unknown field
"spec.paralellism"``. ``quartermaster plan`` refuses the same documents
(``admission.drivers.strict``), so it needs to know every field of every type a Job,
a Pod or a pod template can hold. That knowledge is the Kubernetes OpenAPI schema; this
script boils the schema down to what strict decoding checks (field names, and whether a
value is an object, a list, a map or a scalar of which JSON type) and writes it in a
compact form, checked in so that the loader needs no schema at run time.

The source is the strict JSON schema that ``kubernetes-validate`` (a test dependency)
ships for the Kubernetes releases in ``VERSIONS``; a field of either is accepted (an
alpha field can come and go between releases, and a cluster runs one or the other).
The real API server is the reference: the real-server test in
``tests/unit/drivers/test_strict_fields.py`` checks that it knows no field this file lacks and
refuses the same typos.

    python hack/gen_builtin_fields.py           # write the file
    python hack/gen_builtin_fields.py --check   # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "admission" / "drivers" / "builtin_fields.json"
VERSIONS = ("v1.36.0", "v1.37.0")
ROOTS = {
    "batch/v1 Job": "io.k8s.api.batch.v1.Job",
    "v1 Pod": "io.k8s.api.core.v1.Pod",
    "v1 PodTemplateSpec": "io.k8s.api.core.v1.PodTemplateSpec",
    "apps/v1 Deployment": "io.k8s.api.apps.v1.Deployment",
    "apps/v1 StatefulSet": "io.k8s.api.apps.v1.StatefulSet",
}
REF_PREFIX = "#/$defs/"
# Types whose JSON form is not an object with fixed fields.
SCALAR_TYPES = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int-or-string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Duration": "string",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "any",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": "any",
}


def schema_dir(version: str) -> Path:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return base / f"{version}-local-strict"


def _type_names(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type", [])
    names = [t] if isinstance(t, str) else list(t)
    return [n for n in names if n != "null"]


def shape(schema: dict[str, Any], pending: list[str]) -> Any:
    """The compact shape of one schema: a scalar kind, a type name, [item], {"*": value}."""
    ref = schema.get("$ref")
    if ref is not None:
        name = ref.removeprefix(REF_PREFIX)
        if name in SCALAR_TYPES:
            return SCALAR_TYPES[name]
        pending.append(name)
        return name
    if "oneOf" in schema or "anyOf" in schema:
        return "any"
    types = _type_names(schema)
    if "array" in types:
        return [shape(schema.get("items") or {}, pending)]
    if "object" in types:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return {"*": shape(extra, pending)}
        if "properties" in schema:
            raise ValueError("inline object with properties: not expected in the API schema")
        return "any"
    if len(types) == 1 and types[0] in ("string", "integer", "number", "boolean"):
        return types[0]
    return "any"


def build(definitions: dict[str, Any]) -> dict[str, dict[str, Any]]:
    types: dict[str, dict[str, Any]] = {}
    pending = list(ROOTS.values())
    while pending:
        name = pending.pop()
        if name in types or name in SCALAR_TYPES:
            continue
        schema = definitions[name]
        props = schema.get("properties")
        if props is None:  # a struct without fields: strict decoding refuses any field
            if "object" not in _type_names(schema) or "additionalProperties" in schema:
                raise ValueError(f"{name}: not an object with fixed fields")
            props = {}
        types[name] = {field: shape(sub, pending) for field, sub in sorted(props.items())}
    return types


def render() -> str:
    types: dict[str, dict[str, Any]] = {}
    for version in VERSIONS:  # oldest first: a newer release's shape of a field wins
        doc = json.loads((schema_dir(version) / "_definitions.json").read_text())
        for name, fields in build(doc["$defs"]).items():
            types[name] = dict(sorted({**types.get(name, {}), **fields}.items()))
    out = {
        "source": "kubernetes-validate "
        + ", ".join(f"{v}-local-strict" for v in VERSIONS)
        + " (hack/gen_builtin_fields.py)",
        "roots": ROOTS,
        "types": dict(sorted(types.items())),
    }
    return json.dumps(out, indent=0, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run python hack/gen_builtin_fields.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
