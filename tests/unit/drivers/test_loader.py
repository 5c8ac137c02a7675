"""admission.drivers.loader: YAML files and directories into Inputs, with clear LoadErrors."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.drivers.documents import LoadError
from admission.drivers.inputs import Inputs, merge
from admission.drivers.loader import load_paths
from queues import model as m

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
"""
CLUSTER_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 10}]
"""
LOCAL_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team-a}
spec: {clusterQueue: cq}
"""
WPC = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""
POD_PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 5
"""


def workload_doc(name: str, *, namespace: str = "team-b", cpu: str = "1", status: str = "") -> str:
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: c
          resources: {{requests: {{cpu: "{cpu}"}}}}
{status}"""


def job_doc(name: str, *, priority_class: str = "high") -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team-a
  uid: 11111111-2222-3333-4444-555555555555
  labels:
    kueue.x-k8s.io/queue-name: lq
    kueue.x-k8s.io/priority-class: {priority_class}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        resources: {{requests: {{cpu: "2"}}}}
"""


def write(path: Path, *docs: str) -> str:
    path.write_text("---".join(docs))
    return str(path)


def load_error(paths: list[str]) -> LoadError:
    with pytest.raises(LoadError) as info:
        load_paths(paths)
    return info.value


# ------------------------------------------------------------------ loading


def test_multi_document_file_fills_every_kind(tmp_path: Path) -> None:
    file = write(
        tmp_path / "all.yaml",
        FLAVOR,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        WPC,
        POD_PRIORITY_CLASS,
        workload_doc("w1"),
        "\n",  # an empty document is skipped
    )
    inputs = load_paths([file])
    assert list(inputs.flavors) == ["default"]
    assert list(inputs.cluster_queues) == ["cq"]
    assert list(inputs.local_queues) == ["team-a/lq"]
    assert inputs.workload_priority_classes["high"].value == 1000
    assert inputs.priority_classes["high"] == m.PriorityClass(
        name="high", value=5, kind="PriorityClass"
    )
    assert [w.key for w in inputs.workloads] == ["team-b/w1"]
    assert inputs.workloads[0].pod_sets[0].requests == {"cpu": 1000}


def test_namespaces_are_derived_when_none_given(tmp_path: Path) -> None:
    inputs = load_paths([write(tmp_path / "a.yaml", LOCAL_QUEUE, workload_doc("w1"))])
    assert not inputs.namespaces_given
    assert inputs.namespaces == {
        "team-a": m.Namespace("team-a", {"kubernetes.io/metadata.name": "team-a"}),
        "team-b": m.Namespace("team-b", {"kubernetes.io/metadata.name": "team-b"}),
    }


def test_given_namespaces_are_the_only_ones(tmp_path: Path) -> None:
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {tier: gold}}\n"
    inputs = load_paths([write(tmp_path / "a.yaml", ns, LOCAL_QUEUE, workload_doc("w1"))])
    assert inputs.namespaces_given
    assert list(inputs.namespaces) == ["team-a"]
    assert inputs.namespaces["team-a"].labels == {
        "tier": "gold",
        "kubernetes.io/metadata.name": "team-a",
    }


def test_directory_loads_yaml_and_json_files_sorted_and_not_recursively(tmp_path: Path) -> None:
    write(tmp_path / "b.yml", workload_doc("second"))
    write(tmp_path / "a.yaml", workload_doc("first"))
    (tmp_path / "notes.txt").write_text("not yaml: [")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "c.yaml", workload_doc("nested"))
    inputs = load_paths([str(tmp_path)])
    assert [w.name for w in inputs.workloads] == ["first", "second"]


def test_jobs_see_priority_classes_from_later_files(tmp_path: Path) -> None:
    jobs = write(tmp_path / "a-jobs.yaml", job_doc("train"))
    classes = write(tmp_path / "b-classes.yaml", WPC, LOCAL_QUEUE)
    inputs = load_paths([jobs, classes])
    (wl,) = inputs.workloads
    assert wl.name.startswith("job-train-")
    assert (wl.namespace, wl.queue_name, wl.priority, wl.priority_class) == (
        "team-a",
        "lq",
        1000,
        "high",
    )
    assert wl.pod_sets[0].count == 2


def test_workloads_keep_document_order_across_jobs(tmp_path: Path) -> None:
    file = write(tmp_path / "a.yaml", workload_doc("w1"), job_doc("train"), workload_doc("w2"), WPC)
    names = [w.name for w in load_paths([file]).workloads]
    assert names[0] == "w1" and names[1].startswith("job-train-") and names[2] == "w2"


def test_finished_workloads_are_dropped(tmp_path: Path) -> None:
    finished = "status:\n  conditions:\n  - {type: Finished, status: 'True', reason: Succeeded}\n"
    inputs = load_paths(
        [write(tmp_path / "a.yaml", workload_doc("done", status=finished), workload_doc("w"))]
    )
    assert [w.name for w in inputs.workloads] == ["w"]
    assert inputs.finished_workloads == {"team-b/done"}


def test_inactive_workloads_are_kept_inactive(tmp_path: Path) -> None:
    doc = workload_doc("w").replace("  queueName: lq", "  queueName: lq\n  active: false")
    (wl,) = load_paths([write(tmp_path / "a.yaml", doc)]).workloads
    assert not wl.active


def test_v1beta1_objects_are_accepted(tmp_path: Path) -> None:
    doc = CLUSTER_QUEUE.replace("v1beta2", "v1beta1").replace(
        "namespaceSelector: {}", "cohort: pool"
    )
    inputs = load_paths([write(tmp_path / "a.yaml", doc)])
    assert inputs.cluster_queues["cq"].cohort == "pool"


# ------------------------------------------------------------------ errors


def test_error_names_file_document_object_and_field(tmp_path: Path) -> None:
    bad = CLUSTER_QUEUE.replace("nominalQuota: 10", "nominalQuotaa: 10")
    file = write(tmp_path / "queues.yaml", FLAVOR, "\n", bad)
    err = load_error([file])
    assert str(err) == (
        f"{file}: document 2: ClusterQueue cq: "
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuotaa: unknown field"
    )
    assert (err.file, err.document, err.kind, err.name) == (file, 2, "ClusterQueue", "cq")
    assert err.path == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuotaa"
    assert "\n" not in str(err)


def test_yaml_syntax_error(tmp_path: Path) -> None:
    file = write(tmp_path / "a.yaml", FLAVOR, "\nkind: [unclosed\n")
    err = load_error([file])
    assert err.document == 1
    assert str(err).startswith(f"{file}: document 1: invalid YAML")
    assert "line" in str(err)


def test_non_mapping_document(tmp_path: Path) -> None:
    err = load_error([write(tmp_path / "a.yaml", "- a\n- b\n")])
    assert str(err).startswith(f"{tmp_path / 'a.yaml'}: document 0: is not a mapping (got a list)")


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        ("kind: ResourceFlavor\nmetadata: {name: x}\n", "apiVersion", "Required value"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "kind", "Required value"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {}\n",
            "metadata.name",
            "Required value",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {}\n",
            "metadata.name",
            "Required value",
        ),
        (
            "apiVersion: batch/v2\nkind: Job\nmetadata: {name: x}\n",
            "apiVersion",
            'Unsupported value: "batch/v2"',
        ),
    ],
)
def test_missing_identity_fields(tmp_path: Path, doc: str, path: str, message: str) -> None:
    err = load_error([write(tmp_path / "a.yaml", doc)])
    assert err.path == path
    assert message in str(err)


def test_another_version_of_a_kind_read_is_an_error_not_a_skip(tmp_path: Path) -> None:
    doc = CLUSTER_QUEUE.replace("v1beta2", "v1alpha1")
    err = load_error([write(tmp_path / "a.yaml", doc)])
    assert err.path == "apiVersion" and err.kind == "ClusterQueue"
    assert '"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"' in str(err)


def test_duplicate_objects_across_files(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", CLUSTER_QUEUE)
    second = write(tmp_path / "b.yaml", FLAVOR, CLUSTER_QUEUE.replace("v1beta2", "v1beta1"))
    err = load_error([first, second])
    assert str(err) == (
        f"{second}: document 1: ClusterQueue cq: metadata.name: duplicate ClusterQueue: "
        f"already defined in {first} document 0"
    )


def test_same_name_in_other_namespace_or_kind_is_not_a_duplicate(tmp_path: Path) -> None:
    other_ns = LOCAL_QUEUE.replace("team-a", "team-c")
    file = write(tmp_path / "a.yaml", LOCAL_QUEUE, other_ns, WPC, POD_PRIORITY_CLASS)
    inputs = load_paths([file])
    assert sorted(inputs.local_queues) == ["team-a/lq", "team-c/lq"]


def test_duplicate_workloads_and_jobs(tmp_path: Path) -> None:
    err = load_error([write(tmp_path / "a.yaml", workload_doc("w"), workload_doc("w"))])
    assert "duplicate Workload" in str(err) and err.document == 1
    err = load_error([write(tmp_path / "b.yaml", WPC, job_doc("j"), job_doc("j"))])
    assert "Job team-a/j" in str(err) and "duplicate Job" in str(err)


def test_bad_job_is_a_load_error(tmp_path: Path) -> None:
    err = load_error([write(tmp_path / "a.yaml", job_doc("j", priority_class="missing"))])
    assert err.kind == "Job" and err.name == "team-a/j"
    assert str(err).startswith(f"{tmp_path / 'a.yaml'}: document 0: Job team-a/j: ")


def test_missing_path(tmp_path: Path) -> None:
    err = load_error([str(tmp_path / "nope.yaml")])
    assert str(err) == f"{tmp_path / 'nope.yaml'}: no such file or directory"


# ------------------------------------------------------------------ merge


def test_merge_replaces_and_adds_without_touching_inputs(tmp_path: Path) -> None:
    base = load_paths(
        [
            write(
                tmp_path / "base.yaml",
                FLAVOR,
                CLUSTER_QUEUE,
                LOCAL_QUEUE,
                workload_doc("w1"),
                workload_doc("w2"),
            )
        ]
    )
    bigger = CLUSTER_QUEUE.replace("nominalQuota: 10", "nominalQuota: 20")
    overlay = load_paths(
        [write(tmp_path / "over.yaml", bigger, workload_doc("w2", cpu="3"), workload_doc("w3"))]
    )
    merged = merge(base, overlay)
    assert (
        merged.cluster_queues["cq"].resource_groups[0].flavors[0].resources["cpu"].nominal == 20_000
    )
    assert [w.name for w in merged.workloads] == ["w1", "w2", "w3"]
    assert merged.workloads[1].pod_sets[0].requests == {"cpu": 3000}
    assert list(merged.flavors) == ["default"]
    assert (
        base.cluster_queues["cq"].resource_groups[0].flavors[0].resources["cpu"].nominal == 10_000
    )
    assert len(base.workloads) == 2


def test_merge_removes_workloads_the_overlay_finishes(tmp_path: Path) -> None:
    base = load_paths([write(tmp_path / "base.yaml", workload_doc("w1"), workload_doc("w2"))])
    finished = "status:\n  conditions:\n  - {type: Finished, status: 'True'}\n"
    overlay = load_paths([write(tmp_path / "over.yaml", workload_doc("w1", status=finished))])
    assert [w.name for w in merge(base, overlay).workloads] == ["w2"]


def test_merge_namespaces(tmp_path: Path) -> None:
    base = load_paths([write(tmp_path / "base.yaml", workload_doc("w1", namespace="a"))])
    overlay = load_paths([write(tmp_path / "over.yaml", workload_doc("w2", namespace="b"))])
    merged = merge(base, overlay)
    assert not merged.namespaces_given and sorted(merged.namespaces) == ["a", "b"]
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {x: y}}\n"
    explicit = load_paths([write(tmp_path / "ns.yaml", ns)])
    merged = merge(overlay, explicit)
    assert merged.namespaces_given and list(merged.namespaces) == ["a"]
    assert merged.namespaces["a"].labels["x"] == "y"


def test_empty_inputs_merge_to_empty() -> None:
    merged = merge(Inputs(), Inputs())
    assert merged == Inputs()


# -- the event-level fast path gives what yaml.safe_load_all gives ---------------------

FAST_PATH_SAMPLES = [
    "a: 1\nb: '1'\nc: 1.5\nd: true\ne: null\nf: ~\ng: 2024-01-02T03:04:05Z\nh: [1, x, '']\n",
    "---\n---\nk: v\n---\n",
    "l:\n- 1\n- {a: [b, {c: d}]}\n",
    "base: &b {x: 1}\nuse: *b\n",  # anchors: full loader
    "m:\n  <<: {a: 1}\n  b: 2\n",  # merge key: full loader
    "t: !!str 12\n",  # explicit tag: full loader
    'q: "0x1F"\np: 0x1F\nlong: |\n  two\n  lines\n',
    # the fast path gives two documents (and an empty one), then meets an anchor: the
    # full loader resumes at the fourth, without giving the first ones again
    "a: 1\n---\nb: 2\n---\n---\nbase: &b {x: 1}\nuse: *b\n---\nc: 3\n",
]


@pytest.mark.parametrize("text", FAST_PATH_SAMPLES)
def test_fast_yaml_path_matches_safe_load_all(text: str, tmp_path: Path) -> None:
    import yaml

    from admission.drivers.documents import _documents, _fast_documents
    from admission.drivers.loader_blocks import NotPlain

    want = list(yaml.safe_load_all(text))
    try:
        assert list(_fast_documents(text)) == want
    except NotPlain:
        pass  # falls back to the full loader, checked below
    f = tmp_path / "x.yaml"
    f.write_text(text)
    got = list(_documents(str(f)))
    assert got == [(i, d) for i, d in enumerate(want) if d is not None]


def test_a_syntax_error_after_good_documents_names_its_document(tmp_path: Path) -> None:
    """Documents are read one at a time: the fast path has given the first one when it
    meets the error; the full loader, which words the error, resumes after it (nothing
    is given twice) and names the document."""
    from admission.drivers.documents import LoadError, _documents

    f = tmp_path / "x.yaml"
    f.write_text("a: 1\n---\nb: [1, 2\n")
    got = []
    with pytest.raises(LoadError, match="invalid YAML") as err:
        for index, doc in _documents(str(f)):
            got.append((index, doc))
    assert got == [(0, {"a": 1})]
    assert err.value.document == 1


NODE = """apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  labels: {rack: r1, kubernetes.io/hostname: gpu-1}
spec:
  taints: [{key: maintenance, effect: NoSchedule}]
