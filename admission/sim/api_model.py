"""The API server as the simulated service sees it: a client-side token bucket and a
write latency (``Simulator(api=ApiModel(qps, burst, latency))``).

With this model every decision is a write through a FIFO token bucket (``qps`` /
``burst``) that lands ``latency`` after it is sent: an admission takes effect (its
runtime starts, its queue's usage counts) when its write lands, and a preempted
workload's quota is released when its eviction lands. Finishes are free, as the
runner's are. A run with this model is bounded by ``admissions ÷ qps``, not by the
policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from admission.sim.scenario import US_PER_S


@dataclass(frozen=True, slots=True)
class ApiModel:
    """The API as the simulated service sees it: a token bucket and a write latency."""

    qps: float = 50.0
    burst: int = 100
    latency: float = 0.005  # seconds from sending a write to the API answering it

    def __post_init__(self) -> None:
        if self.qps <= 0 or self.burst < 1 or self.latency < 0:
            raise ValueError(
                f"api model needs qps > 0, burst >= 1, latency >= 0 (got {self.qps}, "
                f"{self.burst}, {self.latency})"
            )


class TokenBucket:
    """A FIFO token bucket on the simulated clock: when a write issued at t is sent."""

    def __init__(self, model: ApiModel) -> None:
        self.per_token_us = US_PER_S / model.qps
        self.burst = model.burst
        self.latency_us = round(model.latency * US_PER_S)
        self.tokens = float(model.burst)
        self.stamp_us = 0
        self.writes = 0
        self.waited_us = 0

    def done_at(self, issued_us: int) -> int:
        """Issue one write at ``issued_us`` (non-decreasing): when its answer arrives."""
        t = max(issued_us, self.stamp_us)
        self.tokens = min(self.burst, self.tokens + (t - self.stamp_us) / self.per_token_us)
        self.stamp_us = t
        if self.tokens < 1:
            wait = round((1 - self.tokens) * self.per_token_us)
            t += wait
            self.tokens = 1.0
            self.stamp_us = t
        self.tokens -= 1
        self.writes += 1
        self.waited_us += t - issued_us
        return t + self.latency_us
