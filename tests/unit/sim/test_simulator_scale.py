"""The simulator's memory and speed work (issue 16) changes no figure.

A small trace in the shape of ``bench sim-5k`` (a cohort tree of depth 3, LowerPriority
preemption within queues, reclamation in the cohort, three priorities, repeated podSet
shapes, a two-podSet gang, a few workloads that never fit) goes through the real
``quartermaster simulate -o json``. Its full summary is pinned in
``tests/support/data/sim_scale_summary.json`` (recorded before the trace loader shared podSets
and the simulator stopped copying workloads, keeping finished records whole and
sampling for nobody): every count, time and percentage must stay what it was. CPU
seconds are the only figures left out (they are measured, not computed).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.main import main
from admission.cli.simulate import load_scenario
from admission.sim.metrics import lower_bound, summarize
from admission.sim.scenario import ScenarioError, parse_generator
from admission.sim.sharing import EMPTY, PodSetShapes
from admission.sim.simulator import Simulator
from tests.support.sim_helpers import GENERATOR_SMALL, cq, scenario, wl

PINNED = Path(__file__).resolve().parents[2] / "support" / "data" / "sim_scale_summary.json"
CPU_KEYS = ("cpuSeconds", "cycleCpuSeconds")


def _cq(name: str, cohort: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "4", "borrowingLimit": "8"},
                                {"name": "memory", "nominalQuota": "16Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def write_trace(directory: Path, *, workloads: int = 600) -> Path:
    """Queue objects (root -> 2 -> 2 cohorts, 3 ClusterQueues under each leaf) and
    ``workloads`` JSON-lines entries, all derived arithmetically (no RNG)."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "root"}},
    ]  # fmt: skip
    queues: list[str] = []
    for a in range(2):
        mid = f"mid-{a}"
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
                     "metadata": {"name": mid}, "spec": {"parentName": "root"}})  # fmt: skip
        for b in range(2):
            leaf = f"leaf-{a}-{b}"
            docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
                         "metadata": {"name": leaf}, "spec": {"parentName": mid}})  # fmt: skip
            for q in range(3):
                name = f"cq-{a}-{b}-{q}"
                queues.append(name)
                docs.append(_cq(name, leaf))
                docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                             "metadata": {"name": "lq", "namespace": name},
                             "spec": {"clusterQueue": name}})  # fmt: skip
    lines = directory / "scale.jsonl"
    with lines.open("w", encoding="utf-8") as f:
        for i in range(workloads):
            cpu = ("1", "2", "500m", "3")[i * 7 % 4]
            entry: dict[str, Any] = {
                "name": f"wl-{i}",
                "namespace": queues[i * 5 % len(queues)],
                "localQueue": "lq",
                "arrival": round(i * 0.1 + (i * 37 % 10) / 100, 3),
                "runtime": 5 + i * 13 % 40,
                "priority": (50, 100, 200)[i * 11 % 3],
                "podSets": [{"name": "main", "count": 1 + i % 2,
                             "requests": {"cpu": cpu, "memory": "1Gi"}}],
            }  # fmt: skip
            if i % 50 == 7:  # a gang of two podSets
                entry["podSets"].append({"name": "workers", "count": 2, "requests": {"cpu": "1"}})
            if i % 97 == 3:  # more than a queue can ever hold: never admitted
                entry["podSets"][0]["requests"] = {"cpu": "40"}
            if i % 3 == 0:
                entry["class"] = "batch"
            f.write(json.dumps(entry) + "\n")
    docs.append({"name": "sim-scale", "trace": lines.name})
    out = directory / "scale.yaml"
    with out.open("w", encoding="utf-8") as f:
        yaml.safe_dump_all(docs, f)
    return out


def simulate_json(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["simulate", *argv, "-o", "json"])
    assert code == 0
    summary: dict[str, Any] = json.loads(out.getvalue())
    return summary


