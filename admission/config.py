"""The service configuration file (Kueue's ``Configuration`` plus our extensions).

The same file is taken by ``plan --config``, ``simulate --config`` and
``serve --config``. Field names are Kueue's where Kueue has the feature
(``config.kueue.x-k8s.io/v1beta2``): ``fairSharing``, ``admissionFairSharing``,
``waitForPodsReady``, ``manageJobsWithoutQueueName``, ``managedJobsNamespaceSelector``.
``cohortCredits`` is this project's extension (usage-based credits between
ClusterQueues and Cohorts). Unknown fields are an error naming the path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from admission.engine.vocabulary import DEFAULT_FAIR_SHARING_STRATEGIES, FairSharingStrategy
from admission.integrations.registry import Frameworks, FrameworksError, frameworks

if TYPE_CHECKING:
    from admission.engine.cache import Cache
    from admission.engine.scheduler import Scheduler

STRATEGIES = tuple(str(s) for s in DEFAULT_FAIR_SHARING_STRATEGIES)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """A configuration file that is not valid; the message names the field."""


def parse_duration(text: str | int | float) -> float:
    """A Go duration ("5m", "1h30m", "90s", "0") in seconds."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"{text!r} is negative")
        return float(text)
    s = text.strip()
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"{text!r} is not a duration like 5m, 1h30m or 90s")
    return total


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FairSharingSection(_Strict):
    enable: bool | None = None  # v1beta1 only: presence enables fair sharing in v1beta2
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
    enable: bool | None = None
    timeout: str = "30m"
    blockAdmission: bool = False
    recoveryTimeout: str | None = None
    requeuingStrategy: RequeuingStrategy = Field(default_factory=RequeuingStrategy)


class LeaderElection(_Strict):
    """Kueue's ``leaderElection`` (component-base's LeaderElectionConfiguration)."""

    leaderElect: bool | None = None
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


class ConfigurationDoc(_Strict):
    apiVersion: str | None = None
    kind: str | None = None
    namespace: str | None = None
    fairSharing: FairSharingSection | None = None
    admissionFairSharing: UsageSection | None = None
    cohortCredits: UsageSection | None = None
    waitForPodsReady: WaitForPodsReady | None = None
    manageJobsWithoutQueueName: bool = False
    managedJobsNamespaceSelector: dict[str, Any] | None = None
    internalCertManagement: dict[str, Any] | None = None
    webhook: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    leaderElection: LeaderElection | None = None
    integrations: dict[str, Any] | None = None
    clientConnection: ClientConnection = Field(default_factory=ClientConnection)


@dataclass(slots=True)
class Config:
    """Parsed configuration; defaults are Kueue's (fair sharing and AFS off)."""

    doc: ConfigurationDoc = field(default_factory=ConfigurationDoc)
    now: float | None = None  # plan --now: evaluation time (epoch seconds)

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
    def frameworks(self) -> Frameworks:
        """The job integrations ``integrations.frameworks`` enables (all when unset)."""
        return frameworks(self.doc.integrations)

    def make_scheduler(
        self, cache: Cache, *, clock: Callable[[], float], explain: bool = True
    ) -> Scheduler:
        """A scheduler wired with the features this configuration enables."""
        return build_scheduler(self, cache, clock=clock, explain=explain)


def build_scheduler(
    config: Config, cache: Cache, *, clock: Callable[[], float], explain: bool = True
) -> Scheduler:
    """A scheduler with fair sharing, admission fair sharing and credits as configured:
    the one factory behind ``plan``, ``simulate``, ``serve`` and the what-if.

    Every policy object is built here, once, and handed to ``Scheduler(...)``; nothing
    is changed on the scheduler afterwards. ``explain=False`` skips the numeric pending
    messages (the simulator, which never shows them)."""
    from admission.engine.fair_sharing import FairPreemptor, Tournament, parse_strategies
    from admission.engine.ordering import EntryOrder, classical_order, credit_order
    from admission.engine.preemption import Preemptor
    from admission.engine.scheduler import Scheduler
    from admission.engine.usage import UsageTracker

    tracker: UsageTracker | None = None
    if config.admission_fair_sharing is not None or config.cohort_credits is not None:
        tracker = UsageTracker(
            cache,
            admission_fair_sharing=config.admission_fair_sharing,
            cohort_credits=config.cohort_credits,
            evaluated_at=config.now,
            now=config.now if config.now is not None else clock(),
        )
    fs = config.fair_sharing
    preemptor: Preemptor
    order: EntryOrder
    if fs is not None:
        preemptor = FairPreemptor(
            cache, strategies=parse_strategies(fs.preemptionStrategies), tracker=tracker
        )
        order = Tournament(tracker=tracker)
    else:
        preemptor = Preemptor(cache, tracker=tracker)
        if tracker is not None and config.cohort_credits is not None:
            order = credit_order(tracker)
        else:
            order = classical_order
    return Scheduler(
        cache, clock=clock, preemptor=preemptor, order=order, usage=tracker, explain=explain
    )


def load_config(path: str | None) -> Config:
    if path is None:
        return Config()
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return parse_config(doc or {}, source=path)


def parse_config(doc: Any, *, source: str = "configuration") -> Config:
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping")
    api = doc.get("apiVersion")
    if api is not None and api not in (
        "config.kueue.x-k8s.io/v1beta2",
        "config.kueue.x-k8s.io/v1beta1",
    ):
        raise ConfigError(f"{source}: apiVersion: unsupported {api!r}")
    kind = doc.get("kind")
    if kind is not None and kind != "Configuration":
        raise ConfigError(f"{source}: kind: expected Configuration, got {kind!r}")
    try:
        parsed = ConfigurationDoc.model_validate(doc)
        try:
            frameworks(parsed.integrations)
        except FrameworksError as e:
            raise ConfigError(f"{source}: {e}") from e
        for name in ("admissionFairSharing", "cohortCredits"):
            section = getattr(parsed, name)
            if section is not None:
                try:
                    section.sampling()
                except ValueError as e:
                    raise ConfigError(f"{source}: {name}.usageSamplingInterval: {e}") from e
    except ValidationError as e:
        err = e.errors()[0]
        path = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        raise ConfigError(f"{source}: {path}: {msg}") from e
    return Config(doc=parsed)
