"""``plan`` gives every pending workload its place in its ClusterQueue and LocalQueue,
the numbers the visibility API reports on the cluster (docs/semantics.md §5.5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli.main import main
from tests.unit.drivers.test_loader import CLUSTER_QUEUE, FLAVOR, LOCAL_QUEUE, workload_doc

SECOND_QUEUE = LOCAL_QUEUE.replace("name: lq,", "name: lq2,")


def test_pending_workloads_carry_their_positions_in_both_queues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE, SECOND_QUEUE]
    # same priority, no creation times: the queue orders them by name; "a-big" takes
    # all 10 cpus and the other three wait behind it
    for name, queue in (("a-big", "lq"), ("b", "lq"), ("c", "lq2"), ("d", "lq")):
        cpu = "10" if name == "a-big" else "4"
        docs.append(
            workload_doc(name, namespace="team-a", cpu=cpu).replace(
                "queueName: lq", f"queueName: {queue}"
            )
        )
    path = tmp_path / "objects.yaml"
    path.write_text("\n---\n".join(docs))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    pending = {p["workload"]: p for p in json.loads(capsys.readouterr().out)["pending"]}
    assert {
        k: (p["positionInClusterQueue"], p["positionInLocalQueue"]) for k, p in pending.items()
    } == {
        "team-a/b": (0, 0),
        "team-a/c": (1, 0),
        "team-a/d": (2, 1),
    }
    assert main(["plan", "-f", str(path), "-o", "table"]) == 0
    table = capsys.readouterr().out.split("PENDING\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split()[:3] == ["WORKLOAD", "CLUSTERQUEUE", "POSITION"]
    assert [row.split()[:3] for row in table[1:]] == [
        ["team-a/b", "cq", "0"],
        ["team-a/c", "cq", "1"],
        ["team-a/d", "cq", "2"],
    ]