def without_cpu(summary: dict[str, Any]) -> dict[str, Any]:
    engine = {k: v for k, v in summary["engine"].items() if k not in CPU_KEYS}
    return {**summary, "engine": engine}


def test_the_pinned_trace_summary_is_unchanged(tmp_path: Path) -> None:
    summary = without_cpu(simulate_json(str(write_trace(tmp_path))))
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    assert summary == pinned
    # the trace exercises what the summary could get wrong
    assert summary["engine"]["preemptions"] > 0 and summary["neverAdmitted"] > 0


def _records(result: Any) -> list[tuple[Any, ...]]:
    return [
        (r.key, r.cluster_queue, r.admitted_us, r.first_admitted_us, r.finished_us, r.evictions)
        for r in result.records
    ]


def test_running_on_the_scenarios_own_objects_without_samples_changes_no_record(
    tmp_path: Path,
) -> None:
    path = str(write_trace(tmp_path, workloads=300))
    copied_sc, spent_sc = load_scenario(path), load_scenario(path)
    copied = Simulator(copied_sc).run()
    spent = Simulator(spent_sc, copy_workloads=False, samples=False).run()
    assert _records(spent) == _records(copied)
    bound = lower_bound(copied_sc)
    assert without_cpu(summarize(spent, bound)) == without_cpu(summarize(copied, bound))
    # the default run worked on copies (its scenario can run again); the other on the
    # scenario's own workloads, and kept no per-queue series
    assert all(r.sim is not s for r, s in zip(copied.records, copied_sc.workloads, strict=True))
    assert all(r.sim is s for r, s in zip(spent.records, spent_sc.workloads, strict=True))
    assert copied.samples.times_us and copied.samples.usage[0]
    assert not spent.samples.times_us and not any(spent.samples.usage)
    again = Simulator(copied_sc).run()
    assert _records(again) == _records(copied)


def test_finished_records_keep_what_the_summary_reads_and_drop_their_run_progress(
    tmp_path: Path,
) -> None:
    result = Simulator(load_scenario(str(write_trace(tmp_path, workloads=200)))).run()
    finished = [r for r in result.records if r.finished_us is not None]
    never = [r for r in result.records if r.admitted_us is None]
    assert finished and never
    assert all(r.run_progress is None and r.usage == {} and not r.running for r in finished)
    assert all(r.run_progress is None and r.usage == {} for r in never)  # never ran: none made


def test_the_trace_loader_shares_equal_podsets_runtimes_and_empty_maps(tmp_path: Path) -> None:
    sc = load_scenario(str(write_trace(tmp_path, workloads=120)))
    by_name = {s.workload.name: s for s in sc.workloads}
    # wl-0 and wl-8: the same raw podSets (cpu "1", 1 pod, 1Gi); wl-1: 2 pods of 3 cpu
    a, b, c = by_name["wl-0"].workload, by_name["wl-8"].workload, by_name["wl-1"].workload
    assert a.pod_sets is b.pod_sets and a.pod_sets is not c.pod_sets
    assert [(p.count, p.requests) for p in c.pod_sets] == [(2, {"cpu": 3_000, "memory": 1024**3})]
    gang = by_name["wl-7"].workload
    assert [p.name for p in gang.pod_sets] == ["main", "workers"]
    shapes = {id(s.workload.pod_sets) for s in sc.workloads}
    assert len(shapes) < 20  # 8 shapes of the main podSet, the gangs, the oversized ones
    # runtimes 5 + i*13 % 40 s: one int object per distinct value
    equal = [s for s in sc.workloads if s.runtime_us == by_name["wl-0"].runtime_us]
    assert len(equal) > 1 and all(s.runtime_us is equal[0].runtime_us for s in equal)
    # labels, annotations and reclaimable pods: one shared map that refuses writes
    assert a.labels is b.annotations is c.reclaimable_pods is EMPTY and a.labels == {}
    for write in (
        lambda: a.labels.__setitem__("k", "v"),
        lambda: a.annotations.update(k="v"),
        lambda: a.reclaimable_pods.setdefault("main", 1),
    ):
        with pytest.raises(TypeError, match="shared"):
            write()
    assert EMPTY == {}
    own = copy.deepcopy(a.labels)
    own["k"] = "v"  # a copy is an ordinary dict of its own
    assert own == {"k": "v"} and EMPTY == {}


