"""The parts ``quartermaster demo`` is made of, against the API-server double in this
process: the stand-in Job controller and the Job stream (:mod:`admission.serve.demo_jobs`)
and the directory loader that creates objects as ``kubectl apply -f DIR`` does
(:mod:`admission.serve.apply`)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.apiserver_double import ApiServer, running_apiserver, start_apiserver
from admission.kube.client.kueuectl_calls import UserApi
from admission.kube.client.resources import JOBS
from admission.kube.client.rest import KubeClient
from admission.serve.apply import LAST_APPLIED, create_directory, with_last_applied
from admission.serve.demo_jobs import STREAM_LABEL, JobRunner, JobShape, JobStream
from tests.support.double_client import kube_client_config

Obj = dict[str, Any]
SHAPE = JobShape("default", "team-queue", "research", "train-", 2, (("cpu", "1"),))


@asynccontextmanager
async def double(**kwargs: Any) -> AsyncIterator[tuple[ApiServer, KubeClient]]:
    async with running_apiserver(**kwargs) as server:
        client = await KubeClient.connect(
            configuration=kube_client_config(server.url), strict=False
        )
        try:
            yield server, client
        finally:
            await client.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def runner_of(client: KubeClient, clock: Clock, *, runs: float, keep: float) -> JobRunner:
    """A runner whose Jobs all run ``runs`` seconds, finished ones kept ``keep`` seconds."""
    return JobRunner(
        client, rng=random.Random(1), run_seconds=(runs, runs), keep_finished_seconds=keep,
        clock=clock,
    )  # fmt: skip


def status(server: ApiServer, name: str) -> Obj:
    job = server.get_object("jobs", name, "default")
    assert job is not None, f"Job {name} is gone"
    return dict(job.get("status") or {})


def conditions(server: ApiServer, name: str) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status(server, name).get("conditions") or []}


async def submit(client: KubeClient) -> str:
    created = await client.create(JOBS, SHAPE.job(), namespace="default")
    return str(created["metadata"]["name"])


async def admit(client: KubeClient, name: str, *, suspend: bool = False) -> None:
    """What the service does to an admitted (or preempted) Job: flip spec.suspend."""
    await client.patch(JOBS, name, {"spec": {"suspend": suspend}}, namespace="default")


async def gone(server: ApiServer, name: str) -> bool:
    for _ in range(2000):  # the garbage collector finishes deletions asynchronously
        if server.get_object("jobs", name, "default") is None:
            return True
        await asyncio.sleep(0.01)
    return False


def test_the_runner_starts_an_admitted_job_and_completes_it_in_the_controllers_order() -> None:
    async def scenario() -> None:
        async with double() as (server, client):
            clock = Clock()
            runner = runner_of(client, clock, runs=10, keep=5)
            name = await submit(client)
            await runner.step()
            assert "startTime" not in status(server, name), "a suspended Job does not start"
            await admit(client, name)
            await runner.step()
            assert status(server, name)["startTime"] and status(server, name)["active"] == 2
            clock.now = 9.9
            await runner.step()
            assert "Complete" not in conditions(server, name)
            clock.now = 10.0
            await runner.step()
            assert conditions(server, name) == {"SuccessCriteriaMet": "True", "Complete": "True"}
            assert status(server, name)["succeeded"] == 2
            await runner.step()  # seen finished at 10
            clock.now = 14.9
            await runner.step()
            assert server.get_object("jobs", name, "default") is not None
            clock.now = 15.0
            await runner.step()
            assert await gone(server, name), "a finished Job of the stream is deleted"

    asyncio.run(scenario())


def test_a_preempted_job_gets_its_start_time_reset_and_runs_again_once_readmitted() -> None:
    async def scenario() -> None:
        async with double() as (server, client):
            clock = Clock()
            runner = runner_of(client, clock, runs=10, keep=30)
            name = await submit(client)
            await admit(client, name)
            await runner.step()
            assert status(server, name).get("startTime")
            clock.now = 5.0
            await admit(client, name, suspend=True)  # preempted
            await runner.step()
            assert "startTime" not in status(server, name) and status(server, name)["active"] == 0
            # the template may change again (the double enforces the Job rules)
            await client.patch(
                JOBS, name, {"spec": {"template": {"spec": {"nodeSelector": {"n": "a"}}}}},
                namespace="default",
            )  # fmt: skip
            await admit(client, name)
            await runner.step()
            clock.now = 14.9  # runs 10 s from its new start (5), not from the first one
            await runner.step()
            assert "Complete" not in conditions(server, name)
            clock.now = 15.0
            await runner.step()
            assert conditions(server, name)["Complete"] == "True"

    asyncio.run(scenario())


def test_finished_jobs_not_of_the_stream_are_kept() -> None:
    async def scenario() -> None:
        async with double() as (server, client):
            clock = Clock()
            runner = runner_of(client, clock, runs=1, keep=1)
            body = SHAPE.job()
            body["metadata"] = {"name": "example", "namespace": "default"}  # no stream label
            await client.create(JOBS, body, namespace="default")
            await admit(client, "example")
            for now in (0.0, 1.0, 2.0, 100.0):
                clock.now = now
                await runner.step()
            assert conditions(server, "example")["Complete"] == "True"

    asyncio.run(scenario())


def test_the_stream_stops_submitting_while_enough_of_its_jobs_wait() -> None:
    async def scenario() -> None:
        async with double() as (server, client):
            stream = JobStream(client, rng=random.Random(3), shapes=(SHAPE,), max_waiting=2)
            assert await stream.step() is not None
            assert await stream.step() is not None
            assert await stream.step() is None, "two of its Jobs wait: no third"
            jobs = server.list_objects("jobs", "default")
            assert len(jobs) == 2
            assert all(j["metadata"]["labels"][STREAM_LABEL] == "true" for j in jobs)
            await admit(client, jobs[0]["metadata"]["name"])
            assert await stream.step() is not None, "one was admitted: room for another"

    asyncio.run(scenario())


def write(directory: Path, name: str, *docs: Obj) -> None:
    (directory / name).write_text(yaml.safe_dump_all(docs))


def test_a_directory_is_created_as_kubectl_apply_would(tmp_path: Path) -> None:
    """Files in name order (only *.yaml, *.yml, *.json; no subdirectories), kinds mapped by
    discovery; a kind whose CRD is not installed and an object the server refuses are
    reported with the server's words, and everything else is created."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "gpu"}}  # fmt: skip
    bad_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": "q", "namespace": "team"}, "spec": {}}  # fmt: skip
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": "team"}, "spec": {}}  # fmt: skip
    job = SHAPE.job()
    job["metadata"] = {"name": "j"}  # no namespace: the default one
    write(tmp_path, "20-later.yaml", flavor, bad_queue, jobset)
    write(tmp_path, "10-first.yml", ns)
    (tmp_path / "30-job.json").write_text(json.dumps(job))
    (tmp_path / "notes.txt").write_text("kind: Namespace\n")
    (tmp_path / "extras").mkdir()
    write(tmp_path / "extras", "x.yaml", {**ns, "metadata": {"name": "extra"}})

    async def scenario() -> None:
        async with double(third_party_crds=False) as (server, client):
            api = UserApi(client, "default")
            applied = await create_directory(api, tmp_path)
            assert dict(applied.created) == {"Namespace": 1, "ResourceFlavor": 1, "Job": 1}
            assert list(applied.created) == ["Namespace", "ResourceFlavor", "Job"]
            created = server.get_object("jobs", "j", "default")
            assert created is not None
            assert (
                created["metadata"]["annotations"][LAST_APPLIED]
                == (with_last_applied(job)["metadata"]["annotations"][LAST_APPLIED])
            )
            assert server.get_object("namespaces", "extra") is None
            (queue, js) = applied.not_created
            assert (queue.kind, queue.name, queue.source, queue.unserved) == (
                "LocalQueue", "team/q", "20-later.yaml", False,
            )  # fmt: skip
            assert "spec.clusterQueue" in queue.reason
            assert (js.kind, js.name, js.unserved) == ("JobSet", "team/js", True)
            assert js.reason.startswith(
                'no matches for kind "JobSet" in version "jobset.x-k8s.io/v1alpha2"'
            )

    asyncio.run(scenario())


