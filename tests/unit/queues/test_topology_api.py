"""Topology kind, ResourceFlavor.topologyName and the TAS pod-template annotations:
Kueue's schema, CEL and webhook rules, through the model, the webhook server and the
Job integration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from admission.integrations.kinds.job import JobError, workload_from_job
from queues.api import labels
from queues.api import parse as api
from queues.api.topology_request import (
    TopologyAnnotationError,
    pod_set_group_errors,
    topology_request_from_annotations,
    topology_request_json,
)
from queues.model import Topology, TopologyRequest
from tests.support.crd_validation import crd_problems
from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review
from webhooks.config import WebhookConfig
from webhooks.view import InMemoryView

HOST = "kubernetes.io/hostname"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"


def topology(*levels: str, name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": lvl} for lvl in levels]},
    }


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        api.parse_object(doc)
    except api.InputError as exc:
        return list(exc.errors)
    return []


# ---------------------------------------------------------------- the kind


def test_topology_parses_into_its_levels_widest_first() -> None:
    t = api.parse_model(topology(BLOCK, RACK, HOST))
    assert t == Topology(name="default", levels=(BLOCK, RACK, HOST))


@pytest.mark.parametrize(
    ("levels", "want"),
    [
        ((), ("spec.levels", "Required value: must have at least 1 item")),
        (
            tuple(f"l{i}" for i in range(17)),
            ("spec.levels", "Too many: 17: must have at most 16 items"),
        ),
        ((RACK, RACK), ("spec.levels", "must be unique")),
        (
            (HOST, RACK),
            (
                "spec.levels",
                "the kubernetes.io/hostname label can only be used at the lowest level of topology",
            ),
        ),
        (("bad label!",), ("spec.levels[0].nodeLabel", None)),
    ],
)
def test_topology_levels_follow_kueues_rules(
    levels: tuple[str, ...], want: tuple[str, Any]
) -> None:
    got = problems(topology(*levels))
    assert got, f"{levels} accepted"
    path, msg = want
    assert got[0][0] == path
    if msg is not None:
        assert msg in got[0][1]


def test_topology_with_hostname_as_the_lowest_level_is_valid() -> None:
    assert problems(topology(BLOCK, HOST)) == []
    assert problems(topology(HOST)) == []


def test_generated_crd_enforces_the_same_level_rules() -> None:
    assert crd_problems(topology(BLOCK, RACK, HOST)) == []
    assert any("must be unique" in m for _, m in crd_problems(topology(RACK, RACK)))
    assert any(
        "only be used at the lowest level" in m for _, m in crd_problems(topology(HOST, RACK))
    )


# ---------------------------------------------------------------- the webhook


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    with WebhookServerThread(
        view=InMemoryView(), config=WebhookConfig(), cert_dir=tmp_path_factory.mktemp("certs")
    ) as srv:
        c = srv.client()
        yield c
        c.close()


def _review(client: ReviewClient, obj: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
    status, resp = client.post(
        "/validate-kueue-x-k8s-io-v1beta2-topology",
        make_review("Topology", obj, old=old, operation="UPDATE" if old else "CREATE"),
    )
    assert status == 200
    return resp["response"]


def test_webhook_denies_a_topology_with_hostname_above_another_level(client: ReviewClient) -> None:
    r = _review(client, topology(HOST, RACK))
    assert r["allowed"] is False
    assert (
        "the kubernetes.io/hostname label can only be used at the lowest level"
        in (r["status"]["message"])
    )
    assert _review(client, topology(BLOCK, RACK, HOST))["allowed"] is True


def test_webhook_lets_levels_change_only_with_hostname_lowest_before_and_after(
    client: ReviewClient,
) -> None:
    assert _review(client, topology(BLOCK, HOST), topology(BLOCK, RACK, HOST))["allowed"] is True
    r = _review(client, topology(BLOCK, RACK), topology(BLOCK))
    assert r["allowed"] is False
    assert (
        "levels are mutable only when kubernetes.io/hostname is the lowest level"
        in (r["status"]["message"])
    )
    assert _review(client, topology(BLOCK), topology(BLOCK))["allowed"] is True


# ---------------------------------------------------------------- annotations


def test_required_annotation_becomes_the_topology_request() -> None:
    tr = topology_request_from_annotations({labels.PODSET_REQUIRED_TOPOLOGY: BLOCK}, count=4)
    assert tr == TopologyRequest(required=BLOCK)


def test_slice_annotations_become_slice_fields() -> None:
    tr = topology_request_from_annotations(
        {
            labels.PODSET_PREFERRED_TOPOLOGY: BLOCK,
            labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK,
            labels.PODSET_SLICE_SIZE: "2",
        },
        count=4,
    )
    assert tr == TopologyRequest(preferred=BLOCK, slice_required_topology=RACK, slice_size=2)


def test_unconstrained_annotation_is_a_boolean() -> None:
    assert topology_request_from_annotations(
        {labels.PODSET_UNCONSTRAINED_TOPOLOGY: "true"}
    ) == TopologyRequest(unconstrained=True)
    assert topology_request_from_annotations(
        {labels.PODSET_UNCONSTRAINED_TOPOLOGY: "false"}
    ) == TopologyRequest(unconstrained=False)


def test_no_topology_annotation_is_no_request() -> None:
    assert topology_request_from_annotations({"other": "x"}) is None


@pytest.mark.parametrize(
    ("annotations", "count", "want"),
    [
        (
            {labels.PODSET_REQUIRED_TOPOLOGY: BLOCK, labels.PODSET_PREFERRED_TOPOLOGY: RACK},
            2,
            "must not contain more than one topology annotation",
        ),
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK},
            2,
            "annotations[kueue.x-k8s.io/podset-slice-size]: Required value: must be set when",
        ),
        (
            {labels.PODSET_SLICE_SIZE: "2"},
            2,
            "annotations[kueue.x-k8s.io/podset-slice-size]: Forbidden: may not be set when",
        ),
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK, labels.PODSET_SLICE_SIZE: "0"},
            2,
            'Invalid value: "0": must be greater than or equal to 1',
        ),
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK, labels.PODSET_SLICE_SIZE: "x"},
            2,
            'Invalid value: "x": must be a numeric value',
        ),
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK, labels.PODSET_SLICE_SIZE: "5"},
            4,
            'Invalid value: "5": must not be greater than pod set count 4',
        ),
        (
            {labels.PODSET_UNCONSTRAINED_TOPOLOGY: "yes"},
            1,
            'Invalid value: "yes": must be a boolean value',
        ),
        (
            {labels.PODSET_GROUP_NAME: "g"},
            1,
            "may not be set when neither 'kueue.x-k8s.io/podset-preferred-topology' nor",
        ),
        (
            {labels.PODSET_REQUIRED_TOPOLOGY: BLOCK, labels.PODSET_GROUP_NAME: "12"},
            1,
            'Invalid value: "12": must not be a number',
        ),
        (
            {labels.PODSET_REQUIRED_TOPOLOGY: "Not A Label"},
            1,
            "annotations[kueue.x-k8s.io/podset-required-topology]: Invalid value:",
        ),
    ],
)
def test_bad_annotations_get_kueues_field_errors(
    annotations: dict[str, str], count: int, want: str
) -> None:
    with pytest.raises(TopologyAnnotationError) as exc:
        topology_request_from_annotations(annotations, count=count)
    assert any(want in e for e in exc.value.errors), exc.value.errors
    assert all(e.startswith("spec.template.metadata.annotations") for e in exc.value.errors)


def test_pod_set_groups_need_two_members_one_with_a_single_pod_same_level() -> None:
    leader = TopologyRequest(required=BLOCK, pod_set_group_name="g")
    paths = {"leader": "a", "workers": "b", "third": "c"}
    assert pod_set_group_errors([("leader", 1, leader), ("workers", 8, leader)], paths=paths) == []
    two_big = pod_set_group_errors([("leader", 2, leader), ("workers", 8, leader)], paths=paths)
    assert len(two_big) == 2 and "at least one pod set has only 1 replica" in two_big[0]
    lone = pod_set_group_errors([("leader", 1, leader)], paths=paths)
    assert lone and "exactly 2 pod sets, got: 1" in lone[0]
    other = TopologyRequest(required=RACK, pod_set_group_name="g")
    mixed = pod_set_group_errors([("leader", 1, leader), ("workers", 8, other)], paths=paths)
    assert len(mixed) == 2 and "consistent with 'b.annotations' in group 'g'" in mixed[0]


def _job(annotations: dict[str, str], parallelism: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ns", "uid": "u1"},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    }


def test_job_carries_the_annotations_into_its_podset_with_the_completion_index_label() -> None:
    wl = workload_from_job(
        _job({labels.PODSET_REQUIRED_TOPOLOGY: BLOCK}),
        workload_priority_classes={},
        priority_classes={},
    )
    assert wl.pod_sets[0].topology == TopologyRequest(
        required=BLOCK, pod_index_label="batch.kubernetes.io/job-completion-index"
    )


def test_job_with_a_slice_larger_than_its_pods_is_rejected_naming_the_annotation() -> None:
    with pytest.raises(
        JobError, match=r"job ns/train: .*podset-slice-size\]: Invalid value: \"8\""
    ):
        workload_from_job(
            _job({labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK, labels.PODSET_SLICE_SIZE: "8"}),
            workload_priority_classes={},
            priority_classes={},
        )


# ---------------------------------------------------------------- multi-layer slices

LAYERS = f'[{{"topology": "{RACK}", "size": 4}}, {{"topology": "{HOST}", "size": 2}}]'


def test_the_constraints_annotation_becomes_the_slice_layers() -> None:
    """Kueue's podSetTopologyRequestBuilder with TASMultiLayerTopology (on since 0.19)."""
    tr = topology_request_from_annotations(
        {
            labels.PODSET_REQUIRED_TOPOLOGY: BLOCK,
            labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: LAYERS,
        },
        count=8,
    )
    assert tr == TopologyRequest(required=BLOCK, slice_constraints=((RACK, 4), (HOST, 2)))
    assert tr.slice_layers == ((RACK, 4), (HOST, 2))
    alone = topology_request_from_annotations(
        {labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: LAYERS}, count=8
    )
    assert alone is not None and alone.requests_tas


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: "[]"},
            "topology constraints must contain between 1 and 3 entries",
        ),
        (
            {labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: "{"},
            "must be a valid JSON array",
        ),
        (
            {
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: LAYERS,
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK,
                labels.PODSET_SLICE_SIZE: "2",
            },
            "Forbidden: may not be set when 'kueue.x-k8s.io/podset-slice-required-topology' is",
        ),
        (
            {
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: f'[{{"topology": "{RACK}", "size": 4}}, {{"topology": "{HOST}", "size": 3}}]'
            },
            "[1].size: Invalid value: 3: must evenly divide the parent layer size 4",
        ),
        (
            {
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: f'[{{"topology": "{RACK}", "size": 4}}, {{"topology": "{RACK}", "size": 2}}]'
            },
            f'[1].topology: Duplicate value: "{RACK} (also at index 0)"',
        ),
        (
            {
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: f'[{{"topology": "{RACK}", "size": 0}}]'
            },
            "[0].size: Invalid value: 0: must be greater than or equal to 1",
        ),
        (
            {
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: f'[{{"topology": "{RACK}", "size": 16}}]'
            },
            "Invalid value: 16: must not be greater than pod set count 8",
        ),
    ],
)
def test_bad_constraints_annotations_get_kueues_field_errors(
    annotations: dict[str, str], want: str
) -> None:
    with pytest.raises(TopologyAnnotationError) as exc:
        topology_request_from_annotations(annotations, count=8)
    assert any(want in e for e in exc.value.errors), exc.value.errors


def test_a_workload_with_slice_layers_is_read_and_written_back() -> None:
    """The Workload field, no longer an unknown field; the Job's annotation reaches it."""
    wl = workload_from_job(
        _job(
            {
                labels.PODSET_REQUIRED_TOPOLOGY: BLOCK,
                labels.PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS: LAYERS,
            },
            parallelism=8,
        ),
        workload_priority_classes={},
        priority_classes={},
    )
    tr = wl.pod_sets[0].topology
    assert tr is not None and tr.slice_constraints == ((RACK, 4), (HOST, 2))
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 8,
                    "template": {"spec": {"containers": [{"name": "c"}]}},
                    "topologyRequest": topology_request_json(tr),
                }
            ],
        },
    }
    parsed = api.parse_model(doc)
    assert parsed.pod_sets[0].topology == tr
    doc["spec"]["podSets"][0]["topologyRequest"]["podsetSliceRequiredTopologyConstraints"] = [
        {"topology": RACK, "size": 4}
    ] * 4
    assert problems(doc)  # at most 3 layers
