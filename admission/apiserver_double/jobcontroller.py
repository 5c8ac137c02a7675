"""The status writes kube-controller-manager's Job controller makes, for whoever plays it.

The double has no Job controller; tests that need a Job to start or finish, and the
demo's stand-in that runs admitted Jobs, write its status through ``jobs/status``
themselves.  Since the double enforces 1.32's Job status
rules (:func:`.jobs.job_status_errors`), those writes must come in the controller's
order: ``startTime`` when the Job starts; on success ``SuccessCriteriaMet=True`` first,
then ``Complete=True`` with ``completionTime``; on failure ``FailureTarget=True`` first,
then ``Failed=True``.  :func:`finish_patches` gives those merge patches.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

SUCCESS = (
    "SuccessCriteriaMet",
    "Complete",
    "CompletionsReached",
    "Reached expected number of succeeded pods",
)
FAILURE = (
    "FailureTarget",
    "Failed",
    "BackoffLimitExceeded",
    "Job has reached the specified backoff limit",
)


def rfc3339(when: datetime | None = None) -> str:
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def start_patch(job: Obj, now: str | None = None) -> Obj | None:
    """The ``jobs/status`` merge patch for a Job that starts (None if it has a start time)."""
    if (job.get("status") or {}).get("startTime"):
        return None
    active = (job.get("spec") or {}).get("parallelism", 1)
    return {"status": {"startTime": now or rfc3339(), "active": active}}


def suspend_patch(job: Obj) -> Obj | None:
    """The ``jobs/status`` merge patch for a started Job that was suspended again (a
    preemption): the controller removes its pods and resets ``startTime``, so the
    template may change before it runs again (None if it is not started or not
    suspended)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if not spec.get("suspend") or not status.get("startTime"):
        return None
    return {"status": {"startTime": None, "active": 0}}


def finish_patches(job: Obj, *, succeeded: bool = True, now: str | None = None) -> list[Obj]:
    """The ``jobs/status`` merge patches, in order, that finish ``job`` as the Job
    controller would: start it if needed, then the interim and the terminal condition."""
    now = now or rfc3339()
    patches: list[Obj] = []
    started = start_patch(job, now)
    if started is not None:
        patches.append(started)
    interim, terminal, reason, message = SUCCESS if succeeded else FAILURE
    kept = [
        c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("type") not in (interim, terminal)
    ]
    first = condition(interim, reason, message, now)
    spec = job.get("spec") or {}
    counter = "succeeded" if succeeded else "failed"
    count = (spec.get("completions") or 1) if succeeded else 1
    patches.append({"status": {"conditions": [*kept, first], counter: count}})
    final: Obj = {
        "conditions": [*kept, first, condition(terminal, reason, message, now)],
        "active": 0,
        "ready": 0,
        "terminating": 0,
    }
    if succeeded:
        final["completionTime"] = now
    patches.append({"status": final})
    return patches
