"""The kueuectl verbs against a live service: ``quartermaster create|list|stop|resume|
version`` as a subprocess with a kubeconfig, and ``kubectl qm ...`` through the real
``kubectl`` binary (the ``kubectl-qm`` entry point of pyproject.toml on PATH)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from tests.support.kube_harness import (
    ROOT,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
OBJECTS = [
    namespace("team-a"),
    namespace("team-b"),
    flavor("f", pool="a"),
    flavor("g"),
    cluster_queue("cq", {"f": {"cpu": 2}}, cohort="research"),
    cluster_queue("other", {"g": {"cpu": 1}}),
    local_queue("team-a", "lq", "cq"),
    local_queue("team-b", "lq-b", "other"),
]


async def cli(
    kubeconfig: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "admission", *args, "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def table(text: str) -> list[dict[str, str]]:
    """Parse kubectl-style columns (header words separated by 2+ spaces)."""
    import re

    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?:(?<=\s{2})|^)\S", header)]
    names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
    rows = []
    for ln in lines[1:]:
        cells = [ln[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


async def _pending_workloads(s: Stack, n: int) -> None:
    for i in range(n):
        wl = workload("team-a", f"w{i}", queue="lq", pod_sets=[("main", 1, "1")], priority=i)
        await s.user.create(kr.WORKLOADS, wl, namespace="team-a")


def test_list_verbs_show_kueuectls_columns_and_positions(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS, visibility=True) as s:
            kc = s.kubeconfig(tmp_path / "kc", namespace="team-a")
            await _pending_workloads(s, 4)  # one by one: w0 and w1 fit (2 cpu), then w2, w3 wait
            await eventually(
                lambda: sum(admitted(w) for w in s.workloads()) == 2, what="two admitted"
            )

            async def positions_known() -> Any:
                code, out, err = await cli(kc, "list", "workloads")
                assert code == 0, err
                rows = {r["NAME"]: r for r in table(out)}
                return rows if rows["w3"]["POSITION IN QUEUE"] else None

            rows = await eventually(positions_known, what="positions listed")
            assert list(table((await cli(kc, "list", "workloads"))[1])[0]) == [
                "NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS",
                "POSITION IN QUEUE", "EXEC TIME", "AGE",
            ]  # fmt: skip
            assert (rows["w0"]["STATUS"], rows["w1"]["STATUS"]) == ("ADMITTED", "ADMITTED")
            assert rows["w0"]["EXEC TIME"] != "" and rows["w0"]["POSITION IN QUEUE"] == ""
            # pending, in the queue's order: higher priority first
            assert (rows["w3"]["STATUS"], rows["w3"]["POSITION IN QUEUE"]) == ("PENDING", "0")
            assert (rows["w2"]["STATUS"], rows["w2"]["POSITION IN QUEUE"]) == ("PENDING", "1")
            assert {r["CLUSTERQUEUE"] for r in rows.values()} == {"cq"}
            assert {r["LOCALQUEUE"] for r in rows.values()} == {"lq"}

            code, out, _ = await cli(kc, "list", "wl", "--status", "pending")
            assert sorted(r["NAME"] for r in table(out)) == ["w2", "w3"]
            code, out, _ = await cli(kc, "list", "workloads", "-c", "cq")
            assert sorted(r["NAME"] for r in table(out)) == ["w0", "w1"]  # admitted by cq
            code, out, err = await cli(kc, "list", "workloads", "--status", "running")
            assert code == 2 and "invalid status value (running)" in err
            code, out, err = await cli(kc, "list", "workloads", "-n", "team-b")
            assert (code, out, err.strip()) == (0, "", "No resources found in team-b namespace.")

            code, out, _ = await cli(kc, "list", "clusterqueues")
            cqs = {r["NAME"]: r for r in table(out)}
            assert list(table(out)[0]) == [
                "NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE", "AGE"
            ]  # fmt: skip
            assert cqs["cq"]["COHORT"] == "research" and cqs["other"]["COHORT"] == ""

            async def cq_status() -> Any:
                rows = {r["NAME"]: r for r in table((await cli(kc, "list", "cq"))[1])}
                cq = rows["cq"]
                return (
                    cq
                    if (cq["PENDING WORKLOADS"], cq["ADMITTED WORKLOADS"]) == ("2", "2")
                    else None
                )

            cq_row = await eventually(cq_status, what="queue status counts")
            assert cq_row["ACTIVE"] == "true"
            code, out, _ = await cli(kc, "list", "cq", "--active", "false")
            assert out == ""

            code, out, _ = await cli(kc, "list", "localqueues", "-A")
            lqs = table(out)
            assert list(lqs[0]) == ["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING WORKLOADS",
                                    "ADMITTED WORKLOADS", "AGE"]  # fmt: skip
            assert {(r["NAMESPACE"], r["NAME"], r["CLUSTERQUEUE"]) for r in lqs} == {
                ("team-a", "lq", "cq"),
                ("team-b", "lq-b", "other"),
            }
            code, out, _ = await cli(kc, "list", "lq", "-A", "-c", "other")
            assert [r["NAME"] for r in table(out)] == ["lq-b"]

            code, out, _ = await cli(kc, "list", "resourceflavors")
            rfs = {r["NAME"]: r for r in table(out)}
            assert rfs["f"]["NODE LABELS"] == "pool=a" and rfs["g"]["NODE LABELS"] == ""
            code, out, _ = await cli(kc, "list", "rf", "-o", "name")
            assert out.split() == [
                "resourceflavor.kueue.x-k8s.io/f",
                "resourceflavor.kueue.x-k8s.io/g",
            ]

    asyncio.run(main())


def test_create_stop_and_resume_change_the_objects_the_service_acts_on(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            kc = s.kubeconfig(tmp_path / "kc", namespace="team-a")
            code, out, err = await cli(kc, "create", "localqueue", "lq2", "-c", "cq")
            assert (code, out.strip()) == (0, "localqueue.kueue.x-k8s.io/lq2 created"), err
            assert s.get("localqueues", "lq2", "team-a")["spec"]["clusterQueue"] == "cq"
            code, out, err = await cli(kc, "create", "lq", "lq3", "-c", "missing")
            assert code == 2 and "NotFound" in err and s.get("localqueues", "lq3", "team-a") is None
            code, out, err = await cli(kc, "create", "lq", "lq3", "-c", "missing", "-i")
            assert code == 0 and s.get("localqueues", "lq3", "team-a") is not None
            code, out, err = await cli(
                kc, "create", "lq", "lq4", "-c", "cq", "--dry-run=server", "-n", "team-b"
            )
            assert out.strip() == "localqueue.kueue.x-k8s.io/lq4 created (server dry run)"
            assert s.get("localqueues", "lq4", "team-b") is None

            await _pending_workloads(s, 2)
            await eventually(
                lambda: all(admitted(w) for w in s.workloads("team-a")) and len(s.workloads()) == 2,
                what="both admitted",
            )
            code, out, err = await cli(kc, "stop", "clusterqueue", "cq", "--keep-already-running")
            assert (code, out.strip()) == (0, "clusterqueue.kueue.x-k8s.io/cq stopped"), err
            assert s.get("clusterqueues", "cq")["spec"]["stopPolicy"] == "Hold"
            assert all(admitted(w) for w in s.workloads("team-a"))  # Hold keeps them running
            code, out, err = await cli(kc, "stop", "workload", "w0")
            assert out.strip() == "workload.kueue.x-k8s.io/w0 stopped"
            assert s.get("workloads", "w0", "team-a")["spec"]["active"] is False
            await eventually(
                lambda: not admitted(s.get("workloads", "w0", "team-a")), what="w0 evicted"
            )
            code, out, err = await cli(kc, "resume", "cq", "cq")
            assert s.get("clusterqueues", "cq")["spec"]["stopPolicy"] == "None"
            code, out, err = await cli(kc, "resume", "wl", "w0")
            assert out.strip() == "workload.kueue.x-k8s.io/w0 resumed"
            await eventually(
                lambda: admitted(s.get("workloads", "w0", "team-a")), what="w0 admitted again"
            )
            code, out, err = await cli(kc, "stop", "lq", "lq")
            assert s.get("localqueues", "lq", "team-a")["spec"]["stopPolicy"] == "HoldAndDrain"
            # HoldAndDrain evicts what the LocalQueue admitted, and admits nothing new
            await eventually(
                lambda: not any(admitted(w) for w in s.workloads("team-a")),
                what="the LocalQueue drained",
            )
            assert evicted_reason(s.get("workloads", "w0", "team-a")) == "LocalQueueStopped"
            await s.user.delete(kr.WORKLOADS, "w1", namespace="team-a")
            extra = workload("team-a", "w9", queue="lq", pod_sets=[("main", 1, "1")])
            await s.user.create(kr.WORKLOADS, extra, namespace="team-a")
            await asyncio.sleep(1.0)
            assert not admitted(s.get("workloads", "w9", "team-a"))
            code, out, err = await cli(kc, "resume", "localqueue", "lq", "-o", "yaml")
            assert code == 0 and "stopPolicy: None" in out
            await eventually(
                lambda: all(admitted(s.get("workloads", n, "team-a")) for n in ("w0", "w9")),
                what="w0 and w9 admitted once the LocalQueue resumed",
            )
            code, out, err = await cli(kc, "stop", "cq", "cq")  # HoldAndDrain
            await eventually(
                lambda: not any(admitted(w) for w in s.workloads("team-a")),
                what="the ClusterQueue drained",
            )
            assert evicted_reason(s.get("workloads", "w9", "team-a")) == "ClusterQueueStopped"
            code, out, err = await cli(kc, "resume", "cq", "cq")
            await eventually(
                lambda: all(admitted(s.get("workloads", n, "team-a")) for n in ("w0", "w9")),
                what="w0 and w9 admitted once the ClusterQueue resumed",
            )
            code, out, err = await cli(kc, "stop", "wl", "w0", "--keep-already-running")
            assert code == 2
            code, out, err = await cli(kc, "stop", "cq", "nope")
            assert code == 2 and "Error from server (NotFound)" in err

            code, out, err = await cli(kc, "version")
            assert (code, out) == (0, "Client Version: v0.1.0\n"), err  # no Deployment here

    asyncio.run(main())


def evicted_reason(wl: dict[str, Any] | None) -> str | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Evicted":
            return c.get("reason")
    return None


def plugin_shim(directory: Path) -> Path:
    """The ``kubectl-qm`` executable pip writes from pyproject.toml's entry point."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["kubectl-qm"].split(":")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "kubectl-qm"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"from {module} import {func}\nsys.exit({func}())\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")
