"""Plain, slotted domain objects the engine works on.

Kubernetes objects are parsed and validated once, at the edge (``queues.api.parse``), and
turned into these classes. Nothing here validates or does I/O: the scheduling loop
touches these objects millions of times, so they stay small, typed and cheap.

Quantities are integers in the engine's units (see ``queues.quantity``): CPU in
milli-cores, every other resource in whole units. Times are float seconds since the
Unix epoch, taken from an injectable clock by the drivers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

FlavorResource = tuple[str, str]
"""A (flavor name, resource name) pair: the unit of quota accounting."""

# Kueue enum values, spelled as in the API.
BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"
NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
ANY = "Any"
MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"
BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"
USAGE_BASED_AFS = "UsageBasedAdmissionFairSharing"
# stopPolicy of a ClusterQueue or LocalQueue.
STOP_NONE = "None"
HOLD = "Hold"
HOLD_AND_DRAIN = "HoldAndDrain"
# status.admissionChecks[].state of a Workload (Kueue's CheckState).
CHECK_PENDING = "Pending"
CHECK_READY = "Ready"
CHECK_RETRY = "Retry"
CHECK_REJECTED = "Rejected"


@dataclass(slots=True, frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(slots=True, frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: effect, key and (for Equal) value must match."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if not self.key:  # empty key is only valid with Exists
            return False
        return self.value == taint.value


@dataclass(slots=True, frozen=True)
class SelectorRequirement:
    """One expression of a label selector or node selector term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (labels); also Gt, Lt (nodes)
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        op = self.operator
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(slots=True, frozen=True)
class LabelSelector:
    """metav1.LabelSelector. The empty selector matches everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        return all(e.matches(labels) for e in self.match_expressions)


@dataclass(slots=True, frozen=True)
class NodeSelectorTerm:
    """One term of requiredDuringSchedulingIgnoredDuringExecution (terms are ORed)."""

    match_expressions: tuple[SelectorRequirement, ...] = ()


@dataclass(slots=True)
class ResourceFlavor:
    name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: list[Taint] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)
    topology_name: str | None = None  # spec.topologyName: a TopologyAwareScheduling flavor


@dataclass(slots=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None  # None: unlimited
    lending_limit: int | None = None  # None: lend everything


@dataclass(slots=True)
class FlavorQuotas:
    name: str
    resources: dict[str, ResourceQuota]  # in coveredResources order


@dataclass(slots=True)
class ResourceGroup:
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


@dataclass(slots=True)
class FlavorFungibility:
    when_can_borrow: str = MAY_STOP_SEARCH
    when_can_preempt: str = TRY_NEXT_FLAVOR
    preference: str | None = None


@dataclass(slots=True)
class PreemptionPolicy:
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: int | None = None


@dataclass(slots=True, frozen=True)
class Topology:
    """kueue.x-k8s.io Topology: node labels from the widest domain to the narrowest."""

    name: str
    levels: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class AdmissionCheck:
    """kueue.x-k8s.io AdmissionCheck: which controller decides it, and whether that
    controller says it is ready to (its ``Active`` condition)."""

    name: str
    controller_name: str
    active: bool = False
    parameters: tuple[str, str, str] | None = None  # (apiGroup, kind, name)


@dataclass(slots=True, frozen=True)
class AdmissionCheckState:
    """One entry of a Workload's ``status.admissionChecks``."""

    name: str
    state: str = CHECK_PENDING
    message: str = ""
    last_transition: float | None = None
    requeue_after_seconds: int | None = None
    retry_count: int | None = None


@dataclass(slots=True)
class ClusterQueue:
    name: str
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    cohort: str | None = None
    queueing_strategy: str = BEST_EFFORT_FIFO
    namespace_selector: LabelSelector | None = None  # None: no namespace is eligible
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    fair_weight: float = 1.0
    admission_mode: str | None = None  # USAGE_BASED_AFS turns on admission fair sharing
    stop_policy: str = STOP_NONE
    # spec.admissionChecksStrategy: check name -> onFlavors (empty: every flavor)
    admission_checks: dict[str, tuple[str, ...]] = field(default_factory=dict)


def covered_resources(cq: ClusterQueue) -> dict[str, int]:
    """Each resource ``cq`` covers, with the index of the resource group covering it."""
    return {r: i for i, g in enumerate(cq.resource_groups) for r in g.covered_resources}


