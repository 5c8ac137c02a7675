"""The pod-group integration's pure helpers: Workload composition, ungate and finalizer
patches (admission.integrations.kinds.pod)."""

from __future__ import annotations

import jsonpatch
import pytest

from admission.integrations.framework.podset_info import flavor_info
from admission.integrations.kinds import pod as pg
from queues.model import PriorityClass, ResourceFlavor, Toleration


def pod(name: str, *, cpu: str = "1", total: str | None = "2", **spec: object) -> dict:
    annotations = {pg.GROUP_TOTAL_COUNT_ANNOTATION: total} if total is not None else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"kueue.x-k8s.io/queue-name": "lq", pg.GROUP_NAME_LABEL: "g"},
            "annotations": annotations,
            "finalizers": ["other", pg.POD_FINALIZER],
        },
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
            "schedulingGates": [{"name": "other"}, {"name": pg.ADMISSION_GATE}],
            **spec,
        },
    }


def compose(pods: list[dict], **kw: object) -> dict:
    return pg.workload_for_group(
        "ns/g",
        pods,
        workload_priority_classes=kw.get("wpcs", {}),  # type: ignore[arg-type]
        priority_classes={},
    )


def test_alike_pods_make_one_main_podset_named_after_the_group() -> None:
    wl = compose([pod("b"), pod("a")])
    assert wl["metadata"]["name"] == "g" and wl["metadata"]["namespace"] == "ns"
    assert wl["metadata"]["annotations"] == {pg.IS_GROUP_WORKLOAD_ANNOTATION: "true"}
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
    assert "schedulingGates" not in wl["spec"]["podSets"][0]["template"]["spec"]
    assert wl["spec"]["queueName"] == "lq" and wl["spec"]["priority"] == 0


def test_pods_without_a_queue_name_make_a_workload_without_one() -> None:
    """manageJobsWithoutQueueName: the Workload leaves ``queueName`` out (Kueue's
    omitempty) rather than "", which the CRD's name pattern refuses."""
    pods = [pod("a"), pod("b")]
    for p in pods:
        del p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert "queueName" not in compose(pods)["spec"]


def test_pods_of_two_shapes_make_two_podsets() -> None:
    wl = compose([pod("a"), pod("b"), pod("c", cpu="3")])
    counts = sorted(p["count"] for p in wl["spec"]["podSets"])
    assert counts == [1, 2]
    assert "main" not in {p["name"] for p in wl["spec"]["podSets"]}


def test_the_priority_class_label_sets_the_priority_like_for_jobs() -> None:
    p = pod("a")
    p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    wl = compose([p], wpcs={"high": PriorityClass(name="high", value=7)})
    assert wl["spec"]["priority"] == 7
    assert wl["spec"]["priorityClassRef"]["name"] == "high"
    with pytest.raises(pg.PodGroupError, match="pod ns/a.*high"):
        compose([p])


def test_a_bad_total_count_names_the_pod_and_the_annotation() -> None:
    with pytest.raises(pg.PodGroupError, match="pod ns/a.*pod-group-total-count.*integer"):
        pg.total_count(pod("a", total="two"))
    with pytest.raises(pg.PodGroupError, match="required"):
        pg.total_count(pod("a", total=None))
    with pytest.raises(pg.PodGroupError, match="at least 1"):
        pg.total_count(pod("a", total="0"))


def test_the_ungate_patch_removes_only_our_gate_and_adds_flavor_constraints() -> None:
    p = pod("a", nodeSelector={"zone": "z1"}, tolerations=[{"key": "t", "operator": "Exists"}])
    flv = ResourceFlavor(
        name="f",
        node_labels={"example.com/pool": "gpu", "zone": "z2"},
        tolerations=[Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
    )
    patch, kept = pg.ungate_patch(p, flavor_info("main", 1, [flv]))
    assert patch is not None and kept == ["zone"]
    out = jsonpatch.apply_patch(p, patch)
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]
    assert out["spec"]["nodeSelector"] == {"zone": "z1", "example.com/pool": "gpu"}  # kept z1
    assert out["spec"]["tolerations"][-1] == {
        "key": "gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert pg.ungate_patch(out, flavor_info("main", 1, [flv])) == (None, [])  # already ungated


def test_the_ungate_patch_creates_missing_fields() -> None:
    flv = ResourceFlavor(name="f", node_labels={"a/b": "c"})
    out = jsonpatch.apply_patch(pod("a"), pg.ungate_patch(pod("a"), flavor_info("m", 1, [flv]))[0])
    assert out["spec"]["nodeSelector"] == {"a/b": "c"}
    assert "tolerations" not in out["spec"]


def test_the_finalizer_patch_removes_only_ours() -> None:
    p = pod("a")
    out = jsonpatch.apply_patch(p, pg.unfinalize_patch(p))
    assert out["metadata"]["finalizers"] == ["other"]
    assert pg.unfinalize_patch(out) is None


def test_group_keys_and_group_workloads_are_recognised() -> None:
    assert pg.group_key(pod("a")) == "ns/g"
    assert pg.group_key({"metadata": {"name": "x", "namespace": "ns"}}) is None
    assert pg.is_group_workload(compose([pod("a")]))
    assert not pg.is_group_workload({"metadata": {"name": "w"}})
