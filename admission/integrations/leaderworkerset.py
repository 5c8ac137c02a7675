"""LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, kubernetes-sigs/lws), as Kueue's
``leaderworkerset.x-k8s.io/leaderworkerset`` integration: one serving gang per group.

A LeaderWorkerSet runs ``spec.replicas`` groups, each a leader pod and ``size - 1``
worker pods (multi-host inference): its controller makes a StatefulSet of leaders and,
per leader, a StatefulSet of its workers, labelling every pod with the set's name
(``leaderworkerset.sigs.k8s.io/name``) and its group (``…/group-index``). Kueue admits
each group as one Workload with a leader and a worker podSet; here each group is a pod
group:

* the mutating webhook writes, into the leader and worker templates of a queued set,
  the queue, priority-class and managed labels, ``pod-group-total-count`` = ``size``,
  ``pod-group-serving`` and ``pod-suspending-parent``;
* the pod webhook names each pod's group from its labels
  (:meth:`LeaderWorkerSetIntegration.pod_group_of`:
  ``leaderworkerset-<name>-<group index>-<hash>``, hashed without a UID);
* the pod-group reconciler admits a group only when its leader and all its workers fit
  (one podSet per pod shape), ungates them with their flavors, and, as a serving
  group, lets its controller replace evicted pods; scaling ``replicas`` adds or removes
  whole groups (the Workload of a removed group ends with its pods).

The set itself is not watched. The validating webhook keeps, for a queued set, the
queue name while a replica is ready and ``size`` always (a group's total count). Not
read by ``plan`` (each group is its own Workload, made from pods). Gaps against Kueue:
the podSets are named by pod shape, not ``leader``/``worker``; no prebuilt Workloads
(Kueue's reconciler creates them before the pods); the TAS pod-index offset of the
workers is not set. Sources: Kueue pkg/controller/jobs/leaderworkerset/
leaderworkerset_webhook.go, leaderworkerset_reconciler.go; lws api/leaderworkerset/v1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.labels import POD_GROUP_SERVING
from queues.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.labels import QUEUE_NAME as QUEUE_NAME_LABEL

from .base import (
    IntegrationError,
    Resource,
    Role,
    count_field,
    meta_of,
    ref_of,
    template_at,
    workload_name,
)
from .podowner import Edit, PodOwnerIntegration

FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
_LWT = ("spec", "leaderWorkerTemplate")


class LeaderWorkerSetIntegration(PodOwnerIntegration):
    framework = FRAMEWORK
    resource = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
    planned = False
    workload_name_uses_uid = False

    def size(self, obj: Mapping[str, Any]) -> int:
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        return count_field(lwt.get("size"), self.what, ref_of(obj),
                           "spec.leaderWorkerTemplate.size", default=1)  # fmt: skip

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        """One group: the leader (its own template, or a worker's) and the workers."""
        what, size = self.what, self.size(obj)
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        worker_path = (*_LWT, "workerTemplate")
        leader_path = (*_LWT, "leaderTemplate") if lwt.get("leaderTemplate") else worker_path
        roles = [Role(name="leader", count=1, template=template_at(obj, leader_path, what),
                      path=leader_path)]  # fmt: skip
        if size > 1:
            roles.append(Role(name="worker", count=size - 1,
                              template=template_at(obj, worker_path, what), path=worker_path))  # fmt: skip
        return roles

    def suspend_edits(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> list[Edit]:
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        size = str(lwt.get("size", 1))
        templates = ["workerTemplate"] + (["leaderTemplate"] if lwt.get("leaderTemplate") else [])
        edits: list[Edit] = []
        for t in templates:
            edits += self.template_edits(
                (*_LWT, t),
                labels,
                annotations=[(GROUP_TOTAL_COUNT_ANNOTATION, size), (POD_GROUP_SERVING, "true")],
            )
        return edits

    def group_name(self, name: str, index: int | str) -> str:
        """The pod group (and Workload) name of group ``index`` of the set ``name``."""
        return workload_name(owner_name=f"{name}-{index}", owner_uid="", kind=self.kind,
                             group=self.resource.group)  # fmt: skip

    def pod_group_of(self, pod: Mapping[str, Any]) -> str | None:
        labels = meta_of(pod).get("labels") or {}
        name, index = labels.get(NAME_LABEL), labels.get(GROUP_INDEX_LABEL)
        if not isinstance(name, str) or not isinstance(index, str) or not name or not index:
            return None
        return self.group_name(name, index)

    def group_owner(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        name = (meta_of(pod).get("labels") or {}).get(NAME_LABEL)
        return (name, "") if isinstance(name, str) and name else None

    def keeps_group(self, owner: Mapping[str, Any], group: str) -> bool:
        """One of the set's ``replicas`` groups (a group removed by scaling down goes
        with its pods, as Kueue's reconciler deletes the Workloads beyond ``replicas``)."""
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        name = str(meta_of(owner).get("name") or "")
        n = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        return any(group == self.group_name(name, i) for i in range(n))

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        errors = super().validate(new, old)
        queued = old is not None and (meta_of(old).get("labels") or {}).get(QUEUE_NAME_LABEL)
        if queued and old is not None:
            try:
                before, after = self.size(old), self.size(new)
            except IntegrationError:  # a malformed size is the API server's to refuse
                return errors
            if before != after:
                errors.append(
                    f"spec.leaderWorkerTemplate.size: Invalid value: {after}: field is immutable"
                )
        return errors


LEADERWORKERSET = LeaderWorkerSetIntegration()
