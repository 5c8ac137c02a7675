"""simulate with topology-aware scheduling: traces with Nodes and topology requests,
placement quality, and the topology-blind comparison in the same run."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.main import main
from admission.cli.simulate import load_scenario, simulate_summary
from admission.sim.placement import placement_table
from admission.sim.scenario import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[3] / "admission" / "scenarios"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"


def trace(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    docs: list[Any] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "t"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "tas",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16"}],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        },
    ]
    for r in range(2):
        for h in range(2):
            name = f"r{r}-h{h}"
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {"pool": "gpu", RACK: f"r{r}", HOST: name},
                    },
                    "status": {"allocatable": {"nvidia.com/gpu": "4"}},
                }
            )
    docs.append({"trace": entries})
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def entry(name: str, arrival: int, pods: int, gpus: int, request: dict[str, Any] | None) -> dict:
    ps: dict[str, Any] = {"count": pods, "requests": {"nvidia.com/gpu": gpus}}
    if request is not None:
        ps["topologyRequest"] = request
    return {
        "name": name,
        "namespace": "ns",
        "localQueue": "lq",
        "arrival": arrival,
        "runtime": 100,
        "podSets": [ps],
    }


def test_gangs_requiring_a_rack_land_in_one_rack_and_blind_ones_do_not(tmp_path: Path) -> None:
    # A 1-GPU job on r0-h0 first; then a 2x4-GPU gang: aware it takes rack r1 whole,
    # blind it fills the fullest hosts first (r0-h0's 3 free GPUs cannot hold a 4-GPU pod,
    # so r0-h1 and then r1): spread over two racks.
    path = trace(
        tmp_path,
        [entry("small", 0, 1, 1, None), entry("gang", 1, 2, 4, {"required": RACK})],
    )
    summary, result = simulate_summary(load_scenario(str(path)))
    topo = summary["topology"]
    assert topo["aware"]["insideOneDomain"][RACK] == {"gangs": 1, "inside": 1, "share": 1.0}
    assert topo["blind"]["insideOneDomain"][RACK] == {"gangs": 1, "inside": 0, "share": 0.0}
    rec = next(r for r in result.records if r.key == "ns/gang")
    assert rec.placement is not None
    assert sorted(v[0] for v, _ in rec.placement["main"].domains) == ["r1-h0", "r1-h1"]
    assert topo["aware"]["largeGangs"]["count"] == 1
    assert topo["aware"]["largeGangs"]["neverAdmitted"] == 0


def test_the_placement_table_gives_the_longest_wait_of_large_gangs_beside_the_p95(
    tmp_path: Path,
) -> None:
    # three 2x4-GPU gangs that each need a whole rack of the two: the third waits 100 s
    gangs = [entry(f"gang-{i}", 0, 2, 4, {"required": RACK}) for i in range(3)]
    summary, _ = simulate_summary(load_scenario(str(trace(tmp_path, gangs))))
    large = summary["topology"]["aware"]["largeGangs"]
    assert large["maxTimeToAdmissionS"] == 100.0
    row = next(line for line in placement_table(summary).splitlines() if "(aware)" in line)
    cells = [c.strip() for c in row.split("  ") if c.strip()]
    assert cells[2:4] == [f"p95 {large['p95TimeToAdmissionS']} s", "max 100.0 s"]


def test_a_gang_no_rack_holds_is_never_admitted_aware_but_is_blind(tmp_path: Path) -> None:
    path = trace(tmp_path, [entry("too-big", 0, 3, 4, {"required": RACK})])
    summary, _ = simulate_summary(load_scenario(str(path)))
    topo = summary["topology"]
    assert topo["aware"]["largeGangs"]["neverAdmitted"] == 1
    assert topo["blind"]["largeGangs"]["neverAdmitted"] == 0


def test_a_bad_topology_request_in_a_trace_names_the_field(tmp_path: Path) -> None:
    path = trace(tmp_path, [entry("x", 0, 1, 1, {"requierd": RACK})])
    with pytest.raises(
        ScenarioError, match=r"podSets\[0\]\.topologyRequest\.requierd: unknown field"
    ):
        load_scenario(str(path))


def test_the_bundled_gpu_topology_scenario_compares_aware_and_blind() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["simulate", str(SCENARIOS / "gpu-topology.yaml"), "-o", "json"])
    assert code == 0
    topo = json.loads(out.getvalue())["topology"]
    clique = "nvidia.com/gpu.clique"
    assert topo["aware"]["insideOneDomain"][clique]["share"] == 1.0
    assert topo["blind"]["insideOneDomain"][clique]["share"] < 0.5
    assert set(topo["aware"]["fragmentation"]) == {clique, "cloud.provider.com/topology-block"}


def test_the_bundled_gpu_topology_scenario_is_what_its_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "generate_gpu_topology", SCENARIOS / "generate_gpu_topology.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        module.main()
    assert buf.getvalue() == (SCENARIOS / "gpu-topology.yaml").read_text()


def test_report_and_table_show_the_placement_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = trace(
        tmp_path, [entry("small", 0, 1, 1, None), entry("gang", 1, 2, 4, {"required": RACK})]
    )
    out_dir = tmp_path / "report"
    assert main(["simulate", str(path), "-o", "table", "--report", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert "TOPOLOGY PLACEMENT (aware vs the same workload topology-blind)" in text
    row = next(line for line in text.splitlines() if line.startswith(RACK))
    assert row.split()[1:2] == ["1/1"] and row.split()[3:4] == ["0/1"]
    html = (out_dir / "index.html").read_text()
    assert "<h2>Topology placement</h2>" in html
    assert json.loads((out_dir / "summary.json").read_text())["topology"]["aware"]
