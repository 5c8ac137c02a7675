"""Kueue's ``Configuration.resources``: excluded prefixes and resource transformations.

The arithmetic is pinned by the examples of Kueue's own documentation
(administer_cluster_quotas.md, using_hami.md, the default controller configuration's
MIG comment); then the same configuration is shown to act through every driver that
fills the engine's cache: ``plan``, ``simulate`` and ``serve`` (API double and, with
``KUBEBUILDER_ASSETS``, a real API server).
"""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.main import main
from admission.cli.simulate import load_scenario, simulate_summary
from admission.config.load import parse_config
from admission.config.schema import ConfigError
from admission.kube.client import resources as k
from queues.model import PodSet, Workload
from queues.quantity import to_units
from queues.transformations import ResourceTransformation, ResourceTransformer
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
)

MIG = "nvidia.com/mig-4g.5gb"
MIG_CONFIG = {  # the transformation in Kueue's controller_manager_config.yaml comment
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "resources": {
        "transformations": [
            {
                "input": MIG,
                "strategy": "Replace",
                "outputs": {
                    "example.com/accelerator-memory": "5Gi",
                    "example.com/accelerator-gpc": 4,
                },
            }
        ]
    },
}


def units(**quantities: str | int) -> dict[str, int]:
    return {
        name.replace("__", "/").replace("_", "-"): to_units(name, q)
        for name, q in quantities.items()
    }


def transformer(doc: dict[str, Any]) -> ResourceTransformer:
    return parse_config(doc).resources


# -- the arithmetic, on Kueue's documented examples -----------------------------------------------


def test_kueue_docs_example_retain_and_replace() -> None:
    """administer_cluster_quotas.md, "Transform resources for quota management"."""
    t = transformer(
        {
            "resources": {
                "transformations": [
                    {
                        "input": "example.com/gpu-type1",
                        "strategy": "Replace",
                        "outputs": {"example.com/gpu-memory": "5Gi", "example.com/credits": 10},
                    },
                    {
                        "input": "example.com/gpu-type2",
                        "strategy": "Replace",
                        "outputs": {"example.com/gpu-memory": "20Gi", "example.com/credits": 40},
                    },
                    {"input": "cpu", "strategy": "Retain", "outputs": {"example.com/credits": 1}},
                ]
            }
        }
    )
    pod = {
        "cpu": 1000,
        "memory": 100 * 2**30,
        "example.com/gpu-type1": 2,
        "example.com/gpu-type2": 1,
    }
    assert t.requests(pod) == {
        "cpu": 1000,
        "memory": 100 * 2**30,
        "example.com/gpu-memory": 30 * 2**30,
        "example.com/credits": 61,
    }


def test_hami_multiply_by() -> None:
    """using_hami.md: per-vGPU cores and memory times the number of vGPUs."""
    t = transformer(
        {
            "resources": {
                "transformations": [
                    {
                        "input": "nvidia.com/gpucores",
                        "strategy": "Replace",
                        "multiplyBy": "nvidia.com/gpu",
                        "outputs": {"nvidia.com/total-gpucores": "1"},
                    },
                    {
                        "input": "nvidia.com/gpumem",
                        "strategy": "Replace",
                        "multiplyBy": "nvidia.com/gpu",
                        "outputs": {"nvidia.com/total-gpumem": "1"},
                    },
                ]
            }
        }
    )
    pod = {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 1024}
    assert t.requests(pod) == {
        "nvidia.com/gpu": 2,
        "nvidia.com/total-gpucores": 60,
        "nvidia.com/total-gpumem": 2048,
    }
    # multiplyBy names a resource the pod does not ask for: the input alone
    assert t.requests({"nvidia.com/gpumem": 1024}) == {"nvidia.com/total-gpumem": 1024}


def test_mig_slices_become_accelerator_memory_and_compute_slices() -> None:
    t = transformer(MIG_CONFIG)
    assert t.requests({MIG: 2, "cpu": 500}) == {
        "cpu": 500,
        "example.com/accelerator-memory": 10 * 2**30,
        "example.com/accelerator-gpc": 8,
    }


def test_fractions_round_up_per_pod_and_negative_totals_are_zero() -> None:
    """Kueue's Requests round each pod's quantity up (``Value()``); an allowance written
    as a negative output cancels others, never below zero."""
    t = ResourceTransformer.of(
        transformations=[
            ResourceTransformation(
                "nvidia.com/mig-1g.10gb", "Replace", (("nvidia.com/gpu", Fraction(1, 7)),)
            ),
            ResourceTransformation(
                "example.com/discount", "Replace", (("example.com/credits", Fraction(-5)),)
            ),
            ResourceTransformation("cpu", "Retain", (("example.com/credits", Fraction(1)),)),
        ]
    )
    assert t.requests({"nvidia.com/mig-1g.10gb": 1}) == {"nvidia.com/gpu": 1}
    assert t.requests({"nvidia.com/mig-1g.10gb": 7}) == {"nvidia.com/gpu": 1}
    assert t.requests({"cpu": 2000, "example.com/discount": 1}) == {
        "cpu": 2000,
        "example.com/credits": 0,
    }
    # cpu in milli-cores: 1500m of cpu is 1.5 credits, rounded up to 2
    assert t.requests({"cpu": 1500}) == {"cpu": 1500, "example.com/credits": 2}


def test_excluded_prefixes_are_dropped_before_transformations() -> None:
    t = transformer(
        {
            "resources": {
                "excludeResourcePrefixes": ["example.com/", "vendor.io/bookkeeping"],
                "transformations": [{"input": "example.com/x", "outputs": {"credits": 1}}],
            }
        }
    )
    assert t.requests({"cpu": 1000, "example.com/x": 3, "vendor.io/bookkeeping-a": 1}) == {
        "cpu": 1000
    }


