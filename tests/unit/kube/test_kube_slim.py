"""The informers' slim objects (admission/kube/watch/slim.py): what they keep is all the
controller reads, packing loses nothing, and what needs the whole object gets it."""

from __future__ import annotations

import asyncio
import copy
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from admission.integrations.framework.composition import compose
from admission.integrations.kinds.job import JOB, workload_from_job
from admission.kube import objects as kobj
from admission.kube.client import resources as k
from admission.kube.digest import DIGEST, template_digest
from admission.kube.watch.packing import ModelInterner, RecordDeflater
from admission.kube.watch.slim import (
    PackedStore,
    WorkloadSlimmer,
    job_slimmer,
    pod_slimmer,
    without_digests,
)
from bench.jobgen import realistic_job
from queues.api.parse import parse_model
from queues.pods import pod_requests
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    local_queue,
    namespace,
    priority_class,
    stack,
)

NO_CLASSES: dict[str, Any] = {"workload_priority_classes": {}, "priority_classes": {}}


def body_of(job: dict[str, Any]) -> dict[str, Any]:
    """The Workload the service creates for ``job``."""
    return compose(JOB, job, **NO_CLASSES)[1]


def stored(job: dict[str, Any], i: int = 0) -> dict[str, Any]:
    """A Job as the API returns it (uid, resourceVersion, the defaults it adds)."""
    out = copy.deepcopy(job)
    out["metadata"].update(uid=f"uid-{i}", resourceVersion=str(100 + i), generation=1,
                           creationTimestamp="2026-01-01T00:00:00Z",
                           managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}])  # fmt: skip
    out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    out["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": f"uid-{i}"}}
    t = out["spec"]["template"]
    t["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = f"uid-{i}"
    t["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    return out


def varied_jobs(n: int = 120) -> list[dict[str, Any]]:
    jobs = [stored(realistic_job(i, namespace="ns", queue="lq"), i) for i in range(n)]
    # the cases pod_requests treats specially: pod-level resources, overhead, limits
    # only, plain init containers, required node affinity, topology annotations
    extra = jobs[0]["spec"]["template"]
    extra["spec"]["resources"] = {"requests": {"cpu": "40"}}
    extra["spec"]["overhead"] = {"memory": "1Gi"}
    extra["spec"]["initContainers"] = [
        {"name": "fetch", "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
    ]
    extra["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": []}}
            ],
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    extra["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "rack"
    if n > 1:
        jobs[1]["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = "1"
        jobs[1]["spec"]["parallelism"] = jobs[1]["spec"]["completions"] = 4
    return jobs


def test_a_slim_job_composes_the_same_workload_as_the_whole_one() -> None:
    slimmer = job_slimmer()
    for job in varied_jobs():
        slim = slimmer.slim(job)
        full_wl = workload_from_job(job, **NO_CLASSES)
        slim_wl = workload_from_job(slim, **NO_CLASSES)
        assert slim_wl.pod_sets == full_wl.pod_sets
        for field in ("name", "namespace", "uid", "queue_name", "priority", "creation_time"):
            assert getattr(slim_wl, field) == getattr(full_wl, field), field
        tmpl = slim["spec"]["template"]
        assert pod_requests(tmpl["spec"]) == pod_requests(job["spec"]["template"]["spec"])
        # and it is slim: no managedFields, no env/args/volumes, no foreign labels
        assert "managedFields" not in slim["metadata"]
        assert set(slim["metadata"]["labels"]) == {"kueue.x-k8s.io/queue-name"}
        assert "selector" not in slim["spec"]
        assert {"volumes", "serviceAccountName"}.isdisjoint(tmpl["spec"])
        assert all(
            set(c) <= {"name", "resources", "restartPolicy"} for c in tmpl["spec"]["containers"]
        )
        assert tmpl[DIGEST] == template_digest(job["spec"]["template"])
        assert slimmer.slim(slim) == slim  # slimming a slim object changes nothing
    # the kept scheduling fields of the odd template
    tspec = slimmer.slim(varied_jobs()[0])["spec"]["template"]["spec"]
    assert set(tspec["affinity"]["nodeAffinity"]) == {
        "requiredDuringSchedulingIgnoredDuringExecution"
    }
    assert "podAntiAffinity" not in tspec["affinity"]


def test_equal_templates_are_stored_once_and_packing_loses_nothing() -> None:
    slimmer = job_slimmer()
    store = PackedStore(slimmer, api_version="batch/v1", kind="Job")
    jobs = varied_jobs(60)
    for i, job in enumerate(jobs):
        store[f"ns/{i}"] = slimmer.slim(job)
    for i, job in enumerate(jobs):
        assert store[f"ns/{i}"] == slimmer.slim(job)
    specs = {id(store[f"ns/{i}"]["spec"]["template"]["spec"]) for i in range(len(jobs))}
    shapes = {repr(slimmer.slim(j)["spec"]["template"]["spec"]) for j in jobs}
    assert len(specs) == len(shapes) < len(jobs)  # one copy per distinct shape
    assert sum(len(r[0]) for r in store.records.values()) < 400 * len(jobs)
    assert store.pop("ns/0") == slimmer.slim(jobs[0]) and "ns/0" not in store


def test_records_are_deflated_against_the_first_ones_and_read_back_exactly() -> None:
    """After the kind's first records (kept as they are), records are deflated with a
    dictionary learnt from them: a realistic pending Job's record shrinks to well under
    half and every record, from before the dictionary or after, reads back unchanged."""
    slimmer = job_slimmer()
    store = PackedStore(slimmer, api_version="batch/v1", kind="Job")
    jobs = varied_jobs(200)
    for i, job in enumerate(jobs):
        job["metadata"]["uid"] = str(uuid.UUID(int=random.Random(i).getrandbits(128)))
        store[f"ns/{i}"] = slimmer.slim(job)
    raw = [r[0] for r in store.records.values()]
    first, later = raw[: RecordDeflater.SAMPLES], raw[RecordDeflater.SAMPLES :]
    assert all(r[0] == ord("{") for r in first)
    assert all(r[0] == 0 for r in later)
    plain = [len(slimmer.deflater.inflate(r)) for r in later]
    assert sum(map(len, later)) < 0.5 * sum(plain)
    for i, job in enumerate(jobs):
        assert store[f"ns/{i}"] == slimmer.slim(job)
    odd = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "\x00\x01"}}
    store["ns/odd"] = slimmer.slim(odd)  # control bytes of its own: still exact
    assert store["ns/odd"] == slimmer.slim(odd)


def test_packing_escapes_nothing_a_value_can_hold() -> None:
    """Key names are packed as control bytes: values that look like keys or hold
    control characters come back as they were."""
    slimmer = WorkloadSlimmer()
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": '"name":\x01"uid":', "namespace": "ns"},
          "spec": {"queueName": '{"spec":null}\n\t', "podSets": []},
          "status": {"conditions": [{"type": "X", "message": '"message": \u0002 ok'}]}}  # fmt: skip
    store = PackedStore(slimmer, api_version=wl["apiVersion"], kind=wl["kind"])
    store["ns/w"] = slimmer.slim(wl)
    assert store["ns/w"] == slimmer.slim(wl) == wl


