"""Which gated pod gets which topology domain (Kueue's topology ungater), and the
start/stop of a TAS podSet's template (the gate and the Workload annotation)."""

from __future__ import annotations

from typing import Any

from admission.integrations.framework.fields import apply_merge_patch
from admission.integrations.framework.podset_info import PodSetInfo, original_info, tas_info
from admission.integrations.kinds.job import JOB
from admission.integrations.kinds.jobset import JOBSET
from admission.kube.control.tas_ungate import topology_domains
from queues.api.topology_assignment import to_v1beta2
from queues.model import TopologyAssignment

HOST = "kubernetes.io/hostname"
GATE = "kueue.x-k8s.io/topology"
INDEX = "batch.kubernetes.io/job-completion-index"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
Obj = dict[str, Any]


def workload(
    domains: list[tuple[str, int]],
    *,
    request: Obj | None = None,
    name: str = "main",
    extra: list[tuple[str, list[tuple[str, int]], Obj]] = (),  # type: ignore[assignment]
) -> Obj:
    pod_sets = [(name, domains, request or {"required": "block", "podIndexLabel": INDEX})]
    pod_sets += list(extra)
    return {
        "metadata": {"name": "wl", "namespace": "ns"},
        "spec": {
            "podSets": [
                {"name": n, "count": sum(c for _, c in d), "topologyRequest": r}
                for n, d, r in pod_sets
            ]
        },
        "status": {
            "admission": {
                "podSetAssignments": [
                    {
                        "name": n,
                        "count": sum(c for _, c in d),
                        "topologyAssignment": to_v1beta2(
                            TopologyAssignment(levels=(HOST,), domains=[((h,), c) for h, c in d])
                        ),
                    }
                    for n, d, _ in pod_sets
                ]
            }
        },
    }


def pod(
    name: str,
    *,
    index: int | None = None,
    host: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
    phase: str = "Pending",
    labels: dict[str, str] | None = None,
    podset: str = "main",
    annotations: dict[str, str] | None = None,
) -> Obj:
    lab = {"kueue.x-k8s.io/podset": podset, **(labels or {})}
    if index is not None:
        lab[INDEX] = str(index)
    spec: Obj = {"nodeSelector": {"pool": "gpu"}}
    if host is None:
        spec["schedulingGates"] = [{"name": GATE}]
    else:
        spec["nodeSelector"][HOST] = host
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": lab,
            "annotations": annotations or {},
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def role(p: Any) -> str:
    return str(p["metadata"]["labels"]["kueue.x-k8s.io/podset"])


def hosts(out: dict[str, dict[str, str]]) -> dict[str, str]:
    return {k.split("/", 1)[1]: v[HOST] for k, v in out.items()}


def test_ranks_give_each_index_the_host_holding_that_place_of_the_assignment() -> None:
    wl = workload([("h0", 2), ("h1", 1), ("h2", 1)])
    pods = [pod(f"p{i}", index=i) for i in (3, 1, 0, 2)]
    assert hosts(topology_domains(wl, pods, role)) == {
        "p0": "h0", "p1": "h0", "p2": "h1", "p3": "h2"
    }  # fmt: skip


def test_without_index_labels_gated_pods_fill_the_domains_oldest_first() -> None:
    wl = workload([("h0", 2), ("h1", 1)])
    pods = [
        pod("c", created="2026-01-01T00:00:03Z"),
        pod("a", created="2026-01-01T00:00:01Z"),
        pod("b", created="2026-01-01T00:00:02Z"),
    ]
    assert hosts(topology_domains(wl, pods, role)) == {"a": "h0", "b": "h0", "c": "h1"}


def test_running_pods_keep_their_places_and_replacements_take_the_free_ones() -> None:
    """A pod that failed is replaced: the running pods' domains are full, the new pod
    gets the place the failed one left (its rank's, as its index is the same)."""
    wl = workload([("h0", 1), ("h1", 1), ("h2", 1)])
    pods = [
        pod("p0", index=0, host="h0"),
        pod("p1-old", index=1, host="h1", phase="Failed"),
        pod("p1-new", index=1),
        pod("p2", index=2, host="h2"),
    ]
    assert hosts(topology_domains(wl, pods, role)) == {"p1-new": "h1"}


