"""What drivers report of training progress: checkpoints per source, and notices.

The data half of progress-aware preemption (:mod:`admission.engine.preemption.checkpoint` has the
policy): the cache keeps one :class:`ProgressBook` (``Cache.progress``) that the
drivers fill and the policy reads. It sits below the cache in the engine's layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WORKLOAD_SOURCE = "workload"


@dataclass(slots=True)
class Notice:
    """A victim noticed of its eviction: when, until when, and for whom."""

    noticed_at: float
    deadline: float
    preemptor: str = ""
    reason: str = ""  # the preemption's reason and message, for the eviction to come
    message: str = ""


@dataclass(slots=True)
class ProgressBook:
    """Checkpoints per workload and source, and the notices in flight (``Cache.progress``)."""

    checkpoints: dict[str, dict[str, float]] = field(default_factory=dict)
    notices: dict[str, Notice] = field(default_factory=dict)

    def report(self, key: str, source: str, at: float | None) -> bool:
        """A checkpoint reported by ``source`` (None: it reports none any more). True
        when the workload is noticed and this checkpoint is newer than the notice
        (checkpoint-and-yield: the driver evicts it now)."""
        if at is None:
            per = self.checkpoints.get(key)
            if per is not None:
                per.pop(source, None)
                if not per:
                    del self.checkpoints[key]
            return False
        self.checkpoints.setdefault(key, {})[source] = at
        n = self.notices.get(key)
        return n is not None and at > n.noticed_at

    def checkpoint(self, key: str) -> float | None:
        per = self.checkpoints.get(key)
        return max(per.values()) if per else None

    def notice(self, key: str, notice: Notice) -> None:
        self.notices.setdefault(key, notice)  # never given twice

    def released(self, key: str) -> None:
        """The workload no longer holds quota: a notice in flight is over."""
        self.notices.pop(key, None)

    def forget(self, key: str) -> None:
        self.notices.pop(key, None)
        self.checkpoints.pop(key, None)

    def yielded(self, key: str) -> bool:
        n = self.notices.get(key)
        c = self.checkpoint(key)
        return n is not None and c is not None and c > n.noticed_at

    def due(self, now: float) -> list[str]:
        """Noticed workloads to evict now: past their deadline, or checkpointed since."""
        return sorted(k for k, n in self.notices.items() if n.deadline <= now or self.yielded(k))

    def next_deadline(self) -> float | None:
        return min((n.deadline for n in self.notices.values()), default=None)
