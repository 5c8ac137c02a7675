"""Quota CR and Workload admission over real HTTPS (docs/semantics.md §3.5–§3.8)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queues.model import Admission, Cohort
from tests.support.webhook_server import (
    ReviewClient,
    cluster_queue_doc,
    decode_patch,
    make_review,
    pending_view,
    serving,
)
from webhooks.handlers import quota
from webhooks.view import InMemoryView

V = "/validate-kueue-x-k8s-io-v1beta2-"
M = "/mutate-kueue-x-k8s-io-v1beta2-"
API = "kueue.x-k8s.io/v1beta2"
SERVICE_USER = "system:serviceaccount:quartermaster-system:quartermaster"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    view = InMemoryView(
        cohorts={"a": Cohort("a", parent="b"), "b": Cohort("b", parent="c"), "c": Cohort("c")}
    )
    with serving(view, tmp_path_factory.mktemp("certs")) as c:
        yield c


def review(
    client: ReviewClient,
    path: str,
    kind: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    username: str = "admin",
) -> dict[str, Any]:
    op = "UPDATE" if old is not None else "CREATE"
    status, resp = client.post(
        path, make_review(kind, obj, old=old, operation=op, username=username)
    )
    assert status == 200
    return resp["response"]


def denial(response: dict[str, Any]) -> str:
    assert response["allowed"] is False and response["status"]["code"] == 403
    return response["status"]["message"]


def cluster_queue(
    *, cohort: str | None = None, lending: str | None = None, nominal: str = "4"
) -> dict[str, Any]:
    quota_: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
    if lending is not None:
        quota_["lendingLimit"] = lending
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [quota_]}]}
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}


def cohort(name: str, parent: str | None = None) -> dict[str, Any]:
    spec = {"parentName": parent} if parent else {}
    return {"apiVersion": API, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


# ---------------------------------------------------------------- mutating


def test_cluster_queue_create_gets_the_resource_in_use_finalizer(client: ReviewClient) -> None:
    response = review(client, M + "clusterqueue", "ClusterQueue", cluster_queue())
    assert decode_patch({"response": response}) == [
        {"op": "add", "path": "/metadata/finalizers", "value": ["kueue.x-k8s.io/resource-in-use"]}
    ]


def test_resource_flavor_with_finalizer_already_gets_no_patch(client: ReviewClient) -> None:
    rf = {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": "f", "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
        "spec": {},
    }
    response = review(client, M + "resourceflavor", "ResourceFlavor", rf)
    assert response["allowed"] is True and "patch" not in response


def test_workload_mutation_allows_unchanged(client: ReviewClient) -> None:
    response = review(client, M + "workload", "Workload", workload())
    assert response["allowed"] is True and "patch" not in response


# ---------------------------------------------------------------- ClusterQueue / RF / WPC


def test_valid_cluster_queue_is_allowed(client: ReviewClient) -> None:
    assert review(client, V + "clusterqueue", "ClusterQueue", cluster_queue())["allowed"] is True


def test_lending_limit_needs_a_cohort_and_at_most_nominal(client: ReviewClient) -> None:
    assert denial(
        review(client, V + "clusterqueue", "ClusterQueue", cluster_queue(lending="5"))
    ) == (
        "[spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be nil when cohort is empty, "
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be less than or equal to the nominalQuota]"
    )
    assert denial(
        review(client, V + "clusterqueue", "ClusterQueue", cluster_queue(cohort="co", lending="5"))
    ) == (
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be less than or equal to the nominalQuota"
    )


def test_cluster_queue_update_is_validated_too(client: ReviewClient) -> None:
    msg = denial(
        review(
            client, V + "clusterqueue", "ClusterQueue", cluster_queue(nominal="-1"), cluster_queue()
        )
    )
    assert msg.startswith("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: ")


def test_resource_flavor_taints_are_validated(client: ReviewClient) -> None:
    rf = {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {
            "nodeTaints": [
                {"key": "gpu", "effect": "NoSchedule"},
                {"key": "gpu", "effect": "NoSchedule"},
            ]
        },
    }
    assert "taints must be unique by key and effect pair" in denial(
        review(client, V + "resourceflavor", "ResourceFlavor", rf)
    )


def test_workload_priority_class_needs_a_value(client: ReviewClient) -> None:
    wpc = {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}}
    assert denial(
        review(client, V + "workloadpriorityclass", "WorkloadPriorityClass", wpc)
    ).startswith("value: ")
    wpc["value"] = 1000
    assert (
        review(client, V + "workloadpriorityclass", "WorkloadPriorityClass", wpc)["allowed"] is True
    )


# ---------------------------------------------------------------- LocalQueue


def local_queue(cq: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ns"},
        "spec": {"clusterQueue": cq},
    }


def test_local_queue_cluster_queue_is_immutable(client: ReviewClient) -> None:
    assert denial(
        review(client, V + "localqueue", "LocalQueue", local_queue("cq-b"), local_queue("cq-a"))
    ) == ('spec.clusterQueue: Invalid value: "cq-b": field is immutable')
    assert review(client, V + "localqueue", "LocalQueue", local_queue("cq-a"), local_queue("cq-a"))[
        "allowed"
    ]


# ---------------------------------------------------------------- Cohort


def test_cohort_edit_closing_a_cycle_is_denied_with_the_cycle(client: ReviewClient) -> None:
    # existing tree: a -> b -> c
    assert denial(review(client, V + "cohort", "Cohort", cohort("c", "a"), cohort("c"))) == (
        'spec.parentName: Invalid value: "a": would create a cycle in the cohort tree: c -> a -> b -> c'
    )


def test_cohort_that_is_its_own_parent_is_denied(client: ReviewClient) -> None:
    assert denial(review(client, V + "cohort", "Cohort", cohort("x", "x"))) == (
        'spec.parentName: Invalid value: "x": would create a cycle in the cohort tree: x -> x'
    )


def test_cohort_create_under_an_existing_tree_is_allowed(client: ReviewClient) -> None:
    assert review(client, V + "cohort", "Cohort", cohort("d", "a"))["allowed"] is True
    assert review(client, V + "cohort", "Cohort", cohort("b", "missing-parent"), cohort("b", "c"))[
        "allowed"
    ]


def test_cohort_cycle_helper_ignores_cycles_not_through_the_edited_cohort() -> None:
    cohorts = {"p": Cohort("p", parent="q"), "q": Cohort("q", parent="p")}
    assert quota.cohort_cycle("new", "p", cohorts) is None
    assert quota.cohort_cycle("p", "q", cohorts) == ["p", "q", "p"]


def test_cohort_limits_need_a_parent(client: ReviewClient) -> None:
    co = cohort("root")
    co["spec"]["resourceGroups"] = [
        {
            "coveredResources": ["cpu"],
            "flavors": [
                {
                    "name": "f",
                    "resources": [{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}],
                }
            ],
        }
    ]
    assert "must be nil when parent is empty" in denial(review(client, V + "cohort", "Cohort", co))


# ---------------------------------------------------------------- impact warnings seam


@pytest.fixture(scope="module")
def pending_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    """A server whose model holds one pending workload: quota edits have an impact."""
    with serving(
        pending_view(1, cluster_queues=1, cohorts=1), tmp_path_factory.mktemp("certs")
    ) as c:
        yield c


def test_impact_warnings_are_returned_at_most_ten(
    pending_client: ReviewClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [f"line {i}" for i in range(12)]

    # the what-if may run in a forked child: what it saw comes back in its first line
    def fake(kind: str, obj: Any, snap: Any, config: Any, now: float, deadline: Any) -> list[str]:
        return [f"{kind} {obj.name} deadline={deadline is not None}", *lines[1:]]

    monkeypatch.setattr(quota, "impact_lines", fake)
    response = review(
        pending_client,
        V + "clusterqueue",
        "ClusterQueue",
        cluster_queue(nominal="8"),
        cluster_queue(),
    )
    assert response["allowed"] is True
    name = cluster_queue()["metadata"]["name"]
    assert response["warnings"] == [f"ClusterQueue {name} deadline=True", *lines[1:10]]


def test_failing_impact_warnings_do_not_block_the_edit(
    pending_client: ReviewClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any) -> list[str]:
        raise RuntimeError("what-if exploded")

    monkeypatch.setattr(quota, "impact_lines", broken)
    response = review(pending_client, V + "cohort", "Cohort", cohort("e"))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "impact of this edit was not computed: it failed (RuntimeError: what-if exploded)"
    ]


def test_only_edits_that_can_move_a_workload_run_the_what_if(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create with nothing pending (``kubectl apply -f manifests/examples/`` on a
    fresh install) is answered at once, without a what-if and without a warning."""
    monkeypatch.setattr(quota, "impact_lines", lambda *_a: ["computed"])
    view = pending_view(1, cluster_queues=1, cohorts=1)
    (key,) = view.workloads
    pending = view.workloads.pop(key)
    admitted = copy.copy(pending)
    admitted.admission = Admission("cq-0", [])
    cq_doc = cluster_queue_doc("cq-1", cohort="cohort-0")
    with serving(view, tmp_path) as c:

        def warnings(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
            return review(c, V + kind.lower(), kind, obj, old).get("warnings")

        # no workload at all: no edit can move one
        assert warnings("ClusterQueue", cq_doc) is None
        assert warnings("ClusterQueue", cq_doc, cq_doc) is None
        assert warnings("Cohort", cohort("cohort-0")) is None
        # admitted workloads only: a create adds quota, except a Cohort's, which may
        # set limits on an existing implicit cohort; updates may take quota away
        view.workloads[key] = admitted
        assert warnings("ClusterQueue", cq_doc) is None
        assert warnings("LocalQueue", local_queue("cq-0")) is None
        assert warnings("Cohort", cohort("cohort-0")) == ["computed"]
        assert warnings("ClusterQueue", cq_doc, cq_doc) == ["computed"]
        # a pending workload: any edit may admit it
        view.workloads[key] = pending
        assert warnings("ClusterQueue", cq_doc) == ["computed"]


def test_impact_warnings_default_to_none() -> None:
    assert quota.impact_warnings("ClusterQueue", None, cluster_queue(), InMemoryView()) == []


# ---------------------------------------------------------------- Workload


def workload(*, reserved: bool = False, admission: bool = False, count: int = 2) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ],
        },
    }
    status: dict[str, Any] = {}
    if reserved:
        status["conditions"] = [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    if admission:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default"},
                    "resourceUsage": {"cpu": "2"},
                    "count": count,
                }
            ],
        }
    if status:
        wl["status"] = status
    return wl


