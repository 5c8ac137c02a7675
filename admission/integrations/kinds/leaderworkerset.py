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
  (its ``leader`` and ``worker`` podSets), ungates them with their flavors, and, as a serving
  group, lets its controller replace evicted pods; scaling ``replicas`` adds or removes
  whole groups (the Workload of a removed group ends with its pods).

The set itself is not watched. The validating webhook keeps, for a queued set, the
queue name while a replica is ready and ``size`` always (a group's total count).
``plan`` builds the Workloads the groups' pods would get: ``replicas`` of them, named as
the pod webhook names the groups (:meth:`LeaderWorkerSetIntegration.plan_workloads`).
Its podSets are Kueue's: ``leader`` and ``worker``, or ``main`` without a
leader template (the webhook writes the podSet into each template's
``kueue.x-k8s.io/podset`` label, and the pod-group reconciler groups a group's pods by
it). Gaps against Kueue: a ``worker`` podSet of 0 pods (size 1) is left out; no prebuilt Workloads
(Kueue's reconciler creates them before the pods); the TAS pod-index offset of the
workers is not set. Sources: Kueue pkg/controller/jobs/leaderworkerset/
leaderworkerset_webhook.go, leaderworkerset_reconciler.go; lws api/leaderworkerset/v1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import kind_of, named_child_may_own
from admission.integrations.framework.fields import (
    IntegrationError,
    count_field,
    meta_of,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import Role
from admission.integrations.framework.workload_names import PREFIX_ROOM, workload_name
from admission.integrations.kinds.admitted_by_pods import (
    Edit,
    Obj,
    PodOwnerIntegration,
    UpdateCheck,
    at,
    immutable,
    shape_errors,
)
from queues.api.labels import POD_GROUP_SERVING
from queues.api.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.api.labels import PODSET as PODSET_LABEL

FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
_LWT = ("spec", "leaderWorkerTemplate")


class LeaderWorkerSetIntegration(PodOwnerIntegration):
    framework = FRAMEWORK
    resource = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
    workload_name_uses_uid = False

    def size(self, obj: Mapping[str, Any]) -> int:
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        return count_field(lwt.get("size"), self.lower_kind, ref_of(obj),
                           "spec.leaderWorkerTemplate.size", default=1)  # fmt: skip

    def pod_sets(self, obj: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...], int]]:
        """(podSet name, template path, count) of one group, as Kueue's ``podSets``: with
        a leader template, ``leader`` (1) and ``worker`` (size - 1, left out when 0);
        without one, every pod of the group is a worker: ``main`` (size)."""
        size = self.size(obj)
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        worker = (*_LWT, "workerTemplate")
        if not lwt.get("leaderTemplate"):
            return [("main", worker, size)]
        sets: list[tuple[str, tuple[str, ...], int]] = [("leader", (*_LWT, "leaderTemplate"), 1)]
        return sets + ([("worker", worker, size - 1)] if size > 1 else [])

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        """One group: its leader and its workers."""
        return [Role(name=name, count=count, template=template_at(obj, path, self.lower_kind),
                     path=path) for name, path, count in self.pod_sets(obj)]  # fmt: skip

    def replicas(self, obj: Mapping[str, Any]) -> int:
        return count_field((obj.get("spec") or {}).get("replicas"), self.lower_kind, ref_of(obj),
                           "spec.replicas", default=1)  # fmt: skip

    def plan_workloads(self, obj: Mapping[str, Any]) -> list[tuple[str | None, list[Role]]]:
        """One Workload per group, named as its pods name it (``pod_group_of``)."""
        roles = self.roles(obj)
        name = str(meta_of(obj).get("name") or "")
        out: list[tuple[str | None, list[Role]]] = []
        for i in range(self.replicas(obj)):
            out.append((self.group_name(name, i), roles))
        return out

    def suspend_edits(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> list[Edit]:
        """Each template: the pod group's labels and annotations, and the podSet its
        pods are in (``kueue.x-k8s.io/podset``: the group's Workload names its podSets
        ``leader``/``worker`` by it, whatever the templates' shapes)."""
        lwt = ((obj.get("spec") or {}).get("leaderWorkerTemplate")) or {}
        size = str(lwt.get("size", 1))
        worker = "worker" if lwt.get("leaderTemplate") else "main"
        templates = [("workerTemplate", worker)]
        if lwt.get("leaderTemplate"):
            templates.append(("leaderTemplate", "leader"))
        edits: list[Edit] = []
        for t, pod_set in templates:
            edits += self.template_edits(
                (*_LWT, t),
                labels,
                extra_labels=[(PODSET_LABEL, pod_set)],
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
        prefix = f"{self.kind.lower()}-{name}-"
        if len(prefix) + len(str(max(n - 1, 0))) > PREFIX_ROOM:
            # a name so long that some group names are cut: the index may not be in them
            return any(group == self.group_name(name, i) for i in range(n))
        # every group name of the set is "<prefix><index>-<hash>": read the index, then
        # check that one name, however many replicas the set has
        index = group[len(prefix) : group.rfind("-")] if group.startswith(prefix) else ""
        if not (index.isascii() and index.isdigit()) or (index[0] == "0" and index != "0"):
            return False
        i = int(index)
        return i < n and group == self.group_name(name, i)

    def group_size(self, owner: Mapping[str, Any]) -> int:
        try:
            return self.size(owner)
        except IntegrationError:
            return 1

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """Its leader StatefulSet, named as the set (the workers' StatefulSets are the
        leader pods'), besides the pods of its held templates."""
        if kind_of(child) == ("apps/v1", "StatefulSet"):
            name = str(meta_of(obj).get("name") or "")
            return named_child_may_own(obj, child, {("apps/v1", "StatefulSet"): name})
        return super().may_own(obj, child)

    def update_errors(self, new: Obj, old: Obj, check: UpdateCheck) -> list[str]:
        """Kueue's LeaderWorkerSet ``ValidateUpdate``: for a managed set, the leader and
        worker templates keep their pods' shape (a leader template is neither added nor
        removed) and ``size`` is fixed (``LWSImmutableGroupSize``, on by default: a
        group's Workload is not resized); ``replicas`` may change (groups come and go)."""
        errors = super().update_errors(new, old, check)
        if not check.managed:
            return errors
        for t in ("leaderTemplate", "workerTemplate"):
            path = (*_LWT, t)
            new_template, old_template = at(new, path), at(old, path)
            where = "spec.leaderWorkerTemplate." + t
            if (new_template is None) != (old_template is None):
                errors.append(immutable(where, new_template))
            elif new_template is not None:
                errors += shape_errors(
                    at(new_template, ("spec",)), at(old_template, ("spec",)), f"{where}.spec"
                )
        try:
            before, after = self.size(old), self.size(new)
        except IntegrationError:  # a malformed size is the API server's to refuse
            return errors
        if before != after:
            errors.append(immutable("spec.leaderWorkerTemplate.size", after))
        return errors


LEADERWORKERSET = LeaderWorkerSetIntegration()
