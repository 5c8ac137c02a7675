"""Kueue's own example files load unchanged and give the outcome Kueue documents.

The fixtures are Kueue's (``tests/support/data/kueue-examples/README.md`` says where each comes
from). Every folder is run through the real command line, ``quartermaster plan -f
FOLDER``, as a Kueue user would run it; each test states what Kueue's documentation says
happens and checks that Quartermaster does the same. Where Quartermaster does not yet do
what Kueue does (plain pods in plan), the
test of Kueue's outcome is a strict xfail naming the gap, so it turns into a failure
the day the gap closes and the mark must go; the folder still loads, with one warning
per object it skips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.main import main
from admission.cli.simulate import load_scenario, simulate_summary
from admission.config.listen import listen_defaults
from admission.config.load import load_config
from admission.drivers.loader import load_paths
from admission.integrations.registry import BY_FRAMEWORK
from admission.sim.scenario import ScenarioError

DATA = Path(__file__).resolve().parents[2] / "support" / "data"
EXAMPLES = DATA / "kueue-examples"
KUEUE_PERF = Path(__file__).resolve().parents[3] / "admission" / "scenarios" / "kueue-perf"
FOLDERS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name != "perf")


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["plan", *args, "-o", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def admitted(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["workload"]: a for a in doc["admitted"]}


def by_prefix(doc: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Admitted workloads whose name starts with ``prefix`` (generated names vary)."""
    return [a for a in doc["admitted"] if a["workload"].startswith(prefix)]


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if " warning: " in line]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_example_folder_loads_unchanged(
    capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    code, doc, err = plan(capsys, "-f", str(EXAMPLES / folder))
    assert code == 0, err
    assert all(" warning: " in line for line in err.splitlines()), err  # nothing but warnings
    assert not doc["preempted"]


def test_every_fixture_is_covered_by_an_outcome_test() -> None:
    """A new fixture folder needs its own outcome test below."""
    covered = {
        "admission-check", "admission-fs", "cohort-hello", "cohort-quota", "cohort-tree",
        "concurrent-admission", "dra", "flavors-empty", "flavors-taints",
        "flavors-tolerations", "kueueviz", "otherjobs", "partial", "pods", "provisioning",
        "quick-start", "shared-quota", "single-cq", "tas", "v1beta1-cohort",
        "v1beta1-single-cq",
    }  # fmt: skip
    assert set(FOLDERS) == covered


# -- getting started and running jobs ------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "prefix", "cq", "count"),
    [
        # docs/tasks/run/jobs.md: sample-job.yaml (generateName) is admitted, 3 pods
        ("single-cq", "default/job-sample-job-", "cluster-queue", 3),
        # docs/get-started: the quick-start Job is admitted
        ("quick-start", "default/job-sample-job-", "cluster-queue", None),
    ],
)
def test_sample_jobs_are_admitted(
    capsys: pytest.CaptureFixture[str], folder: str, prefix: str, cq: str, count: int | None
) -> None:
    code, doc, err = plan(capsys, "-f", str(EXAMPLES / folder))
    (job,) = by_prefix(doc, prefix)
    assert job["clusterQueue"] == cq and doc["pending"] == []
    if count is not None:
        assert job["podSetAssignments"][0]["count"] == count
    if folder == "single-cq":  # generateName: the Job got a name, and the output shows it
        (generated,) = doc["generatedNames"]
        assert generated["generateName"] == "sample-job-"
        assert job["workload"].startswith(f"default/job-{generated['name'].split('/')[1]}-")


def test_partial_admission_admits_as_many_pods_as_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/tasks/run/jobs.md (partial admission): 20 pods of 1 cpu, min-parallelism 5, a
    ClusterQueue of 9 cpu: admitted with 9 pods."""
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "partial"))
    (job,) = doc["admitted"]
    assert job["podSetAssignments"][0]["count"] == 9
    assert job["podSetAssignments"][0]["resourceUsage"]["cpu"] == "9"


def test_admission_fair_sharing_setup_admits_both_queues(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two 3-cpu Jobs from lq-a and lq-b fit the 9-cpu ClusterQueue: both are admitted."""
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "admission-fs"))
    assert len(doc["admitted"]) == 2 and not doc["pending"]
    assert {a["clusterQueue"] for a in doc["admitted"]} == {"cluster-queue"}


# -- cohorts ----------------------------------------------------------------------------------