WL = V + "workload"


def test_workload_with_reserved_pods_key_is_denied(client: ReviewClient) -> None:
    wl = workload()
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "pods"
    ] = "1"
    assert "the key is reserved for internal kueue use" in denial(
        review(client, WL, "Workload", wl)
    )


def test_workload_with_negative_request_is_denied(client: ReviewClient) -> None:
    wl = workload()
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "cpu"
    ] = "-1"
    assert "must be greater than or equal to 0" in denial(review(client, WL, "Workload", wl))


def test_user_cannot_admit_their_own_workload(client: ReviewClient) -> None:
    old = workload()
    new = workload(reserved=True, admission=True)
    assert denial(review(client, WL, "Workload", new, old, username="alice")) == (
        "status.admission: Forbidden: can only be set by the admission service "
        f'({SERVICE_USER}), not by "alice"'
    )
    assert review(client, WL, "Workload", new, old, username=SERVICE_USER)["allowed"] is True


def test_workload_created_with_admission_by_a_user_is_denied(client: ReviewClient) -> None:
    msg = denial(
        review(client, WL, "Workload", workload(reserved=True, admission=True), username="bob")
    )
    assert msg.startswith("status.admission: Forbidden: can only be set by the admission service")


def test_admission_is_immutable_once_set(client: ReviewClient) -> None:
    old = workload(reserved=True, admission=True)
    new = copy.deepcopy(old)
    new["status"]["admission"]["clusterQueue"] = "other"
    msg = denial(review(client, WL, "Workload", new, old, username=SERVICE_USER))
    assert msg.startswith('status.admission: Invalid value: {"clusterQueue":"other"')
    assert msg.endswith(": field is immutable")


