"""Training progress on the wire: the checkpoint and preemption-notice signals.

A workload reports its last checkpoint so preemption can weigh the work a victim
would lose (``admission.engine.preemption.checkpoint``). The signal is an RFC 3339 time in this
project's annotation namespace, set with one API call after each save:

* ``quartermaster.io/last-checkpoint`` on the job object (any kind of the integration
  interface) or on any of its pods (the latest across the gang counts), or on the
  Workload itself;
* or, for controllers that prefer the Workload API, a Workload status condition of
  type ``quartermaster.io/Checkpointed`` with ``status: "True"`` whose
  ``lastTransitionTime`` is the save time.

When a workload is chosen as a victim under a notice window, the service writes
``quartermaster.io/eviction-deadline`` (RFC 3339) on the Workload, the job and its
pods, and a ``quartermaster.io/PreemptionNotice`` condition (``status: "True"``,
``lastTransitionTime`` = when the notice was given) on the Workload. Both are read
back here, so a restarted service, ``plan`` and the what-if see notices in flight.

Pure parsing, no I/O: a bad value is a :class:`ProgressError` naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from queues.times import strict_rfc3339_seconds

DOMAIN = "quartermaster.io"
CHECKPOINT_ANNOTATION = f"{DOMAIN}/last-checkpoint"
DEADLINE_ANNOTATION = f"{DOMAIN}/eviction-deadline"
CHECKPOINTED_CONDITION = f"{DOMAIN}/Checkpointed"
NOTICE_CONDITION = f"{DOMAIN}/PreemptionNotice"
NOTICE_REASON = "PreemptionNoticed"


class ProgressError(ValueError):
    """A progress signal that is not valid; ``field`` is its path in the object."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_time(value: Any, field: str) -> float:
    """An RFC 3339 time in epoch seconds (:func:`queues.times.strict_rfc3339_seconds`),
    a bad one a :class:`ProgressError` naming ``field``."""
    try:
        return strict_rfc3339_seconds(value)
    except ValueError as err:
        raise ProgressError(field, str(err)) from None


def format_time(seconds: float) -> str:
    """Epoch seconds as RFC 3339 UTC, to the second (what the annotations carry)."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotation_checkpoint(annotations: Mapping[str, str] | None, where: str = "") -> float | None:
    """The checkpoint time an object's annotations report (None when absent)."""
    value = (annotations or {}).get(CHECKPOINT_ANNOTATION)
    if value is None:
        return None
    return parse_time(value, f"{where}metadata.annotations[{CHECKPOINT_ANNOTATION}]")


def latest_checkpoint(times: Iterable[float | None]) -> float | None:
    """The latest of several reports (a gang's pods, the job, the Workload)."""
    known = [t for t in times if t is not None]
    return max(known) if known else None


class WorkloadProgress(NamedTuple):
    """What a Workload object says about its progress and any notice in flight."""

    checkpoint: float | None
    noticed_at: float | None
    deadline: float | None


def without_progress(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of a Workload without its progress signals (for a reader that
    must not drop the Workload over a bad one)."""
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k not in (CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION)
    }
    out = {**obj, "metadata": meta}
    status = obj.get("status")
    if isinstance(status, Mapping):
        out["status"] = {
            **status,
            "conditions": [
                c
                for c in status.get("conditions") or []
                if not (
                    isinstance(c, Mapping)
                    and c.get("type") in (CHECKPOINTED_CONDITION, NOTICE_CONDITION)
                )
            ],
        }
    return out


def _condition(conditions: Iterable[Mapping[str, Any]], kind: str) -> tuple[int, Mapping] | None:
    for i, c in enumerate(conditions):
        if isinstance(c, Mapping) and c.get("type") == kind:
            return i, c
    return None


def workload_progress(obj: Mapping[str, Any]) -> WorkloadProgress:
    """Read a Workload's checkpoint (annotation or ``Checkpointed`` condition) and its
    notice (``PreemptionNotice`` condition with the deadline annotation)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    times = [annotation_checkpoint(annotations)]
    found = _condition(conditions, CHECKPOINTED_CONDITION)
    if found is not None and found[1].get("status") == "True":
        i, c = found
        times.append(
            parse_time(c.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime")
        )
    noticed_at = deadline = None
    found = _condition(conditions, NOTICE_CONDITION)
    if found is not None and found[1].get("status") == "True":
        i, c = found
        noticed_at = parse_time(
            c.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"
        )
        raw = annotations.get(DEADLINE_ANNOTATION)
        if raw is None:
            raise ProgressError(
                f"metadata.annotations[{DEADLINE_ANNOTATION}]",
                f"Required value: the {NOTICE_CONDITION} condition needs the eviction deadline",
            )
        deadline = parse_time(raw, f"metadata.annotations[{DEADLINE_ANNOTATION}]")
        if deadline < noticed_at:
            raise ProgressError(
                f"metadata.annotations[{DEADLINE_ANNOTATION}]",
                "the eviction deadline is before the notice was given",
            )
    return WorkloadProgress(latest_checkpoint(times), noticed_at, deadline)
