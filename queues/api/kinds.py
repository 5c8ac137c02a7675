"""Kueue's API objects as pydantic models: the one place where input is checked.

Everything that enters Quartermaster — YAML for ``plan``, objects from the API server,
AdmissionReview payloads — is a Kubernetes object. ``parse_object`` validates one
against what Kueue's CRD schema, CEL rules and validating webhooks enforce
(docs/semantics.md §1, §3.5-3.8; the rules themselves are in ``queues.api.rules``)
and ``to_model`` turns it into the plain slotted classes of ``queues.model``
(``queues.api.convert``). Nothing downstream validates again.

Every problem is an ``InputError`` naming the object and the full field path
(``spec.resourceGroups[0].flavors[1].resources[0].nominalQuota``) with Kueue's or
Kubernetes' own wording where one exists. Unknown fields are errors, never ignored;
only ``status`` content that Quartermaster does not read is passed over.

The models are also the source of the CRD schemas:
``ClusterQueue.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)``.

v1beta1 objects are converted to v1beta2 first, as Kueue's conversion webhook does
(``spec.cohort`` → ``spec.cohortName``; ``priorityClassName`` + ``priorityClassSource``
→ ``priorityClassRef``; fungibility ``Borrow``/``Preempt`` → ``MayStopSearch``;
``admissionChecks`` → ``admissionChecksStrategy``); error paths keep v1beta1 names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError

from queues import model as m
from queues.api import convert as api_convert
from queues.api import rules as api_rules
from queues.api import topology as topology_api
from queues.api.fields import (
    DNS1123_SUBDOMAIN,
    FreeForm,
    Int32,
    KubeJsonSchema,
    KubeModel,
    LabelSelector,
    NonNegInt32,
    ObjectMeta,
    Problems,
    Quantity,
    ResourceGroups,
    StatusModel,
    StopPolicy,
    Subdomain,
    Time,
    Toleration,
    loc_path,
    pydantic_message,
)
from queues.api.fields import Condition as Condition
from queues.api.fields import DNSLabel as PodSetReference
from queues.api.fields import FairSharing as FairSharing
from queues.api.fields import FlavorQuotas as FlavorQuotas
from queues.api.fields import ResourceGroup as ResourceGroup
from queues.api.fields import ResourceQuota as ResourceQuota
from queues.api.fields import Taint as Taint
from queues.api.topology import Topology as Topology

__all__ = [
    "KINDS",
    "InputError",
    "KubeJsonSchema",
    "ModelObject",
    "ParsedObject",
    "parse_model",
    "parse_object",
    "to_model",
    # kinds
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "Namespace",
    "PriorityClass",
    "ResourceFlavor",
    "Topology",
    "Workload",
    "WorkloadPriorityClass",
]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"
SCHEDULING_V1 = "scheduling.k8s.io/v1"
CORE_V1 = "v1"
WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PC_SOURCE = "scheduling.k8s.io/priorityclass"
MAX_PODSETS = 18
DEFAULT_NAMESPACE = api_convert.DEFAULT_NAMESPACE
NAMESPACED_KINDS = api_rules.NAMESPACED_KINDS


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


# --------------------------------------------------------------------------------------
# ResourceFlavor
# --------------------------------------------------------------------------------------


class ResourceFlavorSpec(KubeModel):
    node_labels: Annotated[dict[str, str], Field(max_length=8)] = Field(default_factory=dict)
    node_taints: Annotated[list[Taint], Field(max_length=8)] = Field(default_factory=list)
    tolerations: Annotated[list[Toleration], Field(max_length=8)] = Field(default_factory=list)
    topology_name: Subdomain | None = None


class ResourceFlavor(KubeModel):
    """kueue.x-k8s.io ResourceFlavor (cluster-scoped, no status)."""

    api_version: str
    kind: Literal["ResourceFlavor"]
    metadata: ObjectMeta
    spec: ResourceFlavorSpec = Field(
        default_factory=ResourceFlavorSpec, json_schema_extra={"default": {}}
    )


# --------------------------------------------------------------------------------------
# ClusterQueue
# --------------------------------------------------------------------------------------


class FlavorFungibility(KubeModel):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor"] = "MayStopSearch"
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor"] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class BorrowWithinCohort(KubeModel):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: Int32 | None = None


class ClusterQueuePreemption(KubeModel):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort = Field(
        default_factory=BorrowWithinCohort, json_schema_extra={"default": {}}
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"


class AdmissionCheckStrategyRule(KubeModel):
    name: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    on_flavors: Annotated[list[Subdomain], Field(max_length=64)] = Field(default_factory=list)


class AdmissionChecksStrategy(KubeModel):
    admission_checks: Annotated[
        list[AdmissionCheckStrategyRule], Field(min_length=1, max_length=64)
    ]


class AdmissionScope(KubeModel):
    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"]


class ConcurrentAdmissionConstraints(KubeModel):
    last_acceptable_flavor_name: Subdomain | None = None


class ConcurrentAdmissionMigration(KubeModel):
    mode: Literal["TryPreferredFlavors", "RetainFirstAdmission"]
    constraints: ConcurrentAdmissionConstraints | None = None


class ConcurrentAdmissionPolicy(KubeModel):
    migration: ConcurrentAdmissionMigration


class ClusterQueueSpec(KubeModel):
    resource_groups: ResourceGroups = Field(default_factory=list)
    cohort_name: Subdomain | None = None
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility = Field(
        default_factory=FlavorFungibility, json_schema_extra={"default": {}}
    )
    preemption: ClusterQueuePreemption = Field(
        default_factory=ClusterQueuePreemption, json_schema_extra={"default": {}}
    )
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy = "None"
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None
    concurrent_admission_policy: ConcurrentAdmissionPolicy | None = None


class ClusterQueue(KubeModel):
    """kueue.x-k8s.io ClusterQueue (cluster-scoped). ``status`` is accepted, not read."""

    api_version: str
    kind: Literal["ClusterQueue"]
    metadata: ObjectMeta
    spec: ClusterQueueSpec = Field(
        default_factory=ClusterQueueSpec, json_schema_extra={"default": {}}
    )
    status: FreeForm | None = None


# --------------------------------------------------------------------------------------
# Cohort, LocalQueue, priority classes, Namespace
# --------------------------------------------------------------------------------------


class CohortSpec(KubeModel):
    parent_name: Subdomain | None = None
    resource_groups: ResourceGroups = Field(default_factory=list)
    fair_sharing: FairSharing | None = None


class Cohort(KubeModel):
    """kueue.x-k8s.io Cohort (cluster-scoped). ``status`` is accepted, not read."""

    api_version: str
    kind: Literal["Cohort"]
    metadata: ObjectMeta
    spec: CohortSpec = Field(default_factory=CohortSpec, json_schema_extra={"default": {}})
    status: FreeForm | None = None


class LocalQueueSpec(KubeModel):
    cluster_queue: Subdomain
    stop_policy: StopPolicy = "None"
    fair_sharing: FairSharing | None = None


class AdmissionFairSharingStatus(KubeModel):
    consumed_resources: dict[str, Quantity] = Field(default_factory=dict)
    last_update: Time | None = None


class LocalQueueFairSharingStatus(StatusModel):
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


class LocalQueueStatus(StatusModel):
    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(KubeModel):
    """kueue.x-k8s.io LocalQueue (namespaced)."""

    api_version: str
    kind: Literal["LocalQueue"]
    metadata: ObjectMeta
    spec: LocalQueueSpec
    status: LocalQueueStatus | None = None


class WorkloadPriorityClass(KubeModel):
    """kueue.x-k8s.io WorkloadPriorityClass (cluster-scoped; value at top level)."""

    api_version: str
    kind: Literal["WorkloadPriorityClass"]
    metadata: ObjectMeta
    value: Int32
    description: Annotated[str, StringConstraints(max_length=2048)] = ""


class PriorityClass(KubeModel):
    """scheduling.k8s.io/v1 PriorityClass."""

    api_version: str
    kind: Literal["PriorityClass"]
    metadata: ObjectMeta
    value: Int32
    global_default: bool = False
    description: str = ""
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = None


class Namespace(KubeModel):
    """v1 Namespace: only the name and labels matter (they feed namespaceSelector)."""

    api_version: str
    kind: Literal["Namespace"]
    metadata: ObjectMeta
    spec: FreeForm | None = None
    status: FreeForm | None = None


# --------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------

_Str63 = Annotated[str, StringConstraints(max_length=63)]
_Str317 = Annotated[str, StringConstraints(max_length=317)]


class PodSetTopologyRequest(KubeModel):
    required: _Str63 | None = None
    preferred: _Str63 | None = None
    unconstrained: bool | None = None
    pod_index_label: _Str317 | None = None
    sub_group_index_label: _Str317 | None = None
    sub_group_count: Int32 | None = None
    pod_set_group_name: Annotated[str, StringConstraints(max_length=256)] | None = None
    pod_set_slice_required_topology: _Str63 | None = None
    pod_set_slice_size: Int32 | None = None


class PodSet(KubeModel):
    name: PodSetReference = "main"
    template: FreeForm
    count: NonNegInt32 = 1
    min_count: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    topology_request: PodSetTopologyRequest | None = None


class PriorityClassRef(KubeModel):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]


class PreemptionGate(KubeModel):
    name: Annotated[str, StringConstraints(min_length=1, max_length=316)]


class WorkloadSpec(KubeModel):
    pod_sets: Annotated[list[PodSet], Field(min_length=1, max_length=MAX_PODSETS)]
    queue_name: Subdomain | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: Int32 | None = None
    active: bool = True
    maximum_execution_time_seconds: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    preemption_gates: Annotated[list[PreemptionGate], Field(max_length=8)] = Field(
        default_factory=list
    )


class PodSetAssignment(KubeModel):
    name: PodSetReference = "main"
    flavors: dict[str, Subdomain] = Field(default_factory=dict)
    resource_usage: dict[str, Quantity] = Field(default_factory=dict)
    count: NonNegInt32 | None = None
    topology_assignment: FreeForm | None = None
    delayed_topology_request: Literal["Pending", "Ready"] | None = None


class Admission(KubeModel):
    cluster_queue: Subdomain
    pod_set_assignments: Annotated[list[PodSetAssignment], Field(max_length=MAX_PODSETS)] = Field(
        default_factory=list
    )


class WorkloadStatus(StatusModel):
    conditions: Annotated[list[Condition], Field(max_length=16)] = Field(default_factory=list)
    admission: Admission | None = None


class Workload(KubeModel):
    """kueue.x-k8s.io Workload (namespaced)."""

    api_version: str
    kind: Literal["Workload"]
    metadata: ObjectMeta
    spec: WorkloadSpec
    status: WorkloadStatus | None = None

    def condition(self, type_: str) -> Condition | None:
        """The status condition of that type, if any."""
        if self.status is None:
            return None
        return next((c for c in self.status.conditions if c.type == type_), None)


# --------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------

ParsedObject = (
    ResourceFlavor
    | ClusterQueue
    | Cohort
    | LocalQueue
    | WorkloadPriorityClass
    | PriorityClass
    | Workload
    | Namespace
    | Topology
)
ModelObject = (
    m.ResourceFlavor
    | m.ClusterQueue
    | m.Cohort
    | m.LocalQueue
    | m.PriorityClass
    | m.Workload
    | m.Namespace
    | m.Topology
)

_KUEUE_KINDS: dict[str, type[KubeModel]] = {
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "Cohort": Cohort,
    "LocalQueue": LocalQueue,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "Workload": Workload,
    "Topology": Topology,
}
KINDS: dict[tuple[str, str], type[KubeModel]] = {
    **{(KUEUE_V1BETA2, k): v for k, v in _KUEUE_KINDS.items()},
    **{(KUEUE_V1BETA1, k): v for k, v in _KUEUE_KINDS.items()},
    (SCHEDULING_V1, "PriorityClass"): PriorityClass,
    (CORE_V1, "Namespace"): Namespace,
}
"""(apiVersion, kind) → model class, for every object ``parse_object`` accepts."""

_RULES: dict[type[KubeModel], Callable[[Any], Problems]] = {
    ResourceFlavor: lambda o: api_rules.check_resource_flavor(o.spec),
    ClusterQueue: lambda o: api_rules.check_cluster_queue(o.spec),
    Cohort: lambda o: api_rules.check_cohort(o.spec),
    Workload: api_rules.check_workload,
    Topology: lambda o: topology_api.check_topology(o.spec),
}
_CONVERTERS: dict[type[KubeModel], Callable[[Any], ModelObject]] = {
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
        data, renames, problems = _convert_v1beta1(data)
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
    return f"{ns if isinstance(ns, str) and ns else DEFAULT_NAMESPACE}/{meta['name']}"


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


def _convert_v1beta1(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], Problems]:
    """The v1beta2 form of a v1beta1 object, the renamed paths (new → old), and problems."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return doc, {}, []
    spec = dict(spec)
    if doc["kind"] == "ClusterQueue":
        renames, problems = _convert_cluster_queue_spec(spec)
    elif doc["kind"] == "Workload":
        renames, problems = _convert_workload_spec(spec)
        status = doc.get("status")
        if isinstance(status, dict) and "accumulatedPastExexcutionTimeSeconds" in status:
            status = dict(status)
            status["accumulatedPastExecutionTimeSeconds"] = status.pop(
                "accumulatedPastExexcutionTimeSeconds"
            )
            doc = {**doc, "status": status}
    else:
        return doc, {}, []
    return {**doc, "spec": spec}, renames, problems


