"""The same flow with the real ``kubectl`` binary against the double and the service."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
    stack,
)

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")

OBJECTS = [
    namespace("team-a"),
    flavor("f", pool="a"),
    cluster_queue("cq", {"f": {"cpu": 4}}),
    local_queue("team-a", "lq", "cq"),
]

EDITOR = """\
import sys, yaml
path = sys.argv[1]
doc = yaml.safe_load(open(path))
doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "8"
open(path, "w").write(yaml.safe_dump(doc))
"""


async def kubectl(
    kubeconfig: Path, tmp: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp / "kcache"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def test_kubectl_creates_a_job_gets_workloads_and_edits_a_cluster_queue(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS) as s:
            kc = s.kubeconfig(tmp_path / "kubeconfig", namespace="team-a")
            manifest = tmp_path / "jobs.yaml"
            manifest.write_text(
                yaml.safe_dump_all(
                    [
                        job("team-a", "small", queue="lq", cpu="3"),
                        job("team-a", "big", queue="lq", cpu="4"),
                    ]
                )
            )
            code, out, err = await kubectl(
                kc, tmp_path, "create", "-f", str(manifest), "--validate=false"
            )
            assert code == 0, err
            assert "job.batch/small created" in out
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "small")), what="small admitted"
            )

            code, out, err = await kubectl(kc, tmp_path, "get", "workloads", "-o", "json")
            assert code == 0, err
            items = {
                w["metadata"]["ownerReferences"][0]["name"]: w for w in json.loads(out)["items"]
            }
            assert set(items) == {"small", "big"}
            assert items["small"]["status"]["admission"]["clusterQueue"] == "cq"
            code, out, err = await kubectl(
                kc,
                tmp_path,
                "get",
                "job",
                "small",
                "-o",
                "jsonpath={.spec.template.spec.nodeSelector.pool}",
            )
            assert (code, out) == (0, "a"), err

            # an invalid edit is refused by the CRD's CEL rule, before any webhook runs
            bad = '{"spec":{"resourceGroups":[{"coveredResources":["cpu"],"flavors":[{"name":"f","resources":[{"name":"cpu","nominalQuota":"8","borrowingLimit":"1"}]}]}]}}'
            code, out, err = await kubectl(
                kc, tmp_path, "patch", "clusterqueue", "cq", "--type=merge", "-p", bad
            )
            assert code != 0
            # 1.32 prints the CEL rule's value ("object"), 1.36 leaves it out
            assert 'The ClusterQueue "cq" is invalid: spec: Invalid value: ' in err
            assert "borrowingLimit must be nil when cohort is empty" in err

            editor = tmp_path / "editor.py"
            editor.write_text(EDITOR)
            env = {
                "KUBE_EDITOR": f"{sys.executable} {editor}",
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
            }
            code, out, err = await kubectl(
                kc, tmp_path, "edit", "clusterqueue", "cq", "--validate=false", env=env
            )
            assert code == 0, err
            assert "clusterqueue.kueue.x-k8s.io/cq edited" in out
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "big")),
                what="big admitted after the edit",
            )

    asyncio.run(main())