def test_podset_shapes_remember_only_values_that_parsed() -> None:
    shapes = PodSetShapes(max_entries=2)
    calls: list[Any] = []

    def parse(raw: Any) -> list[Any]:
        calls.append(raw)
        if raw == "bad":
            raise ValueError("bad podSets")
        return [raw]

    first = shapes([{"cpu": 1}], parse)
    assert shapes([{"cpu": 1}], parse) is first and len(calls) == 1
    assert shapes([{"cpu": 1.0}], parse) is not first  # 1.0 is not 1: parsed on its own
    for _ in range(2):
        with pytest.raises(ValueError):
            shapes("bad", parse)
    assert calls.count("bad") == 2  # a bad value is never remembered
    shapes([{"cpu": 3}], parse)  # full: the cache starts over, values stay right
    assert len(shapes) == 1 and shapes([{"cpu": 1}], parse) == [[{"cpu": 1}]]


def test_a_run_stopped_by_the_cycle_limit_says_how_far_it_got(tmp_path: Path) -> None:
    summary = simulate_json(str(write_trace(tmp_path)), "--max-cycles", "40")
    stop = summary["stoppedEarly"]
    assert summary["truncated"] is True and summary["engine"]["cycles"] == 40
    assert stop["by"] == "maxCycles" and stop["simulatedMs"] > 0
    assert 0 < stop["arrivedWorkloads"] < summary["workloads"]
    assert (
        stop["finishedWorkloads"] + stop["runningWorkloads"] + stop["waitingWorkloads"]
        == stop["arrivedWorkloads"]
    )
    assert "makespanOverLowerBound" not in summary  # no makespan to compare yet


def test_a_run_stopped_by_the_cpu_limit_says_so_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(write_trace(tmp_path)), "--cpu-limit", "1e-6", "-o", "table"]) == 0
    out = capsys.readouterr().out
    assert "WARNING: stopped at the CPU limit; the run is incomplete" in out
    assert "of 600 workloads finished" in out


def test_a_whole_run_is_not_marked_stopped(tmp_path: Path) -> None:
    summary = simulate_json(str(write_trace(tmp_path, workloads=100)))
    assert "truncated" not in summary and "stoppedEarly" not in summary


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-cycles", "0", "--max-cycles: must be a positive number of cycles, got 0"),
        ("--cpu-limit", "-1", "--cpu-limit: must be a positive number of CPU seconds, got -1.0"),
        ("--cpu-limit", "nan", "--cpu-limit: must be a positive number of CPU seconds, got nan"),
    ],
)
def test_bad_limits_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    assert main(["simulate", str(tmp_path / "missing.yaml"), flag, value]) == 2
    assert message in capsys.readouterr().err  # before the scenario is even read


def test_a_stopped_run_is_settled_where_it_stopped() -> None:
    # one queue of 2 cpu; w1 admitted at t=0, w2 at t=1 s; the third cycle is the last
    sc = scenario(
        [cq("a", 2)],
        [wl("w1", "a", arrival=0, runtime=10), wl("w2", "a", arrival=1, runtime=100)],
    )
    r = Simulator(sc, max_cycles=3).run()
    assert (r.truncated, r.stopped_by, r.stopped_at_us, r.end_us, r.arrived) == (
        True, "maxCycles", 1_001_000, 0, 2,
    )  # fmt: skip
    # both ran until the stop: not settled at the last finish (there was none)
    assert r.queues["a"].integral == {"cpu": 1_000 * 1_001_000 + 1_000 * 1_000}
    with pytest.raises(ValueError, match="max_cycles"):
        Simulator(sc, max_cycles=0)
    with pytest.raises(ValueError, match="cpu_limit"):
        Simulator(sc, cpu_limit=0)


