"""The Configuration's ``multiKueue`` section: Kueue's fields and defaults
(apis/config/v1beta2/configuration_types.go ``MultiKueue``, defaults.go), plus one
dispatcher of this project's, ``FITS`` (nominate only the workers whose ClusterQueue
can admit the workload now, judged from their quota status).

A dispatcher name other than the built-in ones is an external dispatcher, as in Kueue:
a controller of the user's writes ``status.nominatedClusterNames`` and the service
only acts on what it names.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from admission.config.durations import Duration, parse_duration
from queues.api.labels import MULTIKUEUE_ALL_AT_ONCE, MULTIKUEUE_INCREMENTAL

ALL_AT_ONCE = MULTIKUEUE_ALL_AT_ONCE
INCREMENTAL = MULTIKUEUE_INCREMENTAL
FITS = "quartermaster.x-k8s.io/multikueue-dispatcher-fits"
BUILT_IN = (ALL_AT_ONCE, INCREMENTAL, FITS)
INCREMENTAL_ROUND_SECONDS = 300.0
"""Kueue's ``incrementalDispatcherRoundTimeout``: how long a round of nominations is
given before the next workers are added."""
DEFAULT_STEP_SIZE = 3


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class IncrementalDispatcherConfig(_Strict):
    stepSize: StrictInt | None = Field(default=None, ge=1)


class ExternalFramework(_Strict):
    name: StrictStr


class MultiKueueSection(_Strict):
    gcInterval: Duration | None = None
    origin: StrictStr | None = None
    workerLostTimeout: Duration | None = None
    dispatcherName: StrictStr | None = None
    externalFrameworks: list[ExternalFramework] | None = None
    clusterProfile: dict[str, object] | None = None
    incrementalDispatcherConfig: IncrementalDispatcherConfig | None = None

    def settings(self) -> MultiKueueSettings:
        step = self.incrementalDispatcherConfig
        return MultiKueueSettings(
            gc_interval=parse_duration(self.gcInterval) if self.gcInterval is not None else 60.0,
            origin=self.origin or "multikueue",
            worker_lost_timeout=(
                parse_duration(self.workerLostTimeout)
                if self.workerLostTimeout is not None
                else 900.0
            ),
            dispatcher=self.dispatcherName or ALL_AT_ONCE,
            step_size=(step.stepSize if step and step.stepSize else DEFAULT_STEP_SIZE),
            incremental_round=INCREMENTAL_ROUND_SECONDS,
        )


@dataclass(frozen=True, slots=True)
class MultiKueueSettings:
    """The section with Kueue's defaults applied; seconds for durations."""

    gc_interval: float = 60.0  # 0: no garbage collection
    origin: str = "multikueue"
    worker_lost_timeout: float = 900.0
    dispatcher: str = ALL_AT_ONCE
    step_size: int = DEFAULT_STEP_SIZE
    incremental_round: float = INCREMENTAL_ROUND_SECONDS

    @property
    def external(self) -> bool:
        return self.dispatcher not in BUILT_IN