def test_cohort_quota_is_borrowed_by_a_queue_without_nominal_quota(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/concepts/cohort.md: a ClusterQueue with nominalQuota 0 may use the 12 cpu its
    Cohort defines."""
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "cohort-quota"))
    (job,) = doc["admitted"]
    assert job["clusterQueue"] == "my-cluster-queue"
    assert doc["usage"]["my-cluster-queue"]["default-flavor"]["cpu"] == {
        "total": "12",
        "borrowed": "12",
    }


def test_cohort_blocks_build_the_documented_tree() -> None:
    hello = load_paths([str(EXAMPLES / "cohort-hello")])
    assert hello.cluster_queues["my-cluster-queue"].cohort == "hello-cohort"
    tree = load_paths([str(EXAMPLES / "cohort-tree")])
    assert {n: c.parent for n, c in tree.cohorts.items()} == {
        "root-cohort": None,
        "important-org": "root-cohort",
        "regular-org": "root-cohort",
    }


def test_v1beta1_files_are_converted() -> None:
    """Kueue's conversion webhook: v1beta1 ``spec.cohort`` is v1beta2's ``cohortName``."""
    old = load_paths([str(EXAMPLES / "v1beta1-cohort")])
    assert old.cluster_queues["cq-b"].cohort == "team-ab"
    single = load_paths([str(EXAMPLES / "v1beta1-single-cq")])
    new = load_paths([str(EXAMPLES / "single-cq" / "single-clusterqueue-setup.yaml")])
    assert single.cluster_queues == new.cluster_queues
    assert single.local_queues == new.local_queues


# -- flavors, setups ----------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["flavors-empty", "flavors-taints", "flavors-tolerations"])
def test_a_lone_flavor_loads_with_a_warning_that_nothing_uses_it(
    capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    _, _, err = plan(capsys, "-f", str(EXAMPLES / folder))
    (line,) = warnings(err)
    assert "is not used by any ClusterQueue or Cohort" in line


def test_flavor_taints_and_tolerations_are_read() -> None:
    taints = load_paths([str(EXAMPLES / "flavors-taints")]).flavors["spot"]
    assert [t.key for t in taints.node_taints] == ["spot"]
    tolerations = load_paths([str(EXAMPLES / "flavors-tolerations")]).flavors["spot"]
    assert tolerations.tolerations


@pytest.mark.parametrize(
    ("folder", "queues", "flavors"),
    [
        ("concurrent-admission", ["team-cluster-queue"], ["reservation", "on-demand", "spot"]),
        ("dra", ["cluster-queue"], ["default-flavor"]),
    ],
)
def test_setups_create_their_queues(folder: str, queues: list[str], flavors: list[str]) -> None:
    inputs = load_paths([str(EXAMPLES / folder)])
    assert list(inputs.cluster_queues) == queues
    assert list(inputs.flavors) == flavors


def test_kueueviz_demo_admits_every_job_with_its_priority(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The KueueViz demo: three Jobs of three WorkloadPriorityClasses, one per
    ClusterQueue of the ai-for-humanity-foundation cohort, all within quota."""
    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "kueueviz"))
    cqs = {
        a["workload"].split("/")[1].rsplit("-", 2)[0]: a["clusterQueue"] for a in doc["admitted"]
    }
    assert cqs == {
        "job-agi": "agi-cluster-queue",
        "job-llm": "llm-cluster-queue",
        "job-cancer-research": "emergency-cluster-queue",
    }
    assert any("ResourceFlavor spot is not used" in w for w in warnings(err))
    inputs = load_paths([str(EXAMPLES / "kueueviz")])
    assert sorted(w.priority for w in inputs.workloads) == [1, 1000, 1_000_000]


# -- AdmissionChecks, and kinds Quartermaster does not read ------------------------------------


def test_an_admission_check_without_status_is_taken_as_active_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "admission-check"))
    lines = warnings(err)
    assert len(lines) == 2
    assert "AdmissionCheck prov-test has no Active condition: taken as Active" in lines[0]
    assert "skipped ProvisioningRequestConfig prov-test-config" in lines[1]
    assert "sample-admission-check.yaml document 0" in lines[0]
    assert doc["admitted"] == doc["pending"] == []