def test_workload_and_job_digests_agree_and_see_an_unkept_change() -> None:
    jslim, wslim = job_slimmer(), WorkloadSlimmer()
    job = varied_jobs(1)[0]
    workload_from_job(job, **NO_CLASSES)  # the job is one the integration accepts
    created = body_of(job)  # what the service writes (whole template)
    assert DIGEST not in created["spec"]["podSets"][0]["template"]
    slim_wl = wslim.slim(created)
    desired = body_of(jslim.slim(job))
    assert kobj.workload_spec_drift(slim_wl, desired) is None
    assert kobj.workload_spec_drift(created, desired) is None  # a whole copy compares the same
    edited = copy.deepcopy(job)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "registry/other:v2"
    # (the API allows this edit on a suspended Job only for its scheduling fields and
    # labels/annotations; Kueue's EquivalentToWorkload compares containers whole too)
    drift = kobj.workload_spec_drift(slim_wl, body_of(jslim.slim(edited)))
    assert drift is not None and kobj.carries_slim_template(drift)  # must not be written as is
    whole = kobj.workload_spec_drift(slim_wl, body_of(edited))
    assert whole is not None and not kobj.carries_slim_template(whole)
    assert (
        whole["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"]
        == "registry/other:v2"
    )


def test_a_slim_workload_parses_to_the_same_engine_workload() -> None:
    wslim, share = WorkloadSlimmer(), ModelInterner()
    for job in varied_jobs(40):
        body = body_of(job)
        body["metadata"].update(
            uid="w", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z"
        )
        full = parse_model(body)
        slim = share(parse_model(without_digests(wslim.slim(body))))
        assert slim.pod_sets == full.pod_sets
        assert slim.labels == full.labels and slim.name == full.name
        assert DIGEST in wslim.slim(body)["spec"]["podSets"][0]["template"]  # left as it was


