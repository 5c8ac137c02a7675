"""Jobs that no queue manages, and why: ``plan`` says so instead of dropping them.

A Job (or any integrated kind) without the ``kueue.x-k8s.io/queue-name`` label, in a
namespace without a LocalQueue named ``default``, is not Kueue's: the service does
not suspend it, so it starts at once and uses no quota. A user who forgot the label
sees it here, in ``plan``'s ``notQueued`` list, rather than not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queues.api.labels import QUEUE_NAME

__all__ = ["NotQueued"]


@dataclass(frozen=True, slots=True)
class NotQueued:
    """One object the service leaves alone: where it was read, what it is, and why."""

    where: str  # "file document N"
    kind: str
    name: str  # namespace/name
    reason: str

    @classmethod
    def without_label(cls, where: str, kind: str, name: str, namespace: str) -> NotQueued:
        reason = (
            f"not queued: it has no {QUEUE_NAME} label and namespace {namespace} has no "
            'LocalQueue named "default"; the service does not suspend it, so it runs '
            "at once, outside every quota"
        )
        return cls(where, kind, name, reason)

    def json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "reason": self.reason, "source": self.where}
