"""The configuration file's schema: Kueue's whole ``config.kueue.x-k8s.io``
``Configuration`` (v1beta2, and v1beta1's spellings) plus this project's extensions, and
``Config``, the parsed file the commands and the engine factory read.

Field names are Kueue's and unknown fields are an error naming the path, so a Kueue
user's file loads unchanged. The extensions are off by default (Kueue's behaviour):

* ``cohortCredits``: usage-based credits between ClusterQueues and Cohorts.
* ``reserveEvictingCapacity: true`` (strict mode): capacity held by workloads being
  evicted is usable only by the preemptors waiting for it, until the eviction finishes,
  so admitted plus evicting workloads never exceed a quota (docs/semantics.md §4.7).
* ``parkUntilFeasible: true`` (deficit-bounded parking): a head parked because it can
  neither fit nor preempt carries how much quota must be released, and where, before it
  could be admitted, and only such releases wake it
  (``admission.engine.preemption.feasibility``; docs/semantics.md §4.3). Not with
  ``fairSharing`` or ``admissionFairSharing`` (a warning says so).
* ``schedulingRefill: {enable: true, maxHeadsPerCycle, maxRounds}``: after a cycle's
  admissions the same cycle runs another round with the next heads, while a round
  admits and within the bounds, so a ClusterQueue admits more than one workload per
  cycle; the decisions equal those of back-to-back cycles (docs/semantics.md §4.2).
* ``nodeFailures``: node failures for every workload, bad-node memory, flaky nodes
  (``admission.config.node_failures``; on by default, Kueue's delays).
* ``progressAwarePreemption``: checkpoint-aware victims, notice windows, minimum runtime
  and requeue policies after preemption.

``resources`` (excluded prefixes and resource transformations) becomes the
``queues.transformations.ResourceTransformer`` the engine's cache applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from admission.config.dra import DeviceClassMappingDoc, check_mappings
from admission.config.durations import Duration, parse_duration
from admission.config.multikueue import MultiKueueSection, MultiKueueSettings
from admission.config.node_failures import NodeFailuresSection
from admission.engine.build import EnginePolicy, build_scheduler
from admission.engine.cache import Cache
from admission.engine.preemption.checkpoint import (
    DEFAULT_LOST_WORK_RESOURCES,
    MAX_NOTICE_SECONDS,
    ProgressPolicy,
    QueuePolicy,
    RequeuePolicy,
)
from admission.engine.scheduler import Refill, Scheduler
from admission.engine.vocabulary import DEFAULT_FAIR_SHARING_STRATEGIES, FairSharingStrategy
from admission.integrations.registry import BY_FRAMEWORK, Frameworks, frameworks
from queues.dra import DeviceClassMapping
from queues.quantity import QuantityError, parse_quantity
from queues.transformations import REPLACE, RETAIN, ResourceTransformation, ResourceTransformer

STRATEGIES = tuple(str(s) for s in DEFAULT_FAIR_SHARING_STRATEGIES)


class ConfigError(ValueError):
    """A configuration file that is not valid; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FairSharingSection(_Strict):
    enable: StrictBool | None = None  # v1beta1 only: presence enables fair sharing in v1beta2
    preemptionStrategies: list[str] = Field(default_factory=lambda: list(STRATEGIES))

    @field_validator("preemptionStrategies")
    @classmethod
    def _valid(cls, v: list[str]) -> list[str]:
        allowed: tuple[list[str], ...] = (
            [],
            [FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE],
            [FairSharingStrategy.LESS_THAN_INITIAL_SHARE],
            list(STRATEGIES),
        )
        if v not in allowed:
            raise ValueError(
                "must be LessThanOrEqualToFinalShare, LessThanInitialShare, or both in that order"
            )
        return v or list(STRATEGIES)