status:
  allocatable: {cpu: "32", nvidia.com/gpu: "8", pods: "110"}
  conditions: [{type: Ready, status: "False"}]
"""
POD = """apiVersion: v1
kind: Pod
metadata: {name: ds-1, namespace: kube-system}
spec:
  nodeName: gpu-1
  containers: [{name: c, resources: {requests: {cpu: 500m, nvidia.com/gpu: "1"}}}]
status: {phase: Running}
"""


def test_topology_nodes_and_running_pods_are_loaded(tmp_path: Path) -> None:
    topo = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
        "spec: {levels: [{nodeLabel: rack}, {nodeLabel: kubernetes.io/hostname}]}\n"
    )
    finished = POD.replace("ds-1", "done").replace("Running", "Succeeded")
    unbound = POD.replace("ds-1", "waiting").replace("  nodeName: gpu-1\n", "")
    path = tmp_path / "a.yaml"
    path.write_text("---\n".join([topo, NODE, POD, finished, unbound]))
    inputs = load_paths([str(path)])
    assert inputs.topologies["t"].levels == ("rack", "kubernetes.io/hostname")
    node = inputs.nodes["gpu-1"]
    assert node.allocatable == {"cpu": 32000, "nvidia.com/gpu": 8, "pods": 110}
    assert node.ready is False and node.taints[0].key == "maintenance"
    assert list(inputs.pods) == ["kube-system/ds-1"]  # finished and unbound pods use nothing
    assert inputs.pods["kube-system/ds-1"].requests == {"cpu": 500, "nvidia.com/gpu": 1}


def test_bad_node_allocatable_names_the_node_and_field(tmp_path: Path) -> None:
    bad = NODE.replace('pods: "110"', "pods: lots")
    err = load_error([write(tmp_path / "a.yaml", bad)])
    assert f"{tmp_path / 'a.yaml'}: document 0: Node gpu-1: status.allocatable.pods:" in str(err)


def test_a_pod_is_strictly_decoded_too(tmp_path: Path) -> None:
    bad = POD.replace("  nodeName: gpu-1\n", "  nodeName: gpu-1\n  nodeNmae: gpu-2\n")
    err = load_error([write(tmp_path / "a.yaml", bad)])
    assert (err.kind, err.name, err.path) == ("Pod", "kube-system/ds-1", "spec.nodeNmae")