def test_provisioning_reserves_quota_and_waits_for_the_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/concepts/admission_check/provisioning_request.md: the Job gets quota, then waits
    for the ProvisioningRequest: plan shows the reservation and the check it waits on."""
    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "provisioning"))
    (job,) = doc["admitted"]
    assert job["clusterQueue"] == "cluster-queue"
    assert job["admissionChecks"] == ["sample-prov"]
    (waiting,) = doc["admissionChecks"]
    assert waiting["workload"] == job["workload"]
    assert waiting["action"] == "Wait"
    assert waiting["checks"] == [{"name": "sample-prov", "state": "Pending"}]
    assert not [w for w in warnings(err) if "admissionChecksStrategy" in w]
    assert main(["plan", "-f", str(EXAMPLES / "provisioning"), "-o", "table"]) == 0
    (row,) = [ln for ln in capsys.readouterr().out.splitlines() if job["workload"] in ln]
    assert row.endswith("; waits for AdmissionChecks sample-prov")


def test_a_cronjob_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    """A CronJob is not admitted itself: the Jobs it creates later are (Kueue docs,
    run_cronjobs.md)."""
    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "otherjobs" / "sample-cronjob.yaml"))
    (line,) = warnings(err)
    assert "skipped CronJob default/sample-cronjob (batch/v1)" in line
    assert doc["admitted"] == []


def test_jobset_and_pytorchjob_are_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/tasks/run/jobsets.md, kubeflow/pytorchjobs.md: both are admitted in
    cluster-queue, one podSet per replicated job / replica type."""
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "otherjobs"))
    podsets = {
        a["workload"].split("/")[1].split("-")[0]: [p["name"] for p in a["podSetAssignments"]]
        for a in doc["admitted"]
    }
    assert podsets == {"jobset": ["workers", "driver"], "pytorchjob": ["master", "worker"]}
    assert {a["clusterQueue"] for a in doc["admitted"]} == {"cluster-queue"}


@pytest.mark.xfail(strict=True, reason="plan does not read plain Pods (pod groups) yet")
def test_plain_pods_are_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/tasks/run/plain_pods.md: the pod and the pod group are admitted."""
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "pods"))
    assert len(doc["admitted"]) == 2


def test_queued_pods_are_named_in_a_warning_meanwhile(capsys: pytest.CaptureFixture[str]) -> None:
    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "pods"))
    lines = [w for w in warnings(err) if "does not admit plain pods" in w]
    assert len(lines) == 3 and "names LocalQueue user-queue" in lines[0]
    assert doc["admitted"] == doc["pending"] == []


def test_tas_job_is_admitted_inside_one_rack(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/concepts/topology_aware_scheduling.md, sample-job-required.yaml on the kind
    cluster of tas/kind-cluster.yaml (two 8-cpu workers per rack): the 10 pods requiring
    one rack are admitted, all in one rack."""
    from queues.api.topology_assignment import from_v1beta2

    _, doc, err = plan(capsys, "-f", str(EXAMPLES / "tas"))
    (job,) = doc["admitted"]
    (psa,) = job["podSetAssignments"]
    assignment = from_v1beta2(psa["topologyAssignment"])
    assert assignment.pod_count == 10
    nodes = load_paths([str(EXAMPLES / "tas")]).nodes
    racks = {
        (nodes[values[-1]].labels["cloud.provider.com/topology-block"],
         nodes[values[-1]].labels["cloud.provider.com/topology-rack"])
        for values, _ in assignment.domains
    }  # fmt: skip
    assert len(racks) == 1
    assert not warnings(err)


# -- resource transformations (Configuration.resources) ------------------------------------------


def test_shared_quota_across_flavors_stops_at_the_credits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/tasks/manage/share_quotas_across_flavors.md: with the cpu -> cpu_credits
    transformation, five 3-cpu Jobs (``kubectl create`` five times) give four admitted
    and one pending: "insufficient unused quota for cpu_credits in flavor credits, 1
    more needed"; each Workload requests cpu 3 and cpu_credits 3."""
    folder = EXAMPLES / "shared-quota"
    job = str(folder / "shared-quota-sample-job.yaml")
    code, doc, err = plan(
        capsys,
        "--config",
        str(folder / "kueue-config.yaml"),
        "-f",
        str(folder / "shared-quota-setup.yaml"),
        *["-f", job] * 5,
    )
    assert code == 0, err
    assert len(doc["admitted"]) == 4
    for a in doc["admitted"]:
        assert a["podSetAssignments"][0]["resourceUsage"] == {"cpu": "3", "cpu_credits": "3"}
    (pending,) = doc["pending"]
    assert pending["message"].startswith(
        "couldn't assign flavors to podSet main: insufficient unused quota for cpu_credits "
        "in flavor credits, 1 more needed"
    )
    assert doc["usage"]["team-cluster-queue"]["credits"]["cpu_credits"]["total"] == "12"
    assert len({g["name"] for g in doc["generatedNames"]}) == 5


