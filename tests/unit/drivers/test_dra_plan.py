"""DRA through ``quartermaster plan``: Kueue's DRA examples, applied unchanged, charge
the quota Kueue's documentation shows (site/content/en/docs/tasks/manage/setup_dra.md,
tasks/run/dra.md), and ``resources.deviceClassMappings`` is read and checked as Kueue's
``validateDeviceClassMappings`` checks it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.cli.main import main
from admission.config.load import parse_config
from admission.config.schema import ConfigError

DRA = Path(__file__).resolve().parents[2] / "support" / "data" / "kueue-examples" / "dra"
SETUP = DRA / "setup"
CONFIG = str(SETUP / "kueue-config.yaml")
GPU_RESOURCE = "example.com/gpu"


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["plan", *args, "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


def usage(doc: dict[str, Any], resource: str) -> str:
    return str(doc["usage"]["cluster-queue"]["default-flavor"][resource]["total"])


def test_the_rct_job_is_charged_one_device_per_request(capsys: pytest.CaptureFixture[str]) -> None:
    """setup_dra.md: each request naming a mapped DeviceClass consumes ``count`` units
    (default 1)."""
    doc = plan(
        capsys, "--config", CONFIG, "-f", str(DRA), "-f", str(SETUP / "deviceclass.yaml"),
        "-f", str(DRA / "jobs" / "sample-dra-rct-job.yaml"),
    )  # fmt: skip
    (job,) = doc["admitted"]
    assert job["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": "1", "memory": "200Mi", "example.com/gpu": "1"
    }  # fmt: skip


def test_an_extended_resource_served_by_dra_is_charged_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """tasks/run/dra.md, "Double counting": one GPU is 1, not 2."""
    doc = plan(capsys, "--config", CONFIG, "-f", str(DRA), "-f", str(SETUP / "deviceclass.yaml"),
               "-f", str(DRA / "jobs"))  # fmt: skip
    assert len(doc["admitted"]) == 2 and not doc["pending"]
    for job in doc["admitted"]:
        assert job["podSetAssignments"][0]["resourceUsage"]["example.com/gpu"] == "1"
    assert usage(doc, "example.com/gpu") == "2"


def test_without_a_mapping_the_rct_job_is_not_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    """setup_dra.md: not admitted rather than admitted without quota accounting."""
    doc = plan(capsys, "-f", str(DRA), "-f", str(SETUP / "deviceclass.yaml"),
               "-f", str(DRA / "jobs" / "sample-dra-rct-job.yaml"))  # fmt: skip
    (pending,) = doc["pending"]
    assert pending["reason"] == "Misconfigured"
    assert (
        "DeviceClass gpu.example.com is not mapped in DRA configuration for podset main"
        in (pending["message"])
    )
    assert usage(doc, "example.com/gpu") == "0"


def test_the_counter_job_is_charged_the_partitions_counter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """setup_dra.md, counter-based quota: the device's consumesCounters value (10Gi)."""
    doc = plan(capsys, "--config", str(SETUP / "counter-config.yaml"), "-f", str(DRA / "counter"),
               "-f", str(SETUP / "deviceclass.yaml"))  # fmt: skip
    (job,) = doc["admitted"]
    assert job["podSetAssignments"][0]["resourceUsage"]["gpu.memory"] == "10Gi"


def team(tmp_path: Path, *jobs: tuple[str, int, int]) -> Path:
    """Kueue's DRA queues (8 GPUs), a DeviceClass, and Jobs of (name, pods, devices per pod)."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "gpu.example.com"}},
    ]  # fmt: skip
    for i, (name, pods, devices) in enumerate(jobs):
        docs.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": "default", "name": f"{name}-gpus"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com",
                                            "count": devices}}]}}},
        })  # fmt: skip
        docs.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": "default", "name": name,
                         "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
                         "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x",
                                "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{name}-gpus"}],
            }}},
        })  # fmt: skip
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_devices_count_per_pod_times_the_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 pods x 2 GPUs = 6 of 8; the next Job's 2 x 2 = 4 does not fit, 1 x 2 does."""
    path = team(tmp_path, ("first", 3, 2), ("second", 2, 2), ("third", 1, 2))
    doc = plan(capsys, "--config", CONFIG, "-f", str(DRA), "-f", str(path))
    admitted = {a["workload"].split("-")[1]: a for a in doc["admitted"]}
    assert set(admitted) == {"first", "third"}
    assert admitted["first"]["podSetAssignments"][0]["resourceUsage"]["example.com/gpu"] == "6"
    assert usage(doc, "example.com/gpu") == "8"
    (pending,) = doc["pending"]
    assert pending["workload"].startswith("default/job-second-")
    assert "example.com/gpu" in pending["message"]


# -- the configuration ----------------------------------------------------------------------


