"""Node failures in the simulator: the failure model and the two policies of
``python -m bench gpu-failures`` on clusters of a few nodes, with failures placed by hand."""

from __future__ import annotations

import pytest

from admission.engine.preemption.checkpoint import RequeuePolicy
from admission.sim import failure_cluster, failure_policy
from admission.sim.failure_cluster import GPU, NAMESPACE, PLAIN, RACK, TAS
from admission.sim.failure_model import META_RATE_PER_GPU_HOUR, FailureModel, Outage
from admission.sim.failure_run import FailureRun
from admission.sim.scenario import US_PER_S, SimWorkload
from queues.model import PodSet, TopologyRequest, Workload

H = 3600 * US_PER_S
FAST_LIMIT = RequeuePolicy(backoff_limit=1)
DAY = 24 * 3600.0
SLOW_START = {"pods_ready_timeout_seconds": DAY}  # no startup timeout in these runs


def job(
    name: str, queue: str, *, pods: int = 1, arrival_s: float = 0, hours: float = 10
) -> SimWorkload:
    topology = TopologyRequest(required=RACK) if queue == TAS else None
    wl = Workload(
        namespace=NAMESPACE,
        name=name,
        queue_name=queue,
        pod_sets=[PodSet(name="main", count=pods, requests={GPU: 8}, topology=topology)],
    )
    return SimWorkload(
        workload=wl,
        arrival_us=round(arrival_s * US_PER_S),
        runtime_us=round(hours * H),
        wl_class=name,
        checkpoint_interval_us=H // 3,  # every 20 minutes
    )


def cluster(nodes: int, workloads: list[SimWorkload]) -> failure_cluster.FailureCluster:
    """One TAS rack and one plain rack of ``nodes`` nodes each, with these workloads."""
    c = failure_cluster.build(blocks=2, racks=1, nodes=nodes, tas_blocks=1, days=0.01)
    c.scenario.workloads = workloads
    return c


def check_books(st) -> None:
    """Every GPU-µs held is useful, lost or stranded: nothing counted twice or missed."""
    assert st.held == st.useful + st.lost + st.stranded


# -- the failure model ----------------------------------------------------------------


def test_meta_rate_reproduces_llama3_interruptions_at_its_scale():
    nodes = {f"n{i}": 8 for i in range(2048)}  # 16,384 GPUs, 54 days
    outages = FailureModel(seed=1).schedule(nodes, 54 * 24 * H)
    assert 350 < len(outages) < 490  # 419 measured; Poisson noise
    assert META_RATE_PER_GPU_HOUR * 16_384 == pytest.approx(1 / 3.09, rel=0.01)  # ~1 per 3 h


def test_schedule_is_deterministic_repairs_take_about_two_hours_and_never_overlap():
    nodes = {f"n{i}": 8 for i in range(64)}
    model = FailureModel(rate_per_gpu_hour=1e-3, seed=7, flaky_node="n3")
    outages = model.schedule(nodes, 30 * 24 * H)
    assert outages == model.schedule(nodes, 30 * 24 * H)
    assert all(1.5 * H <= o.up_us - o.down_us <= 2.5 * H for o in outages)
    by_node: dict[str, list[Outage]] = {}
    for o in outages:
        by_node.setdefault(o.node, []).append(o)
    for node_outages in by_node.values():
        for a, b in zip(node_outages, node_outages[1:], strict=False):
            assert b.down_us >= a.up_us  # a node that is down does not fail again
    flaky = [o for o in outages if o.flaky]
    assert len(flaky) > 80 and all(o.node == "n3" for o in flaky)  # every ~6 h for 30 days


def test_unknown_flaky_node_is_refused():
    with pytest.raises(ValueError, match="flaky node nope"):
        FailureModel(flaky_node="nope").schedule({"n0": 8}, H)


# -- the policies ---------------------------------------------------------------------


def flaky_run(policy: failure_policy.FailurePolicy):
    """Plain pool of 2 nodes: A lands on b1-r0-n0 (fullest-first, ties by name), B on
    b1-r0-n1 for 5 h; b1-r0-n0 fails at 1 h and again at 4 h, 2 h each time."""
    a, b = job("a", PLAIN), job("b", PLAIN, arrival_s=1, hours=5)
    flaky = "b1-r0-n0"
    outages = [Outage(flaky, 1 * H, 3 * H, True), Outage(flaky, 4 * H, 6 * H, True)]
    run = FailureRun(
        cluster(2, [a, b]), outages, policy, flaky_node=flaky, flaky_window_seconds=DAY
    )
    return run.run()


def test_flaky_node_is_avoided_under_ours_and_infra_evictions_do_not_count():
    st = flaky_run(failure_policy.ours(requeue=FAST_LIMIT, **SLOW_START))  # a day's memory
    assert st.evictions == {"NodeFailures": 1}
    assert st.flaky_readmissions == 0  # it waited for B's node, not the repaired one
    assert st.deactivated == 0 and st.finished == 2
    assert st.interruptions == 1 and len(st.recoveries_us) == 1
    check_books(st)


def test_memory_shorter_than_the_repair_does_not_keep_the_workload_off_the_node():
    st = flaky_run(failure_policy.ours_avoid(3600.0, requeue=FAST_LIMIT, **SLOW_START))
    assert st.evictions == {"NodeFailures": 2}  # back on the node at 3 h, broken at 4 h
    assert st.flaky_readmissions_day == 1
    assert st.deactivated == 0 and st.finished == 2
    check_books(st)


