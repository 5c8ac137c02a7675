"""The loader reads files the way kubectl does: generateName, Lists, stdin, -R, JSON, -n,
kinds it does not read skipped with a warning, and an input without objects refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from admission.drivers.documents import LoadError
from admission.drivers.loader import load_paths
from tests.unit.drivers.test_loader import (
    CLUSTER_QUEUE,
    FLAVOR,
    LOCAL_QUEUE,
    job_doc,
    workload_doc,
    write,
)

GENERATED_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  generateName: sample-job-
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        resources: {requests: {cpu: "1"}}
"""
ADMISSION_CHECK = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: prov-test}
spec: {controllerName: kueue.x-k8s.io/provisioning-request}
"""
NAME_ALPHABET = set("bcdfghjklmnpqrstvwxz2456789")


def load_error(paths: list[str], **kwargs: object) -> LoadError:
    with pytest.raises(LoadError) as info:
        load_paths(paths, **kwargs)  # type: ignore[arg-type]
    return info.value


# -- metadata.generateName ---------------------------------------------------------------


def test_generate_name_gets_prefix_and_five_api_server_characters(tmp_path: Path) -> None:
    inputs = load_paths([write(tmp_path / "job.yaml", GENERATED_JOB, LOCAL_QUEUE)])
    (generated,) = inputs.generated_names
    namespace, name = generated.name.split("/")
    assert namespace == "team-a" and name.startswith("sample-job-")
    suffix = name.removeprefix("sample-job-")
    assert len(suffix) == 5 and set(suffix) <= NAME_ALPHABET
    assert (generated.kind, generated.generate_name) == ("Job", "sample-job-")
    assert generated.where == f"{tmp_path / 'job.yaml'} document 0"
    (wl,) = inputs.workloads
    assert wl.name.startswith(f"job-{name}-")  # the Workload is named after the Job
    assert wl.pod_sets[0].count == 3


def test_generated_names_are_the_same_on_every_run(tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", GENERATED_JOB, LOCAL_QUEUE)
    first = [g.name for g in load_paths([file]).generated_names]
    unrelated = write(tmp_path / "other.yaml", FLAVOR)
    assert [g.name for g in load_paths([unrelated, file]).generated_names] == first


def test_the_same_document_twice_gets_two_names(tmp_path: Path) -> None:
    """``kubectl create -f job.yaml`` twice makes two Jobs."""
    inputs = load_paths([write(tmp_path / "jobs.yaml", GENERATED_JOB, GENERATED_JOB, LOCAL_QUEUE)])
    names = [g.name for g in inputs.generated_names]
    assert len(set(names)) == 2
    assert len(inputs.workloads) == 2


def test_a_name_wins_over_generate_name_and_long_prefixes_are_cut(tmp_path: Path) -> None:
    named = GENERATED_JOB.replace(
        "  generateName: sample-job-\n", "  name: fixed\n  generateName: x-\n"
    )
    long_prefix = GENERATED_JOB.replace("sample-job-", "p" * 70)
    inputs = load_paths([write(tmp_path / "jobs.yaml", named, long_prefix, LOCAL_QUEUE)])
    (generated,) = inputs.generated_names
    name = generated.name.split("/")[1]
    assert len(name) == 63 and name.startswith("p" * 58)
    assert any(w.name.startswith("job-fixed-") for w in inputs.workloads)


def test_generate_name_works_for_kueue_kinds(tmp_path: Path) -> None:
    doc = workload_doc("x").replace("{name: x, namespace: team-b}", "{generateName: wl-}")
    (wl,) = load_paths([write(tmp_path / "wl.yaml", doc)]).workloads
    assert wl.namespace == "default" and wl.name.startswith("wl-") and len(wl.name) == 8


# -- Lists, standard input, directories, JSON ----------------------------------------------


def test_kind_list_is_unwrapped(tmp_path: Path) -> None:
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            json.loads(json.dumps(_yaml(FLAVOR))),
            _yaml(CLUSTER_QUEUE),
            _yaml(LOCAL_QUEUE),
        ],
    }
    inputs = load_paths([write(tmp_path / "list.yaml", _dump(listed))])
    assert list(inputs.flavors) == ["default"]
    assert list(inputs.cluster_queues) == ["cq"]
    assert list(inputs.local_queues) == ["team-a/lq"]


def test_typed_list_is_unwrapped_and_errors_name_the_item(tmp_path: Path) -> None:
    bad = _yaml(CLUSTER_QUEUE)
    bad["spec"]["queueingStrategy"] = "Random"
    listed = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueueList", "items": [bad]}
    file = write(tmp_path / "list.yaml", FLAVOR, _dump(listed))
    err = load_error([file])
    assert (err.document, err.item, err.path) == (1, 0, "spec.queueingStrategy")
    assert str(err).startswith(f"{file}: document 1 items[0]: ClusterQueue cq: ")


def test_dash_reads_standard_input() -> None:
    stdin = io.StringIO("---".join([FLAVOR, CLUSTER_QUEUE]))
    inputs = load_paths(["-"], stdin=stdin)
    assert list(inputs.cluster_queues) == ["cq"]


def test_standard_input_errors_say_stdin() -> None:
    err = load_error(["-"], stdin=io.StringIO(CLUSTER_QUEUE.replace("cpu]", "cpu")))
    assert err.file == "<stdin>"


def test_recursive_reads_subdirectories_in_name_order(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", workload_doc("top"))
    (tmp_path / "b").mkdir()
    write(tmp_path / "b" / "x.yml", workload_doc("nested"))
    (tmp_path / "b" / "c").mkdir()
    write(tmp_path / "b" / "c" / "y.json", json.dumps(_yaml(workload_doc("deeper"))))
    write(tmp_path / "z.yaml", workload_doc("last"))
    flat = load_paths([str(tmp_path)])
    assert [w.name for w in flat.workloads] == ["top", "last"]
    deep = load_paths([str(tmp_path)], recursive=True)
    assert [w.name for w in deep.workloads] == [
        "top",
        "deeper",
        "nested",
        "last",
    ]  # filepath.Walk's order


def test_json_files_hold_one_object_or_a_stream(tmp_path: Path) -> None:
    one = json.dumps(_yaml(FLAVOR), indent="\t")  # tabs: valid JSON, not valid YAML
    stream = "\n".join(json.dumps(_yaml(d)) for d in (CLUSTER_QUEUE, LOCAL_QUEUE))
    write(tmp_path / "1.json", one)
    write(tmp_path / "2.json", stream)
    inputs = load_paths([str(tmp_path)])
    assert (list(inputs.flavors), list(inputs.cluster_queues)) == (["default"], ["cq"])
    assert list(inputs.local_queues) == ["team-a/lq"]


def test_invalid_json_names_line_and_document(tmp_path: Path) -> None:
    file = write(tmp_path / "bad.json", json.dumps(_yaml(FLAVOR)) + '\n{"kind": ')
    err = load_error([file])
    assert err.document == 1
    assert "invalid JSON at line 2" in str(err)


# -- kinds not read, inputs without objects -------------------------------------------------


def test_kinds_not_read_are_skipped_with_one_warning_each(tmp_path: Path) -> None:
    cronjob = "\napiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly, namespace: ml}\n"
    config_map = "\napiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: cfg-}\n"
    file = write(tmp_path / "mixed.yaml", ADMISSION_CHECK, FLAVOR, cronjob, config_map)
    inputs = load_paths([file])
    assert list(inputs.flavors) == ["default"]
    assert list(inputs.admission_checks) == ["prov-test"]
    assert inputs.warnings == [
        f"{file} document 0: AdmissionCheck prov-test has no Active condition: taken as "
        "Active (its controller, kueue.x-k8s.io/provisioning-request, sets it on a cluster)",
        f"{file} document 2: skipped CronJob ml/nightly (batch/v1): "
        "Quartermaster does not read this kind",
        f"{file} document 3: skipped ConfigMap cfg-* (v1): Quartermaster does not read this kind",
    ]
    assert not inputs.generated_names  # nothing is named for a skipped object


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ("kind: AdmissionCheck\nmetadata: {name: x}\n", "apiVersion"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "kind"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: b}}\n", "metadata.name"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: [x]\n", "metadata"),
    ],
)
def test_a_malformed_object_of_a_skipped_kind_is_still_an_error(
    tmp_path: Path, doc: str, path: str
) -> None:
    assert load_error([write(tmp_path / "a.yaml", doc)]).path == path


def test_an_input_with_no_objects_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    err = load_error([str(tmp_path / "empty")])
    assert str(err).startswith(f"{tmp_path / 'empty'}: no objects found")
    assert "-R" in str(err)
    comments = write(tmp_path / "comments.yaml", "# nothing here\n---\n")
    assert "no objects found" in str(load_error([comments]))
    assert str(load_error(["-"], stdin=io.StringIO(""))).startswith("<stdin>: no objects found")
    nested = tmp_path / "nested"
    (nested / "sub").mkdir(parents=True)
    write(nested / "sub" / "a.yaml", FLAVOR)
    assert "no objects found" in str(load_error([str(nested)]))
    assert load_paths([str(nested)], recursive=True).flavors


def test_only_skipped_kinds_is_not_an_empty_input(tmp_path: Path) -> None:
    inputs = load_paths([write(tmp_path / "check.yaml", ADMISSION_CHECK)])
    assert len(inputs.warnings) == 1 and not inputs.workloads


# -- -n NAMESPACE ----------------------------------------------------------------------------


def test_namespace_is_the_default_for_namespaced_objects_without_one(tmp_path: Path) -> None:
    lq = LOCAL_QUEUE.replace(", namespace: team-a", "")
    job = (
        job_doc("train")
        .replace("  namespace: team-a\n", "")
        .replace(
            "  labels:\n    kueue.x-k8s.io/queue-name: lq\n    kueue.x-k8s.io/priority-class: high\n",
            "  labels: {kueue.x-k8s.io/queue-name: lq}\n",
        )
    )
    other = workload_doc("w", namespace="elsewhere")
    file = write(tmp_path / "a.yaml", FLAVOR, CLUSTER_QUEUE, lq, job, other)
    inputs = load_paths([file], namespace="ml")
    assert list(inputs.local_queues) == ["ml/lq"]
    assert sorted(w.key.split("/")[0] for w in inputs.workloads) == ["elsewhere", "ml"]
    assert list(inputs.flavors) == ["default"]  # cluster-scoped kinds get no namespace
    assert load_paths([file]).local_queues.keys() == {"default/lq"}


# -- helpers -----------------------------------------------------------------------------------


def _yaml(text: str) -> dict:
    import yaml

    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def _dump(doc: dict) -> str:
    import yaml

    return "\n" + yaml.safe_dump(doc, sort_keys=False)
