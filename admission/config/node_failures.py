"""The ``nodeFailures`` section: how node failures are detected and what they leave
behind (:mod:`queues.node_health`; docs/semantics.md "Failures").

Every field is optional; the defaults are Kueue's where Kueue has the knob (a 30 s
NotReady delay, taints as failures as with ``TASReplaceNodeOnNodeTaints``, fail-fast
replacement, a 60 s grace for pods stuck terminating), and on for the rest::

    nodeFailures:
      enable: true                    # off: nodes are only capacity, as before
      notReadyDelay: 30s              # NotReady/Unknown this long counts as a failure
      taints: true                    # an untolerated NoSchedule/NoExecute taint too
      replaceOnPodTermination: false  # Kueue's TASReplaceNodeOnPodTermination
      failFast: true                  # Kueue's TASFailedNodeReplacementFailFast
      avoidNodesFor: 24h              # bad-node memory, longer than a repair (0: none)
      flakyNode: {workloads: 2, window: 24h}  # Event + metric (workloads 0: never)
      forcefulTerminationGracePeriod: 60s     # kueue.x-k8s.io/safe-to-forcefully-delete pods
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from admission.config.durations import Duration, parse_duration
from queues.node_health import NodeFailurePolicy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FlakyNode(_Strict):
    workloads: int = Field(default=2, ge=0)
    window: Duration = "24h"


class NodeFailuresSection(_Strict):
    enable: StrictBool = True
    notReadyDelay: Duration = "30s"
    taints: StrictBool = True
    replaceOnPodTermination: StrictBool = False
    failFast: StrictBool = True
    avoidNodesFor: Duration = "24h"
    flakyNode: FlakyNode = Field(default_factory=FlakyNode)
    forcefulTerminationGracePeriod: Duration = "60s"

    def policy(self) -> NodeFailurePolicy:
        return NodeFailurePolicy(
            enable=self.enable,
            not_ready_delay=parse_duration(self.notReadyDelay),
            taints=self.taints,
            replace_on_pod_termination=self.replaceOnPodTermination,
            fail_fast=self.failFast,
            avoid_for=parse_duration(self.avoidNodesFor),
            flaky_workloads=self.flakyNode.workloads,
            flaky_window=parse_duration(self.flakyNode.window),
            forceful_termination_grace=parse_duration(self.forcefulTerminationGracePeriod),
        )
