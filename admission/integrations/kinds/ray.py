"""The Ray cluster shape KubeRay's kinds share (Kueue's ``raycluster`` common code).

A ``RayClusterSpec`` has one head group (``headGroupSpec.template``, one pod) and worker
groups (``workerGroupSpecs[]``: ``groupName``, ``replicas`` — 1 when unset — clamped
into [``minReplicas``, ``maxReplicas``] as KubeRay runs it, times ``numOfHosts`` for
multi-host groups, ``template``). A group's count is what KubeRay will run, so an edit of
its bounds that changes it evicts a running cluster like any resize. Kueue makes a podSet ``head`` and one
per worker group named after it (in lower case), and refuses in its webhook what would
make the admitted quota wrong: in-tree autoscaling (the cluster would grow past it), a
worker group named ``head``, more podSets than a Workload holds. A RayCluster is
suspended at ``spec.suspend``; KubeRay lets the pod templates change while suspended.

Gaps against Kueue: the autoscaler sidecar and the Redis-cleanup Job of GCS fault
tolerance are not added to the head podSet (autoscaling is refused anyway); no workload
slicing (elastic Ray). Source: Kueue pkg/controller/jobs/raycluster/common.go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.fields import (
    IntegrationError,
    Path,
    count_field,
    dotted,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import Role

HEAD = "head"


def cluster_roles(kind_noun: str, obj: Mapping[str, Any], prefix: Path) -> list[Role]:
    """head + one role per worker group of the RayClusterSpec at ``prefix``."""
    ref = ref_of(obj)
    head_path = (*prefix, "headGroupSpec", "template")
    roles = [
        Role(name=HEAD, count=1, template=template_at(obj, head_path, kind_noun), path=head_path)
    ]
    spec = template_at(obj, prefix, kind_noun)
    groups = spec.get("workerGroupSpecs") or []
    where = dotted((*prefix, "workerGroupSpecs"))
    if not isinstance(groups, list):
        raise IntegrationError(f"{kind_noun} {ref}: {where}: expected a list")
    for i, group in enumerate(groups):
        if not isinstance(group, Mapping):
            raise IntegrationError(f"{kind_noun} {ref}: {where}[{i}]: expected an object")
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise IntegrationError(f"{kind_noun} {ref}: {where}[{i}].groupName: required")
        replicas = desired_replicas(kind_noun, ref, group, f"{where}[{i}]")
        hosts = count_field(
            group.get("numOfHosts"), kind_noun, ref, f"{where}[{i}].numOfHosts", default=1
        )
        path = (*prefix, "workerGroupSpecs", i, "template")
        roles.append(
            Role(
                name=name.lower(),
                count=replicas * max(hosts, 1),
                template=template_at(obj, path, kind_noun),
                path=path,
            )
        )
    return roles


def desired_replicas(kind_noun: str, ref: str, group: Mapping[str, Any], where: str) -> int:
    """The worker pods KubeRay runs for a group (its ``GetWorkerGroupDesiredReplicas``):
    ``replicas`` (1 when unset) clamped into [``minReplicas``, ``maxReplicas``], and
    ``maxReplicas`` when the bounds cross. ``replicas: 1, minReplicas: 6`` runs 6."""
    replicas = count_field(group.get("replicas"), kind_noun, ref, f"{where}.replicas", default=1)
    low = count_field(group.get("minReplicas"), kind_noun, ref, f"{where}.minReplicas", default=0)
    high = (
        count_field(group.get("maxReplicas"), kind_noun, ref, f"{where}.maxReplicas", default=0)
        if group.get("maxReplicas") is not None
        else None
    )
    if high is not None and low > high:
        return high
    if replicas < low:
        return low
    if high is not None and replicas > high:
        return high
    return replicas


CLUSTER_LABEL, GROUP_LABEL, HEAD_GROUP = "ray.io/cluster", "ray.io/group", "headgroup"


def cluster_pod_template(cluster: Mapping[str, Any], pod: Mapping[str, Any]) -> Any | None:
    """The template of the group ``pod`` is of, by what KubeRay writes on a pod of
    ``cluster`` (the cluster's name, its head group or one of its worker groups); None
    when it is none of them."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    spec = cluster.get("spec") or {}
    if labels.get(CLUSTER_LABEL) != (cluster.get("metadata") or {}).get("name"):
        return None
    group = labels.get(GROUP_LABEL)
    if group == HEAD_GROUP:
        return (spec.get("headGroupSpec") or {}).get("template")
    for g in spec.get("workerGroupSpecs") or []:
        if isinstance(g, Mapping) and g.get("groupName") == group:
            return g.get("template")
    return None


def cluster_errors(obj: Mapping[str, Any], prefix: Path) -> list[str]:
    """Kueue's ``raycluster.ValidateCreate`` for the RayClusterSpec at ``prefix``."""
    node: Any = obj
    for part in prefix:
        node = node.get(part) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        return []
    errors = []
    if node.get("enableInTreeAutoscaling") is True:
        errors.append(
            f"{dotted((*prefix, 'enableInTreeAutoscaling'))}: Invalid value: true: a kueue "
            "managed job should only use autoscaling when workload slicing is enabled"
        )
    for i, group in enumerate(node.get("workerGroupSpecs") or []):
        if isinstance(group, Mapping) and group.get("groupName") == HEAD:
            errors.append(
                f"{dotted((*prefix, 'workerGroupSpecs', i, 'groupName'))}: Forbidden: "
                f'"{HEAD}" is reserved for the head group'
            )
    return errors
