"""A Kubernetes object in, a checked ``queues.model`` object out: the one place input is checked.

``parse_object`` validates a document against what Kueue's CRD schema, CEL rules and
validating webhooks enforce (docs/semantics.md §1, §3.5-3.8): the shapes are the
models of :mod:`queues.api.kinds`, the rules :mod:`queues.api.rules`. ``to_model``
turns the result into the plain slotted classes of ``queues.model``
(:mod:`queues.api.convert`). Nothing downstream validates again. v1beta1 objects are
converted to v1beta2 first (:mod:`queues.api.v1beta1`).

Every problem is an ``InputError`` naming the object and the full field path
(``spec.resourceGroups[0].flavors[1].resources[0].nominalQuota``) with Kueue's or
Kubernetes' own wording where one exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from queues import model as m
from queues.api import convert as api_convert
from queues.api import rules as api_rules
from queues.api import topology as topology_api
from queues.api.fields import KubeModel, LabelSelector, Problems, loc_path, pydantic_message
from queues.api.kinds import (
    KINDS,
    KUEUE_V1BETA1,
    NAMESPACED_KINDS,
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    ParsedObject,
    PriorityClass,
    ResourceFlavor,
    Topology,
    Workload,
    WorkloadPriorityClass,
)
from queues.api.v1beta1 import to_v1beta2

__all__ = [
    "InputError",
    "ModelObject",
    "display_name",
    "parse_label_selector",
    "parse_model",
    "parse_object",
    "to_model",
]


class InputError(ValueError):
    """An object that is not valid input; ``path`` and ``message`` describe the first problem.

    ``errors`` holds every (path, message) found, the first being (path, message).
    ``name`` is ``namespace/name`` for namespaced kinds.
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        path: str,
        message: str,
        errors: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.kind = kind
        self.name = name
        self.path = path
        self.message = message
        self.errors = errors or ((path, message),)
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.kind or 'object'} {self.name or '(unnamed)'}: {self.path}: {self.message}"


ModelObject = (
    m.AdmissionCheck
    | m.ResourceFlavor
    | m.ClusterQueue
    | m.Cohort
    | m.LocalQueue
    | m.PriorityClass
    | m.Workload
    | m.Namespace
    | m.Topology
)

_RULES: dict[type[KubeModel], Callable[[Any], Problems]] = {
    ResourceFlavor: lambda o: api_rules.check_resource_flavor(o.spec),
    ClusterQueue: lambda o: api_rules.check_cluster_queue(o.spec),
    Cohort: lambda o: api_rules.check_cohort(o.spec),
    Workload: api_rules.check_workload,
    Topology: lambda o: topology_api.check_topology(o.spec),
}
_CONVERTERS: dict[type[KubeModel], Callable[[Any], ModelObject]] = {
    AdmissionCheck: api_convert.admission_check,
    ResourceFlavor: api_convert.resource_flavor,
    ClusterQueue: api_convert.cluster_queue,
    Cohort: api_convert.cohort,
    LocalQueue: api_convert.local_queue,
    WorkloadPriorityClass: api_convert.workload_priority_class,
    PriorityClass: api_convert.priority_class,
    Namespace: api_convert.namespace,
    Workload: api_convert.workload,
    Topology: topology_api.to_model,
}


def parse_object(doc: Any) -> ParsedObject:
    """Validate one Kubernetes object (a dict decoded from YAML/JSON) of a known kind.

    v1beta1 Kueue objects are converted to v1beta2. Raises InputError on any problem.
    """
    if not isinstance(doc, dict):
        raise InputError(kind="", name="", path="(document)", message="must be a mapping")
    kind = doc.get("kind")
    meta = doc.get("metadata")
    name = display_name(kind, meta)
    kind_text = kind if isinstance(kind, str) else ""

    def fail(path: str, message: str) -> InputError:
        return InputError(kind=kind_text, name=name, path=path, message=message)

    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise fail("apiVersion", "Required value")
    if not isinstance(kind, str) or not kind:
        raise fail("kind", "Required value")
    model_cls = KINDS.get((api_version, kind))
    if model_cls is None:
        versions = sorted(v for (v, k) in KINDS if k == kind)
        if versions:
            supported = ", ".join(f'"{v}"' for v in versions)
            raise fail(
                "apiVersion",
                f'Unsupported value: "{api_version}": supported values for {kind}: {supported}',
            )
        known = ", ".join(sorted({k for (_, k) in KINDS}))
        raise fail("kind", f'unsupported kind "{kind}" (supported kinds: {known})')
    if not isinstance(meta, dict):
        raise fail("metadata", "Required value" if meta is None else "must be of type object")
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise fail("metadata.name", "Required value")

    data = dict(doc)
    renames: dict[str, str] = {}
    if api_version == KUEUE_V1BETA1:
        data, renames, problems = to_v1beta2(data)
        if problems:
            raise _error(kind, name, problems)
    if kind in NAMESPACED_KINDS and data.get("spec") is None:
        data["spec"] = {}  # report the missing fields of spec, not spec itself
    try:
        parsed = model_cls.model_validate(data)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        problems = [(_rename(loc_path(e["loc"]), renames), pydantic_message(e)) for e in errors]
        raise _error(kind, name, problems) from None
    problems = api_rules.check_meta(parsed.metadata, kind)  # type: ignore[attr-defined]
    rules = _RULES.get(model_cls)
    if rules is not None:
        problems += rules(parsed)
    if problems:
        raise _error(kind, name, [(_rename(p, renames), msg) for p, msg in problems])
    return parsed  # type: ignore[return-value]


def to_model(parsed: ParsedObject) -> ModelObject:
    """The ``queues.model`` object for a parsed object (InputError if a value won't convert)."""
    meta = parsed.metadata
    try:
        return _CONVERTERS[type(parsed)](parsed)
    except api_convert.ConvertError as exc:
        name = display_name(parsed.kind, {"name": meta.name, "namespace": meta.namespace})
        raise InputError(kind=parsed.kind, name=name, path=exc.path, message=exc.message) from None


def parse_model(doc: Any) -> ModelObject:
    """``to_model(parse_object(doc))``."""
    return to_model(parse_object(doc))


def display_name(kind: Any, meta: Any) -> str:
    """How errors name an object: ``name``, or ``namespace/name`` for namespaced kinds."""
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return ""
    if kind not in NAMESPACED_KINDS:
        return meta["name"]
    ns = meta.get("namespace")
    return f"{ns if isinstance(ns, str) and ns else api_convert.DEFAULT_NAMESPACE}/{meta['name']}"


def _error(kind: str, name: str, problems: Problems) -> InputError:
    path, message = problems[0]
    return InputError(kind=kind, name=name, path=path, message=message, errors=tuple(problems))


def _rename(path: str, renames: dict[str, str]) -> str:
    for new, old in renames.items():
        if path == new or path.startswith((new + ".", new + "[")):
            return old + path[len(new) :]
    return path


# --------------------------------------------------------------------------------------
# v1beta1 → v1beta2 (apis/kueue/v1beta1/*_conversion.go)
# --------------------------------------------------------------------------------------


def parse_label_selector(doc: Any, *, path: str) -> m.LabelSelector:
    """A metav1.LabelSelector outside an object (e.g. in the configuration file)."""
    try:
        parsed = LabelSelector.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        sub = ".".join(str(p) for p in err["loc"])
        raise InputError(
            kind="", name="", path=f"{path}.{sub}" if sub else path, message=err["msg"]
        ) from None
    return api_convert._label_selector(parsed)