def mappings(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"resources": {"deviceClassMappings": list(entries)}}


def test_the_mapping_is_read_without_a_warning() -> None:
    config = parse_config(yaml.safe_load(Path(CONFIG).read_text()))
    assert config.warnings == []
    (m,) = config.device_class_mappings
    assert (m.name, m.device_class_names) == ("example.com/gpu", ("gpu.example.com",))


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"name": "a.com/gpu", "deviceClassNames": ["gpu.example.com"]},
             {"name": "b.com/gpu", "deviceClassNames": ["gpu.example.com"]}],
            'deviceClassMappings[1].deviceClassNames[0]: Invalid value: "gpu.example.com": '
            "device class already mapped to resource a.com/gpu",
        ),
        (
            [{"name": "a.com/gpu", "deviceClassNames": ["x", "x"]}],
            'deviceClassMappings[0].deviceClassNames[1]: Duplicate value: "x"',
        ),
        (
            [{"name": "not a name!", "deviceClassNames": ["x"]}],
            'name: Invalid value: "not a name!"',
        ),
        (
            [{"name": "gpu.memory", "deviceClassNames": ["x"], "sources": [{"capacity": {
                "name": "gpu.example.com/memory", "driver": "gpu.example.com",
                "deviceSelector": {"cel": {"expression": "true"}}}}]}],
            "capacity sources require KueueDRAIntegrationConsumableCapacity to be enabled",
        ),
        (
            [{"name": "gpu.memory", "deviceClassNames": ["x"], "sources": [{"counter": {
                "name": "memory", "driver": "gpu.example.com",
                "deviceSelector": {"cel": {"expression": "device.driver =="}}}}]}],
            "sources[0].counter.deviceSelector.cel.expression: Invalid value",
        ),
        (
            [{"name": "a.com/gpu", "deviceClassNames": ["x"], "deviceClasses": ["y"]}],
            "deviceClassMappings.0.deviceClasses: unknown field",
        ),
    ],
)  # fmt: skip
def test_bad_mappings_are_configuration_errors(entries: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(mappings(*entries))
    assert message in str(err.value)
    assert "resources" in str(err.value)


# -- the what-if (the quota webhook's impact warnings), simulate ------------------------------


def test_impact_warnings_count_dra_devices(tmp_path: Path) -> None:
    """The webhook's what-if runs on the live cache's workloads, DRA devices counted: a
    cut of example.com/gpu below what the DRA Jobs hold is warned about, and an increase
    says when the pending DRA Job fits."""
    from admission.drivers.impact import impact_of_edit
    from admission.drivers.loader import load_paths
    from admission.drivers.plan import run_plan

    path = team(tmp_path, ("first", 3, 2), ("second", 2, 2))
    inputs = load_paths([str(DRA), str(path)])
    config = parse_config(yaml.safe_load(Path(CONFIG).read_text()))
    run_plan(inputs, config=config)  # the live state: first admitted (6 GPUs), second pending
    cq = inputs.cluster_queues["cluster-queue"]

    def impact(nominal: int) -> list[str]:
        edited = copy.deepcopy(cq)
        edited.resource_groups[0].flavors[0].resources[GPU_RESOURCE].nominal = nominal
        return impact_of_edit(
            flavors=inputs.flavors, cluster_queues=inputs.cluster_queues, cohorts=inputs.cohorts,
            local_queues=inputs.local_queues, workloads={w.key: w for w in inputs.workloads},
            namespace_labels=lambda ns: {"kubernetes.io/metadata.name": ns},
            kind="ClusterQueue", obj=edited, config=config,
        )  # fmt: skip

    cut = impact(2)
    assert cut[0] == (
        "ClusterQueue cluster-queue: admitted workloads use 6 example.com/gpu on flavor "
        "default-flavor, 4 over the new limit 2; they keep running (an edit evicts nothing)"
    )
    # second asks 2 pods x 2 GPUs: 10 GPUs leave it room, 9 do not
    assert "1 pending workload(s) now fit and will be admitted" in impact(10)[0]
    assert not any("now fit" in line for line in impact(9))


def test_simulate_charges_dra_devices(tmp_path: Path) -> None:
    """A trace of DRA Jobs: 8 GPUs hold two 2-pod x 2-GPU Jobs at a time, the third waits."""
    from admission.cli.simulate import load_scenario, simulate_summary

    docs = list(yaml.safe_load_all(team(tmp_path, ("j0", 2, 2)).read_text()))
    dc, rct, job = docs
    entries = []
    for i in range(3):
        j = copy.deepcopy(job)
        j["metadata"]["name"] = f"train-{i}"
        entries.append({"arrival": i, "runtime": 60, "job": j})
    trace = tmp_path / "trace.yaml"
    queues = (DRA / "sample-dra-queues.yaml").read_text()
    trace.write_text(queues + "---\n" + yaml.safe_dump_all([dc, rct, {"trace": entries}]))
    config = parse_config(yaml.safe_load(Path(CONFIG).read_text()))
    summary, result = simulate_summary(load_scenario(str(trace)), config=config)
    waits = sorted(
        r.admitted_us - r.sim.arrival_us for r in result.records if r.admitted_us is not None
    )
    assert len(waits) == 3 and waits[-1] >= 55_000_000 and waits[0] < 1_000_000


def test_the_examples_dra_variant_charges_the_organisations_quota(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """manifests/examples/README.md, "The DRA variant": both DRA Jobs admitted on the
    quota device-plugin Jobs use, mig-batch-eval then 10 slices short; without the
    configuration neither is admitted."""
    examples = Path(__file__).resolve().parents[3] / "manifests" / "examples"
    args = ("-f", str(examples), "-f", str(examples / "extras" / "dra"))
    doc = plan(capsys, *args, "--config", str(examples / "extras" / "dra-config.yaml"))
    got = {a["workload"].rsplit("-", 1)[0]: a["podSetAssignments"][0] for a in doc["admitted"]}
    finetune = got["training-prod/job-dra-llm-finetune"]
    assert finetune["resourceUsage"]["nvidia.com/gpu"] == "8"
    assert finetune["flavors"]["nvidia.com/gpu"] == "h100"
    assert got["inference-prod/job-dra-mig-serving-eval"]["resourceUsage"][
        "nvidia.com/mig-1g.10gb"
    ] == "6"  # fmt: skip
    (batch,) = [p for p in doc["pending"] if "mig-batch-eval" in p["workload"]]
    assert "10 more needed" in batch["message"]
    plain = plan(capsys, *args)
    unmapped = [p for p in plain["pending"] if p["reason"] == "Misconfigured"]
    assert {p["workload"].rsplit("-", 1)[0] for p in unmapped} == {
        "training-prod/job-dra-llm-finetune", "inference-prod/job-dra-mig-serving-eval"
    }  # fmt: skip


# -- no quota escape, whatever the jobs ---------------------------------------------------

job_shapes = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=4),  # pods
        st.sampled_from(["one", "two", "three", "unmapped", "named", "missing"]),
    ),
    min_size=1,
    max_size=8,
)
COUNTS = {"one": 1, "two": 2, "three": 3}