class UsageSection(_Strict):
    """admissionFairSharing and cohortCredits share this shape."""

    usageHalfLifeTime: str | float = "168h"
    usageSamplingInterval: str | float = "5m"
    resourceWeights: dict[str, float] = Field(default_factory=dict)

    @field_validator("usageHalfLifeTime", "usageSamplingInterval")
    @classmethod
    def _duration(cls, v: str | float) -> str | float:
        parse_duration(v)
        return v

    @field_validator("resourceWeights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        for r, w in v.items():
            if w < 0:
                raise ValueError(f"weight of {r} must be ≥ 0")
        return v

    def half_life(self) -> float:
        return parse_duration(self.usageHalfLifeTime)

    def sampling(self) -> float:
        s = parse_duration(self.usageSamplingInterval)
        if s <= 0:
            raise ValueError("usageSamplingInterval must be > 0")
        return s


class RequeuingStrategy(_Strict):
    timestamp: str = "Eviction"
    backoffLimitCount: int | None = None
    backoffBaseSeconds: int = 60
    backoffMaxSeconds: int = 3600


class WaitForPodsReady(_Strict):
    enable: StrictBool | None = None
    timeout: Duration = "30m"
    blockAdmission: StrictBool = False
    recoveryTimeout: Duration | None = None
    requeuingStrategy: RequeuingStrategy = Field(default_factory=RequeuingStrategy)


class RequeueAfterPreemption(_Strict):
    """Kueue's ``requeuingStrategy`` shape, for requeues after a preemption:
    ``backoffLimitCount: 0`` never requeues (the workload is deactivated)."""

    backoffLimitCount: int | None = Field(default=None, ge=0)
    backoffBaseSeconds: int = Field(default=60, ge=0)
    backoffMaxSeconds: int = Field(default=3600, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> RequeueAfterPreemption:
        if self.backoffMaxSeconds < self.backoffBaseSeconds:
            raise ValueError(
                f"backoffMaxSeconds ({self.backoffMaxSeconds}) must not be less than "
                f"backoffBaseSeconds ({self.backoffBaseSeconds})"
            )
        return self

    def policy(self) -> RequeuePolicy:
        return RequeuePolicy(
            backoff_base=float(self.backoffBaseSeconds),
            backoff_max=float(self.backoffMaxSeconds),
            backoff_limit=self.backoffLimitCount,
        )


def _bounded_window(v: str | float | None) -> str | float | None:
    if v is not None and parse_duration(v) > MAX_NOTICE_SECONDS:
        raise ValueError(f"{v!r} is longer than the bound of {MAX_NOTICE_SECONDS / 3600:g}h")
    return v


class LocalQueueProgress(_Strict):
    requeuingStrategy: RequeueAfterPreemption | None = None


class QueueProgress(_Strict):
    """The per-ClusterQueue rules of ``progressAwarePreemption`` (also its defaults)."""

    noticeWindow: str | float | None = None
    minimumRuntime: str | float | None = None
    minimumRuntimeWithinClusterQueue: StrictBool | None = None
    requeuingStrategy: RequeueAfterPreemption | None = None

    @field_validator("noticeWindow")
    @classmethod
    def _notice(cls, v: str | float | None) -> str | float | None:
        if v is not None:
            parse_duration(v)
        return _bounded_window(v)

    @field_validator("minimumRuntime")
    @classmethod
    def _runtime(cls, v: str | float | None) -> str | float | None:
        if v is not None:
            parse_duration(v)
        return v

    def resolve(self, base: QueuePolicy) -> QueuePolicy:
        return QueuePolicy(
            notice=parse_duration(self.noticeWindow)
            if self.noticeWindow is not None
            else base.notice,
            minimum_runtime=(
                parse_duration(self.minimumRuntime)
                if self.minimumRuntime is not None
                else base.minimum_runtime
            ),
            minimum_runtime_within_cq=(
                self.minimumRuntimeWithinClusterQueue
                if self.minimumRuntimeWithinClusterQueue is not None
                else base.minimum_runtime_within_cq
            ),
            requeue=(
                self.requeuingStrategy.policy()
                if self.requeuingStrategy is not None
                else base.requeue
            ),
        )


class ProgressAwarePreemption(QueueProgress):
    """This project's extension (admission.engine.preemption.checkpoint): checkpoint-aware victims,
    notice windows, minimum runtime and requeue policies after preemption."""

    victimOrder: Literal["Kueue", "LostWork"] = "Kueue"
    lostWorkResources: list[str] | None = None
    clusterQueues: dict[str, QueueProgress] = Field(default_factory=dict)
    localQueues: dict[str, LocalQueueProgress] = Field(default_factory=dict)

    @field_validator("localQueues")
    @classmethod
    def _lq_keys(cls, v: dict[str, LocalQueueProgress]) -> dict[str, LocalQueueProgress]:
        for key in v:
            ns, sep, name = key.partition("/")
            if not sep or not ns or not name or "/" in name:
                raise ValueError(f"{key!r}: LocalQueues are keyed <namespace>/<name>")
        return v

    @field_validator("lostWorkResources")
    @classmethod
    def _resources(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or any(not r for r in v)):
            raise ValueError("must list at least one resource name")
        return v

    def policy(self) -> ProgressPolicy:
        default = self.resolve(QueuePolicy())
        return ProgressPolicy(
            victim_order=self.victimOrder,
            resources=tuple(self.lostWorkResources or DEFAULT_LOST_WORK_RESOURCES),
            default=default,
            cluster_queues={n: q.resolve(default) for n, q in self.clusterQueues.items()},
            local_queues={
                k: q.requeuingStrategy.policy()
                for k, q in self.localQueues.items()
                if q.requeuingStrategy is not None
            },
        )


class LeaderElection(_Strict):
    """Kueue's ``leaderElection`` (component-base's LeaderElectionConfiguration)."""

    leaderElect: StrictBool | None = None
    leaseDuration: str | float = "15s"
    renewDeadline: str | float = "10s"
    retryPeriod: str | float = "2s"
    resourceLock: Literal["leases"] = "leases"
    resourceName: str = "quartermaster-leader-election"
    resourceNamespace: str | None = None

    @field_validator("leaseDuration", "renewDeadline", "retryPeriod")
    @classmethod
    def _duration(cls, v: str | float) -> str | float:
        if parse_duration(v) <= 0:
            raise ValueError("must be a positive duration")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        lease, renew, retry = self.seconds()
        if not retry < renew < lease:
            raise ValueError(
                "renewDeadline must be shorter than leaseDuration, and retryPeriod shorter "
                f"than renewDeadline (got {lease:g}s / {renew:g}s / {retry:g}s)"
            )
        return self

    def seconds(self) -> tuple[float, float, float]:
        """(leaseDuration, renewDeadline, retryPeriod) in seconds."""
        return (
            parse_duration(self.leaseDuration),
            parse_duration(self.renewDeadline),
            parse_duration(self.retryPeriod),
        )


class ClientConnection(_Strict):
    """Kueue's ``clientConnection``: the client-side rate limit to the API server."""

    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)


class ControllerWebhook(_Strict):
    """``webhook``: where the webhook server listens (``serve``'s defaults)."""

    port: int | None = Field(default=None, ge=1, le=65535)
    host: str | None = None
    certDir: str | None = None
    # This project's extension: how long a quota edit waits for its impact warnings.
    impactDeadline: Duration | None = None
    # This project's extension: who may orphan a Workload (drop its controller
    # reference) besides the service: the cluster's garbage collector. Unset: its
    # identities under kube-controller-manager (webhooks.config.DEFAULT_GARBAGE_COLLECTORS).
    garbageCollectorUsernames: list[str] | None = None

    def get(self, name: str, default: Any = None) -> Any:
        """Dict-style access, for readers of the extension fields."""
        value = getattr(self, name, None)
        return default if value is None else value


class ControllerMetrics(_Strict):
    bindAddress: str | None = None
    enableClusterQueueResources: StrictBool | None = None
    customLabels: list[dict[str, Any]] | None = None
    localQueueMetrics: dict[str, Any] | None = None


class ControllerHealth(_Strict):
    healthProbeBindAddress: str | None = None
    readinessEndpointName: str | None = None
    livenessEndpointName: str | None = None


class ControllerConfigurationSpec(_Strict):
    groupKindConcurrency: dict[str, int] | None = None
    cacheSyncTimeout: Duration | None = None


class TLSOptions(_Strict):
    minVersion: str | None = None
    cipherSuites: list[str] | None = None
    curvePreferences: list[int] | None = None


class InternalCertManagement(_Strict):
    enable: StrictBool | None = None
    webhookServiceName: str | None = None
    webhookSecretName: str | None = None


class PodIntegrationOptions(_Strict):
    """v1beta1's ``integrations.podOptions`` (dropped in v1beta2)."""

    namespaceSelector: dict[str, Any] | None = None
    podSelector: dict[str, Any] | None = None


# Every framework name Kueue knows (apis/config/v1beta2 Integrations.Frameworks); a name
# outside it is an error (Kueue: integration not found), a Kueue name this project has no
# integration for yet has no effect.
KUEUE_FRAMEWORKS = frozenset(
    {
        "batch/job",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/paddlejob",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/jaxjob",
        "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper",
        "sparkoperator.k8s.io/sparkapplication",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    }
)


class Integrations(_Strict):
    frameworks: list[str] | None = None
    externalFrameworks: list[str] | None = None
    labelKeysToCopy: list[str] | None = None
    podOptions: PodIntegrationOptions | None = None

    def unregistered(self) -> list[str]:
        """Kueue's framework names listed that Quartermaster has no integration for."""
        return [f for f in self.frameworks or [] if f in KUEUE_FRAMEWORKS and f not in BY_FRAMEWORK]

    def registry_section(self) -> dict[str, Any]:
        """The section as the integrations registry reads it, without the frameworks
        that have no effect (they are warned about)."""
        section = self.model_dump(exclude_none=True)
        if self.frameworks is not None:
            skip = set(self.unregistered())
            section["frameworks"] = [f for f in self.frameworks if f not in skip]
        return section


class ResourceTransformationDoc(_Strict):
    """One ``resources.transformations`` entry (Kueue's ``ResourceTransformation``)."""

    input: str = Field(min_length=1)
    strategy: str = RETAIN  # Kueue's default (SetDefaults_Configuration)
    multiplyBy: str | None = None
    outputs: dict[str, str | int | float] = Field(default_factory=dict)

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        if v not in (RETAIN, REPLACE):
            raise ValueError(f'Unsupported value: "{v}": supported values: "Retain", "Replace"')
        return v

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, v: dict[str, str | int | float]) -> dict[str, str | int | float]:
        for name, qty in v.items():
            if isinstance(qty, bool):
                raise ValueError(f"{name}: must be a quantity, got a boolean")
            try:
                parse_quantity(qty)
            except QuantityError as e:
                raise ValueError(f"{name}: {e}") from None
        return v


