"""Deployment (``apps/v1``), as Kueue's ``deployment`` integration: single-pod Workloads.

A Deployment serves until deleted and its ReplicaSet owns its pods, so Kueue admits
each pod on its own: the mutating webhook writes, into the pod template of a Deployment
that names a queue, the queue and priority-class labels, the managed label and
``pod-suspending-parent``; every pod is then gated by the pod webhook and gets its own
Workload (``pod-<name>-<hash>``, controlled by the pod, one podSet ``main`` of one pod)
from the pod reconciler (``admission.kube.reconcilers.pod_groups``), which ungates it with its
flavor once admitted. A preempted pod is deleted and its ReplicaSet makes a new one,
which queues again; deleting the Deployment ends its pods' Workloads. Replicas are
therefore admitted one by one, not as a gang: a Deployment of 4 replicas on quota for
2 runs 2 pods.

The object itself is not watched (it is read up its pods' owner chain, through the
ReplicaSet); the validating webhook keeps the queue name of a Deployment with ready
replicas unchanged, and the priority class as for jobs. ``plan`` builds the Workloads its
pods would get: ``replicas`` single-pod Workloads (:meth:`DeploymentIntegration.plan_workloads`).
Source: Kueue pkg/controller/jobs/deployment/deployment_webhook.go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.fields import count_field, meta_of, ref_of, template_at
from admission.integrations.framework.interface import Role
from admission.integrations.framework.workload_names import workload_name
from admission.integrations.kinds.admitted_by_pods import Edit, PodOwnerIntegration

FRAMEWORK = "deployment"
_TEMPLATE = ("spec", "template")


class DeploymentIntegration(PodOwnerIntegration):
    framework = FRAMEWORK
    resource = Resource("apps", "v1", "deployments", "Deployment")
    #: a changed template rolls out new pods, each admitted on its own new Workload
    fixed_requests = False

    def replicas(self, obj: Mapping[str, Any]) -> int:
        return count_field((obj.get("spec") or {}).get("replicas"), self.lower_kind, ref_of(obj),
                           "spec.replicas", default=1)  # fmt: skip

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        """One pod's podSet (each replica is its own Workload)."""
        self.replicas(obj)
        return [Role(name="main", count=1, template=template_at(obj, _TEMPLATE, self.lower_kind),
                     path=_TEMPLATE)]  # fmt: skip

    def plan_workloads(self, obj: Mapping[str, Any]) -> list[tuple[str | None, list[Role]]]:
        """One single-pod Workload per replica, as its pods get: named after a stand-in
        pod ``<deployment>-<i>`` (the ReplicaSet names the real ones at random), so
        ``pod-<deployment>-<i>-<hash>``."""
        roles = self.roles(obj)
        m = meta_of(obj)
        name, uid = str(m.get("name") or ""), str(m.get("uid") or "")
        out: list[tuple[str | None, list[Role]]] = []
        for i in range(self.replicas(obj)):
            pod = workload_name(owner_name=f"{name}-{i}", owner_uid=uid, kind="Pod", group="")
            out.append((pod, roles))
        return out

    def suspend_edits(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> list[Edit]:
        return self.template_edits(_TEMPLATE, labels)


DEPLOYMENT = DeploymentIntegration()
