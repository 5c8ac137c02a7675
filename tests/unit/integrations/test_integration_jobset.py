"""JobSet (jobset.x-k8s.io/v1alpha2): one Workload per JobSet, one podSet per
replicated Job, the child Jobs never admitted on their own.

The tests play the JobSet controller: they create the child Jobs of a running JobSet
(controller-owned, labels copied) and write its status. The CRD served to both backends
is ``tests/support/crds/jobset.x-k8s.io_jobsets.yaml``.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import IntegrationError
from admission.integrations.kinds.jobset import JOBSET
from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from tests.support.integration_kit import (
    NS,
    PODSET,
    KindCase,
    Q,
    Roles,
    crds_of,
    gang_scenario,
    lifecycle_objects,
    meta,
    pod_template,
    review,
    run_lifecycle,
    workload_of,
)
from tests.support.kube_harness import admitted, eventually, stack
from webhooks.config import WebhookConfig


def jobset(name: str, roles: Roles, metadata: dict[str, Any], *, parallelism: int = 1) -> dict:
    """Each role: a replicated Job of ``pods // parallelism`` replicas."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "replicatedJobs": [
                {
                    "name": role,
                    "replicas": pods // parallelism,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "template": pod_template(),
                        }
                    },
                }
                for role, pods in roles
            ]
        },
    }