def _convert_cluster_queue_spec(spec: dict[str, Any]) -> tuple[dict[str, str], Problems]:
    renames: dict[str, str] = {}
    problems: Problems = []
    if "cohortName" in spec:
        problems.append(("spec.cohortName", "unknown field"))
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
        renames["spec.cohortName"] = "spec.cohort"
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        fungibility = dict(fungibility)
        if fungibility.get("whenCanBorrow") == "Borrow":
            fungibility["whenCanBorrow"] = "MayStopSearch"
        if fungibility.get("whenCanPreempt") == "Preempt":
            fungibility["whenCanPreempt"] = "MayStopSearch"
        spec["flavorFungibility"] = fungibility
    if "admissionChecks" in spec:
        checks = spec.pop("admissionChecks")
        if checks is not None and not isinstance(checks, list):
            problems.append(("spec.admissionChecks", "must be of type array"))
        elif checks and spec.get("admissionChecksStrategy"):
            problems.append(
                (
                    "spec.admissionChecks",
                    "Either admissionChecks or admissionChecksStrategy can be set, but not both",
                )
            )
        elif checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
            renames["spec.admissionChecksStrategy.admissionChecks"] = "spec.admissionChecks"
    return renames, problems


def _convert_workload_spec(spec: dict[str, Any]) -> tuple[dict[str, str], Problems]:
    renames: dict[str, str] = {}
    problems: Problems = []
    if "priorityClassRef" in spec:
        problems.append(("spec.priorityClassRef", "unknown field"))
    source = spec.pop("priorityClassSource", "")
    pc_name = spec.pop("priorityClassName", None)
    if source not in ("", None, WPC_SOURCE, POD_PC_SOURCE):
        problems.append(
            (
                "spec.priorityClassSource",
                f'Unsupported value: "{source}": supported values: "{WPC_SOURCE}", '
                f'"{POD_PC_SOURCE}", ""',
            )
        )
    elif pc_name is not None and source == WPC_SOURCE:
        spec["priorityClassRef"] = {
            "group": KUEUE_GROUP,
            "kind": "WorkloadPriorityClass",
            "name": pc_name,
        }
    elif pc_name is not None and source == POD_PC_SOURCE:
        spec["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": pc_name,
        }
    if "priorityClassRef" in spec:
        renames["spec.priorityClassRef.name"] = "spec.priorityClassName"
        renames["spec.priorityClassRef"] = "spec.priorityClassName"
    return renames, problems


def parse_label_selector(doc: Any, *, path: str) -> m.LabelSelector:
    """A metav1.LabelSelector outside an object (e.g. in the configuration file)."""
    from queues.api.fields import LabelSelector as _Selector

    try:
        parsed = _Selector.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        sub = ".".join(str(p) for p in err["loc"])
        raise InputError(
            kind="", name="", path=f"{path}.{sub}" if sub else path, message=err["msg"]
        ) from None
    return api_convert._label_selector(parsed)