def test_kueue_readmits_onto_the_flaky_node_and_deactivates_after_its_backoff_limit():
    st = flaky_run(failure_policy.kueue(requeue=FAST_LIMIT, **SLOW_START))
    # recoveryTimeout (30 min) evicts it twice with PodsReadyTimeout: past backoffLimitCount 1
    assert st.evictions == {"PodsReadyTimeout": 2}
    assert st.flaky_readmissions_in_window == 1  # back on the node at its repair, 3 h
    assert st.interruptions == 2
    assert st.deactivated == 1 and st.deactivated_after_infra == 1 and st.finished == 1
    assert st.never_recovered == 1 and st.stranded > 0
    check_books(st)


def runs_with_each_node_failing(nodes: int, workloads: list[SimWorkload], policy):
    """The same workloads once per TAS node, that node failing at 1 h for 2 h: the
    runs where a workload was hit (placement decides which)."""
    hit = []
    for n in range(nodes):
        outage = Outage(f"b0-r0-n{n}", 1 * H, 3 * H)
        st = FailureRun(cluster(nodes, workloads), [outage], policy).run()
        check_books(st)
        if st.interruptions:
            hit.append(st)
    assert hit
    return hit


@pytest.mark.parametrize("make", [failure_policy.ours, failure_policy.kueue])
def test_tas_gang_is_hot_swapped_onto_a_spare_node_of_its_rack(make):
    gang = job("gang", TAS, pods=2)
    for st in runs_with_each_node_failing(3, [gang], make()):
        assert st.hot_swaps == 1 and st.evictions == {}
        assert st.recoveries_us == [30 * US_PER_S]  # detected after 30 s NotReady, swapped
        assert st.broken_held == 16 * 30 * US_PER_S


def test_tas_gang_without_a_spare_is_evicted_at_once_under_ours_held_30_min_under_kueue():
    work = [job("a", TAS), job("b", TAS, hours=20)]
    for st in runs_with_each_node_failing(2, work, failure_policy.ours()):
        assert st.evictions == {"NodeFailures": 1} and st.hot_swaps == 0
        assert st.broken_held == 8 * 30 * US_PER_S
    for st in runs_with_each_node_failing(2, work, failure_policy.kueue()):
        assert st.evictions == {"PodsReadyTimeout": 1}
        assert st.broken_held == 8 * 1800 * US_PER_S


def test_a_random_cluster_balances_its_books_under_both_policies():
    c = failure_cluster.build(blocks=2, racks=2, nodes=4, tas_blocks=1, days=2, seed=3)
    outages = FailureModel(rate_per_gpu_hour=2e-3, seed=5, flaky_node="b0-r0-n0").schedule(
        c.node_gpus, 10 * 24 * H
    )
    policies = (
        failure_policy.ours(),
        failure_policy.kueue(),
        failure_policy.ours_hold(),
        failure_policy.ours_quarantine(),
    )
    for policy in policies:
        st = FailureRun(c, outages, policy, flaky_node="b0-r0-n0").run()  # c is not spent
        assert st.interruptions > 0
        assert st.finished + st.deactivated == st.workloads
        check_books(st)
        if policy.name in ("ours", "oursHoldForSpare"):  # cordons can starve a tiny pool's gangs
            assert st.deactivated_after_infra == 0
            assert st.flaky_readmissions_in_window == 0


def test_hold_variant_swaps_when_a_node_frees_within_the_hold_else_evicts_uncounted():
    work = [job("a", TAS), job("b", TAS, hours=1.25)]  # b ends at 1 h 15, inside a's hold
    swapped = evicted = 0
    for st in runs_with_each_node_failing(2, work, failure_policy.ours_hold()):
        assert "PodsReadyTimeout" not in st.evictions  # the hold's end is not counted
        if st.hot_swaps:
            swapped += 1
            (rec,) = st.recoveries_us  # a's node failed: b's node frees at 1 h 15 (+ a cycle)
            assert 15 * 60 * US_PER_S <= rec <= 15 * 60 * US_PER_S + 10_000
        else:
            evicted += 1  # b's node failed: nothing frees before b's hold ends
            assert st.evictions == {"NodeFailures": 1}
            assert st.broken_held == 8 * 1800 * US_PER_S
    assert swapped == 1 and evicted == 1


def test_quarantine_variant_cordons_a_node_that_failed_two_distinct_workloads():
    """n0 breaks a at 1 h; c lands on it once it is back at 3 h; it breaks c at 4 h."""
    work = [
        job("a", PLAIN),
        job("b", PLAIN, arrival_s=1, hours=0.5),
        job("c", PLAIN, arrival_s=2 * 3600),
    ]
    x = "b1-r0-n0"
    outages = [Outage(x, 1 * H, 3 * H), Outage(x, 4 * H, 6 * H)]
    for after, cordoned in ((2, True), (3, False)):
        policy = failure_policy.ours_quarantine(flaky_workloads=after, **SLOW_START)
        run = FailureRun(cluster(2, work), outages, policy)
        st = run.run()
        assert st.interruptions == 2 and st.quarantined == st.flaky_reports == int(cordoned)
        assert (x in run.cordoned) == cordoned and (x in run.pool.cordoned) == cordoned
        check_books(st)