def test_shared_quota_without_the_configuration_counts_only_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, doc, _ = plan(capsys, "-f", str(EXAMPLES / "shared-quota"))
    (job,) = doc["admitted"]
    assert job["podSetAssignments"][0]["resourceUsage"] == {"cpu": "3"}


# -- the default controller configuration and the perf configs ------------------------------------


def test_the_default_controller_configuration_loads_with_what_has_no_effect() -> None:
    config = load_config(str(EXAMPLES / "kueue-controller-manager-config.yaml"))
    assert [w.split(": ", 2)[1] for w in config.warnings] == [
        "controller",
        "integrations.frameworks",
    ]
    assert all("has no effect" in w for w in config.warnings)
    frameworks = config.warnings[1].split("(", 1)[1].split(":")[0]  # the names without effect
    assert "batch/job" not in frameworks and "jobset.x-k8s.io/jobset" not in frameworks
    assert set(frameworks.split(", ")) == set(
        yaml.safe_load((EXAMPLES / "kueue-controller-manager-config.yaml").read_text())[
            "integrations"
        ]["frameworks"]
    ) - set(BY_FRAMEWORK)
    listed = set(
        yaml.safe_load((EXAMPLES / "kueue-controller-manager-config.yaml").read_text())[
            "integrations"
        ]["frameworks"]
    )
    assert config.frameworks.enabled == listed & set(BY_FRAMEWORK)  # the registered ones run
    assert {"batch/job", "pod", "jobset.x-k8s.io/jobset"} <= config.frameworks.enabled
    doc = config.doc
    assert (doc.clientConnection.qps, doc.clientConnection.burst) == (300, 500)
    assert doc.leaderElection is not None and doc.leaderElection.resourceName == (
        "c1f6bfd2.kueue.x-k8s.io"
    )
    listen = listen_defaults(config)
    assert (listen.webhook_port, listen.metrics_port, listen.health_port) == (9443, 8443, 8081)


def test_plan_runs_with_the_default_controller_configuration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, err = plan(
        capsys,
        "--config",
        str(EXAMPLES / "kueue-controller-manager-config.yaml"),
        "-f",
        str(EXAMPLES / "single-cq"),
    )
    assert code == 0 and len(doc["admitted"]) == 1
    assert sum("has no effect" in w for w in warnings(err)) == 2


def _rangespec(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((KUEUE_PERF / f"{name}.rangespec.yaml").read_text())
    return spec


def test_perf_baseline_meets_kueues_range_spec() -> None:
    """test/performance/scheduler: the baseline's rangespec (ClusterQueue usage at least
    50%, average time to admission per class at most its bound) holds for the simulated
    run, and every one of the 15,000 workloads finishes."""
    scenario = load_scenario(str(EXAMPLES / "perf" / "baseline.yaml"))
    assert len(scenario.workloads) == 15_000 and len(scenario.cluster_queues) == 30
    summary, _ = simulate_summary(scenario, config=load_config(None))
    spec = _rangespec("baseline")
    for cls, minimum in spec["clusterQueueClassesMinUsage"].items():
        assert summary["clusterQueueClasses"][cls]["usagePercent"] >= minimum
    classes = summary["workloadClasses"]
    for cls, bound in spec["wlClassesMaxAvgTimeToAdmissionMs"].items():
        assert classes[cls]["averageTimeToAdmissionMs"] <= bound
    assert sum(c["count"] for c in classes.values()) == 15_000


def test_perf_large_scale_config_loads() -> None:
    """Simulated in ``python -m bench sim-large-scale`` (too heavy for the test suite)."""
    scenario = load_scenario(str(EXAMPLES / "perf" / "large-scale.yaml"))
    assert len(scenario.cluster_queues) == 1000
    assert (EXAMPLES / "perf" / "large-scale.yaml").read_bytes() == (
        KUEUE_PERF / "large-scale.yaml"
    ).read_bytes()


def test_perf_tas_config_is_refused_with_the_reason() -> None:
    with pytest.raises(ScenarioError, match="topology-aware scheduling is not simulated"):
        load_scenario(str(EXAMPLES / "perf" / "tas.yaml"))


# -- the example Kueue refuses ------------------------------------------------------------------------


def test_the_example_kueue_refuses_is_refused_saying_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = plan(capsys, "-f", str(DATA / "kueue-examples-invalid" / "minimal-cq"))
    assert code == 2
    assert "ClusterQueue cluster-queue-2" in err
    assert "spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]" in err
    assert 'Unsupported value: "default-flavor"' in err
    assert "this ClusterQueue has none" in err
    assert "supported values: \n" not in err and not err.rstrip().endswith("supported values:")
