"""Per-pod requests and placement constraints computed from a pod spec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queues.model import NodeSelectorTerm, PodSet, SelectorRequirement, Toleration
from queues.pods import (
    PodSpecError,
    pod_node_selector,
    pod_requests,
    pod_required_affinity,
    pod_tolerations,
    podset_from_template,
)
from queues.quantity import QuantityError


def container(
    name: str,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


# ----------------------------------------------------------------------- requests


def test_regular_container_requests_add_up() -> None:
    spec = {
        "containers": [
            container("a", {"cpu": "500m", "memory": "1Gi"}),
            container("b", {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "2"}),
        ]
    }
    assert pod_requests(spec) == {"cpu": 1500, "memory": 1536 * 2**20, "nvidia.com/gpu": 2}


def test_init_container_raises_the_floor_but_does_not_add() -> None:
    spec = {
        "initContainers": [container("init", {"cpu": "2", "memory": "100Mi"})],
        "containers": [container("main", {"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 2000, "memory": 2**30}


def test_largest_init_container_wins_per_resource() -> None:
    spec = {
        "initContainers": [
            container("i1", {"cpu": "3"}),
            container("i2", {"memory": "4Gi"}),
        ],
        "containers": [container("main", {"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 3000, "memory": 4 * 2**30}


def test_init_container_only_resources_are_counted() -> None:
    spec = {
        "initContainers": [container("init", {"nvidia.com/gpu": "1"})],
        "containers": [container("main", {"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 1000, "nvidia.com/gpu": 1}


def test_sidecar_adds_to_regular_containers() -> None:
    spec = {
        "initContainers": [
            container("proxy", {"cpu": "250m", "memory": "64Mi"}, restart_policy="Always")
        ],
        "containers": [container("main", {"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 1250, "memory": 2**30 + 64 * 2**20}


def test_init_container_after_a_sidecar_runs_next_to_it() -> None:
    # k8s: InitContainerUse(i) = sum(sidecars before i) + init container i.
    spec = {
        "initContainers": [
            container("sidecar", {"cpu": "1"}, restart_policy="Always"),
            container("migrate", {"cpu": "3"}),
        ],
        "containers": [container("main", {"cpu": "2"})],
    }
    # max(sidecar + main = 3, sidecar + migrate = 4)
    assert pod_requests(spec) == {"cpu": 4000}


def test_init_container_before_a_sidecar_does_not_include_it() -> None:
    spec = {
        "initContainers": [
            container("migrate", {"cpu": "3"}),
            container("sidecar", {"cpu": "1"}, restart_policy="Always"),
        ],
        "containers": [container("main", {"cpu": "1"})],
    }
    # max(sidecar + main = 2, migrate alone = 3)
    assert pod_requests(spec) == {"cpu": 3000}


def test_init_container_with_restart_policy_other_than_always_is_not_a_sidecar() -> None:
    spec = {
        "initContainers": [container("init", {"cpu": "1"}, restart_policy="Never")],
        "containers": [container("main", {"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 1000}


def test_overhead_is_added_last() -> None:
    spec = {
        "initContainers": [container("init", {"cpu": "4"})],
        "containers": [container("main", {"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "100m", "memory": "10Mi"},
    }
    assert pod_requests(spec) == {"cpu": 4100, "memory": 2**30 + 10 * 2**20}


def test_limit_stands_in_for_a_missing_request_per_resource() -> None:
    spec = {
        "containers": [
            container("a", requests={"cpu": "500m"}, limits={"cpu": "2", "memory": "2Gi"}),
            container("b", limits={"nvidia.com/gpu": "1"}),
        ]
    }
    assert pod_requests(spec) == {"cpu": 500, "memory": 2 * 2**30, "nvidia.com/gpu": 1}


def test_init_container_limits_default_its_requests_too() -> None:
    spec = {
        "initContainers": [container("init", limits={"cpu": "5"})],
        "containers": [container("main", {"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 5000}


def test_cpu_is_summed_exactly_then_rounded_up_to_millicores_once() -> None:
    spec = {
        "containers": [
            container("a", {"cpu": "0.0005"}),
            container("b", {"cpu": "0.0005"}),
            container("c", {"cpu": "100.5u"}),
        ]
    }
    # 0.5m + 0.5m + 0.1005m = 1.1005m -> 2m
    assert pod_requests(spec) == {"cpu": 2}


def test_fractional_gpu_and_memory_round_up_to_whole_units() -> None:
    spec = {"containers": [container("a", {"nvidia.com/gpu": "0.5", "memory": "1.5"})]}
    assert pod_requests(spec) == {"nvidia.com/gpu": 1, "memory": 2}


def test_zero_valued_resources_are_dropped() -> None:
    spec = {"containers": [container("a", {"cpu": "0", "memory": "0Gi", "nvidia.com/gpu": "1"})]}
    assert pod_requests(spec) == {"nvidia.com/gpu": 1}


def test_pod_without_resources_requests_nothing() -> None:
    assert pod_requests({"containers": [{"name": "a", "image": "x"}]}) == {}
    assert pod_requests({}) == {}


def test_numeric_quantities_from_yaml_are_accepted() -> None:
    spec = {
        "containers": [container("a", {"cpu": 2, "memory": 1073741824, "example.com/foo": 0.5})]
    }
    assert pod_requests(spec) == {"cpu": 2000, "memory": 2**30, "example.com/foo": 1}


def test_pod_level_requests_replace_the_container_aggregate_for_cpu_and_memory() -> None:
    spec = {
        "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
        "containers": [container("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})],
        "overhead": {"cpu": "100m"},
    }
    # nvidia.com/gpu is not a pod-level resource: it keeps the container value.
    assert pod_requests(spec) == {"cpu": 4100, "memory": 8 * 2**30, "nvidia.com/gpu": 1}


def test_pod_level_limits_default_pod_requests_when_containers_do_not_request() -> None:
    spec = {
        "resources": {"limits": {"cpu": "3", "memory": "2Gi"}},
        "containers": [container("a"), container("b")],
    }
    assert pod_requests(spec) == {"cpu": 3000, "memory": 2 * 2**30}


def test_pod_level_limits_do_not_override_container_requests() -> None:
    # k8s DefaultPodLevelRequests: cpu/memory default from the containers' aggregate first.
    spec = {
        "resources": {"limits": {"cpu": "8", "memory": "8Gi"}},
        "containers": [container("a", {"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 1000, "memory": 8 * 2**30}


def test_pod_level_hugepages_default_from_container_limits() -> None:
    spec = {
        "resources": {"requests": {"cpu": "1"}},
        "containers": [container("a", limits={"hugepages-2Mi": "100Mi"})],
    }
    assert pod_requests(spec) == {"cpu": 1000, "hugepages-2Mi": 100 * 2**20}


def test_pod_level_non_supported_resources_are_ignored() -> None:
    spec = {
        "resources": {"requests": {"nvidia.com/gpu": "8"}},
        "containers": [container("a", {"nvidia.com/gpu": "1"})],
    }
    assert pod_requests(spec) == {"nvidia.com/gpu": 1}


def test_bad_container_quantity_names_the_container_and_resource() -> None:
    spec = {"containers": [container("worker", {"cpu": "1", "memory": "1Gb"})]}
    with pytest.raises(QuantityError) as info:
        pod_requests(spec)
    message = str(info.value)
    assert 'container "worker"' in message
    assert '"memory"' in message
    assert '"1Gb"' in message


def test_bad_init_container_limit_names_the_init_container() -> None:
    spec = {
        "initContainers": [container("setup", limits={"cpu": "lots"})],
        "containers": [container("main")],
    }
    with pytest.raises(QuantityError, match=r'initContainer "setup" resources\.limits\["cpu"\]'):
        pod_requests(spec)


def test_bad_overhead_and_pod_level_quantities_name_the_field() -> None:
    with pytest.raises(QuantityError, match=r'spec\.overhead\["cpu"\]'):
        pod_requests({"containers": [container("a")], "overhead": {"cpu": "x"}})
    with pytest.raises(QuantityError, match=r'spec\.resources\.requests\["memory"\]'):
        pod_requests({"containers": [container("a")], "resources": {"requests": {"memory": True}}})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"containers": {"name": "a"}}, "containers"),
        ({"containers": ["a"]}, r"containers\[0\]"),
        ({"containers": [{"name": "a", "resources": []}]}, 'container "a" resources'),
        ({"containers": [{"name": "a", "resources": {"requests": "1"}}]}, "resources.requests"),
        ({"initContainers": [{"name": "a", "restartPolicy": 1}]}, "restartPolicy"),
    ],
)
def test_malformed_specs_raise_pod_spec_error_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(PodSpecError, match=field):
        pod_requests(spec)


# ----------------------------------------------------------------------- placement


def test_node_selector_is_copied() -> None:
    spec = {"nodeSelector": {"cloud.example.com/accelerator": "h100"}}
    selector = pod_node_selector(spec)
    assert selector == {"cloud.example.com/accelerator": "h100"}
    selector["x"] = "y"
    assert spec["nodeSelector"] == {"cloud.example.com/accelerator": "h100"}
    assert pod_node_selector({}) == {}


def test_node_selector_values_must_be_strings() -> None:
    with pytest.raises(PodSpecError, match="spec.nodeSelector"):
        pod_node_selector({"nodeSelector": {"gpu": True}})


def test_required_affinity_keeps_terms_and_match_expressions() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                                {"key": "spot", "operator": "DoesNotExist"},
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                            ],
                        },
                        {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {"matchExpressions": [{"key": "p", "operator": "Exists"}]},
                    }
                ],
            }
        }
    }
    assert pod_required_affinity(spec) == [
        NodeSelectorTerm(
            match_expressions=(
                SelectorRequirement(key="zone", operator="In", values=("a", "b")),
                SelectorRequirement(key="spot", operator="DoesNotExist"),
            )
        ),
        NodeSelectorTerm(
            match_expressions=(SelectorRequirement(key="cores", operator="Gt", values=("8",)),)
        ),
    ]


def test_term_with_only_match_fields_becomes_an_empty_term() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    assert pod_required_affinity(spec) == [NodeSelectorTerm()]


def test_no_affinity_means_no_terms() -> None:
    assert pod_required_affinity({}) == []
    assert pod_required_affinity({"affinity": {"podAntiAffinity": {}}}) == []


def test_affinity_with_unknown_operator_is_rejected() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "Equals"}]}
                    ]
                }
            }
        }
    }
    with pytest.raises(
        PodSpecError, match=r"nodeSelectorTerms\[0\]\.matchExpressions\[0\]\.operator"
    ):
        pod_required_affinity(spec)


def test_tolerations_default_operator_to_equal_and_drop_toleration_seconds() -> None:
    spec = {
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "team", "value": "a"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"operator": "Exists"},
        ]
    }
    assert pod_tolerations(spec) == [
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        Toleration(key="team", operator="Equal", value="a"),
        Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute"),
        Toleration(operator="Exists"),
    ]


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"key": "a", "operator": "Gte"}, r"spec\.tolerations\[0\]\.operator"),
        ({"key": "a", "effect": "NoRun"}, r"spec\.tolerations\[0\]\.effect"),
        ({"key": 3}, r"spec\.tolerations\[0\]\.key"),
    ],
)
def test_bad_tolerations_are_rejected_naming_the_field(
    toleration: dict[str, Any], field: str
) -> None:
    with pytest.raises(PodSpecError, match=field):
        pod_tolerations({"tolerations": [toleration]})


# ----------------------------------------------------------------------- podset


def test_podset_from_template_combines_requests_and_constraints() -> None:
    template = {
        "metadata": {"labels": {"app": "train"}},
        "spec": {
            "nodeSelector": {"accelerator": "h100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [container("w", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"})],
        },
    }
    assert podset_from_template(name="main", count=4, template=template, min_count=2) == PodSet(
        name="main",
        count=4,
        requests={"cpu": 8000, "memory": 64 * 2**30, "nvidia.com/gpu": 4},
        min_count=2,
        node_selector={"accelerator": "h100"},
        required_affinity=[],
        tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists")],
    )


@pytest.mark.parametrize("count", [-1, True, 1.5, "2"])
def test_podset_from_template_rejects_bad_counts(count: Any) -> None:
    with pytest.raises(PodSpecError, match="count"):
        podset_from_template(name="main", count=count, template={"spec": {}})


def test_podset_from_template_rejects_non_object_template() -> None:
    with pytest.raises(PodSpecError, match="template"):
        podset_from_template(name="main", count=1, template=["spec"])  # type: ignore[arg-type]


def test_pod_level_hugepage_limit_wins_over_container_hugepages() -> None:
    # Hugepages are not defaulted from the containers' aggregate: the pod-level limit
    # becomes the pod-level request and replaces the container sum.
    spec = {
        "resources": {"limits": {"hugepages-2Mi": "200Mi"}},
        "containers": [container("a", limits={"hugepages-2Mi": "100Mi"})],
    }
    assert pod_requests(spec) == {"hugepages-2Mi": 200 * 2**20}


def test_pod_sets_of_one_template_content_are_independent() -> None:
    """What a template asks for is remembered per content (queues.memo): each PodSet
    still gets containers of its own, and a content that differs only in a value's type
    ("1" vs 1) is another template."""
    template = {
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "nodeSelector": {"zone": "a"},
        }
    }
    a = podset_from_template(name="a", count=1, template=template)
    b = podset_from_template(name="b", count=2, template=json.loads(json.dumps(template)))
    assert (a.requests, b.requests) == ({"cpu": 1000}, {"cpu": 1000})
    a.requests["cpu"] = 5
    a.node_selector["zone"] = "b"
    c = podset_from_template(name="c", count=1, template=template)
    assert (b.requests, c.requests) == ({"cpu": 1000}, {"cpu": 1000})
    assert (b.node_selector, c.node_selector) == ({"zone": "a"}, {"zone": "a"})
    with pytest.raises(QuantityError):  # a remembered success does not hide a bad value
        podset_from_template(
            name="d",
            count=1,
            template={
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1x"}}}]}
            },
        )


def test_a_template_found_valid_once_is_still_checked_when_it_differs() -> None:
    from queues.api.rules import check_pod_template

    good = {"spec": {"containers": [{"name": "c"}]}}
    assert check_pod_template(good, "t") == []
    assert check_pod_template(good, "t") == []
    bad = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"pods": "1"}}}]}}
    assert check_pod_template(bad, "t") == [
        (
            "t.spec.containers[0].resources.requests.pods",
            "the key is reserved for internal kueue use",
        )
    ]
    assert check_pod_template(bad, "t")  # problems are never remembered
