"""Workload names are valid DNS subdomains for every kind, whatever the owner's name:
Kueue's ``<kind>-<name>`` prefix is truncated to fit 253 characters with the hash, and a
truncation that ends on a ``.`` would make ``….-<hash>``, a name the API server refuses
(the object then never gets a Workload)."""

from __future__ import annotations

import re

import pytest

from admission.integrations.framework.interface import Integration
from admission.integrations.framework.workload_names import MAX_WORKLOAD_NAME_LENGTH, workload_name
from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
from admission.integrations.registry import INTEGRATIONS

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _valid(name: str) -> bool:
    return len(name) <= MAX_WORKLOAD_NAME_LENGTH and DNS1123_SUBDOMAIN.fullmatch(name) is not None


def _owner_names() -> list[str]:
    """Valid 253-character object names with a ``.`` at every position near where the
    prefixes of the kinds are cut."""
    names = []
    for dot in range(200, 252):
        names.append("a" * dot + "." + "b" * (252 - dot))
    return names


@pytest.mark.parametrize("integ", INTEGRATIONS, ids=lambda i: i.framework)
def test_every_kind_names_its_workload_validly_whatever_the_owner_name(integ: Integration) -> None:
    for name in _owner_names():
        assert _valid(name)
        obj = {"apiVersion": integ.api_version, "kind": integ.kind,
               "metadata": {"name": name, "namespace": "ns", "uid": "u-1"}}  # fmt: skip
        got = integ.workload_name(obj)
        assert _valid(got), (name, got)


def test_a_raycluster_cut_on_a_dot_gets_a_valid_name_and_keeps_its_hash() -> None:
    cut = MAX_WORKLOAD_NAME_LENGTH - 1 - 5 - len("raycluster-")
    name = "r" * (cut - 1) + "." + "x" * 10
    got = workload_name(owner_name=name, owner_uid="u", kind="RayCluster", group="ray.io")
    assert _valid(got)
    assert got.startswith("raycluster-" + "r" * (cut - 1) + "-")
    assert got != workload_name(owner_name=name + "y", owner_uid="u", kind="RayCluster",
                                group="ray.io")  # fmt: skip


def test_leaderworkerset_group_names_are_valid() -> None:
    for name in _owner_names():
        for index in (0, 7, 12345):
            assert _valid(LEADERWORKERSET.group_name(name[: 253 - len(f"-{index}")], index))