def test_a_document_without_a_kind_is_refused_naming_the_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", {"apiVersion": "v1", "metadata": {"name": "x"}})

    async def scenario() -> None:
        async with double() as (_server, client):
            with pytest.raises(ValueError, match=r"a\.yaml: document 1: .*apiVersion and kind"):
                await create_directory(UserApi(client, "default"), tmp_path)

    asyncio.run(scenario())


KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")
def test_objects_carry_the_last_applied_configuration_kubectl_apply_writes(
    tmp_path: Path,
) -> None:
    """The annotation, to the byte, that ``kubectl apply -f manifests/examples/`` gives the
    same objects, so a later ``kubectl apply`` of an edited file patches them."""
    with start_apiserver(tls=True, third_party_crds=False) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        files = [str(p) for p in sorted(EXAMPLES.glob("[0-6]*.yaml"))]
        done = subprocess.run(
            [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'c'}",
             "apply", *[a for f in files for a in ("-f", f)]],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        compared = 0
        for path in files:
            for doc in yaml.safe_load_all(Path(path).read_text()):
                if not doc:
                    continue
                plural = {"Namespace": "namespaces", "ResourceFlavor": "resourceflavors",
                          "Cohort": "cohorts", "ClusterQueue": "clusterqueues",
                          "LocalQueue": "localqueues", "Job": "jobs",
                          "WorkloadPriorityClass": "workloadpriorityclasses"}[doc["kind"]]  # fmt: skip
                meta = doc["metadata"]
                stored = api.get_object(plural, meta["name"], meta.get("namespace"))
                assert stored is not None, meta
                ours = with_last_applied(doc)["metadata"]["annotations"][LAST_APPLIED]
                assert stored["metadata"]["annotations"][LAST_APPLIED] == ours, meta["name"]
                compared += 1
        assert compared >= 30
