"""Dynamic Resource Allocation end to end: GPUs asked for through ResourceClaimTemplates
count against quota, on the API double and (``KUBEBUILDER_ASSETS``) a real
kube-apiserver, which serves ``resource.k8s.io/v1`` (no DRA driver is needed to admit).

The service reads DeviceClasses and ResourceClaimTemplates from the API
(``admission/kube/control/dra_apis.py``) and charges each podSet the devices its claims
ask for, per pod, under the quota resource ``resources.deviceClassMappings`` names:
admission and usage, preemption among DRA workloads, a template created after its Job
(the Job waits, then is admitted), and the quota escapes that are refused: a running
job's claims changed, a claim shared by name, a class no mapping covers.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.config.load import parse_config
from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH, Resource
from tests.support.kube_harness import (
    Obj,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
    priority_class,
    stack,
)
from tests.unit.cli.test_kueuectl import cli

NS = "team-gpu"
GPU = "example.com/gpu"
CLASS = "gpu.example.com"
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True)
MAPPING = {"resources": {"deviceClassMappings": [{"name": GPU, "deviceClassNames": [CLASS]}]}}
CONFIG = parse_config(MAPPING)
KUEUE_DRA = Path(__file__).resolve().parents[1] / "support" / "data" / "kueue-examples" / "dra"


def device_class(name: str = CLASS) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}}  # fmt: skip


def template(name: str, count: int, cls: str = CLASS) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": cls, "count": count}}]}}},
    }  # fmt: skip


def gpu_job(name: str, claim: str, *, pods: int = 1, priority: str | None = None,
            named_claim: bool = False) -> Obj:  # fmt: skip
    obj = job(NS, name, queue="lq", cpu="1", parallelism=pods, priority_class=priority)
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    ref = "resourceClaimName" if named_claim else "resourceClaimTemplateName"
    spec["resourceClaims"] = [{"name": "gpu", ref: claim}]
    return obj


def queues(gpus: int, *extra: Obj) -> list[Obj]:
    return [
        namespace(NS), flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 16, GPU: gpus}},
                      preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue(NS, "lq", "cq"), device_class(), *extra,
    ]  # fmt: skip


def usage_of(wl: Obj | None) -> dict[str, str]:
    (psa,) = wl["status"]["admission"]["podSetAssignments"] if wl else [{}]
    return dict(psa.get("resourceUsage") or {})


def pending_message(wl: Obj | None) -> str:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


def test_dra_jobs_are_charged_their_devices_per_pod(tmp_path: Path, backend: Any) -> None:
    """2 pods x 2 GPUs = 4 of 6; a second Job of 2 x 2 waits, saying the GPUs are short;
    a third of 1 x 2 fits."""
    objects = queues(6, template("two-gpus", 2))

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, config=CONFIG) as s:
            await s.user.create(k.JOBS, gpu_job("first", "two-gpus", pods=2), namespace=NS)
            first = await eventually(
                lambda: (w := s.workload_of_job(NS, "first")) and admitted(w) and w,
                what="the first Job admitted",
            )
            assert usage_of(first)[GPU] == "4" and usage_of(first)["cpu"] == "2"
            await s.user.create(k.JOBS, gpu_job("second", "two-gpus", pods=2), namespace=NS)
            second = await eventually(
                lambda: pending_message(s.workload_of_job(NS, "second")),
                what="the second Job pending",
            )
            assert GPU in second
            # why: the GPUs are short, and 8 of them (not 6) would admit it
            cfg = tmp_path / "config.yaml"
            cfg.write_text(yaml.safe_dump(MAPPING))
            kc = s.kubeconfig(tmp_path / "kc", namespace=NS)
            code, out, err = await cli(kc, "why", "job/second", "--config", str(cfg), "-o", "json")
            assert code == 0, err
            why = json.loads(out)
            assert GPU in why["message"], why
            changes = {(c["name"], c["field"], c["resource"]): (c["current"], c["needed"])
                       for c in why["changes"]}  # fmt: skip
            assert changes[("cq", "nominalQuota", GPU)] == ("6", "8"), why
            await s.user.create(k.JOBS, gpu_job("third", "two-gpus"), namespace=NS)
            third = await eventually(
                lambda: (w := s.workload_of_job(NS, "third")) and admitted(w) and w,
                what="the third Job admitted",
            )
            assert usage_of(third)[GPU] == "2"
            assert not admitted(s.workload_of_job(NS, "second"))

    asyncio.run(main())


def test_a_higher_priority_dra_job_preempts_a_lower_one(tmp_path: Path, backend: Any) -> None:
    objects = queues(4, template("four-gpus", 4), template("three-gpus", 3),
                     priority_class("low", 10), priority_class("high", 1000))  # fmt: skip

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, config=CONFIG) as s:
            await s.user.create(k.JOBS, gpu_job("low", "four-gpus", priority="low"), namespace=NS)
            await eventually(lambda: admitted(s.workload_of_job(NS, "low")), what="low admitted")
            await s.user.create(k.JOBS, gpu_job("high", "three-gpus", priority="high"),
                                namespace=NS)  # fmt: skip
            high = await eventually(
                lambda: (w := s.workload_of_job(NS, "high")) and admitted(w) and w,
                what="the high-priority Job admitted in place of the low one",
            )
            assert usage_of(high)[GPU] == "3"
            low = s.workload_of_job(NS, "low")
            assert not admitted(low)
            assert any(c["type"] == "Preempted" and c["status"] == "True"
                       for c in low["status"]["conditions"])  # fmt: skip
            stored = s.get("jobs", "low", NS)
            assert stored is not None and stored["spec"]["suspend"] is True

    asyncio.run(main())


def test_a_job_waits_for_its_template_and_is_charged_once_it_exists(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=queues(8), config=CONFIG) as s:
            await s.user.create(k.JOBS, gpu_job("early", "later-gpus"), namespace=NS)
            message = await eventually(
                lambda: pending_message(s.workload_of_job(NS, "early")),
                what="the Job waiting for its template",
            )
            assert 'resourceclaimtemplates.resource.k8s.io "later-gpus" not found' in message
            assert "podset main" in message and "claim gpu" in message
            await s.user.create(TEMPLATES, template("later-gpus", 3), namespace=NS)
            wl = await eventually(
                lambda: (w := s.workload_of_job(NS, "early")) and admitted(w) and w,
                what="the Job admitted once its template exists",
            )
            assert usage_of(wl)[GPU] == "3"

    asyncio.run(main())


def test_quota_escapes_through_claims_are_refused(tmp_path: Path, backend: Any) -> None:
    """A claim shared by name, a class no mapping covers: never admitted, nothing charged.
    A running PyTorchJob's claims pointed at a bigger template: refused by the webhook."""
    objects = queues(8, template("one-gpu", 1), template("eight-gpus", 8),
                     template("fpgas", 1, cls="fpga.example.com"),
                     device_class("fpga.example.com"))  # fmt: skip

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, config=CONFIG,
                         crds=("pytorchjobs",)) as s:  # fmt: skip
            await s.user.create(k.JOBS, gpu_job("shared", "team-claim", named_claim=True),
                                namespace=NS)  # fmt: skip
            await s.user.create(k.JOBS, gpu_job("fpga", "fpgas"), namespace=NS)
            shared = await eventually(
                lambda: pending_message(s.workload_of_job(NS, "shared")), what="shared waits"
            )
            assert "does not support use of resource claims" in shared
            fpga = await eventually(
                lambda: pending_message(s.workload_of_job(NS, "fpga")), what="fpga waits"
            )
            assert "DeviceClass fpga.example.com is not mapped in DRA configuration" in fpga
            await s.user.create(PYTORCHJOBS, pytorchjob_with_claim("pt", "one-gpu"), namespace=NS)
            await eventually(
                lambda: (
                    (j := s.get("pytorchjobs", "pt", NS))
                    and j["spec"]["runPolicy"].get("suspend") is False
                ),
                what="the PyTorchJob admitted and started",
            )
            path = "/spec/pytorchReplicaSpecs/Master/template/spec/resourceClaims/0"
            patch = [{"op": "replace", "path": f"{path}/resourceClaimTemplateName",
                      "value": "eight-gpus"}]  # fmt: skip
            with pytest.raises(ApiError) as err:
                await s.user.patch(PYTORCHJOBS, "pt", patch, namespace=NS,
                                   content_type=JSON_PATCH)  # fmt: skip
            assert err.value.status in (400, 403, 422)
            assert "resource claims (DRA devices count against quota)" in str(err.value)
            for name in ("shared", "fpga"):
                assert not admitted(s.workload_of_job(NS, name))

    asyncio.run(main())


