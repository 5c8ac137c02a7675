"""Simulator traces naming a job kind (``job:``): the Workload is the one ``serve`` builds
for that object (podSets, queue, priority, name), its class the kind by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.cli.simulate import load_scenario
from admission.sim.scenario import ScenarioError
from admission.sim.simulator import simulate
from tests.support.sim_helpers import TRACE_OBJECTS

RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch}
spec:
  mlPolicy: {numNodes: 2, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: pytorch, resources: {requests: {nvidia.com/gpu: 2}}}]
"""
GPU = "{containers: [{name: c, image: x, resources: {requests: {nvidia.com/gpu: 1}}}]}"
TRACE = f"""
trace:
- arrival: 0
  runtime: 100
  job:
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    metadata: {{name: train, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: main,
                kueue.x-k8s.io/priority-class: high}}}}
    spec:
      replicatedJobs:
      - {{name: driver, replicas: 1, template: {{spec: {{template: {{spec: {GPU}}}}}}}}}
      - {{name: workers, replicas: 3, template: {{spec: {{parallelism: 1, template: {{spec: {GPU}}}}}}}}}
- arrival: 1
  runtime: 50
  localQueue: main
  job:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {{name: tune, namespace: team-a}}
    spec: {{runtimeRef: {{name: torch}}}}
- arrival: 2
  runtime: 10
  class: batch
  job:
    apiVersion: batch/v1
    kind: Job
    metadata: {{name: etl, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: main}}}}
    spec: {{parallelism: 2, completions: 2, template: {{spec: {GPU}}}}}
"""


def trace_file(tmp_path: Path, trace: str, objects: str = TRACE_OBJECTS + "---\n" + RUNTIME) -> str:
    path = tmp_path / "trace.yaml"
    path.write_text(objects + "---\n" + trace)
    return str(path)


def test_a_trace_names_jobs_of_any_kind_and_simulates_their_workloads(tmp_path: Path) -> None:
    sc = load_scenario(trace_file(tmp_path, TRACE))
    jobset, trainjob, job = sc.workloads
    assert jobset.workload.name.startswith("jobset-train-") and jobset.wl_class == "jobset"
    assert [(p.name, p.count) for p in jobset.workload.pod_sets] == [("driver", 1), ("workers", 3)]
    assert jobset.workload.priority == 100 and jobset.workload.priority_class == "high"
    assert trainjob.workload.name.startswith("trainjob-tune-") and trainjob.wl_class == "trainjob"
    assert [(p.name, p.count, p.requests) for p in trainjob.workload.pod_sets] == [
        ("node", 2, {"nvidia.com/gpu": 2})
    ]
    assert trainjob.workload.queue_name == "main"  # from localQueue
    assert job.wl_class == "batch" and job.workload.pod_sets[0].count == 2
    records = {r.sim.workload.name: r for r in simulate(sc).records}
    # 8 GPUs: the JobSet (4) and the TrainJob (4) run at once; the Job waits for one
    js, tj, etl = (records[s.workload.name] for s in (jobset, trainjob, job))
    assert js.admitted_us == 0 and tj.admitted_us is not None and tj.admitted_us < 2_000_000
    assert etl.admitted_us is not None and etl.admitted_us >= tj.finished_us


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{arrival: 0, runtime: 1, job: {apiVersion: v1, kind: ConfigMap}}",
         "job: v1 ConfigMap: not a job kind (known: "),
        ("{arrival: 0, runtime: 1, job: {apiVersion: batch/v1, kind: Job, metadata: {name: j}, "
         f"spec: {{template: {{spec: {GPU}}}}}}}}}", "job: job names no queue"),
        ("{arrival: 0, runtime: 1, podSets: [], job: {apiVersion: batch/v1, kind: Job}}",
         "podSets: not with job"),
        ("{arrival: 0, runtime: 1, localQueue: main, job: {apiVersion: trainer.kubeflow.org/v1alpha1, "
         "kind: TrainJob, metadata: {name: t, namespace: team-a}, spec: {runtimeRef: {name: nope}}}}",
         "ClusterTrainingRuntime 'nope' not found"),
    ],
)  # fmt: skip
def test_bad_job_entries_name_the_entry_and_field(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=r"trace\[0\]: ") as err:
        load_scenario(trace_file(tmp_path, f"trace:\n- {entry}\n"))
    assert message in str(err.value)
