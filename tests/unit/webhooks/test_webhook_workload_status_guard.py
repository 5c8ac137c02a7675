"""A tenant may not write a Workload's status, whichever kind owns the Workload.

``status.reclaimablePods`` lowers what a Workload is charged: a tenant with
``workloads/status`` who adds it to a running JobSet's Workload gets a second JobSet
admitted on the quota the first still uses. The guard is the registry's rule
(``workload_status_is_the_services``), so the table runs over every registered kind,
through the webhook server over HTTPS; the service itself may still correct the field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from admission.integrations.registry import ALL, INTEGRATIONS, Frameworks
from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review
from webhooks.config import WebhookConfig
from webhooks.view import InMemoryView

SERVICE_USER = "system:serviceaccount:quartermaster-system:quartermaster"
WL = "/validate-kueue-x-k8s-io-v1beta2-workload"
RECLAIMABLE = [{"name": "main", "count": 2}]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    config = WebhookConfig(
        frameworks=Frameworks(ALL.enabled, frozenset({("example.com/v1", "External")}))
    )
    with WebhookServerThread(
        view=InMemoryView(), config=config, cert_dir=tmp_path_factory.mktemp("certs")
    ) as srv:
        c = srv.client()
        yield c
        c.close()


def admitted_workload(owner: tuple[str, str] | None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w", "namespace": "ns", "annotations": annotations}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u1",
             "controller": True}
        ]  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "f"},
                        "resourceUsage": {"cpu": "2"},
                        "count": 2,
                    }
                ],
            },
        },
    }


def update(client: ReviewClient, new: dict[str, Any], old: dict[str, Any], user: str) -> dict:
    status, resp = client.post(
        WL,
        make_review(
            "Workload", new, old=old, operation="UPDATE", username=user, sub_resource="status"
        ),
    )
    assert status == 200
    return resp["response"]  # type: ignore[no-any-return]


OWNERS = [pytest.param((i.api_version, i.kind), id=i.kind) for i in INTEGRATIONS]


@pytest.mark.parametrize("owner", OWNERS)
def test_a_tenant_cannot_add_reclaimable_pods_to_any_kinds_workload(
    client: ReviewClient, owner: tuple[str, str]
) -> None:
    old = admitted_workload(owner)
    new = copy.deepcopy(old)
    new["status"]["reclaimablePods"] = RECLAIMABLE
    resp = update(client, new, old, "alice")
    assert resp["allowed"] is False
    assert resp["status"]["message"] == (
        "status.reclaimablePods: Forbidden: can only be changed by the admission service "
        f'({SERVICE_USER}), not by "alice"'
    )


def test_a_tenant_cannot_write_the_status_of_a_pod_groups_workload(client: ReviewClient) -> None:
    old = admitted_workload(None, **{"kueue.x-k8s.io/is-group-workload": "true"})
    new = copy.deepcopy(old)
    new["status"]["reclaimablePods"] = RECLAIMABLE
    assert update(client, new, old, "alice")["allowed"] is False


@pytest.mark.parametrize(
    "owner", [pytest.param(("example.com/v1", "External"), id="external"),
              pytest.param(None, id="standalone")],
)  # fmt: skip
def test_an_external_or_standalone_workloads_status_is_its_controllers(
    client: ReviewClient, owner: tuple[str, str] | None
) -> None:
    old = admitted_workload(owner)
    new = copy.deepcopy(old)
    new["status"]["reclaimablePods"] = RECLAIMABLE
    assert update(client, new, old, "external-controller")["allowed"] is True


def test_a_tenant_cannot_hand_a_workload_to_an_external_owner(client: ReviewClient) -> None:
    """Two steps would do it otherwise: re-own the Workload (the main resource), then
    write its status as the new owner's controller."""
    old = admitted_workload(("jobset.x-k8s.io/v1alpha2", "JobSet"))
    new = copy.deepcopy(old)
    external = copy.deepcopy(old)
    external["metadata"]["ownerReferences"][0].update(apiVersion="example.com/v1", kind="External")
    orphan = copy.deepcopy(old)
    del orphan["metadata"]["ownerReferences"]
    for new in (external, orphan):
        status, resp = client.post(
            WL, make_review("Workload", new, old=old, operation="UPDATE", username="alice")
        )
        assert status == 200 and resp["response"]["allowed"] is False
        assert resp["response"]["status"]["message"].startswith(
            "metadata.ownerReferences: Forbidden: would hand the Workload's status to another"
        )
    gc = "system:serviceaccount:kube-system:generic-garbage-collector"
    status, resp = client.post(
        WL, make_review("Workload", orphan, old=old, operation="UPDATE", username=gc)
    )
    assert resp["response"]["allowed"] is True, "the garbage collector orphans it"


@pytest.mark.parametrize("owner", OWNERS)
def test_the_service_can_lower_reclaimable_pods_a_tenant_slipped_in(
    client: ReviewClient, owner: tuple[str, str]
) -> None:
    old = admitted_workload(owner)
    old["status"]["reclaimablePods"] = RECLAIMABLE
    new = copy.deepcopy(old)
    del new["status"]["reclaimablePods"]
    assert update(client, new, old, SERVICE_USER)["allowed"] is True
    assert update(client, new, old, "alice")["allowed"] is False


@pytest.mark.parametrize(
    ("webhook_section", "allowed", "refused"),
    [
        pytest.param(
            None,
            ["system:serviceaccount:kube-system:generic-garbage-collector",
             "system:kube-controller-manager"],
            ["system:serviceaccount:kube-system:my-collector", "alice"],
            id="kube-controller-manager",
        ),
        pytest.param(
            {"garbageCollectorUsernames": ["system:serviceaccount:kube-system:my-collector"]},
            ["system:serviceaccount:kube-system:my-collector"],
            ["system:serviceaccount:kube-system:generic-garbage-collector",
             "system:kube-controller-manager", "alice"],
            id="configured",
        ),
    ],
)  # fmt: skip
def test_who_may_orphan_a_workload_is_the_configured_garbage_collector(
    webhook_section: dict[str, Any] | None, allowed: list[str], refused: list[str]
) -> None:
    """Dropping a Workload's controller reference hands its status to nobody: only the
    cluster's garbage collector may (orphaning it when its owner is deleted with
    ``propagationPolicy: Orphan``). Its identity depends on how kube-controller-manager
    runs, so the Configuration may name it (``webhook.garbageCollectorUsernames``)."""
    from admission.config.load import parse_config
    from webhooks.handlers.quota import validate_workload
    from webhooks.review import AdmissionRequest, HandlerContext

    cfg = parse_config({"webhook": webhook_section} if webhook_section else {})
    ctx = HandlerContext(view=InMemoryView(), config=WebhookConfig.from_config(cfg))
    old = admitted_workload(("jobset.x-k8s.io/v1alpha2", "JobSet"))
    orphan = copy.deepcopy(old)
    del orphan["metadata"]["ownerReferences"]

    def verdict(username: str) -> bool:
        req = AdmissionRequest(
            uid="u", operation="UPDATE", group="kueue.x-k8s.io", version="v1beta2",
            kind="Workload", namespace="ns", name="w", object=orphan, old_object=old,
            username=username,
        )  # fmt: skip
        return validate_workload(req, ctx).allowed

    assert [u for u in allowed + refused if verdict(u)] == allowed
