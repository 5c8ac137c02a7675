"""The plain-cluster scenario, run on the double and on a real API server.

A cluster with only the project's CRDs (``manifests/crd/``), as manifests/README.md
installs it, and the shipped configuration (``manifests/base/config/config.yaml``): the
service is ready, says which integrations run and which wait for their CRD, queues and
admits a Job; then the JobSet CRD is installed and, with no restart, a JobSet is
queued and admitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from admission.config.load import load_config
from admission.config.schema import Config
from admission.integrations.kinds.jobset import JOBSET
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from tests.support.integration_kit import NS, meta, pod_template, workload_of
from tests.support.kube_harness import (
    Stack,
    admitted,
    eventually,
    is_true,
    job,
    operator_crds,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "manifests" / "base" / "config" / "config.yaml"
JOBSET_FRAMEWORK = JOBSET.framework
JOBSET_WAITING = (
    f"integration {JOBSET_FRAMEWORK}: waiting for CRD (jobset.x-k8s.io/v1alpha2/jobsets not served)"
)
Obj = dict[str, Any]


def shipped_config() -> Config:
    return load_config(str(SHIPPED_CONFIG))


def queue_objects() -> list[Obj]:
    """A namespace, a flavor, a ClusterQueue of 8 cpu and a LocalQueue ``lq``."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu"],
             "flavors": [{"name": "default",
                          "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip


def jobset(name: str) -> Obj:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(name),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {"parallelism": 1, "completions": 1, "template": pod_template()}
                    },
                }
            ]
        },
    }


def active(s: Stack, framework: str) -> float | None:
    """``quartermaster_integration_active`` of ``framework``."""
    return s.service.metrics.registry.get_sample_value(
        "quartermaster_integration_active", {"framework": framework}
    )


async def readyz(s: Stack) -> tuple[int, str]:
    url = f"http://127.0.0.1:{s.service.ports['health']}/readyz"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, await resp.text()


async def create_when_served(s: Stack, res: k.Resource, obj: Obj) -> Obj:
    """Create ``obj`` once its resource is served: right after a CRD is established a
    real server answers 404 (discovery not caught up) or 429 ("storage is
    (re)initializing") for a moment."""

    async def attempt() -> Obj | None:
        try:
            return await s.user.create(res, obj, namespace=NS)
        except ApiError as err:
            if err.status in (404, 429, 503):
                return None
            raise

    created: Obj = await eventually(attempt, what=f"{res.plural} are served", interval=0.2)
    return created


async def install_crd(s: Stack, plural: str) -> None:
    (crd,) = operator_crds([plural])
    await s.user.create(kr.CUSTOM_RESOURCE_DEFINITIONS, crd)


async def plain_cluster_scenario(s: Stack) -> None:
    # ready with only the project's CRDs, saying what runs and what waits (once the
    # service has read the CRDs, which readiness does not wait for)
    await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 0, what="JobSet found waiting")
    status, text = await readyz(s)
    assert status == 200, text
    assert "integration batch/job: active" in text.splitlines()
    assert JOBSET_WAITING in text.splitlines(), text
    assert active(s, "batch/job") == 1
    assert active(s, JOBSET_FRAMEWORK) == 0

    # the Job lifecycle: suspended by the webhook, admitted, started, finished
    created = await s.user.create(kr.JOBS, job(NS, "first", queue="lq"), namespace=NS)
    assert created["spec"]["suspend"] is True, "the mutating webhook suspends a queued Job"
    await eventually(lambda: admitted(s.workload_of_job(NS, "first")), what="the Job admitted")
    await eventually(
        lambda: (s.get("jobs", "first", NS) or {}).get("spec", {}).get("suspend") is False,
        what="the admitted Job started",
    )
    await s.finish_job(NS, "first")
    await eventually(
        lambda: is_true(s.workload_of_job(NS, "first"), "Finished"), what="the Workload Finished"
    )

    # the JobSet CRD installed: the integration starts without a restart
    await install_crd(s, "jobsets")
    await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 1, what="the JobSet integration runs")
    status, text = await readyz(s)
    assert f"integration {JOBSET_FRAMEWORK}: active" in text.splitlines(), text
    created = await create_when_served(s, JOBSET.resource, jobset("train"))
    assert created["spec"].get("suspend") is True, "the mutating webhook suspends a JobSet"
    await eventually(
        lambda: admitted(workload_of(s.server, JOBSET, "train")), what="the JobSet admitted"
    )
    await eventually(
        lambda: (s.get("jobsets", "train", NS) or {}).get("spec", {}).get("suspend") is False,
        what="the admitted JobSet started",
    )

    # the owner check of its children: a Job the JobSet controller makes (here labelled
    # with the queue too) is left to its admitted JobSet, neither suspended nor queued
    child = job(NS, "train-workers-0", queue="lq")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": JOBSET.api_version, "kind": "JobSet", "name": "train",
         "uid": created["metadata"]["uid"], "controller": True}
    ]  # fmt: skip
    made = await s.user.create(kr.JOBS, child, namespace=NS)
    assert made["spec"]["suspend"] is False, "the webhook leaves a managed JobSet's child alone"
    controller = s.service.controller
    assert controller is not None
    await eventually(controller.idle, what="the service has reconciled the child")
    assert s.workload_of_job(NS, "train-workers-0") is None
    assert (s.get("jobs", "train-workers-0", NS) or {})["spec"]["suspend"] is False
    assert not s.task.done(), "the service did not restart"
