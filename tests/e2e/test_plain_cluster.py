"""``serve`` on a cluster without the job kinds' operator CRDs (the double).

An integration whose kind is a custom resource is not watched while its CRD is
missing, does not hold back readiness, is logged once as waiting, starts when the CRD
is installed and stops when the CRD is deleted
(``admission/kube/control/integrationgate.py``). Deleting a CRD deletes its objects
with it, so their Workloads go too (the service and the garbage collector both see
their jobs gone); the Workloads of other kinds are untouched. The same scenario runs on a real API server in
``tests/e2e/test_real_install.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from admission.integrations.kinds.jobset import JOBSET
from admission.kube.client import resources as k
from tests.support.integration_kit import NS, workload_of
from tests.support.kube_harness import admitted, eventually, job, stack
from tests.support.plain_cluster import (
    JOBSET_FRAMEWORK,
    JOBSET_WAITING,
    active,
    create_when_served,
    install_crd,
    jobset,
    plain_cluster_scenario,
    queue_objects,
    readyz,
    shipped_config,
)


def test_serve_on_a_plain_cluster_is_ready_and_starts_jobset_when_its_crd_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quartermaster.kube.integrations")

    async def main() -> None:
        async with stack(tmp_path, objects=queue_objects(), config=shipped_config(), crds=()) as s:
            await plain_cluster_scenario(s)

    asyncio.run(main())
    waiting = [r.getMessage() for r in caplog.records if "not started" in r.getMessage()]
    jobset_lines = [m for m in waiting if JOBSET_FRAMEWORK in m]
    assert jobset_lines == [
        f"integration {JOBSET_FRAMEWORK} (JobSet) not started: API not served: "
        "jobset.x-k8s.io/v1alpha2/jobsets (CRD jobsets.jobset.x-k8s.io); it starts when "
        "the CRD is installed"
    ]


def test_a_deleted_crd_stops_its_integration_and_a_new_one_starts_it_again(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with stack(
            tmp_path, objects=queue_objects(), config=shipped_config(), crds=("jobsets",)
        ) as s:
            await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 1, what="JobSet runs")
            await s.user.create(JOBSET.resource, jobset("a"), namespace=NS)
            await eventually(lambda: admitted(workload_of(s.server, JOBSET, "a")), what="admitted")
            await s.user.create(k.JOBS, job(NS, "keep", queue="lq"), namespace=NS)
            await eventually(lambda: admitted(s.workload_of_job(NS, "keep")), what="Job admitted")
            kept = s.workload_of_job(NS, "keep")["metadata"]["name"]
            informer = s.service.informers["jobsets"]
            assert informer.synced.is_set() and informer.store
            s.server.clear_requests()

            await s.user.delete(k.CUSTOM_RESOURCE_DEFINITIONS, "jobsets.jobset.x-k8s.io")
            await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 0, what="JobSet stops")
            assert not informer.synced.is_set() and not informer.store
            status, text = await readyz(s)
            assert status == 200 and JOBSET_WAITING in text.splitlines(), text
            deletes = [
                r for r in s.server.requests
                if r.verb in ("delete", "deletecollection") and r.resource == "workloads"
                and (r.name == kept or not r.name)
            ]  # fmt: skip
            assert deletes == [], "an integration stopping deletes no Workload of another kind"
            assert admitted(s.workload_of_job(NS, "keep")), "the Job's Workload keeps its quota"

            await install_crd(s, "jobsets")
            await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 1, what="JobSet again")
            await create_when_served(s, JOBSET.resource, jobset("b"))
            await eventually(
                lambda: admitted(workload_of(s.server, JOBSET, "b")), what="b admitted"
            )
            assert not s.task.done()

    asyncio.run(main())


def test_a_kind_without_its_crd_is_not_watched_and_readiness_waits_for_the_core_only(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=queue_objects(), config=shipped_config(), crds=()) as s:
            await eventually(lambda: active(s, JOBSET_FRAMEWORK) == 0, what="JobSet waits")
            for plural in ("jobsets", "rayjobs", "pytorchjobs", "trainjobs", "trainingruntimes"):
                assert s.server.request_count(resource=plural) == 0, plural
                assert not s.service.informers[plural].synced.is_set()
            core = {i.name for i in s.service.core_informers}
            assert {"workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts",
                    "workloadpriorityclasses", "jobs", "pods", "nodes", "namespaces",
                    "priorityclasses"} <= core  # fmt: skip
            assert not core & {"jobsets", "rayjobs", "rayclusters", "pytorchjobs", "mpijobs",
                               "trainjobs", "leaderworkersets"}  # fmt: skip
            assert s.service.synced

    asyncio.run(main())
