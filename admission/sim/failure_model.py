"""Node failures for the simulator: when each node goes down and comes back.

The rate is Meta's measurement on the Llama 3 405B pre-training run: 419 unexpected
interruptions in 54 days on 16,384 H100 GPUs (about one every 3 hours at that scale).
Scaled per GPU, a cluster of ``g`` GPUs sees failures as a Poisson process of rate
``419 / (54 × 24 × 16,384) × g`` per hour; each failure takes down one node (chosen
uniformly among the nodes that are up) for a repair time of about two hours (uniform in
``repair ± 25 %``). A *flaky* node, optionally, fails again after every short uptime
(``flaky_uptime ± 25 %``) on top of that: the node a health pipeline would quarantine.

A schedule is a pure function of the model and the node list (fixed seed), so a run is
reproducible and the two policies of a benchmark see the very same failures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from admission.sim.scenario import US_PER_S

# Meta, "The Llama 3 Herd of Models" (2024), section 3.3.4: 419 unexpected interruptions
# in a 54-day snapshot of pre-training on 16,384 H100 GPUs.
META_INTERRUPTIONS = 419
META_DAYS = 54
META_GPUS = 16_384
META_RATE_PER_GPU_HOUR = META_INTERRUPTIONS / (META_DAYS * 24 * META_GPUS)
REPAIR_SECONDS = 2 * 3600.0
US_PER_H = 3600 * US_PER_S


@dataclass(frozen=True, slots=True)
class Outage:
    """One node down from ``down_us`` until ``up_us`` (simulated µs)."""

    node: str
    down_us: int
    up_us: int
    flaky: bool = False


@dataclass(frozen=True, slots=True)
class FailureModel:
    """How nodes fail (see the module docstring)."""

    rate_per_gpu_hour: float = META_RATE_PER_GPU_HOUR
    repair_seconds: float = REPAIR_SECONDS
    flaky_node: str | None = None
    flaky_uptime_seconds: float = 4 * 3600.0
    flaky_first_seconds: float = 3600.0  # its first failure, from t=0
    seed: int = 405

    def schedule(self, nodes: dict[str, int], horizon_us: int) -> list[Outage]:
        """The outages of ``nodes`` (name -> GPUs) that start before ``horizon_us``,
        in time order. A node that is down does not fail again until repaired."""
        if self.rate_per_gpu_hour < 0 or self.repair_seconds <= 0:
            raise ValueError("failure rate must be >= 0 and repair time > 0")
        rng = random.Random(self.seed)
        names = sorted(nodes)
        gpus = sum(nodes.values())
        out: list[Outage] = []
        up_at = dict.fromkeys(names, 0)  # when each node is up again
        if self.flaky_node is not None:
            if self.flaky_node not in nodes:
                raise ValueError(f"flaky node {self.flaky_node} is not a node of the cluster")
            t = round(self.flaky_first_seconds * US_PER_S)
            while t < horizon_us:
                up = t + self._around(rng, self.repair_seconds)
                out.append(Outage(self.flaky_node, t, up, flaky=True))
                t = up + self._around(rng, self.flaky_uptime_seconds)
        per_hour = self.rate_per_gpu_hour * gpus
        t = 0
        while per_hour > 0:
            t += max(1, round(rng.expovariate(per_hour) * US_PER_H))
            if t >= horizon_us:
                break
            node = names[rng.randrange(len(names))]
            if node == self.flaky_node or up_at[node] > t:
                continue  # already down (or flaky: its own schedule): no second failure
            up = t + self._around(rng, self.repair_seconds)
            up_at[node] = up
            out.append(Outage(node, t, up))
        out.sort(key=lambda o: (o.down_us, o.node))
        return out

    @staticmethod
    def _around(rng: random.Random, seconds: float) -> int:
        """``seconds`` ± 25 %, in µs."""
        return max(1, round(seconds * rng.uniform(0.75, 1.25) * US_PER_S))