class Resources(_Strict):
    quotaCheckStrategy: Literal["BlockUndeclared", "IgnoreUndeclared"] | None = None
    excludeResourcePrefixes: list[str] = Field(default_factory=list)
    transformations: list[ResourceTransformationDoc] = Field(default_factory=list)
    deviceClassMappings: list[DeviceClassMappingDoc] | None = None

    @model_validator(mode="after")
    def _unique_inputs(self) -> Resources:
        seen: set[str] = set()
        for i, t in enumerate(self.transformations):
            if t.input in seen:
                raise ValueError(f'transformations[{i}].input: Duplicate value: "{t.input}"')
            seen.add(t.input)
        check_mappings(self.deviceClassMappings or [])
        if self.excludeResourcePrefixes and self.quotaCheckStrategy == "IgnoreUndeclared":
            raise ValueError(
                "quotaCheckStrategy: excludeResourcePrefixes is not allowed when "
                "quotaCheckStrategy is IgnoreUndeclared"
            )
        return self

    def transformer(self) -> ResourceTransformer:
        return ResourceTransformer.of(
            excluded_prefixes=self.excludeResourcePrefixes,
            transformations=(
                ResourceTransformation(
                    input=t.input,
                    strategy=t.strategy,
                    multiply_by=t.multiplyBy or None,
                    outputs=tuple((n, parse_quantity(q)) for n, q in t.outputs.items()),
                )
                for t in self.transformations
            ),
        )


