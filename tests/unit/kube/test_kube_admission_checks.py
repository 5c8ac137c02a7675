"""The Workload status writes of AdmissionChecks (admission.kube.objects): the
reservation that waits for its checks, the eviction that resets them, and the
deactivation a Rejected check causes."""

from __future__ import annotations

from typing import Any

from admission.kube import objects as kobj
from queues.api.conditions import condition, is_true
from queues.model import Admission, PodSetAssignment

T0 = 1_800_000_000.0
ADMISSION = Admission("cq", [PodSetAssignment("main", {"cpu": "f"}, {"cpu": 2000}, 2)])


def _wl(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns", "generation": 1}, "status": status}


def test_a_reservation_with_checks_is_not_admitted_and_lists_them_pending() -> None:
    body = kobj.admission_status(_wl(), ADMISSION, now=T0, checks=("b", "a"))
    wl = _wl(**body)
    assert condition(wl, "QuotaReserved")["status"] == "True"
    adm = condition(wl, "Admitted")
    assert (adm["status"], adm["reason"], adm["message"]) == (
        "False",
        "UnsatisfiedAdmissionChecks",
        "The workload has not all checks ready",
    )
    assert body["admissionChecks"] == [
        {"name": "a", "state": "Pending", "message": "", "lastTransitionTime": kobj.rfc3339(T0)},
        {"name": "b", "state": "Pending", "message": "", "lastTransitionTime": kobj.rfc3339(T0)},
    ]
    assert kobj.has_quota(wl) and not is_true(wl, "Admitted")


def test_a_reservation_without_checks_is_admitted_as_before() -> None:
    body = kobj.admission_status(_wl(), ADMISSION, now=T0)
    assert condition(_wl(**body), "Admitted")["status"] == "True"
    assert "admissionChecks" not in body


def test_checks_ready_before_the_reservation_admit_at_once() -> None:
    ready = {"name": "a", "state": "Ready", "message": "ok",
             "lastTransitionTime": kobj.rfc3339(T0 - 5)}  # fmt: skip
    body = kobj.admission_status(_wl(admissionChecks=[ready]), ADMISSION, now=T0, checks=("a",))
    assert condition(_wl(**body), "Admitted")["status"] == "True"
    assert body["admissionChecks"] == [ready]


def test_an_eviction_resets_the_checks_and_keeps_pod_set_updates_of_pending_ones() -> None:
    checks = [
        {"name": "a", "state": "Retry", "message": "later", "requeueAfterSeconds": 30,
         "lastTransitionTime": kobj.rfc3339(T0 - 9)},
        {"name": "b", "state": "Pending", "message": "", "lastTransitionTime": kobj.rfc3339(T0),
         "podSetUpdates": [{"name": "main", "labels": {"x": "y"}}]},
    ]  # fmt: skip
    body = kobj.evicted_status(
        _wl(admissionChecks=checks), reason="AdmissionCheck", message="m", now=T0 + 1
    )
    a, b = body["admissionChecks"]
    assert a == {
        "name": "a",
        "state": "Pending",
        "message": "Reset to Pending after eviction. Previously: Retry",
        "lastTransitionTime": kobj.rfc3339(T0 + 1),
        "requeueAfterSeconds": 30,
        "retryCount": 1,
    }
    assert b == checks[1]


def test_deactivation_names_its_target_condition() -> None:
    assert kobj.deactivation_eviction(_wl()) == ("Deactivated", "The workload is deactivated")
    target = {"type": "DeactivationTarget", "status": "True", "reason": "AdmissionCheck",
              "message": 'AdmissionCheck in Rejected state: "a"'}  # fmt: skip
    assert kobj.deactivation_eviction(_wl(conditions=[target])) == (
        "DeactivatedDueToAdmissionCheck",
        'The workload is deactivated due to AdmissionCheck in Rejected state: "a"',
    )
    status = kobj.without_deactivation_target({"conditions": [target, {"type": "Evicted"}]})
    assert status["conditions"] == [{"type": "Evicted"}]


def test_unknown_states_are_not_read() -> None:
    wl = _wl(admissionChecks=[{"name": "a", "state": "Maybe"}, {"state": "Ready"}, "x"])
    assert kobj.check_states(wl) == ()


def test_pod_set_updates_merge_and_a_conflict_names_the_check() -> None:
    from admission.integrations.framework.podset_info import PodSetInfo
    from admission.kube.control.workloads import apply_pod_set_updates

    info = PodSetInfo("main", 2, node_selector={"pool": "a"}, labels={"kueue.x-k8s.io/podset": "main"})
    ok = _wl(admissionChecks=[
        {"name": "a", "state": "Ready", "podSetUpdates": [
            {"name": "other", "labels": {"x": "1"}},
            {"name": "main", "labels": {"x": "2"}, "nodeSelector": {"pool": "a", "zone": "z"},
             "tolerations": [{"key": "t", "operator": "Exists"}]}]},
        {"name": "b", "state": "Ready", "podSetUpdates": [
            {"name": "main", "tolerations": [{"key": "t", "operator": "Exists"}]}]},
    ])  # fmt: skip
    assert apply_pod_set_updates(info, ok) is None
    assert info.labels == {"kueue.x-k8s.io/podset": "main", "x": "2"}
    assert info.node_selector == {"pool": "a", "zone": "z"}
    assert info.tolerations == [{"key": "t", "operator": "Exists"}]  # not twice
    bad = _wl(admissionChecks=[
        {"name": "c", "state": "Ready", "podSetUpdates": [
            {"name": "main", "nodeSelector": {"pool": "b"}}]}])  # fmt: skip
    assert apply_pod_set_updates(info, bad) == (
        'in admission check "c": invalid admission check PodSetUpdate: conflict for '
        "nodeSelector: conflict for key=pool, value1=a, value2=b"
    )


def test_a_reservation_read_from_the_api_holds_quota_and_follows_its_checks() -> None:
    """The cache rebuilt from the API (a restart, a new leader) charges a reservation
    waiting for its checks, knows what it waits for, and follows the states its check
    controller writes without charging it again."""
    from admission.engine.admission_checks import waiting_on
    from admission.kube.watch.cachesync import CacheSync
    from tests.unit.kube.test_kube_objects import admission, make_cache, wl_obj

    cache = make_cache()
    sync = CacheSync(cache, clock=lambda: 0.0)
    reserved = wl_obj(status=kobj.admission_status(wl_obj(), admission(), now=T0, checks=("a",)))
    sync.workload("ns/w", reserved)
    assert cache.tree.queues["cq"].usage == {("f", "cpu"): 2000}
    model = cache.workloads["ns/w"]
    assert not model.admitted and [s.name for s in waiting_on(model)] == ["a"]
    moved = wl_obj(rv="11", status={**reserved["status"], "admissionChecks": [
        {"name": "a", "state": "Pending", "message": "provisioning",
         "lastTransitionTime": kobj.rfc3339(T0)}]})  # fmt: skip
    sync.workload("ns/w", moved)
    assert [s.message for s in waiting_on(cache.workloads["ns/w"])] == ["provisioning"]
    conds = kobj.admitted_condition(
        reserved["status"]["conditions"], admitted=True, now=T0 + 5, gen=1
    )
    sync.workload("ns/w", wl_obj(rv="12", status={**moved["status"], "conditions": conds}))
    assert waiting_on(cache.workloads["ns/w"]) == ()
    assert cache.tree.queues["cq"].usage == {("f", "cpu"): 2000}  # charged once
