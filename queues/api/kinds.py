"""Kueue's API objects as pydantic models: the shapes every input is checked against.

Everything that enters Quartermaster — YAML for ``plan``, objects from the API server,
AdmissionReview payloads — is a Kubernetes object of one of these kinds. The models
check shapes, types, enums, sizes and name patterns; what Kueue enforces on top (its
CRDs' CEL rules and validating webhooks) is :mod:`queues.api.rules`, the conversion to
``queues.model`` is :mod:`queues.api.convert`, and :mod:`queues.api.parse` runs all
three on a document. Unknown fields are errors, never ignored; only ``status`` content
that Quartermaster does not read is passed over.

The models are also the source of the CRD schemas:
``ClusterQueue.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)``
(``queues.api.fields.KubeJsonSchema``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from queues.api.fields import (
    DNS1123_SUBDOMAIN,
    FreeForm,
    Int32,
    KubeModel,
    LabelSelector,
    NonNegInt32,
    ObjectMeta,
    Quantity,
    ResourceGroups,
    StatusModel,
    StopPolicy,
    Subdomain,
    Time,
    Toleration,
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
    "NAMESPACED_KINDS",
    "ParsedObject",
    # kinds
    "AdmissionCheck",
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
MAX_PODSETS = 18
NAMESPACED_KINDS = frozenset({"LocalQueue", "Workload"})


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
# AdmissionCheck
# --------------------------------------------------------------------------------------


class AdmissionCheckParametersReference(KubeModel):
    api_group: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
    ]
    kind: Annotated[
        str,
        StringConstraints(
            min_length=1, max_length=63, pattern=r"^[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?$"
        ),
    ]
    name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
    ]


class AdmissionCheckSpec(KubeModel):
    controller_name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheckStatus(StatusModel):
    conditions: Annotated[list[Condition], Field(max_length=16)] = Field(default_factory=list)


class AdmissionCheck(KubeModel):
    """kueue.x-k8s.io AdmissionCheck (cluster-scoped): a check a Workload must pass,
    after it reserved quota, before it is admitted; its controller sets ``Active``."""

    api_version: str
    kind: Literal["AdmissionCheck"]
    metadata: ObjectMeta
    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None

    def condition(self, type_: str) -> Condition | None:
        """The status condition of that type, if any."""
        if self.status is None:
            return None
        return next((c for c in self.status.conditions if c.type == type_), None)


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


class PodsetSliceRequiredTopologyConstraint(KubeModel):
    topology: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    size: Annotated[int, Field(ge=1, le=2**31 - 1)]


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
    podset_slice_required_topology_constraints: (
        Annotated[list[PodsetSliceRequiredTopologyConstraint], Field(max_length=3)] | None
    ) = None


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


class PodSetUpdate(KubeModel):
    name: PodSetReference
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: Annotated[list[Toleration], Field(max_length=8)] = Field(default_factory=list)


class AdmissionCheckState(KubeModel):
    """One entry of ``status.admissionChecks``: what the check's controller says."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    state: Literal["Pending", "Ready", "Retry", "Rejected"]
    last_transition_time: Time | None = None
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    requeue_after_seconds: NonNegInt32 | None = None
    retry_count: NonNegInt32 | None = None
    pod_set_updates: Annotated[list[PodSetUpdate], Field(max_length=MAX_PODSETS)] = Field(
        default_factory=list
    )


class WorkloadStatus(StatusModel):
    conditions: Annotated[list[Condition], Field(max_length=16)] = Field(default_factory=list)
    admission: Admission | None = None
    admission_checks: Annotated[list[AdmissionCheckState], Field(max_length=8)] = Field(
        default_factory=list
    )


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
# Every kind
# --------------------------------------------------------------------------------------

ParsedObject = (
    AdmissionCheck
    | ResourceFlavor
    | ClusterQueue
    | Cohort
    | LocalQueue
    | WorkloadPriorityClass
    | PriorityClass
    | Workload
    | Namespace
    | Topology
)

_KUEUE_KINDS: dict[str, type[KubeModel]] = {
    "AdmissionCheck": AdmissionCheck,
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