@dataclass(slots=True)
class Cohort:
    name: str
    parent: str | None = None
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    fair_weight: float = 1.0


@dataclass(slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: str = STOP_NONE
    fair_weight: float = 1.0
    # Admission fair sharing history (status.fairSharing.admissionFairSharingStatus).
    consumed_resources: dict[str, int] = field(default_factory=dict)
    last_update: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class PriorityClass:
    """A WorkloadPriorityClass or a scheduling.k8s.io PriorityClass."""

    name: str
    value: int
    kind: str = "WorkloadPriorityClass"  # or "PriorityClass"
    global_default: bool = False


@dataclass(slots=True, frozen=True)
class TopologyRequest:
    """A podSet's ``topologyRequest`` (or the job annotations that set it)."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    pod_set_group_name: str | None = None
    slice_required_topology: str | None = None
    slice_size: int | None = None
    pod_index_label: str | None = None  # the label numbering the pods (ungater order)
    sub_group_index_label: str | None = None  # the label numbering a pod's sub-group (JobSet Job)
    sub_group_count: int | None = None  # how many sub-groups the podSet's pods form
    # podsetSliceRequiredTopologyConstraints (Kueue's TASMultiLayerTopology): (level,
    # size) per slice layer, outermost first; exclusive with the two fields above.
    slice_constraints: tuple[tuple[str, int], ...] = ()

    @property
    def requests_tas(self) -> bool:
        """Kueue's IsExplicitlyRequestingTAS (a podSet group name alone does not)."""
        return (
            self.required is not None
            or self.preferred is not None
            or self.unconstrained is not None
            or self.slice_required_topology is not None
            or self.slice_size is not None
            or bool(self.slice_constraints)
        )

    @property
    def slice_layers(self) -> tuple[tuple[str, int | None], ...]:
        """Kueue's PodSetSliceRequiredTopologyConstraints: the slice layers, outermost
        first, from either form; () when no slices are asked for."""
        if self.slice_constraints:
            return self.slice_constraints
        if self.slice_required_topology is not None:
            return ((self.slice_required_topology, self.slice_size),)
        return ()


@dataclass(slots=True)
class PodSet:
    name: str
    count: int
    requests: dict[str, int]  # per pod, engine units
    min_count: int | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    required_affinity: list[NodeSelectorTerm] = field(default_factory=list)  # ORed terms
    tolerations: list[Toleration] = field(default_factory=list)
    topology: TopologyRequest | None = None
    # Containers whose requests exceed their limits: (field, index, resources), e.g.
    # ("containers", 0, ("cpu",)). Such a workload is never admitted (Misconfigured).
    limit_violations: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    # The requests the pod template declares, when ``requests`` is what Kueue's resource
    # transformations made of them (queues.transformations); None: untransformed.
    declared_requests: dict[str, int] | None = None
    # The pod spec's ``resourceClaims`` (name, resourceClaimTemplateName,
    # resourceClaimName): the DRA devices they ask for are added to ``requests`` by
    # queues.dra, or ``dra_error`` says why they cannot be counted (Misconfigured).
    resource_claims: tuple[tuple[str, str | None, str | None], ...] = ()
    dra_error: str = ""


def pod_set_requests(ps: PodSet, count: int, covered: Mapping[str, int]) -> dict[str, int]:
    """What ``count`` pods of ``ps`` ask of a ClusterQueue whose resource groups cover
    ``covered`` (:func:`covered_resources`): each request times the count, a zero
    request only when covered (Kueue still gives it a flavor; else it is ignored), and
    ``pods`` when covered."""
    requests = {r: v * count for r, v in ps.requests.items() if v or r in covered}
    if "pods" in covered:
        requests["pods"] = count
    return requests


@dataclass(slots=True, frozen=True)
class TopologyAssignment:
    """Where a podSet's pods go (Kueue's internal TopologyAssignment): ``levels`` are
    node label keys from the highest assigned level down (only the hostname when it is
    the topology's lowest level); each domain is (values per level, pod count)."""

    levels: tuple[str, ...]
    domains: tuple[tuple[tuple[str, ...], int], ...]

    @property
    def pod_count(self) -> int:
        return sum(c for _, c in self.domains)


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    flavors: dict[str, str]  # resource -> flavor
    resource_usage: dict[str, int]  # total for the podSet (per-pod request x count)
    count: int
    topology_assignment: TopologyAssignment | None = None


@dataclass(slots=True)
class Admission:
    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment]

    def usage(self) -> dict[FlavorResource, int]:
        """Quota this admission holds, per (flavor, resource)."""
        out: dict[FlavorResource, int] = {}
        for psa in self.pod_set_assignments:
            for res, val in psa.resource_usage.items():
                flv = psa.flavors.get(res)
                if flv is None:
                    continue
                fr = (flv, res)
                out[fr] = out.get(fr, 0) + val
        return out