def completed(_obj: dict) -> dict:
    return {
        "conditions": [
            {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
             "message": "jobset completed successfully",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    }  # fmt: skip


CASE = KindCase(JOBSET, jobset, [("driver", 1), ("workers", 4)], completed)


def run(coro: Any) -> None:
    asyncio.run(coro)


# ----------------------------------------------------------------------- the integration


def test_one_podset_per_replicated_job_counting_replicas_times_parallelism() -> None:
    js = jobset("train", [("driver", 1), ("workers", 8)], meta("train", uid="u1"), parallelism=2)
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 1
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 1
    js["spec"]["replicatedJobs"][0]["replicas"] = 1
    wl = workload_model(JOBSET, js, workload_priority_classes={}, priority_classes={})
    assert [(p.name, p.count, p.requests) for p in wl.pod_sets] == [
        ("driver", 1, {"cpu": 1000}),
        ("workers", 8, {"cpu": 1000}),  # 4 replicas x parallelism 2
    ]
    assert wl.name.startswith("jobset-train-") and wl.queue_name == "lq"


def test_a_jobset_without_replicated_jobs_is_refused_naming_the_field() -> None:
    js = jobset("bad", [], meta("bad"))
    with pytest.raises(IntegrationError, match=r"jobset team-a/bad: spec\.replicatedJobs"):
        workload_model(JOBSET, js, workload_priority_classes={}, priority_classes={})


def test_the_topology_annotations_of_a_replicated_job_become_its_topology_request() -> None:
    js = jobset("tas", [("workers", 4)], meta("tas"))
    tmpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    tmpl["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}}
    (ps,) = workload_model(JOBSET, js, workload_priority_classes={}, priority_classes={}).pod_sets
    assert ps.topology is not None and ps.topology.required == "rack"


# ----------------------------------------------------------------------------- webhooks


def test_the_mutating_webhook_suspends_a_queued_jobset() -> None:
    allowed, patch, _ = review(JOBSET, jobset("a", CASE.roles, meta("a")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    plain = jobset("b", CASE.roles, meta("b", queue=None))
    assert review(JOBSET, plain, mutating=True)[:2] == (True, [])


def test_the_queue_label_of_a_running_jobset_is_immutable() -> None:
    old = jobset("a", CASE.roles, meta("a"))
    old["spec"]["suspend"] = False
    new = copy.deepcopy(old)
    new["metadata"]["labels"][Q] = "other"
    allowed, _, message = review(JOBSET, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and "queue-name]: Invalid value" in message and "immutable" in message
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert review(JOBSET, new, mutating=False, operation="UPDATE", old=old)[0]


def test_podset_names_must_be_dns_labels_and_at_most_eight() -> None:
    bad = jobset("a", [("Driver", 1)], meta("a"))
    allowed, _, message = review(JOBSET, bad, mutating=False)
    assert not allowed and "spec.replicatedJobs[0].template.spec.template" in message
    many = jobset("b", [(f"r{i}", 1) for i in range(9)], meta("b"))
    allowed, _, message = review(JOBSET, many, mutating=False)
    assert not allowed and "at most 8 podSets" in message


def test_a_disabled_integration_answers_allowed_unchanged() -> None:
    config = WebhookConfig(
        frameworks=parse_config({"integrations": {"frameworks": ["batch/job"]}}).frameworks
    )
    assert review(JOBSET, jobset("a", CASE.roles, meta("a")), mutating=True, config=config)[:2] == (
        True,
        [],
    )


def test_a_job_owned_by_a_jobset_is_left_to_the_jobset_integration() -> None:
    from admission.integrations.kinds.job import JOB

    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **meta("a-workers-0"),
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                 "name": "a", "uid": "u", "controller": True}],
        },
        "spec": {"template": pod_template()},
    }  # fmt: skip
    assert review(JOB, child, mutating=True)[:2] == (True, [])
    disabled = WebhookConfig(
        frameworks=parse_config({"integrations": {"frameworks": ["batch/job"]}}).frameworks
    )
    assert review(JOB, child, mutating=True, config=disabled)[1] == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


# ------------------------------------------------------------------------------ plan


def test_plan_admits_a_jobset_gang_only_when_every_replicated_job_fits(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


# ---------------------------------------------------------------------------- serve


def test_a_jobset_is_admitted_started_per_podset_preempted_restored_and_finished(
    tmp_path: Path, backend: Any
) -> None:
    run(run_lifecycle(CASE, tmp_path, backend))


def child_job(js: dict, role: str, index: int) -> dict:
    """The Job the JobSet controller creates for replica ``index`` of ``role``."""
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == role)
    spec = copy.deepcopy(rj["template"]["spec"])
    spec["suspend"] = bool(js["spec"].get("suspend"))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{js['metadata']['name']}-{role}-{index}",
            "namespace": js["metadata"]["namespace"],
            "labels": {**js["metadata"].get("labels", {}),
                       "jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"]},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                 "name": js["metadata"]["name"], "uid": js["metadata"]["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }  # fmt: skip


def test_child_jobs_with_the_queue_label_are_never_suspended_or_admitted_on_their_own(
    tmp_path: Path, backend: Any
) -> None:
    res = CASE.resource

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(CASE), crds=crds_of(JOBSET)
        ) as s:
            await s.user.create(res, jobset("js", CASE.roles, meta("js")), namespace=NS)
            await eventually(
                lambda: admitted(workload_of(s.server, JOBSET, "js")), what="the JobSet admitted"
            )
            js = await eventually(
                lambda: (j := s.get(res.plural, "js", NS)) and not j["spec"]["suspend"] and j,
                what="the JobSet started",
            )
            # the JobSet webhook's rule (the CRD's CEL here): a running JobSet's
            # replicated Jobs are immutable
            changed = copy.deepcopy(js["spec"]["replicatedJobs"])
            changed[1]["replicas"] = 8
            with pytest.raises(ApiError) as refused:
                await s.user.patch(res, "js", {"spec": {"replicatedJobs": changed}}, namespace=NS)
            assert refused.value.status == 422
            for role, pods in CASE.roles:
                for i in range(pods):
                    created = await s.user.create(k.JOBS, child_job(js, role, i), namespace=NS)
                    assert created["spec"]["suspend"] is False  # not suspended by the webhook
                    tmpl = created["spec"]["template"]
                    assert tmpl["metadata"]["labels"][PODSET] == role
            await asyncio.sleep(1.0)  # give a wrong reconcile time to act
            workloads = s.workloads(NS)
            assert [w["metadata"]["ownerReferences"][0]["kind"] for w in workloads] == ["JobSet"]
            for job in s.server.list_objects("jobs", NS):
                assert job["spec"]["suspend"] is False, job["metadata"]["name"]

    run(main())


def test_with_the_jobset_integration_disabled_its_labelled_child_jobs_are_plain_jobs(
    tmp_path: Path,
) -> None:
    """Kueue's rule for a child of a disabled integration: a Job like any other."""
    config = parse_config({"integrations": {"frameworks": ["batch/job", "pod"]}})
    res = CASE.resource

    async def main() -> None:
        async with stack(tmp_path, objects=lifecycle_objects(CASE), config=config) as s:
            created = await s.user.create(res, jobset("js", CASE.roles, meta("js")), namespace=NS)
            assert created["spec"]["suspend"] is False  # not managed: no webhook change
            created["spec"]["suspend"] = False
            child = await s.user.create(k.JOBS, child_job(created, "driver", 0), namespace=NS)
            assert child["spec"]["suspend"] is True  # suspended as a queued Job
            await eventually(lambda: s.workload_of_job(NS, "js-driver-0"), what="its Workload")
            assert workload_of(s.server, JOBSET, "js") is None

    run(main())
