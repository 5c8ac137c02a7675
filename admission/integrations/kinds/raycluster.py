"""RayCluster (``ray.io/v1``, KubeRay), as Kueue's ``ray.io/raycluster`` integration.

One Workload per RayCluster: podSets ``head`` and one per worker group (see
:mod:`.ray`), suspended at ``spec.suspend``. A RayCluster never finishes on its own (it
serves until deleted; deleting it deletes its Workload and releases the quota); its pods
are running — and ready — when KubeRay reports ``status.state: ready``. Source: Kueue
pkg/controller/jobs/raycluster/raycluster_controller.go, raycluster_webhook.go; KubeRay
ray-operator/apis/ray/v1/raycluster_types.go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import pod_of_role_may_own
from admission.integrations.framework.interface import Finished, Integration, Role
from admission.integrations.kinds.ray import cluster_errors, cluster_pod_template, cluster_roles


class RayClusterIntegration(Integration):
    framework = "ray.io/raycluster"
    resource = Resource("ray.io", "v1", "rayclusters", "RayCluster")

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        return cluster_roles(self.lower_kind, obj, ("spec",))

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return None  # a RayCluster is never "finished" (Kueue)

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return (obj.get("status") or {}).get("state") == "ready"

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        return (obj.get("status") or {}).get("state") == "ready"

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """KubeRay's pods: labelled with the cluster's name and one of its groups."""
        return pod_of_role_may_own(
            obj, child, suspended=self.is_suspended(obj), template=cluster_pod_template(obj, child)
        )

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        return cluster_errors(new, ("spec",)) + super().validate(new, old)


RAYCLUSTER = RayClusterIntegration()
