"""The Workload status writes of AdmissionChecks (admission.kube.objects): the
reservation that waits for its checks, the eviction that resets them, the
deactivation a Rejected check causes, and the admission a check's controller writes
with the last check's Ready."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from admission.kube import objects as kobj
from admission.kube.reconcilers.admission_checks import admitting_conditions
from queues.api.conditions import condition, is_true
from queues.model import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    ResourceGroup,
    Workload,
)

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

    info = PodSetInfo(
        "main", 2, node_selector={"pool": "a"}, labels={"kueue.x-k8s.io/podset": "main"}
    )
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


def test_the_last_checks_ready_admits_in_its_own_write_only_when_the_service_would() -> None:
    flavors = [ResourceGroup(["cpu"], [FlavorQuotas("f", {})])]
    cq = ClusterQueue("cq", flavors, admission_checks={"a": (), "b": ()})
    model = Workload("ns", "w", [PodSet("main", 2, {"cpu": 1000})], admission=ADMISSION)
    ctx = SimpleNamespace(
        sync=SimpleNamespace(inflight=set(), cluster_queues={"cq": cq}),
        cache=SimpleNamespace(workloads={"ns/w": model}),
    )
    reserved = kobj.admission_status(_wl(), ADMISSION, now=T0, checks=("a", "b"))
    wl = _wl(**reserved)

    def entry(name: str, state: str) -> dict[str, Any]:
        return {"name": name, "state": state, "message": "", "lastTransitionTime": "t"}

    both = [entry("a", "Ready"), entry("b", "Ready")]
    conds = admitting_conditions(ctx, "ns/w", wl, both, T0 + 3)  # type: ignore[arg-type]
    assert conds is not None
    adm = condition({"status": {"conditions": conds}}, "Admitted")
    assert (adm["status"], adm["reason"], adm["message"], adm["lastTransitionTime"]) == (
        "True", "Admitted", "The workload is admitted", kobj.rfc3339(T0 + 3)
    )  # fmt: skip
    assert condition({"status": {"conditions": conds}}, "QuotaReserved") == condition(
        wl, "QuotaReserved"
    )
    # another check not Ready, or missing: the service admits later, as before
    one = [entry("a", "Ready"), entry("b", "Pending")]
    assert admitting_conditions(ctx, "ns/w", wl, one, T0 + 3) is None  # type: ignore[arg-type]
    assert admitting_conditions(ctx, "ns/w", wl, both[:1], T0 + 3) is None  # type: ignore[arg-type]
    # admitted already, evicted, deactivated, or its admission write in flight: none
    admitted = _wl(**{**reserved, "conditions": conds})
    assert admitting_conditions(ctx, "ns/w", admitted, both, T0 + 3) is None  # type: ignore[arg-type]
    evicted = _wl(**{**reserved, "conditions": kobj.set_condition(
        kobj.conditions(wl), type_="Evicted", status=True, reason="x", message="", now=T0)})  # fmt: skip
    assert admitting_conditions(ctx, "ns/w", evicted, both, T0 + 3) is None  # type: ignore[arg-type]
    inactive = {**wl, "spec": {"active": False}}
    assert admitting_conditions(ctx, "ns/w", inactive, both, T0 + 3) is None  # type: ignore[arg-type]
    ctx.sync.inflight.add("ns/w")
    assert admitting_conditions(ctx, "ns/w", wl, both, T0 + 3) is None  # type: ignore[arg-type]