def test_the_report_of_a_stopped_run_says_it_is_incomplete(tmp_path: Path) -> None:
    report = tmp_path / "report"
    simulate_json(str(write_trace(tmp_path)), "--max-cycles", "40", "--report", str(report))
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "Incomplete run:</b> stopped at the cycle limit" in page
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    assert summary["stoppedEarly"]["by"] == "maxCycles"
    assert (report / "queues.csv").read_text(encoding="utf-8").count("\n") > 12  # sampled


QUEUES = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "4"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team}
spec: {clusterQueue: cq}
---
trace: lines.jsonl
"""
LINE = (
    '{"name": "w", "namespace": "team", "localQueue": "lq", "arrival": %s, "runtime": 5,'
    ' "priority": %s, "podSets": [{"count": 1, "requests": {"cpu": "1"}}]}'
)


@pytest.mark.parametrize(
    ("arrival", "priority", "expect"),
    [
        ("0.5", "7", 7),
        # integers past 64 bits stay exact integers (as json reads them)
        ("0", "123456789012345678901234567890", 123456789012345678901234567890),
        ("0", "-9223372036854775809", -9223372036854775809),
        # what json accepts and the entry then refuses: the entry's own error
        ("NaN", "1", "arrival: must be a number of seconds, got nan"),
        ("1e400", "1", "arrival: must be a number of seconds, got inf"),
        ("0", '"x\\ud800"', "priority: must be an integer, got 'x\\ud800'"),
        ("0", "1.0", "priority: must be an integer, got 1.0"),
    ],
)
def test_json_lines_read_exactly_as_json_reads_them(
    tmp_path: Path, arrival: str, priority: str, expect: Any
) -> None:
    (tmp_path / "lines.jsonl").write_text(LINE % (arrival, priority) + "\n", encoding="utf-8")
    (tmp_path / "t.yaml").write_text(QUEUES, encoding="utf-8")
    if isinstance(expect, int):
        wl = load_scenario(str(tmp_path / "t.yaml")).workloads[0].workload
        assert type(wl.priority) is int and wl.priority == expect
    else:
        with pytest.raises(ScenarioError) as err:
            load_scenario(str(tmp_path / "t.yaml"))
        assert f"lines.jsonl: line 1: {expect}" in str(err.value)


def test_generator_workloads_of_one_template_share_their_podsets() -> None:
    sc = parse_generator(yaml.safe_load(GENERATOR_SMALL), name="small")
    by_class: dict[str, set[int]] = {}
    for s in sc.workloads:
        by_class.setdefault(s.wl_class, set()).add(id(s.workload.pod_sets))
        assert s.workload.labels is EMPTY and s.workload.reclaimable_pods is EMPTY
    assert {c: len(ids) for c, ids in by_class.items()} == {"small": 1, "large": 1}
    small = next(s for s in sc.workloads if s.wl_class == "small").workload.pod_sets
    large = next(s for s in sc.workloads if s.wl_class == "large").workload.pod_sets
    assert [(p.count, p.requests) for p in small] == [(1, {"cpu": 1_000})]
    assert [(p.count, p.requests) for p in large] == [(1, {"cpu": 4_000})]
    # and a run over the shared objects is the run over objects of their own
    own = parse_generator(yaml.safe_load(GENERATOR_SMALL), name="small")
    for s in own.workloads:
        s.workload.pod_sets = copy.deepcopy(s.workload.pod_sets)
        s.workload.labels, s.workload.annotations, s.workload.reclaimable_pods = {}, {}, {}
    assert _records(Simulator(sc, copy_workloads=False).run()) == _records(Simulator(own).run())