def test_a_running_pod_off_its_rank_makes_ranks_unusable_and_the_rest_is_greedy() -> None:
    wl = workload([("h0", 1), ("h1", 1)])
    pods = [pod("p0", index=0, host="h1"), pod("p1", index=1)]
    # by rank p1 would go to h1, where p0 already runs: greedy gives it h0 instead
    assert hosts(topology_domains(wl, pods, role)) == {"p1": "h0"}


def test_conflicting_or_out_of_range_indexes_fall_back_to_greedy() -> None:
    wl = workload([("h0", 1), ("h1", 1)])
    twins = [pod("a", index=1, created="1"), pod("b", index=1, created="2")]
    assert hosts(topology_domains(wl, twins, role)) == {"a": "h0", "b": "h1"}
    too_big = [pod("a", index=0, created="1"), pod("b", index=7, created="2")]
    assert hosts(topology_domains(wl, too_big, role)) == {"a": "h0", "b": "h1"}


def test_pods_beyond_the_assignment_stay_gated() -> None:
    wl = workload([("h0", 1)])
    pods = [pod("a", created="1"), pod("b", created="2")]
    assert hosts(topology_domains(wl, pods, role)) == {"a": "h0"}


def test_jobset_ranks_run_across_its_jobs() -> None:
    """Kueue's SubGroup: rank = completion index + Job index × pods per Job."""
    req = {"required": "block", "podIndexLabel": INDEX, "subGroupIndexLabel": JOB_INDEX,
           "subGroupCount": 2}  # fmt: skip
    wl = workload([("h0", 1), ("h1", 1), ("h2", 1), ("h3", 1)], request=req)
    pods = [pod(f"j{j}-{i}", index=i, labels={JOB_INDEX: str(j)}) for j in (1, 0) for i in (1, 0)]
    assert hosts(topology_domains(wl, pods, role)) == {
        "j0-0": "h0", "j0-1": "h1", "j1-0": "h2", "j1-1": "h3"
    }  # fmt: skip


def test_a_podset_group_leader_takes_rank_zero_and_workers_follow() -> None:
    """LeaderWorkerSet: one group of a 1-pod leader podSet and a worker podSet; the
    workers' indexes start at 1 (after the leader)."""
    req = {"required": "block", "podIndexLabel": INDEX, "podSetGroupName": "g"}
    wl = workload(
        [("h0", 1)],
        request=req,
        name="leader",
        extra=[("workers", [("h1", 1), ("h2", 1)], req)],
    )
    pods = [
        pod("leader", index=0, podset="leader"),
        pod("w2", index=2, podset="workers"),
        pod("w1", index=1, podset="workers"),
    ]
    assert hosts(topology_domains(wl, pods, role)) == {"leader": "h0", "w1": "h1", "w2": "h2"}


def test_the_pod_index_offset_annotation_shifts_ranks() -> None:
    wl = workload([("h0", 1), ("h1", 1)])
    off = {"kueue.x-k8s.io/pod-index-offset": "10"}
    pods = [pod("b", index=11, annotations=off), pod("a", index=10, annotations=off)]
    assert hosts(topology_domains(wl, pods, role)) == {"a": "h0", "b": "h1"}


def test_pods_of_an_unhealthy_node_wait_for_its_replacement() -> None:
    wl = workload([("h0", 1), ("h1", 1)])
    pods = [pod("p0", index=0), pod("p1", index=1)]
    assert hosts(topology_domains(wl, pods, role, unhealthy={"h1"})) == {"p0": "h0"}


# -- the template: gated on start, restored on stop -----------------------------------------


def _job() -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {
                    "annotations": {"kueue.x-k8s.io/podset-required-topology": "block",
                                    "team": "a"}
                },
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }  # fmt: skip


