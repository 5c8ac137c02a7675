"""The v1beta2 TopologyAssignment we write is the one Kueue writes (its default gates:
TASAssignmentsEncodingByHostnamePrefix on), and reads back to the same domains.

Cases from Kueue's pkg/util/tas/tas_assignment_test.go:
TestCompactTopologyAssignmentEncodingWithHostnamePrefixRuns (GKE node pools, AWS EKS
private DNS names, Azure AKS VMSS node pools, on-premises UUID node names),
..._withoutHostnameLevel, ..._preservesDomainOrder,
TestV1Beta2FromInternal_hostnamePrefixFeatureGateAndFallback and
TestV1Beta2FromInternal_largeHostnameAssignmentWithManyPools.
"""

from __future__ import annotations

import pytest

from queues.api.topology_assignment import (
    MAX_DOMAINS_PER_SLICE,
    from_v1beta2,
    hostname_prefix_encoding,
    single_slice_encoding,
    to_v1beta2,
)
from queues.model import TopologyAssignment

HOST = "kubernetes.io/hostname"


def hosts(*pairs: tuple[str, int]) -> TopologyAssignment:
    return TopologyAssignment(levels=(HOST,), domains=tuple(((h,), c) for h, c in pairs))


def sl(count: int | list[int], **individual: object) -> dict:
    roots = individual["roots"]
    assert isinstance(roots, list)
    return {
        "domainCount": len(roots),
        "valuesPerLevel": [{"individual": individual}],
        "podCounts": {"universal": count} if isinstance(count, int) else {"individual": count},
    }


@pytest.mark.parametrize(
    ("ta", "slices"),
    [
        pytest.param(
            hosts(
                ("gke-c-pool-a-hash1-aa", 3),
                ("gke-c-pool-a-hash1-bb", 3),
                ("gke-c-pool-b-hash2-cc", 4),
                ("gke-c-pool-b-hash2-dd", 5),
            ),
            [
                sl(3, prefix="gke-c-pool-a-hash1-", roots=["aa", "bb"]),
                sl([4, 5], prefix="gke-c-pool-b-hash2-", roots=["cc", "dd"]),
            ],
            id="GKE node pools",
        ),
        pytest.param(
            hosts(
                ("ip-10-24-34-0.us-west-2.compute.internal", 2),
                ("ip-10-24-34-1.us-west-2.compute.internal", 2),
                ("ip-10-24-35-0.us-west-2.compute.internal", 3),
                ("ip-10-24-35-1.us-west-2.compute.internal", 4),
            ),
            [
                sl(
                    2, prefix="ip-10-24-34-", suffix=".us-west-2.compute.internal", roots=["0", "1"]
                ),
                sl(
                    [3, 4],
                    prefix="ip-10-24-35-",
                    suffix=".us-west-2.compute.internal",
                    roots=["0", "1"],
                ),
            ],
            id="AWS EKS private DNS names",
        ),
        pytest.param(
            hosts(
                ("aks-nodepool1-12345678-vmss000000", 1),
                ("aks-nodepool1-12345678-vmss000001", 1),
                ("aks-nodepool2-87654321-vmss000000", 2),
                ("aks-nodepool2-87654321-vmss000001", 3),
            ),
            [
                sl(1, prefix="aks-nodepool1-12345678-vmss00000", roots=["0", "1"]),
                sl([2, 3], prefix="aks-nodepool2-87654321-vmss00000", roots=["0", "1"]),
            ],
            id="Azure AKS VMSS node pools",
        ),
        pytest.param(
            hosts(
                ("550e8400-e29b-41d4-a716-446655440000", 1),
                ("6ba7b810-9dad-11d1-80b4-00c04fd430c8", 2),
                ("f47ac10b-58cc-4372-a567-0e02b2c3d479", 3),
            ),
            [
                sl(
                    [1, 2, 3],
                    roots=[
                        "550e8400-e29b-41d4-a716-446655440000",
                        "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
                        "f47ac10b-58cc-4372-a567-0e02b2c3d479",
                    ],
                )
            ],
            id="on-premises UUID node names",
        ),
    ],
)
def test_hostname_prefix_runs(ta: TopologyAssignment, slices: list[dict]) -> None:
    assert hostname_prefix_encoding(ta) == {"levels": [HOST], "slices": slices}
    assert from_v1beta2(hostname_prefix_encoding(ta)) == ta


def test_without_a_hostname_level_one_slice() -> None:
    ta = TopologyAssignment(
        levels=("cloud.example.com/rack",), domains=((("rack-a",), 1), (("rack-b",), 2))
    )
    got = hostname_prefix_encoding(ta)
    assert len(got["slices"]) == 1
    assert from_v1beta2(got) == ta


def test_domain_order_is_kept() -> None:
    ta = hosts(
        ("gke-c-pool-a-hash1-aa", 1),
        ("gke-c-pool-b-hash2-cc", 2),
        ("gke-c-pool-a-hash1-bb", 3),
        ("gke-c-pool-b-hash2-dd", 4),
    )
    got = hostname_prefix_encoding(ta)
    assert len(got["slices"]) == 4
    assert from_v1beta2(got) == ta


def pools(n: int) -> TopologyAssignment:
    """Kueue's hostnamePrefixAssignment: half pool-a, half pool-b, one pod each."""
    half = n // 2
    return hosts(
        *(
            (f"pool-{'a' if i < half else 'b'}-node-{(i if i < half else i - half):05d}", 1)
            for i in range(n)
        )
    )


@pytest.mark.parametrize(
    ("n", "prefixed"),
    [
        pytest.param(1, True, id="one slice: the hostname-prefix form"),
        pytest.param(4, False, id="the single slice is smaller"),
        pytest.param(20, True, id="the hostname-prefix form is smaller"),
    ],
)
def test_the_smaller_form_is_written(n: int, prefixed: bool) -> None:
    ta = pools(n)
    want = hostname_prefix_encoding(ta) if prefixed else single_slice_encoding(ta)
    assert to_v1beta2(ta) == want
    assert from_v1beta2(to_v1beta2(ta)) == ta


def test_many_pools_fit_two_full_slices() -> None:
    """2,000 pools of 100 hosts: too many runs for 1,000 slices at any prefix depth, so
    one run chunked at the 100,000-domain slice limit."""
    ta = hosts(
        *(
            (f"gke-cluster-pool-{p:04d}-{p:08x}-{n:04x}", 1)
            for p in range(2_000)
            for n in range(100)
        )
    )
    got = to_v1beta2(ta)
    assert [s["domainCount"] for s in got["slices"]] == [MAX_DOMAINS_PER_SLICE] * 2
    assert from_v1beta2(got) == ta
