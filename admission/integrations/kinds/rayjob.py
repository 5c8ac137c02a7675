"""RayJob (``ray.io/v1``, KubeRay), as Kueue's ``ray.io/rayjob`` integration.

A RayJob brings up a RayCluster from ``spec.rayClusterSpec``, runs ``entrypoint`` on it
and tears it down: one Workload with the cluster's podSets (``head`` and one per worker
group, see :mod:`.ray`) and, in the default ``K8sJobMode``, the ``submitter`` podSet of
the Job that submits the entrypoint — ``spec.submitterPodTemplate`` or KubeRay's default
(one container on the head's image, 500m cpu / 200Mi requested), written into the
RayJob when it starts so its pods get the podSet's flavor. In ``SidecarMode`` the
submitter is a container in the head pod (500m / 200Mi more for the head podSet).

Suspended at ``spec.suspend``; finished when ``status.jobDeploymentStatus`` is
``Complete`` or ``Failed`` (succeeded: ``jobStatus: SUCCEEDED``); its pods may run
unless the deployment status is ``Suspended`` or new; ready when its cluster is. A
RayJob with ``clusterSelector`` runs on an existing cluster and is not managed. The
webhook refuses, for a queued RayJob, both a clusterSelector and a rayClusterSpec,
neither of them, and ``shutdownAfterJobFinishes: false`` (the idle cluster would keep
its quota), plus the cluster rules of :mod:`.ray`. Source: Kueue
pkg/controller/jobs/rayjob/rayjob_controller.go, rayjob_webhook.go; KubeRay
ray-operator/apis/ray/v1/rayjob_types.go.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import named_child_may_own
from admission.integrations.framework.fields import (
    IntegrationError,
    Obj,
    apply_merge_patch,
    merge_patch,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import Finished, Integration, Role, Step
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.kinds.ray import HEAD, cluster_errors, cluster_roles

SUBMITTER = "submitter"
SUBMITTER_CONTAINER = "ray-job-submitter"
K8S_JOB_MODE, SIDECAR_MODE = "K8sJobMode", "SidecarMode"
SUBMITTER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}
_CLUSTER = ("spec", "rayClusterSpec")
_SUBMITTER_PATH = ("spec", "submitterPodTemplate")


class RayJobIntegration(Integration):
    framework = "ray.io/rayjob"
    resource = Resource("ray.io", "v1", "rayjobs", "RayJob")

    def skip(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("clusterSelector"))

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        spec = obj.get("spec") or {}
        if not isinstance(spec.get("rayClusterSpec"), Mapping):
            raise IntegrationError(
                f"{self.lower_kind} {ref_of(obj)}: spec.rayClusterSpec: required"
            )
        roles = cluster_roles(self.lower_kind, obj, _CLUSTER)
        mode = _mode(obj)
        if mode == SIDECAR_MODE:
            head = roles[0]
            tmpl = copy.deepcopy(dict(head.template))
            tmpl.setdefault("spec", {}).setdefault("containers", []).append(
                {"name": SUBMITTER_CONTAINER, "resources": copy.deepcopy(SUBMITTER_RESOURCES)}
            )
            roles[0] = Role(name=HEAD, count=1, template=tmpl, path=head.path)
        elif mode == K8S_JOB_MODE:
            if spec.get("submitterPodTemplate") is not None:
                template = template_at(obj, _SUBMITTER_PATH, self.lower_kind)
            else:
                template = default_submitter(obj)
            roles.append(Role(name=SUBMITTER, count=1, template=template, path=_SUBMITTER_PATH))
        return roles

    def run_patch(self, obj: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> Obj:
        """Kueue: the submitter template, if the RayJob has none, is KubeRay's default
        with the podSet's flavor merged in, written into ``spec.submitterPodTemplate``.
        (The head's sidecar container is KubeRay's to add, not part of the template.)"""
        full = self._with_submitter(obj)
        return merge_patch(obj, apply_merge_patch(full, super().run_patch(full, infos)))

    def stop_step(
        self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo] | None
    ) -> Step | None:
        full = self._with_submitter(obj)
        step = super().stop_step(full, originals)
        if step is None:
            return None
        new = apply_merge_patch(full, step.patch)
        if (obj.get("spec") or {}).get("submitterPodTemplate") is None:
            new["spec"].pop("submitterPodTemplate", None)  # nothing of ours to restore
        patch = merge_patch(obj, new)
        return Step(patch) if patch else None

    def _with_submitter(self, obj: Mapping[str, Any]) -> Obj:
        full = copy.deepcopy(dict(obj))
        if (
            _mode(obj) == K8S_JOB_MODE
            and (full.get("spec") or {}).get("submitterPodTemplate") is None
        ):
            full.setdefault("spec", {})["submitterPodTemplate"] = default_submitter(obj)
        return full

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        status = obj.get("status") or {}
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
            return None
        return Finished(status.get("jobStatus") == "SUCCEEDED", str(status.get("message") or ""))

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return (obj.get("status") or {}).get("jobDeploymentStatus") not in (None, "", "Suspended")

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        cluster = (obj.get("status") or {}).get("rayClusterStatus") or {}
        return isinstance(cluster, Mapping) and cluster.get("state") == "ready"

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """KubeRay's children of a RayJob: its RayCluster (the name in its status) and
        its submitter Job (the RayJob's name)."""
        status = obj.get("status") or {}
        kinds = {("batch/v1", "Job"): str((obj.get("metadata") or {}).get("name") or "")}
        cluster = status.get("rayClusterName") if isinstance(status, Mapping) else None
        if isinstance(cluster, str) and cluster:
            kinds[("ray.io/v1", "RayCluster")] = cluster
        return named_child_may_own(obj, child, kinds)

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        spec = new.get("spec") or {}
        selector, cluster = spec.get("clusterSelector"), spec.get("rayClusterSpec")
        if selector and cluster is not None:
            return [
                "spec.clusterSelector: Invalid value: a kueue managed job should not use an existing cluster"
            ]
        if selector:
            return []  # runs on an existing cluster: not managed
        if cluster is None:
            return [
                "spec.rayClusterSpec: Required value: rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector"
            ]
        errors = []
        if spec.get("shutdownAfterJobFinishes") is not True:
            errors.append(
                f"spec.shutdownAfterJobFinishes: Invalid value: "
                f"{'true' if spec.get('shutdownAfterJobFinishes') else 'false'}: "
                "a kueue managed job should delete the cluster after finishing"
            )
        return errors + cluster_errors(new, _CLUSTER) + super().validate(new, old)


def _mode(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("submissionMode") or K8S_JOB_MODE)


def default_submitter(obj: Mapping[str, Any]) -> Obj:
    """KubeRay's default submitter pod template (the head container's image)."""
    head = ((((obj.get("spec") or {}).get("rayClusterSpec") or {}).get("headGroupSpec") or {})
            .get("template") or {})  # fmt: skip
    containers = ((head.get("spec") or {}).get("containers")) or [{}]
    image = containers[0].get("image", "") if isinstance(containers[0], Mapping) else ""
    return {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": SUBMITTER_CONTAINER,
                    "image": image,
                    "resources": copy.deepcopy(SUBMITTER_RESOURCES),
                }
            ],
        }
    }


RAYJOB = RayJobIntegration()
