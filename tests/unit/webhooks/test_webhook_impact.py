"""Impact warnings over real HTTPS: an allowed quota edit tells the admin, in
AdmissionReview warnings, what it will do to the live state (what `kubectl apply`
and `--dry-run=server` print)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.drivers.loader import load_paths
from admission.drivers.plan import run_plan
from tests.support.webhook_server import ReviewClient, make_review, serving
from webhooks.view import InMemoryView

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
PATH = "/validate-kueue-x-k8s-io-v1beta2-clusterqueue"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    inputs = load_paths([str(EXAMPLES)])
    run_plan(inputs)  # the live state: what fits is admitted
    with serving(InMemoryView.from_inputs(inputs), tmp_path_factory.mktemp("certs")) as c:
        yield c


def _example_cq(name: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all((EXAMPLES / "30-clusterqueues.yaml").read_text()):
        if doc and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(name)


def _set(doc: dict[str, Any], flavor: str, resource: str, **fields: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for g in doc["spec"]["resourceGroups"]:
        for f in g["flavors"]:
            if f["name"] == flavor:
                for r in f["resources"]:
                    if r["name"] == resource:
                        r.update(fields)
    return doc


def _review(client: ReviewClient, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    status, body = client.post(PATH, make_review("ClusterQueue", new, old=old, operation="UPDATE"))
    assert status == 200
    return body["response"]


def test_quota_cut_is_allowed_and_warns_about_running_workloads_over_quota(
    client: ReviewClient,
) -> None:
    old = _example_cq("llm-research")
    new = _set(
        old, "h100", "nvidia.com/gpu", nominalQuota="4", borrowingLimit="4", lendingLimit="4"
    )
    resp = _review(client, old, new)
    assert resp["allowed"] is True
    assert resp["warnings"][0] == (
        "ClusterQueue llm-research: admitted workloads use 32 nvidia.com/gpu on flavor h100, 24 over the "
        "new limit 8; they keep running (an edit evicts nothing)"
    )
    assert len(resp["warnings"]) <= 10


def test_quota_increase_warns_which_pending_workloads_will_be_admitted(
    client: ReviewClient,
) -> None:
    old = _example_cq("inference-prod")
    new = _set(old, "mig-1g-10gb", "nvidia.com/mig-1g.10gb", nominalQuota="100")
    resp = _review(client, old, new)
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "1 pending workload(s) now fit and will be admitted: 1 in ClusterQueue inference-prod"
    ]


def test_an_invalid_edit_is_denied_without_warnings(client: ReviewClient) -> None:
    old = _example_cq("inference-prod")
    new = _set(old, "mig-1g-10gb", "nvidia.com/mig-1g.10gb", nominalQuota="-1")
    resp = _review(client, old, new)
    assert resp["allowed"] is False
    assert "nominalQuota" in resp["status"]["message"]
    assert not resp.get("warnings")
