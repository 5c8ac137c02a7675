"""Built-in kinds are refused as the API server's strict decoding refuses them.

``kubectl apply`` asks for ``fieldValidation=Strict``: a Job with ``spec.paralellism`` is
refused naming the field. ``plan`` must refuse the same file (exit 2), not plan a Job of
parallelism 1. The field tables come from the Kubernetes OpenAPI schema
(``hack/gen_builtin_fields.py``); the ``[real]`` tests hold them against a real
kube-apiserver, which is the reference.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.drivers import strict
from admission.drivers.documents import LoadError
from admission.drivers.loader import load_paths
from tests.unit.drivers.test_loader import LOCAL_QUEUE, workload_doc, write

ROOT = Path(__file__).resolve().parents[3]
KUEUE_EXAMPLES = ROOT / "tests" / "support" / "data" / "kueue-examples"

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "default", "labels": {"app": "x"}},
    "spec": {
        "parallelism": 2,
        "completions": 2,
        "backoffLimit": 3,
        "template": {
            "metadata": {"annotations": {"a": "b"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "args": ["sleep", "1"],
                        "env": [{"name": "X", "value": "1"}],
                        "resources": {"requests": {"cpu": "1", "memory": 200}},
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                    }
                ],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    },
}


def mutated(edit: str, value: Any) -> dict[str, Any]:
    """JOB with ``value`` set at the dotted path ``edit`` (``[i]`` for list items)."""
    doc = copy.deepcopy(JOB)
    *parents, last = edit.replace("[", ".").replace("]", "").split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return doc


TYPOS = [
    ("spec.paralellism", 3),
    ("metadata.lables", {"a": "b"}),
    ("spec.template.spec.containers[0].resourcse", {}),
    ("spec.template.spec.containers[0].resources.request", {"cpu": "1"}),
    ("spec.template.spec.tolerations[0].efect", "NoSchedule"),
    ("spec.template.metadata.label", {}),
    ("status.actives", 1),
]
WRONG_TYPES = [
    ("spec.parallelism", "3", "must be of type integer, got a string"),
    ("spec.suspend", "yes please", "must be of type boolean, got a string"),
    ("spec.template.spec.containers", {"name": "c"}, "must be of type array, got an object"),
    ("spec.template.spec.containers[0].args", "sleep 1", "must be of type array, got a string"),
    ("spec.template.spec.containers[0].resources.requests", ["cpu"], "must be of type object"),
    ("spec.template.spec.containers[0].ports[0].containerPort", 80.5, "must be of type integer"),
    ("metadata.labels", {"a": 1}, "must be of type string, got a number"),
]


def test_the_field_tables_are_current() -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "hack" / "gen_builtin_fields.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.main(["--check"]) == 0, "run python hack/gen_builtin_fields.py"


def test_a_valid_job_has_no_problems() -> None:
    assert strict.check(JOB, "batch/v1 Job") == []
    assert (
        strict.check(
            {**JOB, "status": None, "spec": {**JOB["spec"], "selector": None}}, "batch/v1 Job"
        )
        == []
    )


@pytest.mark.parametrize(("path", "value"), TYPOS)
def test_unknown_fields_are_named_as_the_server_names_them(path: str, value: Any) -> None:
    assert strict.check(mutated(path, value), "batch/v1 Job") == [
        (path, f'strict decoding error: unknown field "{path}"')
    ]


@pytest.mark.parametrize(("path", "value", "message"), WRONG_TYPES)
def test_values_of_the_wrong_type_are_refused(path: str, value: Any, message: str) -> None:
    problems = strict.check(mutated(path, value), "batch/v1 Job")
    assert problems and problems[0][1].startswith(message)
    assert problems[0][0].startswith(path.split("[")[0] if path.endswith("]") else path)


def test_plan_refuses_a_job_with_a_typo_naming_the_field(tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", json.dumps(mutated("spec.paralellism", 3)))
    with pytest.raises(LoadError) as info:
        load_paths([file])
    err = info.value
    assert (err.kind, err.name, err.path) == ("Job", "default/train", "spec.paralellism")
    assert str(err) == (
        f"{file}: document 0: Job default/train: spec.paralellism: strict decoding error: "
        'unknown field "spec.paralellism"'
    )
    res = subprocess.run(
        [sys.executable, "-m", "admission", "plan", "-f", file, "-o", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and 'unknown field "spec.paralellism"' in res.stderr
    assert res.stdout == ""


def test_every_unknown_field_is_listed_in_one_message(tmp_path: Path) -> None:
    doc = mutated("spec.paralellism", 3)
    doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(LoadError) as info:
        load_paths([write(tmp_path / "job.yaml", json.dumps(doc))])
    assert info.value.detail == (  # in document order, as the server lists them
        'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicyy", '
        'unknown field "spec.paralellism"'
    )


def test_a_workload_pod_template_is_checked_as_kueue_crd_checks_it(tmp_path: Path) -> None:
    doc = workload_doc("w").replace(
        "        - name: c\n", "        - name: c\n          imagee: x\n"
    )
    with pytest.raises(LoadError) as info:
        load_paths([write(tmp_path / "wl.yaml", doc, LOCAL_QUEUE)])
    assert info.value.path == "spec.podSets[0].template.spec.containers[0].imagee"
    assert info.value.kind == "Workload"


def test_kueue_example_jobs_pass() -> None:
    """Every Job and Workload of Kueue's shipped examples is valid as written."""
    docs = 0
    for file in sorted(KUEUE_EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            if isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) == (
                "batch/v1",
                "Job",
            ):
                assert strict.check(doc, "batch/v1 Job") == [], file
                docs += 1
    assert docs >= 10


# -- the real API server is the reference ---------------------------------------------------


def _server_schemas(cluster: Any, group_version: str) -> dict[str, Any]:
    path = "/openapi/v3/" + ("api/v1" if group_version == "v1" else f"apis/{group_version}")
    doc: dict[str, Any] = cluster.view.request("GET", path)
    return doc["components"]["schemas"]


def test_real_server_knows_no_field_the_tables_lack(real_cluster: Any) -> None:
    """Every field of every type the tables describe, as the server publishes it."""
    tables = json.loads((ROOT / "admission" / "drivers" / "builtin_fields.json").read_text())
    schemas: dict[str, Any] = {}
    for gv in ("batch/v1", "v1", "apps/v1"):
        schemas.update(_server_schemas(real_cluster, gv))
    checked = 0
    for name, fields in tables["types"].items():
        server = schemas.get(name)
        if server is None:
            continue  # a type newer than this server
        missing = set(server.get("properties") or {}) - set(fields)
        assert not missing, f"{name}: the server knows {sorted(missing)}"
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(("path", "value"), TYPOS[:-1])
def test_real_server_refuses_the_same_typos(real_cluster: Any, path: str, value: Any) -> None:
    doc = mutated(path, value)
    doc["metadata"]["name"] = "typo"
    res = real_cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False
    )
    assert res.returncode != 0
    assert f'unknown field "{path}"' in res.stderr
    valid = copy.deepcopy(JOB)
    valid["metadata"]["name"] = "valid"
    ok = real_cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(valid))
    assert ok.returncode == 0
