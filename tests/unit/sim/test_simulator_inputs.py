"""Scenario inputs: Kueue's generator format and traces, including bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admission.cli.simulate import load_scenario
from admission.sim.scenario import ScenarioError, parse_generator
from queues.model import ANY, LOWER_PRIORITY
from tests.support.sim_helpers import GENERATOR_SMALL, TRACE_OBJECTS

KUEUE_PERF = Path(__file__).resolve().parents[3] / "admission" / "scenarios" / "kueue-perf"


def gen(text: str) -> object:
    return parse_generator(yaml.safe_load(text), source="gen.yaml")


def test_generator_format_follows_the_kueue_runner_naming_and_timing() -> None:
    sc = gen(GENERATOR_SMALL)
    assert sorted(sc.cluster_queues) == [
        "cq-0-0-cohort-0",
        "cq-0-0-cohort-1",
        "cq-0-1-cohort-0",
        "cq-0-1-cohort-1",
    ]
    q = sc.cluster_queues["cq-0-1-cohort-1"]
    assert q.cohort == "cohort-1"
    quota = q.resource_groups[0].flavors[0].resources["cpu"]
    assert (quota.nominal, quota.borrowing_limit) == (4_000, 4_000)
    assert (q.preemption.within_cluster_queue, q.preemption.reclaim_within_cohort) == (
        LOWER_PRIORITY,
        ANY,
    )
    assert sc.local_queues["cq-0-1-cohort-1/cq-0-1-cohort-1"].cluster_queue == "cq-0-1-cohort-1"
    assert sc.class_of_cq("cq-0-1-cohort-1") == "cq"
    assert len(sc.workloads) == 4 * (20 + 5)
    mine = {s.workload.name: s for s in sc.workloads if s.workload.namespace == "cq-0-0-cohort-0"}
    # Each creation waits one interval first: the k-th workload (from 0) at (k+1) × interval.
    assert mine["small-0-0-0"].arrival_us == 50_000
    assert mine["small-0-19-0"].arrival_us == 1_000_000
    assert mine["large-1-0-0"].arrival_us == 200_000
    large = mine["large-1-4-0"]
    assert (large.arrival_us, large.runtime_us, large.wl_class) == (1_000_000, 300_000, "large")
    assert large.workload.priority == 200
    assert large.workload.pod_sets[0].requests == {"cpu": 4_000}
    assert large.workload.queue_name == "cq-0-0-cohort-0"


def test_kueues_baseline_config_parses_to_30_queues_and_15000_workloads() -> None:
    sc = load_scenario(str(KUEUE_PERF / "baseline.yaml"))
    assert len(sc.cluster_queues) == 30
    assert len(sc.workloads) == 15_000
    assert {s.wl_class for s in sc.workloads} == {"small", "medium", "large"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "cohorts: must be a list"),
        ("cohorts: []", "cohorts: must not be empty"),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [], extra: 1}]",
            "cohorts[0].extra: unknown field",
        ),
        (
            "cohorts: [{className: c, count: five, queuesSets: []}]",
            "cohorts[0].count: must be an integer",
        ),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [{className: q, count: 1, nominalQuota: lots}]}]",
            "cohorts[0].queuesSets[0].nominalQuota: invalid quantity",
        ),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [{className: q, count: 1}]}]",
            "cohorts[0].queuesSets[0].nominalQuota: Required value",
        ),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [{className: q, count: 1, nominalQuota: 1,"
            " withinClusterQueue: Sometimes}]}]",
            "cohorts[0].queuesSets[0].withinClusterQueue: unsupported value 'Sometimes'",
        ),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [{className: q, count: 1, nominalQuota: 1,"
            " workloadsSets: [{count: 1, creationIntervalMs: 1, workloads: [{className: w, runtimeMs: -5,"
            " request: 1}]}]}]}]",
            "cohorts[0].queuesSets[0].workloadsSets[0].workloads[0].runtimeMs: must be >= 0",
        ),
        (
            "cohorts: [{className: c, count: 1, queuesSets: [{className: q, count: 1, nominalQuota: 1,"
            " workloadsSets: [{count: 1, workloads: [{className: w, runtimeMs: 5}]}]}]}]",
            "workloads[0].request: Required value",
        ),
        ("topology: {levels: [rack]}\ncohorts: []", "topology: not supported"),
    ],
)
def test_bad_generator_configs_name_the_file_and_field(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        gen(text)
    assert str(err.value).startswith("gen.yaml: ")
    assert message in str(err.value)


def trace_file(tmp_path: Path, trace: str, objects: str = TRACE_OBJECTS) -> str:
    path = tmp_path / "trace.yaml"
    path.write_text(objects + "---\n" + trace)
    return str(path)


def test_a_trace_gives_queue_objects_and_timed_workloads(tmp_path: Path) -> None:
    path = trace_file(
        tmp_path,
        """
