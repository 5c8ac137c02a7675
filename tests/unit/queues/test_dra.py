"""DRA device counting (queues.dra): Kueue's pkg/dra rules on plain API dicts.

Each rule of Kueue's ``countDevicesPerClass`` / ``GetResourceRequestsForResourceClaimTemplates``
/ ``ResolveExtendedResourceQuota`` / ``GetCounterResourcesForWorkload`` has a row here,
then hypothesis checks the invariants: the devices of a podSet are the sum over its
claims of the requests' counts, per pod, and counting is idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.dra import (
    CounterSource,
    DeviceClassMapping,
    DraAccounting,
    DraCatalog,
    claim_device_counts,
    mapping_errors,
)
from queues.model import Workload
from queues.pods import podset_from_template

GPU_CLASS = "gpu.example.com"
GPU = "example.com/gpu"
MAPPINGS = [DeviceClassMapping(GPU, (GPU_CLASS,))]


def request(
    name: str = "gpu", dc: str = GPU_CLASS, count: int | None = None, **exactly: Any
) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": dc, **exactly}
    if count is not None:
        ex["count"] = count
    return {"name": name, "exactly": ex}


def template(name: str, *requests: Mapping[str, Any], ns: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def catalog(*templates: Mapping[str, Any], classes: tuple[str, ...] = (GPU_CLASS,)) -> DraCatalog:
    cat = DraCatalog()
    for dc in classes:
        cat.set("DeviceClass", dc, {"metadata": {"name": dc}})
    for t in templates:
        meta = t["metadata"]
        cat.set("ResourceClaimTemplate", f"{meta['namespace']}/{meta['name']}", t)
    return cat


def workload(
    claims: list[dict[str, Any]],
    *,
    count: int = 1,
    requests: Mapping[str, str] | None = None,
) -> Workload:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": dict(requests or {"cpu": "1"})}}],
        "resourceClaims": claims,
    }
    ps = podset_from_template(name="main", count=count, template={"spec": spec})
    return Workload(namespace="default", name="w", pod_sets=[ps])


def counted(acc: DraAccounting, wl: Workload) -> tuple[dict[str, int], str]:
    acc.apply(wl)
    ps = wl.pod_sets[0]
    return ps.requests, ps.dra_error


RCT = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]


@pytest.mark.parametrize(
    ("requests", "devices"),
    [
        ([request()], 1),  # count defaults to 1 (Kueue's sample-dra-rct-job)
        ([request(count=4)], 4),
        ([request("a", count=2), request("b", count=3)], 5),  # every request counts
        ([request(count=2, adminAccess=True)], None),  # admin access: no quota
        ([request(count=2, allocationMode="ExactCount")], 2),
    ],
)
def test_exactly_counts_per_request(requests: list[dict[str, Any]], devices: int | None) -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", *requests)))
    got, err = counted(acc, workload(RCT))
    assert err == ""
    assert got.get(GPU) == devices and got["cpu"] == 1000


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (request(allocationMode="All"), "AllocationMode 'All' is not supported"),
        (
            {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}]},
            "FirstAvailable device selection is not supported",
        ),
        (request(allocationMode="Sometimes"), "unsupported allocation mode: Sometimes"),
    ],
)
def test_unsupported_requests_are_inadmissible_naming_podset_claim_and_template(
    req: dict[str, Any], message: str
) -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", req)))
    got, err = counted(acc, workload(RCT))
    assert message in err
    assert "podSet main" in err and "claim gpu" in err and "single-gpu" in err
    assert err.startswith("spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0]")
    assert GPU not in got  # nothing charged, nothing admitted (Misconfigured)


def test_claims_count_per_pod_and_two_claims_of_one_template_count_twice() -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", request(count=2))))
    claims = [
        {"name": "a", "resourceClaimTemplateName": "single-gpu"},
        {"name": "b", "resourceClaimTemplateName": "single-gpu"},
    ]
    wl = workload(claims, count=3)
    got, err = counted(acc, wl)
    assert err == "" and got[GPU] == 4  # per pod; the engine charges 4 x 3 pods
    assert wl.pod_sets[0].count == 3


def test_containers_sharing_a_pod_claim_count_it_once() -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", request())))
    spec = {
        "containers": [
            {"name": "a", "resources": {"claims": [{"name": "gpu"}]}},
            {"name": "b", "resources": {"claims": [{"name": "gpu"}]}},
        ],
        "resourceClaims": RCT,
    }
    ps = podset_from_template(name="main", count=1, template={"spec": spec})
    wl = Workload(namespace="default", name="w", pod_sets=[ps])
    assert counted(acc, wl)[0][GPU] == 1


def test_a_named_resource_claim_is_inadmissible_like_kueue() -> None:
    acc = DraAccounting(MAPPINGS, catalog())
    _, err = counted(acc, workload([{"name": "shared", "resourceClaimName": "team-gpu"}]))
    assert "does not support use of resource claims" in err
    assert "podSet main" in err and "claim shared" in err and "team-gpu" in err


def test_a_missing_template_waits_and_is_counted_once_it_exists() -> None:
    cat = catalog()
    acc = DraAccounting(MAPPINGS, cat)
    wl = workload(RCT)
    _, err = counted(acc, wl)
    assert 'resourceclaimtemplates.resource.k8s.io "single-gpu" not found' in err
    assert "podset main" in err and "claim gpu" in err
    t = template("single-gpu", request(count=2))
    cat.set("ResourceClaimTemplate", "default/single-gpu", t)
    got, err = counted(acc, wl)
    assert err == "" and got[GPU] == 2


def test_a_template_of_another_namespace_is_not_found() -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", request(), ns="other")))
    assert "not found" in counted(acc, workload(RCT))[1]


def test_an_unknown_device_class_is_inadmissible() -> None:
    acc = DraAccounting(MAPPINGS, catalog(template("single-gpu", request()), classes=()))
    _, err = counted(acc, workload(RCT))
    assert f"DeviceClass {GPU_CLASS} does not exist" in err
    assert "podSet main" in err and "claim gpu" in err


def test_a_class_no_mapping_covers_is_inadmissible() -> None:
    cat = catalog(template("single-gpu", request(dc="fpga.example.com")),
                  classes=("fpga.example.com",))  # fmt: skip
    _, err = counted(DraAccounting(MAPPINGS, cat), workload(RCT))
    assert "DeviceClass fpga.example.com is not mapped in DRA configuration for podset main" in err
    assert "claim gpu" in err


def test_two_classes_of_one_mapping_share_its_resource() -> None:
    mappings = [DeviceClassMapping(GPU, (GPU_CLASS, "gpu-b.example.com"))]
    cat = catalog(template("two", request("a"), request("b", dc="gpu-b.example.com", count=2)),
                  classes=(GPU_CLASS, "gpu-b.example.com"))  # fmt: skip
    got, _ = counted(
        DraAccounting(mappings, cat), workload([{"name": "g", "resourceClaimTemplateName": "two"}])
    )
    assert got[GPU] == 3


@pytest.mark.parametrize(
    ("mappings", "error"),
    [
        (
            [DeviceClassMapping("a/gpu", (GPU_CLASS,)), DeviceClassMapping("b/gpu", (GPU_CLASS,))],
            "resources.deviceClassMappings[1].deviceClassNames[0]: Invalid value: "
            '"gpu.example.com": device class already mapped to resource a/gpu',
        ),
        (
            [DeviceClassMapping("a/gpu", (GPU_CLASS, GPU_CLASS))],
            'resources.deviceClassMappings[0].deviceClassNames[1]: Duplicate value: "gpu.example.com"',
        ),
        (
            [DeviceClassMapping("a/gpu", (GPU_CLASS,)), DeviceClassMapping("a/gpu", ("x",))],
            'resources.deviceClassMappings[1].name: Duplicate value: "a/gpu"',
        ),
        ([DeviceClassMapping("a/gpu", ())], "at least one device class name is required"),
    ],
)
def test_mapping_errors(mappings: list[DeviceClassMapping], error: str) -> None:
    assert any(error in e for e in mapping_errors(mappings))


def test_one_class_may_be_mapped_twice_with_two_different_counters() -> None:
    mem = CounterSource("memory", "gpu.example.com", "")
    cores = CounterSource("cores", "gpu.example.com", "")
    assert mapping_errors([
        DeviceClassMapping("gpu.memory", (GPU_CLASS,), (mem,)),
        DeviceClassMapping("gpu.cores", (GPU_CLASS,), (cores,)),
    ]) == []  # fmt: skip


# -- extended resources served by DRA -----------------------------------------------------


def extended_catalog(*, created: str = "2026-01-01T00:00:00Z") -> DraCatalog:
    cat = DraCatalog()
    cat.set("DeviceClass", GPU_CLASS, {
        "metadata": {"name": GPU_CLASS, "creationTimestamp": created},
        "spec": {"extendedResourceName": "nvidia.com/gpu"},
    })  # fmt: skip
    return cat


def test_an_extended_resource_served_by_dra_counts_once_under_its_own_name() -> None:
    wl = workload([], requests={"cpu": "1", "nvidia.com/gpu": "2"}, count=2)
    got, err = counted(DraAccounting([], extended_catalog()), wl)
    assert err == "" and got == {"cpu": 1000, "nvidia.com/gpu": 2}


def test_an_extended_resource_moves_to_the_mapped_name_of_its_class() -> None:
    wl = workload([], requests={"cpu": "1", "nvidia.com/gpu": "2"})
    got, _ = counted(DraAccounting(MAPPINGS, extended_catalog()), wl)
    assert got == {"cpu": 1000, GPU: 2}


def test_an_extended_resource_and_a_claim_of_one_class_add_up() -> None:
    cat = extended_catalog()
    cat.set("ResourceClaimTemplate", "default/single-gpu", template("single-gpu", request()))
    wl = workload(RCT, requests={"cpu": "1", "nvidia.com/gpu": "1"})
    assert counted(DraAccounting(MAPPINGS, cat), wl)[0] == {"cpu": 1000, GPU: 2}


def test_the_newest_class_serving_an_extended_resource_is_the_one_charged() -> None:
    cat = extended_catalog()
    cat.set("DeviceClass", "newer", {
        "metadata": {"name": "newer", "creationTimestamp": "2026-02-01T00:00:00Z"},
        "spec": {"extendedResourceName": "nvidia.com/gpu"},
    })  # fmt: skip
    mappings = [
        DeviceClassMapping("old/gpu", (GPU_CLASS,)),
        DeviceClassMapping("new/gpu", ("newer",)),
    ]
    wl = workload([], requests={"nvidia.com/gpu": "1"})
    assert counted(DraAccounting(mappings, cat), wl)[0] == {"new/gpu": 1}


# -- counters (partitionable devices, MIG) ------------------------------------------------

DRIVER = "gpu.example.com"


def mig_slice(pool: str, devices: list[tuple[str, str, str]], *, count: int = 1,
              generation: int = 1) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": f"{pool}-{generation}-{devices[0][0] if devices else 'x'}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [
                {
                    "name": name,
                    "attributes": {"profile": {"string": profile}},
                    "consumesCounters": [
                        {"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}
                    ],
                }
                for name, profile, memory in devices
            ],
        },
    }


def fake_cel(expression: str, device: Mapping[str, Any], driver: str) -> bool:
    """``device.attributes["profile"] == "X"`` and ``true``, enough for these rows."""
    if expression == "true":
        return True
    want = expression.rsplit("==", 1)[1].strip().strip('"')
    return bool(device["attributes"]["profile"]["string"] == want)


def counter_accounting(*slices: dict[str, Any], selector: str) -> DraAccounting:
    cat = catalog(template("mig", request(count=2, selectors=[{"cel": {"expression": selector}}])))
    for s in slices:
        cat.set("ResourceSlice", s["metadata"]["name"], s)
    mapping = DeviceClassMapping(
        "gpu.memory", (GPU_CLASS,), (CounterSource("memory", DRIVER, "true"),)
    )
    return DraAccounting([mapping], cat, selector_match=fake_cel)


MIG_CLAIM = [{"name": "mig", "resourceClaimTemplateName": "mig"}]


def test_counters_charge_the_largest_matching_device_times_count() -> None:
    s = mig_slice("node-a", [("mig-1g-0", "1g.10gb", "10Gi"), ("mig-1g-1", "1g.10gb", "12Gi"),
                             ("mig-3g-0", "3g.40gb", "40Gi")])  # fmt: skip
    acc = counter_accounting(s, selector='device.attributes["profile"] == "1g.10gb"')
    got, err = counted(acc, workload(MIG_CLAIM))
    assert err == "" and got["gpu.memory"] == 2 * 12 * 2**30 and GPU not in got


def test_counters_skip_incomplete_pools_and_old_generations() -> None:
    old = mig_slice("node-a", [("a", "1g.10gb", "99Gi"), ("b", "1g.10gb", "99Gi")], generation=1)
    new = mig_slice("node-a", [("a", "1g.10gb", "10Gi"), ("b", "1g.10gb", "10Gi")], generation=2)
    half = mig_slice("node-b", [("c", "1g.10gb", "50Gi"), ("d", "1g.10gb", "50Gi")], count=2)
    acc = counter_accounting(old, new, half, selector='device.attributes["profile"] == "1g.10gb"')
    assert counted(acc, workload(MIG_CLAIM))[0]["gpu.memory"] == 2 * 10 * 2**30


def test_counters_wait_when_too_few_devices_match() -> None:
    s = mig_slice("node-a", [("a", "1g.10gb", "10Gi")])
    acc = counter_accounting(s, selector='device.attributes["profile"] == "1g.10gb"')
    _, err = counted(acc, workload(MIG_CLAIM))
    assert (
        "insufficient matching devices for counter driver: 1 device(s) match but 2 requested" in err
    )
    assert "podSet main" in err and "claim mig" in err and GPU_CLASS in err


def test_an_extended_resource_of_a_counter_class_is_inadmissible() -> None:
    cat = extended_catalog()
    mapping = DeviceClassMapping("gpu.memory", (GPU_CLASS,), (CounterSource("memory", DRIVER, ""),))
    _, err = counted(DraAccounting([mapping], cat), workload([], requests={"nvidia.com/gpu": "1"}))
    assert "with counters configured" in err


# -- invariants -----------------------------------------------------------------------------

counts = st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4)


@given(
    templates=st.lists(counts, min_size=1, max_size=3),
    uses=st.lists(st.integers(min_value=0, max_value=2), min_size=0, max_size=4),
    pods=st.integers(min_value=0, max_value=50),
    cpu=st.integers(min_value=0, max_value=4),
)
def test_devices_are_the_sum_of_the_claims_counts_per_pod(
    templates: list[list[int]], uses: list[int], pods: int, cpu: int
) -> None:
    cat = catalog(*(
        template(f"t{i}", *(request(f"r{j}", count=c) for j, c in enumerate(cs)))
        for i, cs in enumerate(templates)
    ))  # fmt: skip
    claims = [
        {"name": f"c{k}", "resourceClaimTemplateName": f"t{u % len(templates)}"}
        for k, u in enumerate(uses)
    ]
    wl = workload(claims, count=pods, requests={"cpu": str(cpu)})
    acc = DraAccounting(MAPPINGS, cat)
    first = counted(acc, wl)
    assert counted(acc, wl) == first  # idempotent: re-reading never charges twice
    expected = sum(sum(templates[u % len(templates)]) for u in uses)
    assert first[0].get(GPU, 0) == expected and first[1] == ""
    assert first[0]["cpu"] == cpu * 1000  # other requests untouched


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
def test_a_class_in_two_mappings_is_always_a_configuration_error(names: list[str]) -> None:
    mappings = [DeviceClassMapping(f"r{i}/gpu", (n,)) for i, n in enumerate(names)]
    duplicated = len(set(names)) < len(names)
    assert bool(mapping_errors(mappings)) == duplicated


def test_claim_device_counts_reads_a_claim_spec() -> None:
    spec = {"devices": {"requests": [request(count=3), request("x", adminAccess=True)]}}
    (only,) = claim_device_counts(spec)
    assert (only.device_class, only.count) == (GPU_CLASS, 3)


def test_cel_selectors_wait_for_enough_matching_devices_in_the_cluster() -> None:
    """Kueue's validateCELSelectorsAgainstDevices: 2 devices of profile 1g.10gb are needed,
    the slices hold one; a second published slice lets the claim be counted (2 devices)."""
    selector = 'device.attributes["profile"] == "1g.10gb"'
    cat = catalog(template("mig", request(count=2, selectors=[{"cel": {"expression": selector}}])))
    one = mig_slice("node-a", [("a", "1g.10gb", "10Gi"), ("b", "3g.40gb", "40Gi")])
    cat.set("ResourceSlice", "node-a", one)
    acc = DraAccounting(MAPPINGS, cat, selector_match=fake_cel)
    _, err = counted(acc, workload(MIG_CLAIM))
    assert (
        "insufficient matching devices for CEL selector in DeviceClass gpu.example.com: "
        "1 device(s) match in the cluster but 2 requested"
    ) in err
    assert "podSet main, claim mig" in err
    cat.set("ResourceSlice", "node-b", mig_slice("node-b", [("c", "1g.10gb", "10Gi")]))
    got, err = counted(acc, workload(MIG_CLAIM))
    assert err == "" and got[GPU] == 2