class WorkloadRetentionPolicy(_Strict):
    afterFinished: Duration | None = None
    afterDeactivatedByKueue: Duration | None = None


class ObjectRetentionPolicies(_Strict):
    workloads: WorkloadRetentionPolicy | None = None


class VisibilityServer(_Strict):
    bindAddress: str | None = None
    bindPort: int | None = Field(default=None, ge=1, le=65535)


class SchedulingRefill(_Strict):
    enable: StrictBool = False
    maxHeadsPerCycle: int = Field(default=1000, ge=1)  # heads evaluated, all rounds
    maxRounds: int = Field(default=100, ge=1)  # refill rounds after the first

    def refill(self) -> Refill | None:
        return Refill(self.maxHeadsPerCycle, self.maxRounds) if self.enable else None


class ConfigurationDoc(_Strict):
    apiVersion: str | None = None
    kind: str | None = None
    namespace: str | None = None
    fairSharing: FairSharingSection | None = None
    admissionFairSharing: UsageSection | None = None
    cohortCredits: UsageSection | None = None
    progressAwarePreemption: ProgressAwarePreemption | None = None
    waitForPodsReady: WaitForPodsReady | None = None
    manageJobsWithoutQueueName: StrictBool = False
    managedJobsNamespaceSelector: dict[str, Any] | None = None
    internalCertManagement: dict[str, Any] | None = None
    webhook: ControllerWebhook | None = None
    metrics: ControllerMetrics | None = None
    health: ControllerHealth | None = None
    leaderElection: LeaderElection | None = None
    integrations: Integrations | None = None
    clientConnection: ClientConnection = Field(default_factory=ClientConnection)
    # The rest of Kueue's Configuration: parsed, implemented or reported as without effect.
    resources: Resources | None = None
    controller: ControllerConfigurationSpec | None = None
    pprofBindAddress: str | None = None
    tls: TLSOptions | None = None
    multiKueue: MultiKueueSection | None = None
    featureGates: dict[str, StrictBool] | None = None
    objectRetentionPolicies: ObjectRetentionPolicies | None = None
    visibilityServer: VisibilityServer | None = None
    queueVisibility: dict[str, Any] | None = None  # v1beta1 only
    # Our extensions (off by default): see the module docstring.
    reserveEvictingCapacity: StrictBool = False
    parkUntilFeasible: StrictBool = False
    schedulingRefill: SchedulingRefill | None = None
    nodeFailures: NodeFailuresSection = Field(default_factory=NodeFailuresSection)

    @field_validator("internalCertManagement")
    @classmethod
    def _icm(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            InternalCertManagement.model_validate(v)
        return v


@dataclass(slots=True)
class Config:
    """Parsed configuration; defaults are Kueue's (fair sharing and AFS off)."""

    doc: ConfigurationDoc = field(default_factory=ConfigurationDoc)
    now: float | None = None  # plan --now: evaluation time (epoch seconds)
    warnings: list[str] = field(default_factory=list)  # fields that have no effect
    resources: ResourceTransformer = field(default_factory=ResourceTransformer)
    device_class_mappings: tuple[DeviceClassMapping, ...] = ()  # resources.deviceClassMappings

    @property
    def fair_sharing(self) -> FairSharingSection | None:
        fs = self.doc.fairSharing
        if fs is not None and fs.enable is False:
            return None  # v1beta1's explicit switch
        return fs

    @property
    def admission_fair_sharing(self) -> UsageSection | None:
        return self.doc.admissionFairSharing

    @property
    def cohort_credits(self) -> UsageSection | None:
        return self.doc.cohortCredits

    @property
    def progress(self) -> ProgressPolicy | None:
        """Progress-aware preemption (``progressAwarePreemption``), None when absent."""
        section = self.doc.progressAwarePreemption
        return section.policy() if section is not None else None

    @property
    def multikueue(self) -> MultiKueueSettings:
        """The ``multiKueue`` section with Kueue's defaults."""
        section = self.doc.multiKueue
        return section.settings() if section is not None else MultiKueueSettings()

    @property
    def frameworks(self) -> Frameworks:
        """The job integrations ``integrations.frameworks`` enables (all when unset)."""
        section = self.doc.integrations
        return frameworks(section.registry_section() if section is not None else None)

    def engine_policy(self) -> EnginePolicy:
        """The settings of the engine this configuration enables."""
        fs = self.fair_sharing
        return EnginePolicy(
            fair_sharing=tuple(fs.preemptionStrategies) if fs is not None else None,
            admission_fair_sharing=self.admission_fair_sharing,
            cohort_credits=self.cohort_credits,
            progress=self.progress,
            park_until_feasible=self.doc.parkUntilFeasible,
            reserve_evicting_capacity=self.doc.reserveEvictingCapacity,
            refill=rf.refill() if (rf := self.doc.schedulingRefill) is not None else None,
            evaluated_at=self.now,
            tas_balanced_placement=bool((self.doc.featureGates or {}).get("TASBalancedPlacement")),
        )

    def make_scheduler(
        self, cache: Cache, *, clock: Callable[[], float], explain: bool = True
    ) -> Scheduler:
        """A scheduler wired with the features this configuration enables."""
        return build_scheduler(self.engine_policy(), cache, clock=clock, explain=explain)
