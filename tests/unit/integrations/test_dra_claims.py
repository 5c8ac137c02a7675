"""Every kind carries its pods' DRA claims into its Workload, and no kind lets a claim
change after admission escape quota.

The devices a claim asks for are counted from the Workload's pod templates
(queues.dra), so every integration must copy ``resourceClaims`` into each podSet; and a
claim added, removed or pointed at another template after admission is a resource change
like a raised request: an object kind's webhook refuses it while the object runs (and
its reconciler would evict it: ``job_mismatch``), a pod owner's webhook refuses it while
its group is managed, and a Deployment's new pods get Workloads of their own, counted
from what they claim.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from admission.integrations.framework.fields import set_path
from admission.integrations.framework.interface import Integration
from admission.integrations.framework.requests import claim_changes
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration, UpdateCheck
from admission.integrations.kinds.pod import workload_for_group
from admission.integrations.registry import INTEGRATIONS
from admission.kube.objects import job_mismatch
from queues.api.parse import parse_model
from queues.dra import DeviceClassMapping, DraAccounting, DraCatalog
from queues.model import Workload
from tests.support.integration_kit import NS, review
from tests.unit.integrations.test_limits_after_admission import BUILDERS, _body, _edited, _pod
from webhooks.config import WebhookConfig
from webhooks.review import HandlerContext
from webhooks.server.app import all_webhooks, process_review
from webhooks.view import InMemoryView

Obj = dict[str, Any]
OWNERS = [i for i in INTEGRATIONS if i.reconciler != "pods"]


def claims(template: str, *names: str) -> Any:
    def edit(spec: Obj) -> None:
        spec["resourceClaims"] = [
            {"name": n, "resourceClaimTemplateName": template} for n in names or ("gpu",)
        ]

    return edit


@pytest.mark.parametrize("integ", OWNERS, ids=lambda i: i.framework)
def test_every_kind_carries_its_claims_into_every_podset(integ: Integration) -> None:
    obj = _edited(integ, BUILDERS[integ.framework](), claims("single-gpu"))
    body = _body(integ, obj)
    pod_sets = body["spec"]["podSets"]
    assert pod_sets
    for ps in pod_sets:
        assert ps["template"]["spec"]["resourceClaims"] == [
            {"name": "gpu", "resourceClaimTemplateName": "single-gpu"}
        ]
    wl = parse_model({**body, "metadata": {**body["metadata"], "namespace": NS}})
    assert isinstance(wl, Workload)
    assert all(ps.resource_claims == (("gpu", "single-gpu", None),) for ps in wl.pod_sets)


def test_a_pod_groups_workload_carries_its_pods_claims() -> None:
    pod = _pod()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    body = workload_for_group(f"{NS}/g", [pod], workload_priority_classes={},
                              priority_classes={})  # fmt: skip
    assert body["spec"]["podSets"][0]["template"]["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "t"}
    ]


def _running(integ: Integration, obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    set_path(out, integ.suspend_path, False)
    return out


EDITS = {
    "added": (lambda s: None, claims("single-gpu")),
    "pointed elsewhere": (claims("single-gpu"), claims("eight-gpus")),
    "a second claim": (claims("single-gpu"), claims("single-gpu", "gpu", "more")),
}


@pytest.mark.parametrize("edit", EDITS, ids=str)
@pytest.mark.parametrize("integ", OWNERS, ids=lambda i: i.framework)
def test_a_claim_change_after_admission_is_caught_for_every_kind(
    integ: Integration, edit: str
) -> None:
    before, after = EDITS[edit]
    base = BUILDERS[integ.framework]()
    old, new = _edited(integ, base, before), _edited(integ, base, after)
    if integ.reconciler == "object":
        old, new = _running(integ, old), _running(integ, new)
        errors = claim_changes(integ, new, old)
        assert errors and all("resource claims" in e for e in errors), errors
        allowed, _patch, message = review(integ, new, mutating=False, operation="UPDATE", old=old)
        assert not allowed and "resource claims (DRA devices count against quota)" in message
        why = job_mismatch(_body(integ, old), _body(integ, new), started=True)
        assert why is not None and "resource claims" in why
    elif isinstance(integ, PodOwnerIntegration) and integ.fixed_requests:
        errors = integ.update_errors(new, old, UpdateCheck(True, lambda _key: True))
        assert any("resourceClaims" in e for e in errors), errors
    else:  # a Deployment: new pods, new Workloads, counted from what they claim
        assert integ.framework == "deployment"
        spec = _body(integ, new)["spec"]["podSets"][0]["template"]["spec"]
        assert spec["resourceClaims"][0]["resourceClaimTemplateName"] in {
            "single-gpu", "eight-gpus"
        }  # fmt: skip


@pytest.mark.parametrize(
    "integ", [i for i in OWNERS if i.reconciler == "object"], ids=lambda i: i.framework
)
def test_a_suspended_object_may_change_its_claims(integ: Integration) -> None:
    """Before admission nothing was counted: the Workload is rebuilt from the new claims."""
    base = BUILDERS[integ.framework]()
    old = _edited(integ, base, claims("single-gpu"))
    new = _edited(integ, base, claims("eight-gpus"))
    set_path(old, integ.suspend_path, True)
    set_path(new, integ.suspend_path, True)
    allowed, _patch, message = review(integ, new, mutating=False, operation="UPDATE", old=old)
    assert allowed, message


# -- the webhook's warnings ---------------------------------------------------------------


class _DraView(InMemoryView):
    """A webhook view with the live cache's DRA accounting (serve's CacheView has one)."""

    dra: DraAccounting


def _warnings(integ: Integration, obj: Obj, view: InMemoryView) -> tuple[bool, list[str]]:
    path = integ.webhook_paths()[1]
    config = WebhookConfig()
    spec = next(s for s in all_webhooks(config.frameworks) if s.path == path)
    r = integ.resource
    request = {
        "uid": "u", "operation": "CREATE", "dryRun": False,
        "kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "resource": {"group": r.group, "version": r.version, "resource": r.plural},
        "name": obj["metadata"]["name"], "namespace": NS, "object": obj, "oldObject": None,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
    }  # fmt: skip
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()  # fmt: skip
    status, payload, _ = process_review(body, spec, HandlerContext(view=view, config=config))
    assert status == 200
    response = json.loads(payload)["response"]
    return response["allowed"], list(response.get("warnings") or [])


@pytest.mark.parametrize("integ", OWNERS, ids=lambda i: i.framework)
def test_a_queued_object_whose_claims_cannot_be_counted_is_warned_about(
    integ: Integration,
) -> None:
    catalog = DraCatalog()
    catalog.set("DeviceClass", "gpu.example.com", {"metadata": {"name": "gpu.example.com"}})
    catalog.set("ResourceClaimTemplate", f"{NS}/single-gpu", {"spec": {"spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}})  # fmt: skip
    view = _DraView(namespaces=[NS])
    view.dra = DraAccounting([DeviceClassMapping("example.com/gpu", ("gpu.example.com",))], catalog)
    base = BUILDERS[integ.framework]()
    allowed, warnings = _warnings(integ, _edited(integ, base, claims("single-gpu")), view)
    assert allowed and warnings == []
    allowed, warnings = _warnings(integ, _edited(integ, base, claims("not-yet")), view)
    assert allowed  # the template may come after its job
    assert warnings and all(
        'resourceclaimtemplates.resource.k8s.io "not-yet" not found' in w
        and "will not be admitted until its DRA claims can be counted" in w
        for w in warnings
    ), warnings