def _pruned(value: Any) -> Any:
    """Without empty maps (the API server omits them, a merge patch leaves them)."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v != {}}
    return value


def _info(template: Obj) -> tuple[PodSetInfo, PodSetInfo]:
    pod_set = {"name": "main", "count": 2, "template": template,
               "topologyRequest": {"required": "block"}}  # fmt: skip
    started = tas_info(
        PodSetInfo(name="main", count=2, node_selector={"pool": "gpu"},
                   labels={"kueue.x-k8s.io/podset": "main"}),
        wl_name="job-j-1", pod_set=pod_set,
    )  # fmt: skip
    return started, original_info(pod_set)


def test_a_started_tas_job_template_is_gated_and_names_its_workload_and_stop_undoes_it() -> None:
    job = _job()
    started, original = _info(job["spec"]["template"])
    running = apply_merge_patch(job, JOB.run_patch(job, [started]))
    tmpl = running["spec"]["template"]
    assert tmpl["spec"]["schedulingGates"] == [{"name": GATE}]
    assert tmpl["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "block",
        "team": "a",
        "kueue.x-k8s.io/workload": "job-j-1",
    }
    running["spec"]["suspend"] = True
    restored = apply_merge_patch(running, JOB.restore_patch(running, [original]))
    assert _pruned(restored["spec"]["template"]) == job["spec"]["template"]


def test_a_started_tas_jobset_template_is_gated_and_stop_undoes_it() -> None:
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "u"},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 1,
                 "template": _job()["spec"]["template"]}}}
            ],
        },
    }  # fmt: skip
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    started, original = _info(template)
    running = apply_merge_patch(js, JOBSET.run_patch(js, [started]))
    tmpl = running["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert tmpl["spec"]["schedulingGates"] == [{"name": GATE}]
    assert tmpl["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "job-j-1"
    stopped = apply_merge_patch(running, JOBSET.stop_step(running, [original]).patch)  # type: ignore[union-attr]
    assert stopped["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] == template


def test_implicit_tas_podsets_get_the_unconstrained_annotation() -> None:
    info = tas_info(PodSetInfo(name="main", count=1), wl_name="w", pod_set={"name": "main"})
    assert info.annotations == {
        "kueue.x-k8s.io/podset-unconstrained-topology": "true",
        "kueue.x-k8s.io/workload": "w",
    }
    assert info.scheduling_gates == [GATE]


def test_a_started_tas_trainjob_gets_the_gate_through_kueues_runtime_patch() -> None:
    """TrainJob (its pods come from a JobSet its runtime makes): the topology gate and
    the Workload annotation go into Kueue's runtime patch for each replicated Job, and
    its podSets rank pods across the JobSet's Jobs like a JobSet's."""
    from admission.integrations.kinds.trainjob import TRAINJOB
    from tests.unit.integrations.test_integration_trainjob import (
        ROLES,
        RUNTIME,
        lookup_of,
        meta,
        started_templates,
    )
    from tests.unit.integrations.test_integration_trainjob import trainjob as make_trainjob

    job = make_trainjob("t", ROLES, meta("t"))
    job["spec"]["suspend"] = True
    resolved = TRAINJOB.resolve(job, lookup_of(RUNTIME))
    infos = [PodSetInfo(name=n, count=c) for n, c in ROLES]
    tas_info(
        infos[1],
        wl_name="trainjob-t-1",
        pod_set={"name": "node", "topologyRequest": {"required": "rack"}},
    )
    patch = TRAINJOB.run_patch(resolved, infos)
    started = {**job, "spec": {**job["spec"], **patch["spec"]}}
    node = started_templates(started)["node"]
    assert node["spec"]["schedulingGates"] == [{"name": GATE}]
    assert node["metadata"]["annotations"] == {"kueue.x-k8s.io/workload": "trainjob-t-1"}
    assert "schedulingGates" not in (
        started_templates(started)["dataset-initializer"].get("spec") or {}
    )
    assert TRAINJOB.sub_group_index_label == JOB_INDEX
    assert [r.sub_group_count for r in TRAINJOB.roles(resolved)] == [1, 1]
