"""Kueue's ``Topology`` kind (kueue.x-k8s.io/v1beta2, cluster-scoped) as a pydantic model.

A Topology names the node labels that make up a cluster's network hierarchy, from the
widest domain (a block) to the narrowest (a host): ResourceFlavors point at one with
``spec.topologyName`` and podSets ask for a level of it. The schema follows Kueue's
apis/kueue/v1beta2/topology_types.go; ``check_topology`` adds the CEL rules of
``TopologySpec.levels`` (unique levels, ``kubernetes.io/hostname`` only as the lowest)
and ``topology_update_problems`` the transition rule (levels may change only while the
hostname is the lowest level before and after).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from queues import model as m
from queues.api.fields import KubeModel, ObjectMeta, Problems

HOSTNAME_LABEL = "kubernetes.io/hostname"
NODE_LABEL_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
MAX_LEVELS = 16
UNIQUE_MSG = "must be unique"
HOSTNAME_LOWEST_MSG = (
    "the kubernetes.io/hostname label can only be used at the lowest level of topology"
)
MUTABLE_MSG = (
    "levels are mutable only when kubernetes.io/hostname is the lowest level both before and "
    "after the change"
)


class TopologyLevel(KubeModel):
    node_label: Annotated[
        str, StringConstraints(min_length=1, max_length=316, pattern=NODE_LABEL_PATTERN)
    ]


class TopologySpec(KubeModel):
    levels: Annotated[list[TopologyLevel], Field(min_length=1, max_length=MAX_LEVELS)]


class Topology(KubeModel):
    """kueue.x-k8s.io Topology (cluster-scoped, no status)."""

    api_version: str
    kind: Literal["Topology"]
    metadata: ObjectMeta
    spec: TopologySpec


def check_topology(spec: TopologySpec) -> Problems:
    """The CEL rules on ``spec.levels`` (Kueue's messages)."""
    labels = [lvl.node_label for lvl in spec.levels]
    problems: Problems = []
    if len(set(labels)) != len(labels):
        problems.append(("spec.levels", UNIQUE_MSG))
    if HOSTNAME_LABEL in labels and labels[-1] != HOSTNAME_LABEL:
        problems.append(("spec.levels", HOSTNAME_LOWEST_MSG))
    return problems


def topology_update_problems(old_levels: list[str], new_levels: list[str]) -> Problems:
    """The transition rule on ``spec.levels``."""
    if old_levels == new_levels:
        return []
    if old_levels and new_levels and old_levels[-1] == new_levels[-1] == HOSTNAME_LABEL:
        return []
    return [("spec.levels", MUTABLE_MSG)]


def to_model(t: Topology) -> m.Topology:
    return m.Topology(
        name=t.metadata.name or "", levels=tuple(lvl.node_label for lvl in t.spec.levels)
    )
