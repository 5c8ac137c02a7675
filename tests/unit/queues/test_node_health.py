"""Node-failure rules: when a node counts as failed, bad-node memory, flaky nodes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from queues.api.parse import parse_model
from queues.model import Taint, Toleration
from queues.node_health import (
    AVOID_NODES_ANNOTATION,
    HOSTNAME,
    AvoidedNodes,
    FlakyNodes,
    NodeFailurePolicy,
    NodeState,
    avoid_in_start_patch,
    counts_toward_backoff,
    node_failure,
    reachable,
    untolerated,
    with_avoided_nodes,
)

POLICY = NodeFailurePolicy()
T0 = 1_800_000_000.0


def node(ready: str = "True", *, since: str = "2027-01-15T08:00:00Z", taints=()) -> dict:
    return {
        "spec": {"taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]},
    }


def test_a_deleted_node_has_failed() -> None:
    assert node_failure(None, name="n1", now=T0, policy=POLICY) == "node n1 was deleted"


def test_not_ready_counts_only_after_the_delay() -> None:
    state = NodeState.of("n1", node("Unknown"))
    assert state.since is not None
    assert node_failure(state, name="n1", now=state.since + 29, policy=POLICY) is None
    why = node_failure(state, name="n1", now=state.since + 30, policy=POLICY)
    assert why == "node n1 has been NotReady for 30s"
    short = NodeFailurePolicy(not_ready_delay=5)
    assert node_failure(state, name="n1", now=state.since + 6, policy=short) is not None
    assert not reachable(state) and reachable(NodeState.of("n1", node()))


def test_an_untolerated_scheduling_taint_is_a_failure_and_a_tolerated_one_is_not() -> None:
    gpu_bad = {"key": "nvidia.com/gpu-unhealthy", "value": "true", "effect": "NoExecute"}
    prefer = {"key": "maintenance", "effect": "PreferNoSchedule"}
    state = NodeState.of("n1", node(taints=[gpu_bad, prefer]))
    why = node_failure(state, name="n1", now=T0, policy=POLICY)
    assert why == "node n1 has the untolerated taint nvidia.com/gpu-unhealthy=true:NoExecute"
    tolerated = [Toleration("nvidia.com/gpu-unhealthy", "Exists")]
    assert node_failure(state, name="n1", now=T0, policy=POLICY, tolerations=tolerated) is None
    off = NodeFailurePolicy(taints=False)
    assert node_failure(state, name="n1", now=T0, policy=off) is None


def test_only_scheduling_taints_count() -> None:
    t = Taint("k", "v", "NoSchedule")
    assert untolerated([t, Taint("x", "", "PreferNoSchedule")], []) == [t]
    assert untolerated([t], [Toleration("k", "Equal", "v")]) == []
    assert untolerated([t], [Toleration("k", "Equal", "w")]) == [t]


def test_only_node_failures_spare_the_backoff() -> None:
    assert not counts_toward_backoff("NodeFailures")
    assert counts_toward_backoff("PodsReadyTimeout")
    assert counts_toward_backoff("Preempted")


def test_memory_round_trips_through_the_annotation_and_expires() -> None:
    mem = AvoidedNodes().remember(["n2", "n1"], now=T0, duration=600)
    text = mem.render()
    back = AvoidedNodes.of({AVOID_NODES_ANNOTATION: text})
    assert back.active(T0) == ("n1", "n2")
    assert back.active(T0 + 601) == ()
    later = back.remember(["n3"], now=T0 + 601, duration=600)
    assert set(later.until) == {"n3"}  # the expired entries are dropped
    assert AvoidedNodes.parse("n1=garbage,=2027-01-01T00:00:00Z,n2").until == {}


def requirement(aff: dict | None) -> list[list[dict]]:
    terms = (
        ((aff or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    return [t.get("matchExpressions") or [] for t in terms]  # fmt: skip


def test_avoided_nodes_are_anded_into_every_term_and_replaced_not_stacked() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    pool = {"key": "pool", "operator": "In", "values": ["gpu"]}
    base = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [pool]}]
            }
        },
        "podAntiAffinity": {"x": 1},
    }
    once = with_avoided_nodes(base, ["n1"])
    not_in = {"key": HOSTNAME, "operator": "NotIn", "values": ["n1"]}
    assert requirement(once) == [[zone, not_in], [pool, not_in]]
    assert once is not None and once["podAntiAffinity"] == {"x": 1}
    twice = with_avoided_nodes(once, ["n1", "n2"], drop=["n1"])
    both = {"key": HOSTNAME, "operator": "NotIn", "values": ["n1", "n2"]}
    assert requirement(twice) == [[zone, both], [pool, both]]
    cleared = with_avoided_nodes(twice, [], drop=["n1", "n2"])
    assert cleared == base
    assert with_avoided_nodes(None, []) is None
    assert requirement(with_avoided_nodes(None, ["n1"])) == [[not_in]]


@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
)
def test_avoiding_is_idempotent_and_never_drops_a_users_requirement(
    first: list[str], second: list[str]
) -> None:
    user = {"key": HOSTNAME, "operator": "NotIn", "values": ["z"]}  # the user's own exclusion
    base = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [user]}]}}}  # fmt: skip
    a = with_avoided_nodes(base, first)
    b = with_avoided_nodes(a, second, drop=first)
    assert with_avoided_nodes(b, second, drop=first) == b
    for term in requirement(b):
        assert user in term
        ours = [e for e in term if e is not user and e["values"] != ["z"]]
        assert [set(e["values"]) for e in ours] == ([set(second)] if second else [])


def test_a_node_failing_distinct_workloads_in_the_window_is_reported_once() -> None:
    flaky = FlakyNodes(workloads=3, window=3600)
    assert flaky.record("n1", "a", T0) is None
    assert flaky.record("n1", "a", T0 + 1) is None  # the same workload twice: one
    assert flaky.record("n1", "b", T0 + 2) is None
    assert flaky.record("n1", "c", T0 + 3) == 3
    assert flaky.record("n1", "d", T0 + 4) is None  # reported once per window
    assert flaky.record("n2", "a", T0) is None
    assert flaky.record("n2", "b", T0 + 4000) is None  # "a" left the window
    assert FlakyNodes(workloads=0, window=1).record("n", "a", T0) is None


PODSET = "kueue.x-k8s.io/podset"


def template_affinity(t: dict) -> list[list[dict]]:
    return requirement(t["spec"].get("affinity"))


def test_a_start_patch_excludes_the_remembered_nodes_and_a_restart_replaces_them() -> None:
    user_term = {"key": "zone", "operator": "In", "values": ["a"]}
    job = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [user_term]}]}}}}}}}  # fmt: skip
    patch = {"spec": {"suspend": False, "template": {"metadata": {"labels": {PODSET: "main"}}}}}
    out = avoid_in_start_patch(job, patch, ["n1"], podset_label=PODSET)
    tmpl = out["spec"]["template"]
    not_n1 = {"key": HOSTNAME, "operator": "NotIn", "values": ["n1"]}
    assert template_affinity(tmpl) == [[user_term, not_n1]]
    assert tmpl["metadata"]["annotations"] == {AVOID_NODES_ANNOTATION: "n1"}
    # the Job as stored after that start; the next start avoids n1 and n2, not n1 twice
    job["spec"]["template"] = {**tmpl, "spec": {"affinity": tmpl["spec"]["affinity"]}}
    patch = {"spec": {"suspend": False, "template": {"metadata": {"labels": {PODSET: "main"}}}}}
    again = avoid_in_start_patch(job, patch, ["n1", "n2"], podset_label=PODSET)["spec"]["template"]
    both = {"key": HOSTNAME, "operator": "NotIn", "values": ["n1", "n2"]}
    assert template_affinity(again) == [[user_term, both]]
    # the memory expired: the user's affinity is back as it was
    job["spec"]["template"] = {**again, "spec": {"affinity": again["spec"]["affinity"]}}
    patch = {"spec": {"suspend": False, "template": {"metadata": {"labels": {PODSET: "main"}}}}}
    done = avoid_in_start_patch(job, patch, [], podset_label=PODSET)["spec"]["template"]
    assert template_affinity(done) == [[user_term]]
    assert done["metadata"]["annotations"] == {AVOID_NODES_ANNOTATION: None}


def test_every_pod_template_of_a_list_patch_gets_the_exclusion() -> None:
    rj = [
        {"name": w, "template": {"spec": {"template": {"metadata": {"labels": {PODSET: w}},
                                                       "spec": {}}}}}
        for w in ("leader", "workers")
    ]  # fmt: skip
    patch = {"spec": {"suspend": False, "replicatedJobs": rj}}
    out = avoid_in_start_patch({"spec": {}}, patch, ["n3"], podset_label=PODSET)
    for r in out["spec"]["replicatedJobs"]:
        assert template_affinity(r["template"]["spec"]["template"]) == [
            [{"key": HOSTNAME, "operator": "NotIn", "values": ["n3"]}]
        ]
    untouched = {"spec": {"suspend": False}}
    assert avoid_in_start_patch({}, untouched, ["n3"], podset_label=PODSET) == untouched


def wire_workload(**meta: object) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                     **meta},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]},
    }  # fmt: skip


def evicted(wl: dict, reason: str) -> dict:
    cond = {"type": "Evicted", "status": "True", "reason": reason, "message": "",
            "lastTransitionTime": "2026-01-01T01:00:00Z"}  # fmt: skip
    return {**wl, "status": {"conditions": [cond]}}


def test_a_node_failure_keeps_the_workloads_place_in_the_queue() -> None:
    created = parse_model(wire_workload()).queue_order_time
    assert parse_model(evicted(wire_workload(), "NodeFailures")).queue_order_time == created
    assert parse_model(evicted(wire_workload(), "PodsReadyTimeout")).queue_order_time > created


def test_the_remembered_nodes_become_a_required_hostname_exclusion_of_every_pod_set() -> None:
    mem = {AVOID_NODES_ANNOTATION: "n1=2030-01-01T00:00:00Z,n2=2030-01-01T00:00:00Z"}
    wl = parse_model(wire_workload(annotations=mem))
    (ps,) = wl.pod_sets
    assert [[(e.key, e.operator, e.values) for e in t.match_expressions]
            for t in ps.required_affinity] == [[(HOSTNAME, "NotIn", ("n1", "n2"))]]  # fmt: skip
    assert parse_model(wire_workload()).pod_sets[0].required_affinity == []