@settings(max_examples=25, deadline=None)
@given(shapes=job_shapes)
def test_admitted_dra_devices_never_exceed_quota(shapes: list[tuple[int, str]]) -> None:
    """Whatever DRA Jobs come, plan admits devices within the 8 GPUs, each admitted Job
    holds exactly pods x its claim's count, and a claim that cannot be counted (a class
    no mapping covers, a ResourceClaim by name, a missing template) is never admitted."""
    from admission.drivers.loader import load_documents
    from admission.drivers.plan import run_plan

    docs: list[dict[str, Any]] = list(
        yaml.safe_load_all((DRA / "sample-dra-queues.yaml").read_text())
    )
    for cls in ("gpu.example.com", "fpga.example.com"):
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                     "metadata": {"name": cls}})  # fmt: skip
    for name, count in (*COUNTS.items(), ("unmapped", 1)):
        cls = "fpga.example.com" if name == "unmapped" else "gpu.example.com"
        docs.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": "default", "name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "d", "exactly": {"deviceClassName": cls, "count": count}}]}}},
        })  # fmt: skip
    for i, (pods, claim) in enumerate(shapes):
        ref = {"resourceClaimName": "team"} if claim == "named" else {
            "resourceClaimTemplateName": claim
        }  # fmt: skip
        docs.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": "default", "name": f"j{i}-{claim}",
                         "creationTimestamp": f"2026-01-01T00:00:{i:02d}Z",
                         "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x",
                                "resources": {"requests": {"cpu": "1"}}}],
                "resourceClaims": [{"name": "d", **ref}]}}},
        })  # fmt: skip
    inputs = load_documents(("t", i, d) for i, d in enumerate(docs))
    config = parse_config(yaml.safe_load(Path(CONFIG).read_text()))
    result = run_plan(inputs, config=config)
    total = 0
    for decision in result.admitted:
        name = decision.workload.name
        index, claim = int(name.split("-")[1][1:]), name.split("-")[2]
        assert claim in COUNTS, name  # uncountable claims are never admitted
        (psa,) = decision.workload.admission.pod_set_assignments
        assert psa.resource_usage[GPU_RESOURCE] == shapes[index][0] * COUNTS[claim]
        total += psa.resource_usage[GPU_RESOURCE]
    assert total <= 8
    for key, (_cq, status) in result.pending.items():
        if key.split("-")[2] in ("unmapped", "named", "missing"):
            assert status.reason == "Misconfigured", (key, status)
