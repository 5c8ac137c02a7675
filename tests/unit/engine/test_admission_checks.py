"""The AdmissionChecks state machine (admission.engine.admission_checks), against Kueue's
pkg/workload/admissionchecks.go, workload_controller.go and evict.go."""

from __future__ import annotations

from admission.engine.admission_checks import (
    Action,
    checks_for,
    inactive_checks,
    max_retry_time,
    reset_on_eviction,
    set_state,
    sync_states,
    verdict,
    waiting_on,
)
from queues.model import (
    Admission,
    AdmissionCheck,
    AdmissionCheckState,
    ClusterQueue,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    ResourceGroup,
    ResourceQuota,
    Workload,
)


def _cq(checks: dict[str, tuple[str, ...]]) -> ClusterQueue:
    flavors = [FlavorQuotas(f, {"cpu": ResourceQuota(4)}) for f in ("on-demand", "spot")]
    return ClusterQueue("cq", [ResourceGroup(["cpu"], flavors)], admission_checks=checks)


def _admission(flavor: str) -> Admission:
    return Admission("cq", [PodSetAssignment("main", {"cpu": flavor}, {"cpu": 1000}, 1)])


def _s(name: str, state: str, **kw: object) -> AdmissionCheckState:
    return AdmissionCheckState(name=name, state=state, **kw)  # type: ignore[arg-type]


def test_checks_for_follows_on_flavors() -> None:
    cq = _cq({"all": (), "spot-only": ("spot",), "both": ("on-demand", "spot")})
    assert checks_for(cq, _admission("on-demand")) == ("all", "both")
    assert checks_for(cq, _admission("spot")) == ("all", "both", "spot-only")
    # without an admission: only the checks that apply to every flavor of the queue
    assert checks_for(cq, None) == ("all", "both")
    assert checks_for(_cq({}), _admission("spot")) == ()


def test_missing_then_inactive_checks_make_the_queue_inactive() -> None:
    cq = _cq({"a": (), "b": ()})
    assert inactive_checks(cq, {}) == (
        "AdmissionCheckNotFound",
        "references missing AdmissionCheck(s): a,b",
    )
    checks = {"a": AdmissionCheck("a", "ctl", active=True), "b": AdmissionCheck("b", "ctl")}
    assert inactive_checks(cq, checks) == (
        "AdmissionCheckInactive",
        "references inactive AdmissionCheck(s): b",
    )
    checks["b"] = AdmissionCheck("b", "ctl", active=True)
    assert inactive_checks(cq, checks) is None


def test_sync_adds_pending_drops_stale_and_sorts() -> None:
    states = (_s("z", "Ready", last_transition=1.0), _s("old", "Retry", last_transition=1.0))
    out, changed = sync_states(states, ["z", "a"], 9.0)
    assert changed
    assert [(s.name, s.state, s.last_transition) for s in out] == [
        ("a", "Pending", 9.0),
        ("z", "Ready", 1.0),
    ]
    assert sync_states(out, ["z", "a"], 10.0) == (out, False)
    assert sync_states(out, [], 10.0) == ((), True)


def test_set_state_moves_the_transition_time_only_on_a_change() -> None:
    states = (_s("a", "Pending", last_transition=1.0),)
    same = set_state(states, _s("a", "Pending", message="still"), 5.0)
    assert same[0].last_transition == 1.0 and same[0].message == "still"
    moved = set_state(states, _s("a", "Ready"), 5.0)
    assert moved[0].last_transition == 5.0 and moved[0].state == "Ready"


def test_verdicts() -> None:
    req = ("a", "b")
    assert verdict((_s("a", "Ready"), _s("b", "Pending")), req).action == Action.WAIT
    assert verdict((_s("a", "Ready"),), req).action == Action.WAIT  # b not yet listed
    assert verdict((_s("a", "Ready"), _s("b", "Ready")), req).action == Action.ADMIT
    # no check left (the queue dropped it): admitted; admitted already: nothing to do
    assert verdict((), ()).action == Action.ADMIT
    assert verdict((), (), admitted=True).action == Action.NONE
    retry = verdict(
        (
            _s("b", "Retry", message="later", last_transition=100.0, requeue_after_seconds=30),
            _s("a", "Retry", last_transition=100.0, requeue_after_seconds=60),
        ),
        req,
    )
    assert retry.action == Action.RETRY
    assert retry.message == 'Evicted due to AdmissionChecks in Retry state: "a"; "b" (later)'
    assert retry.requeue_at == 160.0
    rejected = verdict((_s("a", "Retry"), _s("b", "Rejected", message="no")), req)
    assert rejected.action == Action.REJECT  # Rejected wins over Retry
    assert rejected.message == 'AdmissionCheck in Rejected state: "b" (no)'
    # an admitted workload is still evicted by a Retry check
    assert verdict((_s("a", "Retry"),), req, admitted=True).action == Action.RETRY
    assert verdict((_s("a", "Pending"),), req, admitted=True).action == Action.NONE


def test_retry_without_requeue_after_retries_at_once() -> None:
    assert max_retry_time((_s("a", "Retry", last_transition=5.0),)) is None
    assert verdict((_s("a", "Retry"),), ("a",)).requeue_at is None


def test_eviction_resets_checks_and_counts_retries() -> None:
    states = (
        _s("a", "Retry", requeue_after_seconds=60, retry_count=2),
        _s("b", "Ready"),
        _s("c", "Pending", message="mine"),
    )
    a, b, c = reset_on_eviction(states, 7.0)
    assert (a.state, a.retry_count, a.requeue_after_seconds) == ("Pending", 3, 60)
    assert a.message == "Reset to Pending after eviction. Previously: Retry"
    assert (b.state, b.retry_count, b.last_transition) == ("Pending", None, 7.0)
    assert c == states[2]


def test_waiting_on_lists_what_a_reservation_waits_for() -> None:
    wl = Workload("ns", "w", [PodSet("main", 1, {"cpu": 1000})])
    wl.admission_checks = (_s("a", "Ready"), _s("b", "Pending"))
    assert waiting_on(wl) == ()  # no quota reserved
    wl.admission = _admission("spot")
    assert [s.name for s in waiting_on(wl)] == ["b"]
    wl.admitted = True
    assert waiting_on(wl) == ()
