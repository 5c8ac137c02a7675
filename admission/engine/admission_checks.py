"""AdmissionChecks: what a Workload must pass after it reserved quota, before it is admitted.

Kueue's state machine (``pkg/workload/admissionchecks.go``,
``pkg/controller/core/workload_controller.go``, ``pkg/workload/evict/evict.go``), as pure
functions on the model; the Kubernetes adapter applies them to Workload objects
(``admission.kube.reconcilers.admission_checks``).

* A ClusterQueue names checks in ``spec.admissionChecksStrategy``; a check with
  ``onFlavors`` applies only to workloads assigned one of those flavors
  (:func:`checks_for`). A ClusterQueue whose check does not exist, or is not ``Active``,
  admits nothing (:func:`inactive_checks`).
* The scheduler reserves quota as usual: the workload is charged (preemption and the
  what-if see it like any admitted workload), its ``status.admissionChecks`` gets a
  ``Pending`` entry per check it needs, and its ``Admitted`` condition stays ``False``
  (reason ``UnsatisfiedAdmissionChecks``). Its job stays suspended.
* :func:`verdict` then decides, from the states the checks' controllers wrote:
  every needed check ``Ready`` → **admit** (``Admitted=True``, the job starts); any
  ``Rejected`` → **reject** (the workload is deactivated, condition reason
  ``AdmissionCheck``); else any ``Retry`` → **retry** (evicted with reason
  ``AdmissionCheck``: the quota is released, every check is reset to ``Pending`` with
  its ``retryCount`` raised, and the workload is requeued no earlier than the latest
  ``lastTransitionTime + requeueAfterSeconds`` of its Retry checks); else **wait**.

The interface an admission-check controller uses (MultiKueue's, a test's, a user's):

1. Watch AdmissionChecks whose ``spec.controllerName`` is yours and set their
   ``status.conditions`` ``Active=True`` (reason and message yours) once you can
   evaluate them; until then every ClusterQueue naming them is inactive.
2. Watch Workloads; act on those with ``QuotaReserved=True`` whose
   ``status.admissionChecks`` has an entry named after one of your checks. Read the
   reservation from ``status.admission`` (ClusterQueue, flavors, counts).
3. Write your verdict to the Workload's ``status`` subresource, changing only your
   entry of ``status.admissionChecks`` (a merge patch or update pinned to the
   resourceVersion you read): ``state`` one of ``Pending``, ``Ready``, ``Retry``,
   ``Rejected``, a ``message``, ``lastTransitionTime`` when the state changes, and for
   ``Retry`` optionally ``requeueAfterSeconds``. ``retryCount`` is the service's.
   :func:`set_state` is Kueue's ``SetAdmissionCheckState`` for that write.
4. The service does the rest: admission when all are Ready, eviction and requeue on
   Retry, deactivation on Rejected, and a fresh ``Pending`` entry after each eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from admission.engine import messages
from queues.model import (
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    Admission,
    AdmissionCheck,
    AdmissionCheckState,
    ClusterQueue,
    Workload,
)

States = tuple[AdmissionCheckState, ...]


class Action(StrEnum):
    """What the state of a quota-holding workload's checks calls for."""

    NONE = "None"  # it is admitted already
    WAIT = "Wait"  # some needed check is Pending (or missing from its status)
    ADMIT = "Admit"  # every needed check is Ready
    RETRY = "Retry"  # evict, release the quota, requeue after the retry time
    REJECT = "Reject"  # deactivate


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    message: str = ""
    requeue_at: float | None = None  # RETRY: not queued again before this time


# -- which checks ------------------------------------------------------------------------


def cluster_queue_flavors(cq: ClusterQueue) -> set[str]:
    return {fq.name for g in cq.resource_groups for fq in g.flavors}


def checks_for(cq: ClusterQueue, admission: Admission | None) -> tuple[str, ...]:
    """Kueue's ``AdmissionChecksForWorkload``, sorted: with an admission, the checks
    whose flavors meet the flavors assigned (a check without ``onFlavors`` applies to
    every flavor of the ClusterQueue); without one, only the checks that apply to all
    of them."""
    if not cq.admission_checks:
        return ()
    all_flavors = cluster_queue_flavors(cq)
    if admission is None:
        return tuple(
            sorted(
                name for name, on in cq.admission_checks.items() if not on or set(on) >= all_flavors
            )
        )
    assigned = {f for psa in admission.pod_set_assignments for f in psa.flavors.values()}
    return tuple(
        sorted(
            name
            for name, on in cq.admission_checks.items()
            if assigned & (set(on) if on else all_flavors)
        )
    )


def inactive_checks(
    cq: ClusterQueue, checks: Mapping[str, AdmissionCheck]
) -> tuple[str, str] | None:
    """Kueue's ClusterQueue ``Active=False`` for its checks: (reason, why) when one it
    names does not exist (``AdmissionCheckNotFound``) or is not Active
    (``AdmissionCheckInactive``); None when all are usable."""
    missing = sorted(n for n in cq.admission_checks if n not in checks)
    if missing:
        return "AdmissionCheckNotFound", messages.admission_checks_missing(missing)
    inactive = sorted(n for n in cq.admission_checks if not checks[n].active)
    if inactive:
        return "AdmissionCheckInactive", messages.admission_checks_inactive(inactive)
    return None