def test_applying_twice_is_applying_once() -> None:
    """Retain keeps the input: a workload read again must not be charged its outputs twice."""
    t = transformer(
        {"resources": {"transformations": [{"input": "cpu", "outputs": {"credits": 1}}]}}
    )
    wl = Workload("ns", "w", [PodSet("main", 1, {"cpu": 3000})])
    t.apply(wl)
    t.apply(wl)
    assert wl.pod_sets[0].requests == {"cpu": 3000, "credits": 3}
    assert wl.pod_sets[0].declared_requests == {"cpu": 3000}


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            {"transformations": [{"input": "a", "strategy": "Swap"}]},
            'supported values: "Retain", "Replace"',
        ),
        ({"transformations": [{"input": "a"}, {"input": "a"}]}, 'Duplicate value: "a"'),
        (
            {"transformations": [{"input": "a", "outputs": {"b": "lots"}}]},
            'b: invalid quantity "lots"',
        ),
        (
            {"transformations": [{"input": "a", "outpts": {}}]},
            "transformations.0.outpts: unknown field",
        ),
        (
            {"quotaCheckStrategy": "IgnoreUndeclared", "excludeResourcePrefixes": ["x"]},
            "excludeResourcePrefixes is not allowed",
        ),
    ],
)
def test_bad_resources_sections_name_the_field(resources: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="resources") as info:
        parse_config({"resources": resources}, source="c.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("c.yaml: resources")


# -- through plan ---------------------------------------------------------------------------------

MIG_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100-mig}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: inference}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [example.com/accelerator-memory, example.com/accelerator-gpc]
    flavors:
    - name: a100-mig
      resources:
      - {name: example.com/accelerator-memory, nominalQuota: 20Gi}
      - {name: example.com/accelerator-gpc, nominalQuota: "16"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: inference}
"""


def mig_job(name: str, slices: int, pods: int = 1) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: lq}}}}
spec:
  parallelism: {pods}
  completions: {pods}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        resources: {{limits: {{{MIG}: "{slices}"}}}}
"""


def test_plan_charges_the_transformed_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = tmp_path / "objects.yaml"
    objects.write_text(
        "---".join([MIG_OBJECTS, mig_job("a", 1, pods=2), mig_job("b", 2), mig_job("c", 1)])
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(MIG_CONFIG))
    assert main(["plan", "-f", str(objects), "--config", str(config), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    usage = {
        a["workload"].split("/")[1][:5]: a["podSetAssignments"][0]["resourceUsage"]
        for a in doc["admitted"]
    }
    assert usage == {
        "job-a": {"example.com/accelerator-gpc": "8", "example.com/accelerator-memory": "10Gi"},
        "job-b": {"example.com/accelerator-gpc": "8", "example.com/accelerator-memory": "10Gi"},
    }
    (pending,) = doc["pending"]
    assert "insufficient unused quota for example.com/accelerator-memory" in pending["message"]
    assert "5Gi more needed" in pending["message"]
    # without the configuration the MIG resource is not covered: nothing fits
    assert main(["plan", "-f", str(objects), "-o", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["admitted"] == [] and len(plain["pending"]) == 3


# -- through simulate -----------------------------------------------------------------------------


def test_simulate_charges_the_transformed_resources(tmp_path: Path) -> None:
    trace = tmp_path / "trace.yaml"
    entries = [
        {
            "name": f"infer-{i}",
            "namespace": "ml",
            "localQueue": "lq",
            "arrival": i,
            "runtime": 60,
            "podSets": [{"name": "main", "count": 1, "requests": {MIG: 1}}],
        }
        for i in range(6)
    ]
    trace.write_text(MIG_OBJECTS + "---\n" + yaml.safe_dump({"trace": entries}))
    scenario = load_scenario(str(trace))
    summary, result = simulate_summary(scenario, config=parse_config(MIG_CONFIG))
    counts = summary["workloadClasses"]
    assert sum(c["count"] for c in counts.values()) == 6
    # 20Gi of accelerator memory holds four 5Gi slices at a time: two wait a full runtime
    waits = sorted(
        r.admitted_us - r.sim.arrival_us for r in result.records if r.admitted_us is not None
    )
    assert len(waits) == 6 and waits[-1] >= 55_000_000


# -- through serve ----------------------------------------------------------------------------------


def test_serve_admits_with_the_transformed_usage(tmp_path: Path, backend: Any) -> None:
    objects = [
        namespace("ml"),
        flavor("a100-mig"),
        cluster_queue(
            "inference",
            {
                "a100-mig": {
                    "example.com/accelerator-memory": "20Gi",
                    "example.com/accelerator-gpc": "16",
                }
            },
        ),
        local_queue("ml", "lq", "inference"),
    ]

    async def run() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects, config=parse_config(MIG_CONFIG)
        ) as s:
            job = yaml.safe_load(mig_job("infer", 2))
            job["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox"
            await s.user.create(k.JOBS, job, namespace="ml")
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("ml", "infer")) and w, what="admission"
            )
            (psa,) = wl["status"]["admission"]["podSetAssignments"]
            assert psa["resourceUsage"] == {
                "example.com/accelerator-gpc": "8",
                "example.com/accelerator-memory": "10Gi",
            }
            assert psa["flavors"] == {
                "example.com/accelerator-gpc": "a100-mig",
                "example.com/accelerator-memory": "a100-mig",
            }

    asyncio.run(run())