class _KeyMemo:
    """Where a :class:`Workload` keeps its key and the namespace and name it was built
    from (slots, not dataclass fields: they take no part in equality, ``repr`` or
    construction; three pointers, no tuple per workload)."""

    __slots__ = ("_key", "_key_namespace", "_key_name")
    _key: str
    _key_namespace: str
    _key_name: str

    def _remember_key(self, namespace: str, name: str, key: str) -> str:
        self._key, self._key_namespace, self._key_name = key, namespace, name
        return key


@dataclass(slots=True)
class Workload(_KeyMemo):
    namespace: str
    name: str
    pod_sets: list[PodSet]
    queue_name: str = ""
    priority: int = 0
    priority_class: str | None = None
    priority_class_kind: str | None = None  # WorkloadPriorityClass or PriorityClass
    uid: str = ""
    creation_time: float = 0.0
    active: bool = True
    admission: Admission | None = None
    admission_time: float | None = None  # QuotaReserved lastTransitionTime
    # Queue-order timestamp override (e.g. eviction by PodsReadyTimeout); None: creation time.
    requeue_time: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    finished: bool = False  # Finished=True condition: holds no quota, never admitted again
    # status.reclaimablePods: podSet name -> pods that finished and need no quota.
    reclaimable_pods: dict[str, int] = field(default_factory=dict)
    # Training progress (queues.api.progress): the last checkpoint the Workload reports, and
    # a preemption notice in flight (when it was given, the eviction deadline).
    last_checkpoint: float | None = None
    noticed_at: float | None = None
    eviction_deadline: float | None = None
    requeue_count: int = 0  # status.requeueState.count
    # status.admissionChecks, and whether the Admitted condition is True: a workload
    # holding quota (``admission``) is admitted once every check it needs is Ready.
    admission_checks: tuple[AdmissionCheckState, ...] = ()
    admitted: bool = False

    @property
    def key(self) -> str:
        """The workload's "namespace/name", interned: the informer's key of the object
        is the same string object, so the engine's dicts keyed by it (pending queues,
        statuses) hold no copies of it.

        Kept once built, for as long as namespace and name are the objects it was
        built from (a cycle asks for it a dozen times per head; formatting and
        interning it each time was a measurable part of a 5,000-head cycle)."""
        try:
            if self._key_namespace is self.namespace and self._key_name is self.name:
                return self._key
        except AttributeError:  # not built yet
            pass
        namespace, name = self.namespace, self.name
        return self._remember_key(namespace, name, sys.intern(f"{namespace}/{name}"))

    @property
    def queue_order_time(self) -> float:
        return self.creation_time if self.requeue_time is None else self.requeue_time

    @property
    def tiebreak(self) -> str:
        """Last ordering key: the UID, or the name when no UID is known."""
        return self.uid or self.key

    def admitted_usage(self) -> dict[FlavorResource, int]:
        """Quota the admission holds now (Kueue's ``totalRequestsFromAdmission``): a
        podSet with ``reclaimablePods`` holds only for its other pods — its usage is
        divided by the admitted count and multiplied by ``count - reclaimable``."""
        assert self.admission is not None
        if not self.reclaimable_pods:
            return self.admission.usage()
        counts = {ps.name: ps.count for ps in self.pod_sets}
        out: dict[FlavorResource, int] = {}
        for psa in self.admission.pod_set_assignments:
            after = max(0, counts.get(psa.name, psa.count) - self.reclaimable_pods.get(psa.name, 0))
            for res, val in psa.resource_usage.items():
                flv = psa.flavors.get(res)
                if flv is None:
                    continue
                if after < psa.count:
                    val = val // psa.count * after
                fr = (flv, res)
                out[fr] = out.get(fr, 0) + val
        return out


@dataclass(slots=True)
class Namespace:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