def pytorchjob_with_claim(name: str, claim: str) -> Obj:
    pod = copy.deepcopy(gpu_job(name, claim)["spec"]["template"])
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod}}},
    }  # fmt: skip


def test_kueues_dra_example_is_admitted_with_the_usage_its_docs_show(
    tmp_path: Path, backend: Any
) -> None:
    """site/static/examples/dra: sample-dra-queues.yaml and sample-dra-rct-job.yaml applied
    unchanged, with setup_dra.md's Configuration and DeviceClass: the Job's Workload holds
    one ``example.com/gpu`` (the request's ``count``, default 1), 1 cpu and 200Mi."""
    docs = [d for f in ("sample-dra-queues.yaml", "setup/deviceclass.yaml")
            for d in yaml.safe_load_all((KUEUE_DRA / f).read_text())]  # fmt: skip
    rct, job_doc = yaml.safe_load_all((KUEUE_DRA / "jobs" / "sample-dra-rct-job.yaml").read_text())
    config = parse_config(yaml.safe_load((KUEUE_DRA / "setup" / "kueue-config.yaml").read_text()))

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=docs, config=config) as s:
            await s.user.create(TEMPLATES, rct, namespace="default")
            created = await s.user.create(k.JOBS, job_doc, namespace="default")
            name = created["metadata"]["name"]
            wl = await eventually(
                lambda: (w := s.workload_of_job("default", name)) and admitted(w) and w,
                what="Kueue's DRA sample Job admitted",
            )
            assert usage_of(wl) == {"cpu": "1", "memory": "200Mi", GPU: "1"}

    asyncio.run(main())


