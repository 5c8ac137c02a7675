"""``why`` and ``list -o wide`` show a workload's failed and avoided nodes."""

from __future__ import annotations

from admission.cli.kueuectl_format import WIDE_WORKLOAD, wide_workload
from admission.cli.kueuectl_why import as_text, node_failures

WL = {
    "metadata": {
        "name": "train",
        "namespace": "team-a",
        "annotations": {
            "quartermaster.io/avoid-nodes": "n0=2099-01-01T00:00:00Z,old=2000-01-01T00:00:00Z"
        },
    },
    "spec": {"priority": 5},
    "status": {"unhealthyNodes": [{"name": "h2"}]},
}


def test_why_names_the_unhealthy_and_the_avoided_nodes_still_in_force() -> None:
    doc = node_failures(WL, now=1_800_000_000)
    assert doc == {"unhealthyNodes": ["h2"], "avoidedNodes": {"n0": "2099-01-01T00:00:00Z"}}
    text = as_text({
        "workload": "team-a/train", "clusterQueue": "cq", "reason": "Admitted", "message": "",
        "admittedWithoutChange": False, "changes": [], **doc,
    })  # fmt: skip
    assert text.splitlines() == [
        "Workload team-a/train is admitted in ClusterQueue cq.",
        "  failed node(s) awaiting a replacement: h2",
        "  avoids node n0 until 2099-01-01T00:00:00Z (it failed on it)",
    ]
    assert node_failures({"metadata": {}}, now=0) == {}


def test_the_wide_list_has_the_node_columns() -> None:
    row = dict(zip(WIDE_WORKLOAD, wide_workload(WL), strict=True))
    assert row["UNHEALTHY NODES"] == "h2"
    assert row["AVOIDED NODES"] == "n0"
