"""``plan`` answers for the objects a cluster would hold, and says what it leaves out.

Kubernetes refuses a Job whose containers request a negative quantity, or a fraction
of an extended resource: ``plan`` refuses it too, naming the object and the field,
instead of admitting −2 GPUs or rounding half a GPU up to one. A Job that no queue
manages is listed with the reason, not dropped without a word. ``simulate --trace``
with a file that does not exist says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli.main import main

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 10}
      - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team}
spec: {clusterQueue: cq}
"""


def job(name: str, resources: str, *, label: bool = True, namespace: str = "team") -> str:
    labels = "\n  labels: {kueue.x-k8s.io/queue-name: lq}" if label else ""
    return f"""
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}{labels}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources: {resources}
"""


def plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *extra: str
) -> tuple[int, str, str]:
    path = tmp_path / "objects.yaml"
    path.write_text(QUEUES + text)
    code = main(["plan", "-f", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("resources", "field", "value", "problem"),
    [
        (
            '{requests: {cpu: "1", nvidia.com/gpu: "-2"}, limits: {nvidia.com/gpu: "-2"}}',
            "limits[nvidia.com/gpu]",
            "-2",
            "must be greater than or equal to 0",
        ),
        (
            '{requests: {cpu: "-1"}}',
            "requests[cpu]",
            "-1",
            "must be greater than or equal to 0",
        ),
        (
            '{limits: {nvidia.com/gpu: "0.5"}}',
            "limits[nvidia.com/gpu]",
            "0.5",
            "must be an integer",
        ),
        (
            '{requests: {cpu: "1", example.com/fpga: 500m}}',
            "requests[example.com/fpga]",
            "500m",
            "must be an integer",
        ),
    ],
)
def test_a_request_kubernetes_refuses_is_refused_naming_the_job_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    resources: str,
    field: str,
    value: str,
    problem: str,
) -> None:
    code, out, err = plan(tmp_path, capsys, job("train", resources), "-o", "json")
    assert code == 2
    assert out == ""
    assert err.strip() == (
        f"quartermaster plan: {tmp_path / 'objects.yaml'}: document 3: Job team/train: "
        f'spec.template.spec.containers[0].resources.{field}: Invalid value: "{value}": {problem}'
    )


def test_fractions_of_cpu_and_whole_gpus_are_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources = '{requests: {cpu: 500m}, limits: {nvidia.com/gpu: "2"}}'
    code, out, _ = plan(tmp_path, capsys, job("train", resources), "-o", "json")
    assert code == 0
    (admitted,) = json.loads(out)["admitted"]
    usage = admitted["podSetAssignments"][0]["resourceUsage"]
    assert usage["nvidia.com/gpu"] == "2"
    assert usage["cpu"] == "500m"


def test_a_job_without_a_queue_is_listed_as_not_queued_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = job("queued", "{requests: {cpu: 1}}") + job(
        "forgotten", "{requests: {cpu: 1}}", label=False
    )
    code, out, _ = plan(tmp_path, capsys, text, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert [a["workload"].split("/")[1].rsplit("-", 1)[0] for a in doc["admitted"]] == [
        "job-queued"
    ]
    (entry,) = doc["notQueued"]
    assert entry["kind"] == "Job"
    assert entry["name"] == "team/forgotten"
    assert entry["source"] == f"{tmp_path / 'objects.yaml'} document 4"
    assert "no kueue.x-k8s.io/queue-name label" in entry["reason"]
    assert 'no LocalQueue named "default"' in entry["reason"]

    code, out, _ = plan(tmp_path, capsys, text, "-o", "table")
    assert code == 0
    section = out.split("NOT QUEUED\n", 1)[1].splitlines()
    assert section[0].split() == ["KIND", "NAME", "REASON"]
    assert section[1].startswith("Job ") and "team/forgotten" in section[1]
    assert "not queued: it has no kueue.x-k8s.io/queue-name label" in section[1]


def test_a_job_without_a_label_in_a_namespace_with_a_default_queue_is_queued(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default_lq = (
        "\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: default, namespace: team}\nspec: {clusterQueue: cq}\n"
    )
    code, out, _ = plan(
        tmp_path, capsys, default_lq + job("plain", "{requests: {cpu: 1}}", label=False),
        "-o", "json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert "notQueued" not in doc
    assert len(doc["admitted"]) == 1


def test_simulate_with_a_missing_trace_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.jsonl"
    scenario = tmp_path / "queues.yaml"
    scenario.write_text(QUEUES)
    for argv in (["simulate", "--trace", str(missing)],
                 ["simulate", str(scenario), "--trace", str(missing)]):  # fmt: skip
        assert main([*argv, "-o", "json"]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.strip() == f"quartermaster simulate: --trace {missing}: no such file"


def test_simulate_trace_without_a_scenario_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    assert main(["simulate", "--trace", str(trace), "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("quartermaster simulate: --trace: give the SCENARIO")