trace:
- {name: train, namespace: team-a, localQueue: main, arrival: 1.5, runtime: 60, priorityClass: high,
   podSets: [{name: workers, count: 2, requests: {nvidia.com/gpu: 4, cpu: 500m}}]}
- {namespace: team-a, localQueue: main, arrival: 2, runtime: 1, priority: 7, class: dev,
   podSets: [{name: main, count: 1, requests: {nvidia.com/gpu: 1}}]}
""",
    )
    sc = load_scenario(path)
    assert sc.name == "trace"
    assert list(sc.cluster_queues) == ["team-a"]
    assert sc.namespaces is None  # no Namespace documents: every namespace exists
    train, dev = sc.workloads
    assert (train.arrival_us, train.runtime_us, train.wl_class) == (1_500_000, 60_000_000, "high")
    assert train.workload.priority == 100 and train.workload.priority_class == "high"
    assert train.workload.pod_sets[0].requests == {"nvidia.com/gpu": 4, "cpu": 500}
    assert (
        dev.workload.name == "trace-000001" and dev.wl_class == "dev" and dev.workload.priority == 7
    )
    assert sc.class_of_cq("team-a") == "team-a"


def test_a_trace_can_live_in_a_json_lines_file_beside_the_yaml(tmp_path: Path) -> None:
    (tmp_path / "jobs.jsonl").write_text(
        '{"namespace": "team-a", "localQueue": "main", "arrival": 0, "runtime": 5,'
        ' "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 2}}]}\n\n'
    )
    sc = load_scenario(trace_file(tmp_path, "trace: jobs.jsonl\n"))
    assert len(sc.workloads) == 1 and sc.workloads[0].wl_class == "default"


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (
            "trace:\n- {namespace: team-a, localQueue: main, arrival: 0, podSets: []}",
            "document 4: trace[0]: runtime: Required value",
        ),
        (
            "trace:\n- {namespace: team-a, localQueue: main, arrival: -1, runtime: 1, podSets: []}",
            "trace[0]: arrival: must not be negative",
        ),
        (
            "trace:\n- {namespace: team-a, localQueue: main, arrival: 0, runtime: 1, priorityClass: vip,"
            " podSets: [{name: m, count: 1, requests: {cpu: 1}}]}",
            "trace[0]: priorityClass: unknown priority class 'vip' (known: high)",
        ),
        (
            "trace:\n- {namespace: team-a, localQueue: main, arrival: 0, runtime: 1,"
            " podSets: [{name: m, count: 1, requests: {cpu: one}}]}",
            "trace[0]: podSets[0].requests.cpu: invalid quantity",
        ),
        (
            "trace:\n- {namespace: team-a, localQueue: main, arrival: 0, runtime: 1, color: red,"
            " podSets: [{name: m, count: 1, requests: {cpu: 1}}]}",
            "trace[0]: color: unknown field",
        ),
        ("trace: {}", "trace: must be a list of workloads or the path of a JSON-lines file"),
        ("trace: missing.jsonl", "missing.jsonl: cannot read"),
    ],
)
def test_bad_trace_entries_name_the_file_document_and_field(
    tmp_path: Path, trace: str, message: str
) -> None:
    path = trace_file(tmp_path, trace)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(tmp_path) in str(err.value)
    assert message in str(err.value)


def test_bad_queue_objects_in_a_trace_name_their_own_document(tmp_path: Path) -> None:
    objects = TRACE_OBJECTS.replace(
        "preemption: {withinClusterQueue: LowerPriority}", "preemptoin: {}"
    )
    path = trace_file(tmp_path, "trace: []\n", objects=objects)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert text.startswith(f"{path}: document 2: ClusterQueue team-a: ")
    assert "preemptoin" in text


def test_a_scenario_file_that_does_not_exist_or_is_not_yaml_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("cohorts: [\n")
    with pytest.raises(ScenarioError, match="invalid YAML at line"):
        load_scenario(str(bad))


# -- a JSON-lines trace is read one line at a time, its errors as if read whole ----------

GOOD_LINE = (
    '{"name": "%s", "namespace": "team-a", "localQueue": "main", "arrival": 0, "runtime": 5,'
    ' "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}]}'
)
BAD_ENTRY = '{"name": "bad", "namespace": "team-a", "localQueue": "main", "arrival": 0}'


def _jsonl(tmp_path: Path, lines: list[str], raw: bytes = b"") -> str:
    (tmp_path / "jobs.jsonl").write_bytes("\n".join(lines).encode() + b"\n" + raw)
    return trace_file(tmp_path, "trace: jobs.jsonl\n")


@pytest.mark.parametrize(
    ("lines", "raw", "message"),
    [
        # a line that is not JSON, after a bad entry: the file's own error first
        ([GOOD_LINE % "a", BAD_ENTRY, "{not json"], b"", "jobs.jsonl: line 3: not valid JSON"),
        # a file that cannot be decoded, after a line that is not JSON: cannot read first
        ([GOOD_LINE % "a", "{not json"], b"\xff\xfe\n", "jobs.jsonl: cannot read"),
        ([BAD_ENTRY], b"\xff\n", "jobs.jsonl: cannot read"),
        # a duplicate before a bad entry: the bad entry first (duplicates are checked last)
        (
            [GOOD_LINE % "a", GOOD_LINE % "a", BAD_ENTRY],
            b"",
            "jobs.jsonl: line 3: runtime: Required value",
        ),
        (
            [GOOD_LINE % "a", "", GOOD_LINE % "b", GOOD_LINE % "a"],
            b"",
            "jobs.jsonl: line 4: name: workload team-a/a is already defined at ",
        ),
        (
            [GOOD_LINE % "a", BAD_ENTRY, GOOD_LINE % "b"],
            b"",
            "jobs.jsonl: line 2: runtime: Required value",
        ),
        (["", "  "], b"", "no workloads"),
    ],
)
def test_a_json_lines_trace_reports_the_error_a_whole_read_would(
    tmp_path: Path, lines: list[str], raw: bytes, message: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(_jsonl(tmp_path, lines, raw))
    assert message in str(err.value)
    if "already defined" in message:
        assert str(err.value).endswith("jobs.jsonl: line 1")


def test_json_lines_are_numbered_as_splitlines_numbers_them(tmp_path: Path) -> None:
    """A form feed or CR alone ends a line too (str.splitlines), as when the whole
    file was split at once."""
    text = (GOOD_LINE % "a") + "\r" + (GOOD_LINE % "b") + "\x0c\n" + BAD_ENTRY + "\n"
    (tmp_path / "jobs.jsonl").write_text(text, newline="")
    with pytest.raises(ScenarioError, match="line 4: runtime: Required value"):
        load_scenario(trace_file(tmp_path, "trace: jobs.jsonl\n"))