def test_only_topology_assignments_may_change_in_an_admission(client: ReviewClient) -> None:
    """Kueue's validateAdmissionUpdate under TAS: a failed node replaced rewrites the
    podSets' topologyAssignment; anything else of the admission stays immutable."""
    old = workload(reserved=True, admission=True)
    ta = {"levels": ["kubernetes.io/hostname"],
          "slices": [{"domainCount": 1, "podCounts": {"universal": 1},
                      "valuesPerLevel": [{"universal": "h1"}]}]}  # fmt: skip
    old["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = ta
    new = copy.deepcopy(old)
    new["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0][
        "valuesPerLevel"
    ] = [{"universal": "h2"}]
    assert review(client, WL, "Workload", new, old, username=SERVICE_USER)["allowed"] is True
    new["status"]["admission"]["clusterQueue"] = "other"
    assert denial(review(client, WL, "Workload", new, old, username=SERVICE_USER)).endswith(
        ": field is immutable"
    )


def test_admission_can_be_cleared(client: ReviewClient) -> None:
    old = workload(reserved=True, admission=True)
    assert review(client, WL, "Workload", workload(), old, username=SERVICE_USER)["allowed"] is True


def test_pod_sets_are_immutable_while_quota_is_reserved(client: ReviewClient) -> None:
    old = workload(reserved=True, admission=True)
    new = workload(reserved=True, admission=True)
    new["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] = "other"
    assert denial(review(client, WL, "Workload", new, old, username=SERVICE_USER)) == (
        'spec.podSets[0]: Invalid value: "main": field is immutable'
    )
    # without a reservation the podSets may change
    assert review(client, WL, "Workload", workload(count=3), workload())["allowed"] is True


def test_reserved_workload_needs_admission(client: ReviewClient) -> None:
    msg = denial(review(client, WL, "Workload", workload(reserved=True), username=SERVICE_USER))
    assert (
        "status.admission: Required value: must be set while the QuotaReserved condition is true"
        in msg
    )


def test_reclaimable_pods_are_bounded_by_the_pod_set(client: ReviewClient) -> None:
    wl = workload()
    wl["status"] = {"reclaimablePods": [{"name": "main", "count": 3}]}
    assert denial(review(client, WL, "Workload", wl)) == (
        "status.reclaimablePods[main].count: Invalid value: 3: should be less or equal to 2"
    )


def test_reclaimable_pods_cannot_decrease_while_reserved_but_by_the_service(
    client: ReviewClient,
) -> None:
    """Kueue's rule, for everyone but the service, which sets the field from what the
    job reports and so must be able to undo a value it did not write."""
    old = workload(reserved=True, admission=True)
    old["status"]["reclaimablePods"] = [{"name": "main", "count": 2}]
    new = copy.deepcopy(old)
    new["status"]["reclaimablePods"] = [{"name": "main", "count": 1}]
    assert denial(review(client, WL, "Workload", new, old, username="admin")) == (
        "status.reclaimablePods[main].count: Invalid value: 1: cannot be less than 2"
    )
    assert review(client, WL, "Workload", new, old, username=SERVICE_USER)["allowed"] is True


def test_priority_boost_must_be_an_integer(client: ReviewClient) -> None:
    wl = workload()
    wl["metadata"]["annotations"] = {"kueue.x-k8s.io/priority-boost": "lots"}
    assert denial(review(client, WL, "Workload", wl)) == (
        'metadata.annotations[kueue.x-k8s.io/priority-boost]: Invalid value: "lots": must be a valid signed integer'
    )