def test_equal_podsets_are_shared_between_engine_workloads() -> None:
    share = ModelInterner()
    bodies = []
    for i in range(2):
        job = stored(realistic_job(7, namespace="ns", queue="lq"), i)
        job["metadata"]["name"] = f"j{i}"
        bodies.append(body_of(job))
    a, b = (share(parse_model(x)) for x in bodies)
    assert a.pod_sets is b.pod_sets and a.name != b.name


def test_a_slim_pod_keeps_its_shape_gates_and_node() -> None:
    from admission.kube.reconcilers.pod_groups import gated, shape_of

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "labels": {"kueue.x-k8s.io/pod-group-name": "g", "app": "x"},
                        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
                        "finalizers": ["kueue.x-k8s.io/managed"]},
           "spec": {"schedulingGates": [{"name": "other"}, {"name": "kueue.x-k8s.io/admission"}],
                    "nodeSelector": {"a": "b"}, "tolerations": [{"key": "t", "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "img:1", "env": [{"name": "X", "value": "1"}],
                                    "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Pending", "containerStatuses": [{"name": "c"}]}}  # fmt: skip
    slim = pod_slimmer().slim(pod)
    assert shape_of(slim) == shape_of(pod) and gated(slim)
    assert slim["spec"]["schedulingGates"] == pod["spec"]["schedulingGates"]  # patch indices
    assert slim["metadata"]["finalizers"] == ["kueue.x-k8s.io/managed"]
    assert "env" not in slim["spec"]["containers"][0] and "containerStatuses" not in slim["status"]
    assert "app" not in slim["metadata"]["labels"]


# -- end to end: the controller works from slim objects -------------------------------------


def _job(name: str, *, priority: str, cpu: str) -> dict[str, Any]:
    job = realistic_job(3, namespace="team-a", queue="lq")
    job["metadata"]["name"] = name
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    job["spec"]["suspend"] = False  # the webhook suspends it
    job["spec"]["parallelism"] = job["spec"]["completions"] = 1
    t = job["spec"]["template"]
    t["spec"].pop("initContainers", None)
    t["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    t["spec"]["nodeSelector"] = {"team": "a"}
    t["spec"]["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    ]
    return job


def test_the_controller_runs_on_slim_objects_and_restores_the_whole_template(
    tmp_path: Path,
) -> None:
    """A Job with a realistic template: its Workload gets the whole template (not the
    informer's slim copy), it is admitted and started on its flavor, preempted, stopped,
    and its template comes back exactly as it was; an image edit while it waits reaches
    its Workload. The informers hold only slim copies throughout."""
    objects = [
        namespace("team-a"),
        flavor("a100", **{"gpu.example.com/model": "a100"}),
        cluster_queue("cq", {"a100": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]  # fmt: skip

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            await s.user.create(k.JOBS, _job("victim", priority="low", cpu="3"), namespace="team-a")
            running = await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and not j["spec"]["suspend"] and j,
                what="the victim runs",
            )
            wl = s.workload_of_job("team-a", "victim")
            created = wl["spec"]["podSets"][0]["template"]
            assert DIGEST not in created
            assert created["spec"]["containers"][0]["env"][0]["name"] == "EXPERIMENT_ID"
            assert created["spec"]["volumes"]  # the whole template, not the slim copy
            assert running["spec"]["template"]["spec"]["nodeSelector"] == {
                "team": "a", "gpu.example.com/model": "a100"}  # fmt: skip
            inf = s.service.informers
            for plural in ("jobs", "workloads", "pods"):
                assert isinstance(inf[plural].store, PackedStore)
            kept = inf["jobs"].get("team-a/victim")
            assert (
                kept is not None and "env" not in kept["spec"]["template"]["spec"]["containers"][0]
            )
            await s.user.patch(k.JOBS, "victim", {"status": {"active": 1}}, namespace="team-a",
                               subresource="status")  # fmt: skip
            await s.user.create(
                k.JOBS, _job("urgent", priority="high", cpu="3"), namespace="team-a"
            )
            await eventually(
                lambda: is_true(s.workload_of_job("team-a", "victim"), "Evicted"),
                what="the victim is evicted",
            )
            await eventually(
                lambda: s.get("jobs", "victim", "team-a")["spec"]["suspend"], what="suspended"
            )
            await s.user.patch(k.JOBS, "victim", {"status": {"active": 0}}, namespace="team-a",
                               subresource="status")  # fmt: skip
            restored = await eventually(
                lambda: (
                    (j := s.get("jobs", "victim", "team-a"))
                    and j["spec"]["template"]["spec"].get("nodeSelector") == {"team": "a"}
                    and "kueue.x-k8s.io/podset" not in j["spec"]["template"]["metadata"]["labels"]
                    and j
                ),
                what="the victim's template is restored",
            )
            assert restored["spec"]["template"] == created | {
                "metadata": restored["spec"]["template"]["metadata"]
            }
            assert (
                restored["spec"]["template"]["spec"]["tolerations"]
                == created["spec"]["tolerations"]
            )
            await eventually(lambda: admitted(s.workload_of_job("team-a", "urgent")), what="urgent")
            # while it waits, an edit the slim copy does not keep (a template annotation:
            # the only other template changes a suspended Job allows are scheduling
            # fields) reaches its Workload, read whole
            await s.user.patch(
                k.JOBS, "victim",
                {"spec": {"template": {"metadata": {"annotations": {"ml.example.com/exp": "rerun"}}}}},
                namespace="team-a",
            )  # fmt: skip
            await eventually(
                lambda: (
                    s.workload_of_job("team-a", "victim")["spec"]["podSets"][0]["template"][
                        "metadata"
                    ]["annotations"].get("ml.example.com/exp")
                    == "rerun"
                ),
                what="the Workload takes the Job's new template",
            )
            tmpl = s.workload_of_job("team-a", "victim")["spec"]["podSets"][0]["template"]
            assert DIGEST not in tmpl and tmpl["spec"]["volumes"]

    asyncio.run(main())


@pytest.mark.parametrize("n", [0, 3])
def test_full_reads_the_api_only_when_the_recent_copy_is_missing_or_old(n: int) -> None:
    """``Informer.full``: the recent whole object when it is current, else a GET."""
    from admission.kube.watch.informer import Informer

    class Client:
        gets = 0

        async def get(self, res: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
            Client.gets += 1
            return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "9",
                                 "managedFields": [{}]}, "spec": {"template": {"spec": {}}}}  # fmt: skip

    inf = Informer(Client(), k.JOBS, slimmer=job_slimmer(), keep_recent=n)  # type: ignore[arg-type]
    job = stored(realistic_job(1, namespace="ns", queue="lq"))
    key, slim = inf._ingest(copy.deepcopy(job))
    inf.store[key] = slim
    got = asyncio.run(inf.full(key))
    assert got is not None
    if n:
        assert Client.gets == 0 and got["spec"]["template"]["spec"]["volumes"]
        assert asyncio.run(inf.full(key, at_least="999")) is not None and Client.gets == 1
    else:
        assert Client.gets == 1 and "managedFields" not in got["metadata"]


def test_full_answers_a_burst_of_thousands_of_jobs_without_reading_any_again() -> None:
    """The recent whole objects are packed: a burst of 3,000 Jobs is still there when its
    Workloads are composed and its Jobs copied to workers (no GET), in a few MiB; a Job
    read once from the API is not read again."""
    from admission.kube.watch.informer import Informer

    class Client:
        gets = 0

        async def get(self, res: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
            Client.gets += 1
            return stored(realistic_job(10_000, namespace="ns", queue="lq"))

    inf = Informer(Client(), k.JOBS, slimmer=job_slimmer(), keep_recent=4096)  # type: ignore[arg-type]
    jobs = [stored(realistic_job(i, namespace="ns", queue="lq")) for i in range(3000)]
    for job in jobs:
        key, slim = inf._ingest(copy.deepcopy(job))
        inf.store[key] = slim

    async def read_all() -> list[dict[str, Any] | None]:
        return [await inf.full(f"ns/{j['metadata']['name']}") for j in jobs]

    whole = asyncio.run(read_all())
    assert Client.gets == 0
    assert whole[0] == jobs[0] and whole[-1] == jobs[-1]
    assert inf._recent.size < 4 * 1024 * 1024
    missing = "ns/" + realistic_job(10_000, namespace="ns", queue="lq")["metadata"]["name"]
    asyncio.run(inf.full(missing))
    asyncio.run(inf.full(missing))
    assert Client.gets == 1