def test_the_double_serves_resource_v1_as_the_real_server_does(
    tmp_path: Path, backend: Any
) -> None:
    """Defaults (ExactCount, count 1), a request without its class refused, a template's
    spec immutable, a DeviceClass's not: on both backends alike."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=[namespace(NS)], webhooks=False) as s:
            bare = template("bare", 1)
            del bare["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
            created = await s.user.create(TEMPLATES, bare, namespace=NS)
            (req,) = created["spec"]["spec"]["devices"]["requests"]
            assert req["exactly"]["allocationMode"] == "ExactCount"
            assert req["exactly"]["count"] == 1
            no_class = template("no-class", 1)
            del no_class["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
            with pytest.raises(ApiError) as err:
                await s.user.create(TEMPLATES, no_class, namespace=NS)
            assert err.value.status == 422 and "deviceClassName" in str(err.value)
            path = "/spec/spec/devices/requests/0/exactly/count"
            with pytest.raises(ApiError) as err:
                await s.user.patch(TEMPLATES, "bare", [{"op": "replace", "path": path, "value": 8}],
                                   namespace=NS, content_type=JSON_PATCH)  # fmt: skip
            assert err.value.status == 422 and "field is immutable" in str(err.value)
            await s.user.create(DEVICE_CLASSES, device_class())
            sel = [{"cel": {"expression": "device.driver == 'other.example.com'"}}]
            await s.user.patch(DEVICE_CLASSES, CLASS, [{"op": "replace", "path": "/spec/selectors",
                                                        "value": sel}],
                               content_type=JSON_PATCH)  # fmt: skip

    asyncio.run(main())


def test_an_extended_resource_served_by_dra_is_charged_once(tmp_path: Path, backend: Any) -> None:
    """Kueue's sample-dra-extended-resource-job.yaml applied unchanged, with setup_dra.md's
    DeviceClass (extendedResourceName example.com/gpu): the Job's ``example.com/gpu: 1``
    is charged once, 1 GPU, not 2 (the claim the scheduler would make is not counted)."""
    docs = [d for f in ("sample-dra-queues.yaml", "setup/deviceclass.yaml")
            for d in yaml.safe_load_all((KUEUE_DRA / f).read_text())]  # fmt: skip
    (job_doc,) = yaml.safe_load_all(
        (KUEUE_DRA / "jobs" / "sample-dra-extended-resource-job.yaml").read_text()
    )
    config = parse_config(yaml.safe_load((KUEUE_DRA / "setup" / "kueue-config.yaml").read_text()))

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=docs, config=config) as s:
            stored = s.get("deviceclasses", CLASS, None)
            assert stored is not None
            assert stored["spec"].get("extendedResourceName") == GPU
            created = await s.user.create(k.JOBS, job_doc, namespace="default")
            name = created["metadata"]["name"]
            wl = await eventually(
                lambda: (w := s.workload_of_job("default", name)) and admitted(w) and w,
                what="Kueue's DRA extended-resource sample Job admitted",
            )
            assert usage_of(wl) == {"cpu": "1", "memory": "200Mi", GPU: "1"}

    asyncio.run(main())
