"""The double defaults and validates Jobs and Pods as kube-apiserver 1.32 does (D6-D9).

Issue 11's table: built-in defaulting (D6), the Job template's immutability once a Job
has run or while it is unsuspended (D7), Pod nodeSelector only while gated (D8) and
the Job status rules on ``jobs/status`` (D9).  Requests go over HTTP with aiohttp so
the status codes and ``Status`` bodies are what a client sees.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from admission.apiserver_double import ADMIN_TOKEN, ApiServer, running_apiserver
from admission.apiserver_double.jobcontroller import finish_patches, start_patch

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

Obj = dict[str, Any]


class Http:
    """Raw requests to the double: (status, parsed body)."""

    def __init__(self, server: ApiServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def call(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type, **ADMIN}
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method, self.server.url + path, data=data, headers=headers
        ) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Obj:
        status, out = await self.call(method, path, body, **kw)
        assert 200 <= status < 300, (status, out)
        return out

    async def patch(self, path: str, body: Any, *, content_type: str = MERGE) -> tuple[int, Any]:
        return await self.call("PATCH", path, body, content_type=content_type)


@asynccontextmanager
async def http() -> AsyncIterator[Http]:
    async with running_apiserver() as server:
        async with aiohttp.ClientSession() as session:
            yield Http(server, session)


def run(test: Callable[[Http], Awaitable[None]]) -> None:
    async def main() -> None:
        async with http() as api:
            await test(api)

    asyncio.run(main())


def job(name: str, *, suspend: bool | None = True, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
            **spec,
        },
    }
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    return body


def pod(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


SCHEDULING = {
    "spec": {
        "template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
            "spec": {
                "nodeSelector": {"gpu": "a100"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    }
}


# -- D6: built-in defaulting ------------------------------------------------------------------


def test_job_create_is_defaulted_and_gets_selector_labels_and_empty_status() -> None:
    async def scenario(api: Http) -> None:
        body = job("d", suspend=None)
        body["status"] = {"active": 3}  # dropped: the status subresource owns it
        created = await api.ok("POST", JOBS, body)
        spec, uid = created["spec"], created["metadata"]["uid"]
        assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
        assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
        assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
        assert "manualSelector" not in spec
        assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        assert spec["template"]["metadata"]["labels"] == {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": "d",
            "controller-uid": uid,
            "job-name": "d",
        }
        pod_spec = spec["template"]["spec"]
        assert pod_spec["restartPolicy"] == "Never"  # given, not defaulted
        assert pod_spec["terminationGracePeriodSeconds"] == 30
        assert pod_spec["dnsPolicy"] == "ClusterFirst"
        assert pod_spec["schedulerName"] == "default-scheduler"
        assert pod_spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
        assert created["status"] == {}
        stored = api.server.get_object("jobs", "d", "default")
        assert stored is not None and stored["spec"] == spec

    run(scenario)


def test_job_defaults_follow_the_given_fields() -> None:
    async def scenario(api: Http) -> None:
        body = job("p", completions=4, podFailurePolicy={"rules": []})
        body["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
        created = await api.ok("POST", JOBS, body)
        assert created["spec"]["parallelism"] == 1 and created["spec"]["completions"] == 4
        assert created["spec"]["podReplacementPolicy"] == "Failed"
        assert created["metadata"]["labels"] == {"app": "x"}  # the template's labels

    run(scenario)


def test_job_without_a_valid_restart_policy_is_refused() -> None:
    async def scenario(api: Http) -> None:
        body = job("r")
        del body["spec"]["template"]["spec"]["restartPolicy"]  # defaulted to Always
        status, out = await api.call("POST", JOBS, body)
        assert status == 422 and out["reason"] == "Invalid"
        assert out["message"] == (
            'Job.batch "r" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
            '"Always": supported values: "OnFailure", "Never"'
        )
        assert out["details"]["causes"] == [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"',
                "field": "spec.template.spec.restartPolicy",
            }
        ]

    run(scenario)


def test_pod_spec_is_defaulted() -> None:
    async def scenario(api: Http) -> None:
        body = pod("p")
        body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
        created = await api.ok("POST", PODS, body)
        spec = created["spec"]
        assert spec["restartPolicy"] == "Always"
        assert spec["terminationGracePeriodSeconds"] == 30
        assert spec["dnsPolicy"] == "ClusterFirst"
        assert spec["schedulerName"] == "default-scheduler"
        container = spec["containers"][0]
        assert container["imagePullPolicy"] == "Always"  # no tag
        assert container["resources"]["requests"] == {"cpu": "1"}  # from the limits
        assert created["status"]["phase"] == "Pending"

    run(scenario)


# -- D7: the Job template ---------------------------------------------------------------------


def test_suspended_never_started_job_takes_scheduling_directives() -> None:
    async def scenario(api: Http) -> None:
        await api.ok("POST", JOBS, job("j"))
        # start it and inject the flavor's directives in one write (the stored Job is
        # suspended and has no startTime)
        start = {"spec": {"suspend": False, **SCHEDULING["spec"]}}
        status, out = await api.patch(f"{JOBS}/j", start)
        assert status == 200, out
        template = out["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {"gpu": "a100"}
        assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"

    run(scenario)


def test_template_of_an_unsuspended_job_is_immutable() -> None:
    async def scenario(api: Http) -> None:
        await api.ok("POST", JOBS, job("j", suspend=False))
        status, out = await api.patch(f"{JOBS}/j", SCHEDULING)
        assert status == 422 and out["reason"] == "Invalid"
        assert out["message"].startswith(
            'Job.batch "j" is invalid: spec.template: Invalid value: core.PodTemplateSpec{'
        )
        assert out["message"].endswith(": field is immutable")
        (cause,) = out["details"]["causes"]
        assert cause["field"] == "spec.template" and cause["reason"] == "FieldValueInvalid"
        assert out["details"]["kind"] == "Job" and out["details"]["group"] == "batch"
        # "suspend + restore the template" in one patch is refused too: the *stored* Job
        # decides, and it is running
        both = {"spec": {"suspend": True, **SCHEDULING["spec"]}}
        status, _ = await api.patch(f"{JOBS}/j", both)
        assert status == 422
        # suspending alone is fine, and then the template may change
        await api.ok("PATCH", f"{JOBS}/j", {"spec": {"suspend": True}}, content_type=MERGE)
        await api.ok("PATCH", f"{JOBS}/j", SCHEDULING, content_type=MERGE)

    run(scenario)


def test_started_job_needs_its_start_time_cleared_before_the_template_changes() -> None:
    async def scenario(api: Http) -> None:
        created = await api.ok("POST", JOBS, job("j", suspend=False))
        patch = start_patch(created)
        await api.ok("PATCH", f"{JOBS}/j/status", patch, content_type=MERGE)
        await api.ok("PATCH", f"{JOBS}/j", {"spec": {"suspend": True}}, content_type=MERGE)
        status, out = await api.patch(f"{JOBS}/j", SCHEDULING)
        assert status == 422 and "spec.template: Invalid value" in out["message"]
        # Kueue's Stop: clear startTime through jobs/status, then restore the template
        await api.ok(
            "PATCH", f"{JOBS}/j/status", {"status": {"startTime": None}}, content_type=MERGE
        )
        restored = await api.ok("PATCH", f"{JOBS}/j", SCHEDULING, content_type=MERGE)
        assert restored["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}

    run(scenario)


def test_other_template_changes_are_refused_even_while_suspended() -> None:
    async def scenario(api: Http) -> None:
        await api.ok("POST", JOBS, job("j"))
        image = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x"}]
        status, out = await api.patch(f"{JOBS}/j", image, content_type=JSON_PATCH)
        assert status == 422 and out["message"].endswith("field is immutable")
        assert [c["field"] for c in out["details"]["causes"]] == ["spec.template"]
        status, out = await api.patch(f"{JOBS}/j", {"spec": {"completionMode": "Indexed"}})
        assert status == 422
        assert [c["field"] for c in out["details"]["causes"]] == ["spec.completionMode"]
        # parallelism is mutable at any time
        await api.ok("PATCH", f"{JOBS}/j", {"spec": {"parallelism": 3}}, content_type=MERGE)

    run(scenario)


# -- D8: Pod updates -----------------------------------------------------------------------


def test_gated_pod_takes_node_selector_additions_only() -> None:
    async def scenario(api: Http) -> None:
        gates = [{"name": "kueue.x-k8s.io/admission"}]
        await api.ok("POST", PODS, pod("g", schedulingGates=gates, nodeSelector={"zone": "a"}))
        added = {"spec": {"nodeSelector": {"gpu": "a100"}}}
        out = await api.ok("PATCH", f"{PODS}/g", added, content_type=MERGE)
        assert out["spec"]["nodeSelector"] == {"zone": "a", "gpu": "a100"}
        status, out = await api.patch(f"{PODS}/g", {"spec": {"nodeSelector": {"zone": "b"}}})
        assert status == 422
        assert out["details"]["causes"][0] == {
            "reason": "FieldValueInvalid",
            "field": "spec.nodeSelector",
            "message": 'Invalid value: {"gpu":"a100","zone":"b"}: only additions to '
            "spec.nodeSelector are allowed (no mutations or deletions)",
        }
        # ungate and add a toleration in one write (Kueue's pod-group start)
        ungate = [
            {"op": "remove", "path": "/spec/schedulingGates"},
            {
                "op": "add",
                "path": "/spec/tolerations",
                "value": [{"key": "gpu", "operator": "Exists"}],
            },
        ]
        await api.ok("PATCH", f"{PODS}/g", ungate, content_type=JSON_PATCH)

    run(scenario)


def test_ungated_pod_spec_is_immutable_but_for_images_and_added_tolerations() -> None:
    async def scenario(api: Http) -> None:
        await api.ok("POST", PODS, pod("p"))
        status, out = await api.patch(f"{PODS}/p", {"spec": {"nodeSelector": {"gpu": "a100"}}})
        assert status == 422 and out["reason"] == "Invalid"
        assert out["message"].startswith(
            'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
            "`spec.containers[*].image`"
        )
        assert out["details"]["causes"][0]["reason"] == "FieldValueForbidden"
        gate = {"spec": {"schedulingGates": [{"name": "late"}]}}
        status, out = await api.patch(f"{PODS}/p", gate)
        assert status == 422
        assert out["details"]["causes"][0]["message"] == (
            "Forbidden: only deletion is allowed, but found new scheduling gate 'late'"
        )
        image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}]
        await api.ok("PATCH", f"{PODS}/p", image, content_type=JSON_PATCH)
        tolerations = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}
        await api.ok("PATCH", f"{PODS}/p", tolerations, content_type=MERGE)
        status, out = await api.patch(f"{PODS}/p", {"spec": {"tolerations": []}})
        assert status == 422 and "existing toleration can not be modified" in out["message"]
        labels = {"metadata": {"labels": {"any": "change"}}}
        await api.ok("PATCH", f"{PODS}/p", labels, content_type=MERGE)

    run(scenario)


def test_a_pod_is_resized_in_place_through_its_resize_subresource() -> None:
    """``pods/resize`` (1.33+): only the containers' cpu and memory requests and limits
    change (the rest of the request is dropped), the QoS class stays, and the update is
    admitted as ``pods/resize``, not ``pods``."""
    from admission.apiserver_double.admission import AdmissionAttributes, UserInfo, _rule_version

    async def scenario(api: Http) -> None:
        body = pod("p")
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        created = await api.ok("POST", PODS, body)
        grow = [{"op": "replace", "path": "/spec/containers/0/resources",
                 "value": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                {"op": "replace", "path": "/spec/containers/0/image", "value": "other"}]  # fmt: skip
        resized = await api.ok("PATCH", f"{PODS}/p/resize", grow, content_type=JSON_PATCH)
        container = resized["spec"]["containers"][0]
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "1Gi"}
        assert container["image"] == created["spec"]["containers"][0]["image"]
        assert resized["metadata"]["generation"] == created["metadata"]["generation"] + 1
        gpu = [{"op": "add", "path": "/spec/containers/0/resources/limits",
                "value": {"nvidia.com/gpu": "1"}}]  # fmt: skip
        status, out = await api.patch(f"{PODS}/p/resize", gpu, content_type=JSON_PATCH)
        assert status == 422, out
        assert "spec: Forbidden: only cpu and memory resources are mutable" in out["message"]
        guaranteed = [{"op": "replace", "path": "/spec/containers/0/resources", "value": {
            "requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}}]  # fmt: skip
        status, out = await api.patch(f"{PODS}/p/resize", guaranteed, content_type=JSON_PATCH)
        assert status == 422 and "Pod QOS Class may not change" in out["message"], out

    run(scenario)
    server = ApiServer()
    rt = server.registry.resolve("pods")
    attrs = AdmissionAttributes(rt=rt, version="v1", subresource="resize", operation="UPDATE",
                                name="p", namespace="default", user=UserInfo("u"))  # fmt: skip
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"]}
    assert _rule_version({**rule, "resources": ["pods/resize"]}, attrs, equivalent=True) == "v1"
    assert _rule_version({**rule, "resources": ["pods"]}, attrs, equivalent=True) is None


# -- D9: Job status ---------------------------------------------------------------------------


def cond(type_: str) -> Obj:
    return {"type": type_, "status": "True", "reason": "R", "message": "m"}


def test_complete_needs_success_criteria_met_start_and_completion_time() -> None:
    async def scenario(api: Http) -> None:
        await api.ok("POST", JOBS, job("j", suspend=False))
        bare = {"status": {"conditions": [cond("Complete")]}}
        status, out = await api.patch(f"{JOBS}/j/status", bare)
        assert status == 422
        assert out["message"] == (
            'Job.batch "j" is invalid: [status.conditions: Invalid value: "null": cannot set '
            "Complete=True condition without the SuccessCriteriaMet=true condition, "
            "status.startTime: Required value: startTime is required for finished job, "
            "status.completionTime: Required value: completionTime is required for Complete job]"
        )
        assert [c["field"] for c in out["details"]["causes"]] == [
            "status.conditions",
            "status.startTime",
            "status.completionTime",
        ]
        # as the Job controller writes it
        for patch in finish_patches(api.server.get_object("jobs", "j", "default") or {}):
            await api.ok("PATCH", f"{JOBS}/j/status", patch, content_type=MERGE)
        done = api.server.get_object("jobs", "j", "default")
        assert done is not None
        assert [c["type"] for c in done["status"]["conditions"]] == [
            "SuccessCriteriaMet",
            "Complete",
        ]
        # terminal conditions cannot be taken back, completionTime cannot move
        undo = {"status": {"conditions": [cond("SuccessCriteriaMet")], "completionTime": None}}
        status, out = await api.patch(f"{JOBS}/j/status", undo)
        assert (
            status == 422
            and "cannot disable the terminal Complete=True condition" in out["message"]
        )
        moved = {"status": {"completionTime": "2099-01-01T00:00:00Z"}}
        status, out = await api.patch(f"{JOBS}/j/status", moved)
        assert status == 422 and "completionTime cannot be mutated" in out["message"]

    run(scenario)


def test_failed_needs_failure_target() -> None:
    async def scenario(api: Http) -> None:
        created = await api.ok("POST", JOBS, job("j", suspend=False))
        start = start_patch(created)
        await api.ok("PATCH", f"{JOBS}/j/status", start, content_type=MERGE)
        status, out = await api.patch(
            f"{JOBS}/j/status", {"status": {"conditions": [cond("Failed")]}}
        )
        assert status == 422 and out["details"]["causes"][0]["message"] == (
            'Invalid value: "null": cannot set Failed=True condition without the '
            "FailureTarget=true condition"
        )
        failing = {"status": {"conditions": [cond("FailureTarget"), cond("Failed")], "active": 0}}
        await api.ok("PATCH", f"{JOBS}/j/status", failing, content_type=MERGE)
        # Complete cannot join Failed
        both = {
            "status": {
                "conditions": [
                    *failing["status"]["conditions"],
                    cond("SuccessCriteriaMet"),
                    cond("Complete"),
                ]
            }
        }
        status, out = await api.patch(f"{JOBS}/j/status", both)
        assert (
            status == 422
            and "cannot set Complete=True and Failed=true conditions" in out["message"]
        )

    run(scenario)


def test_start_time_of_an_unsuspended_job_cannot_be_removed() -> None:
    async def scenario(api: Http) -> None:
        created = await api.ok("POST", JOBS, job("j", suspend=False))
        await api.ok("PATCH", f"{JOBS}/j/status", start_patch(created), content_type=MERGE)
        clear = {"status": {"startTime": None}}
        status, out = await api.patch(f"{JOBS}/j/status", clear)
        assert status == 422
        assert out["message"] == (
            'Job.batch "j" is invalid: status.startTime: Required value: startTime cannot be '
            "removed for unsuspended job"
        )
        await api.ok("PATCH", f"{JOBS}/j", {"spec": {"suspend": True}}, content_type=MERGE)
        cleared = await api.ok("PATCH", f"{JOBS}/j/status", clear, content_type=MERGE)
        assert "startTime" not in cleared["status"]

    run(scenario)