def test_kubectl_runs_the_plugin_list_workloads(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            kc = s.kubeconfig(tmp_path / "kc", namespace="team-a")
            await _pending_workloads(s, 1)
            shim = plugin_shim(tmp_path / "bin")
            env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}",
                   "KUBECONFIG": str(kc)}  # fmt: skip
            proc = await asyncio.create_subprocess_exec(
                KUBECTL, "plugin", "list", stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
            out, _ = await proc.communicate()
            assert str(shim) in out.decode()

            async def listed() -> Any:
                proc = await asyncio.create_subprocess_exec(
                    KUBECTL, "qm", "list", "workloads", stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env=env,
                )  # fmt: skip
                out, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()
                rows = table(out.decode())
                return rows if rows and rows[0]["STATUS"] == "ADMITTED" else None

            (row,) = await eventually(listed, what="kubectl qm lists the admitted workload")
            assert (row["NAME"], row["LOCALQUEUE"], row["CLUSTERQUEUE"]) == ("w0", "lq", "cq")

    asyncio.run(main())


def test_why_gives_the_reason_in_numbers_and_the_quota_that_would_admit(
    tmp_path: Path, backend: Any
) -> None:
    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("research", {"f": {"cpu": 2}}, cohort="org", borrowing_limit="1"),
        cluster_queue("prod", {"f": {"cpu": 6}}, cohort="org"),
        local_queue("team-a", "lq", "research"),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            kc = s.kubeconfig(tmp_path / "kc", namespace="team-a")
            big = workload("team-a", "big", queue="lq", pod_sets=[("main", 5, "1")])
            await s.user.create(kr.WORKLOADS, big, namespace="team-a")
            await eventually(
                lambda: "QuotaReserved" in json.dumps(s.get("workloads", "big", "team-a")),
                what="big is pending",
            )
            code, out, err = await cli(kc, "why", "big", "-o", "json")
            assert code == 0, err
            doc = json.loads(out)
            assert (doc["workload"], doc["clusterQueue"], doc["reason"]) == (
                "team-a/big", "research", "ExceedsMaxQuota"
            )  # fmt: skip
            assert "cpu" in doc["message"]
            changes = {(c["kind"], c["name"], c["field"]): (c["current"], c["needed"])
                       for c in doc["changes"]}  # fmt: skip
            # 5 cpu: 2 nominal + 1 borrowable today; borrowing 3 or a nominal of 4 admits it
            assert changes[("ClusterQueue", "research", "borrowingLimit")] == ("1", "3")
            assert changes[("ClusterQueue", "research", "nominalQuota")] == ("2", "4")
            assert doc["positionInClusterQueue"] == 0
            code, out, err = await cli(kc, "why", "big")
            assert "It would be admitted if (any one of):" in out
            assert "ClusterQueue research's borrowingLimit for f/cpu were 3 (now 1)" in out
            # check the claim: with that borrowing limit the service admits it
            await s.user.patch(
                kr.CLUSTER_QUEUES, "research",
                [{"op": "replace",
                  "path": "/spec/resourceGroups/0/flavors/0/resources/0/borrowingLimit",
                  "value": "3"}],
                content_type=k.JSON_PATCH,
            )  # fmt: skip
            await eventually(
                lambda: admitted(s.get("workloads", "big", "team-a")), what="big admitted"
            )
            code, out, err = await cli(kc, "why", "nope")
            assert code == 2 and "NotFound" in err

    asyncio.run(main())