# -- states ------------------------------------------------------------------------------


def set_state(
    states: Sequence[AdmissionCheckState], new: AdmissionCheckState, now: float
) -> States:
    """Kueue's ``SetAdmissionCheckState``: add ``new``, or update the entry of its name;
    ``lastTransitionTime`` moves only when the state changes (to ``new``'s, else now)."""
    out: list[AdmissionCheckState] = []
    found = False
    for s in states:
        if s.name != new.name:
            out.append(s)
            continue
        found = True
        ltt = s.last_transition
        if s.state != new.state:
            ltt = new.last_transition if new.last_transition is not None else now
        out.append(
            replace(
                s,
                state=new.state,
                last_transition=ltt,
                message=new.message,
                requeue_after_seconds=new.requeue_after_seconds,
            )
        )
    if not found:
        ltt = new.last_transition if new.last_transition is not None else now
        out.append(replace(new, last_transition=ltt))
    return tuple(out)


def sync_states(
    states: Sequence[AdmissionCheckState], required: Iterable[str], now: float
) -> tuple[States, bool]:
    """Kueue's ``syncAdmissionCheckConditions``: a ``Pending`` entry for each required
    check missing, entries of checks no longer required dropped, sorted by name; and
    whether anything changed."""
    need = set(required)
    if not need:
        return (), bool(states)
    out = tuple(states)
    changed = False
    have = {s.name for s in out}
    for name in sorted(need - have):
        out = set_state(out, AdmissionCheckState(name=name, state=CHECK_PENDING), now)
        changed = True
    if any(s.name not in need for s in out):
        out = tuple(s for s in out if s.name in need)
        changed = True
    ordered = tuple(sorted(out, key=lambda s: s.name))
    return ordered, changed or ordered != out


def reset_on_eviction(states: Sequence[AdmissionCheckState], now: float | None) -> States:
    """Kueue's ``resetChecksOnEviction``: every check not Pending goes back to Pending
    ("Reset to Pending after eviction. Previously: <state>"); a Retry one counts the
    retry in ``retryCount``."""
    out = []
    for s in states:
        if s.state == CHECK_PENDING:
            out.append(s)
            continue
        retry_count = (s.retry_count or 0) + 1 if s.state == CHECK_RETRY else None
        out.append(
            AdmissionCheckState(
                name=s.name,
                state=CHECK_PENDING,
                message=messages.check_reset_after_eviction(s.state),
                last_transition=now,
                requeue_after_seconds=s.requeue_after_seconds,
                retry_count=retry_count,
            )
        )
    return tuple(out)


def max_retry_time(states: Sequence[AdmissionCheckState]) -> float | None:
    """Kueue's ``GetMaxRetryTime``: the latest ``lastTransitionTime +
    requeueAfterSeconds`` of the Retry checks that set one (None: retry at once)."""
    times = [
        s.last_transition + s.requeue_after_seconds
        for s in states
        if s.state == CHECK_RETRY
        and s.requeue_after_seconds is not None
        and s.last_transition is not None
    ]
    return max(times) if times else None


def all_ready(states: Sequence[AdmissionCheckState], required: Iterable[str]) -> bool:
    """Every required check is present and every check present is Ready (Kueue's
    ``HasAllRequiredChecks`` and ``HasAllChecksReady``)."""
    names = {s.name for s in states}
    return set(required) <= names and all(s.state == CHECK_READY for s in states)


def verdict(
    states: Sequence[AdmissionCheckState], required: Iterable[str], *, admitted: bool = False
) -> Verdict:
    """What the checks of a workload holding quota call for (see the module docstring).
    Rejected wins over Retry, as in Kueue's ``reconcileCheckBasedEviction``; an
    admitted workload is still evicted or deactivated by a Retry or Rejected check."""
    required = tuple(required)
    rejected = [s for s in states if s.state == CHECK_REJECTED]
    if rejected:
        return Verdict(Action.REJECT, messages.checks_in_state(rejected, CHECK_REJECTED))
    retry = [s for s in states if s.state == CHECK_RETRY]
    if retry:
        return Verdict(
            Action.RETRY,
            messages.evicted_by_checks(messages.checks_in_state(retry, CHECK_RETRY)),
            max_retry_time(states),
        )
    if admitted:
        return Verdict(Action.NONE)
    if all_ready(states, required):  # no check left (one removed from the queue) admits too
        return Verdict(Action.ADMIT)
    return Verdict(Action.WAIT)


def waiting_on(wl: Workload) -> tuple[AdmissionCheckState, ...]:
    """The checks a workload holding quota but not admitted waits on (those not Ready);
    empty when it is admitted, pending, or has no checks."""
    if wl.admission is None or wl.admitted:
        return ()
    return tuple(s for s in wl.admission_checks if s.state != CHECK_READY)
