"""From validated API objects to the engine's plain classes (``queues.model``).

Runs after ``queues.api.kinds`` has checked an object, so the only thing that can still go
wrong is a value the engine cannot represent; that is raised as ``ConvertError`` with
its field path. Quantities become engine integers (``queues.quantity.to_units``),
timestamps float epoch seconds, fair-sharing weights floats, and pod templates PodSets
(``queues.pods.podset_from_template``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queues import model as m
from queues.api.fields import (
    FairSharing,
    LabelSelector,
    ResourceGroup,
    Toleration,
    epoch,
    join_path,
    quantity_value,
)
from queues.api.progress import ProgressError, WorkloadProgress, workload_progress
from queues.api.topology_assignment import AssignmentFormError, from_v1beta2
from queues.node_health import AvoidedNodes, excluding_hosts
from queues.pods import podset_from_template
from queues.quantity import to_units

if TYPE_CHECKING:
    from queues.api.kinds import (
        AdmissionCheck,
        ClusterQueue,
        Cohort,
        LocalQueue,
        Namespace,
        PriorityClass,
        ResourceFlavor,
        Workload,
        WorkloadPriorityClass,
    )

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_NAMESPACE = "default"
REQUEUE_EVICTION_REASONS = ("PodsReadyTimeout", "AdmissionCheck")
"""Evicted reasons whose time becomes the queue-order timestamp (requeuingStrategy
``timestamp: Eviction``, Kueue's default; AdmissionCheck always)."""


class ConvertError(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _units(resource: str, value: str, path: str) -> int:
    try:
        return to_units(resource, value)
    except (ValueError, ArithmeticError) as exc:
        raise ConvertError(path, str(exc)) from None


def _weight(fair_sharing: FairSharing | None) -> float:
    if fair_sharing is None or fair_sharing.weight is None:
        return 1.0
    return float(quantity_value(fair_sharing.weight))


def _label_selector(sel: LabelSelector) -> m.LabelSelector:
    return m.LabelSelector(
        match_labels=tuple(sorted(sel.match_labels.items())),
        match_expressions=tuple(
            m.SelectorRequirement(key=e.key, operator=e.operator, values=tuple(e.values))
            for e in sel.match_expressions
        ),
    )


def _toleration(tol: Toleration) -> m.Toleration:
    return m.Toleration(
        key=tol.key or "",
        operator=tol.operator or "Equal",
        value=tol.value or "",
        effect=tol.effect or "",
    )


def resource_flavor(rf: ResourceFlavor) -> m.ResourceFlavor:
    return m.ResourceFlavor(
        name=rf.metadata.name or "",
        node_labels=dict(rf.spec.node_labels),
        node_taints=[
            m.Taint(key=t.key, value=t.value, effect=t.effect) for t in rf.spec.node_taints
        ],
        tolerations=[_toleration(t) for t in rf.spec.tolerations],
        topology_name=rf.spec.topology_name,
    )


def _resource_groups(groups: list[ResourceGroup]) -> list[m.ResourceGroup]:
    out = []
    for i, rg in enumerate(groups):
        flavors = []
        for j, fq in enumerate(rg.flavors):
            quotas: dict[str, m.ResourceQuota] = {}
            for k, q in enumerate(fq.resources):
                path = f"spec.resourceGroups[{i}].flavors[{j}].resources[{k}]"
                borrowing = q.borrowing_limit
                lending = q.lending_limit
                quotas[q.name] = m.ResourceQuota(
                    nominal=_units(q.name, q.nominal_quota, f"{path}.nominalQuota"),
                    borrowing_limit=None
                    if borrowing is None
                    else _units(q.name, borrowing, f"{path}.borrowingLimit"),
                    lending_limit=None
                    if lending is None
                    else _units(q.name, lending, f"{path}.lendingLimit"),
                )
            flavors.append(m.FlavorQuotas(name=fq.name, resources=quotas))
        out.append(m.ResourceGroup(covered_resources=list(rg.covered_resources), flavors=flavors))
    return out


def admission_check(ac: AdmissionCheck) -> m.AdmissionCheck:
    active = ac.condition("Active")
    params = ac.spec.parameters
    return m.AdmissionCheck(
        name=ac.metadata.name or "",
        controller_name=ac.spec.controller_name,
        active=active is not None and active.status == "True",
        parameters=None if params is None else (params.api_group, params.kind, params.name),
    )


def _admission_checks(spec: Any) -> dict[str, tuple[str, ...]]:
    """``spec.admissionChecksStrategy``: check name -> onFlavors, in the spec's order."""
    strategy = spec.admission_checks_strategy
    if strategy is None:
        return {}
    return {rule.name: tuple(rule.on_flavors) for rule in strategy.admission_checks}


def _check_states(status: Any) -> tuple[m.AdmissionCheckState, ...]:
    if status is None:
        return ()
    return tuple(
        m.AdmissionCheckState(
            name=acs.name,
            state=acs.state,
            message=acs.message,
            last_transition=epoch(acs.last_transition_time),
            requeue_after_seconds=acs.requeue_after_seconds,
            retry_count=acs.retry_count,
        )
        for acs in status.admission_checks
    )


def cluster_queue(cq: ClusterQueue) -> m.ClusterQueue:
    spec = cq.spec
    fung = spec.flavor_fungibility
    pre = spec.preemption
    return m.ClusterQueue(
        name=cq.metadata.name or "",
        resource_groups=_resource_groups(spec.resource_groups),
        cohort=spec.cohort_name,
        queueing_strategy=spec.queueing_strategy,
        namespace_selector=None
        if spec.namespace_selector is None
        else _label_selector(spec.namespace_selector),
        flavor_fungibility=m.FlavorFungibility(
            when_can_borrow=fung.when_can_borrow,
            when_can_preempt=fung.when_can_preempt,
            preference=fung.preference,
        ),
        preemption=m.PreemptionPolicy(
            within_cluster_queue=pre.within_cluster_queue,
            reclaim_within_cohort=pre.reclaim_within_cohort,
            borrow_within_cohort=pre.borrow_within_cohort.policy,
            max_priority_threshold=pre.borrow_within_cohort.max_priority_threshold,
        ),
        fair_weight=_weight(spec.fair_sharing),
        admission_mode=None
        if spec.admission_scope is None
        else spec.admission_scope.admission_mode,
        stop_policy=spec.stop_policy,
        admission_checks=_admission_checks(spec),
    )


def cohort(co: Cohort) -> m.Cohort:
    return m.Cohort(
        name=co.metadata.name or "",
        parent=co.spec.parent_name,
        resource_groups=_resource_groups(co.spec.resource_groups),
        fair_weight=_weight(co.spec.fair_sharing),
    )


def local_queue(lq: LocalQueue) -> m.LocalQueue:
    consumed: dict[str, int] = {}
    last_update: float | None = None
    fair_sharing = lq.status.fair_sharing if lq.status is not None else None
    afs = fair_sharing.admission_fair_sharing_status if fair_sharing is not None else None
    if afs is not None:
        path = "status.fairSharing.admissionFairSharingStatus.consumedResources"
        consumed = {
            res: _units(res, qty, join_path(path, res))
            for res, qty in afs.consumed_resources.items()
        }
        last_update = epoch(afs.last_update)
    return m.LocalQueue(
        namespace=lq.metadata.namespace or DEFAULT_NAMESPACE,
        name=lq.metadata.name or "",
        cluster_queue=lq.spec.cluster_queue,
        stop_policy=lq.spec.stop_policy,
        fair_weight=_weight(lq.spec.fair_sharing),
        consumed_resources=consumed,
        last_update=last_update,
    )


def workload_priority_class(wpc: WorkloadPriorityClass) -> m.PriorityClass:
    return m.PriorityClass(name=wpc.metadata.name or "", value=wpc.value)


def priority_class(pc: PriorityClass) -> m.PriorityClass:
    return m.PriorityClass(
        name=pc.metadata.name or "",
        value=pc.value,
        kind="PriorityClass",
        global_default=pc.global_default,
    )


def namespace(ns: Namespace) -> m.Namespace:
    name = ns.metadata.name or ""
    # The API server sets this label on every namespace (GA since Kubernetes 1.22).
    return m.Namespace(name=name, labels={**ns.metadata.labels, NAMESPACE_NAME_LABEL: name})


def workload(wl: Workload) -> m.Workload:
    pod_sets = []
    for i, ps in enumerate(wl.spec.pod_sets):
        try:
            pod_set = podset_from_template(
                name=ps.name, count=ps.count, template=ps.template, min_count=ps.min_count
            )
        except (ValueError, ArithmeticError, TypeError) as exc:
            raise ConvertError(f"spec.podSets[{i}].template", str(exc)) from None
        tr = ps.topology_request
        if tr is not None:
            pod_set.topology = m.TopologyRequest(
                required=tr.required,
                preferred=tr.preferred,
                unconstrained=tr.unconstrained,
                pod_set_group_name=tr.pod_set_group_name,
                slice_required_topology=tr.pod_set_slice_required_topology,
                slice_size=tr.pod_set_slice_size,
                pod_index_label=tr.pod_index_label,
                sub_group_index_label=tr.sub_group_index_label,
                sub_group_count=tr.sub_group_count,
                slice_constraints=tuple(
                    (c.topology, c.size)
                    for c in tr.podset_slice_required_topology_constraints or ()
                ),
            )
        pod_sets.append(pod_set)
    avoided = tuple(AvoidedNodes.of(wl.metadata.annotations).until)
    for pod_set in pod_sets if avoided else ():  # bad-node memory (queues.node_health)
        pod_set.required_affinity = excluding_hosts(pod_set.required_affinity, avoided)
    ref = wl.spec.priority_class_ref
    reserved = wl.condition("QuotaReserved")
    status = wl.status
    admission = None
    admission_time = None
    if (
        status is not None
        and status.admission is not None
        and reserved is not None
        and reserved.status == "True"
    ):
        counts = {ps.name: ps.count for ps in wl.spec.pod_sets}
        assignments = []
        for i, psa in enumerate(status.admission.pod_set_assignments):
            path = f"status.admission.podSetAssignments[{i}].resourceUsage"
            assignments.append(
                m.PodSetAssignment(
                    name=psa.name,
                    flavors=dict(psa.flavors),
                    resource_usage={
                        res: _units(res, qty, join_path(path, res))
                        for res, qty in psa.resource_usage.items()
                    },
                    count=psa.count if psa.count is not None else counts.get(psa.name, 0),
                    topology_assignment=_topology_assignment(
                        psa.topology_assignment, f"status.admission.podSetAssignments[{i}]"
                    ),
                )
            )
        admission = m.Admission(
            cluster_queue=status.admission.cluster_queue, pod_set_assignments=assignments
        )
        admission_time = epoch(reserved.last_transition_time)
    evicted = wl.condition("Evicted")
    requeue_time = None
    if (
        evicted is not None
        and evicted.status == "True"
        and evicted.reason in REQUEUE_EVICTION_REASONS
    ):
        requeue_time = epoch(evicted.last_transition_time)
    finished = wl.condition("Finished")
    admitted = wl.condition("Admitted")
    progress = _progress(wl)
    return m.Workload(
        namespace=wl.metadata.namespace or DEFAULT_NAMESPACE,
        name=wl.metadata.name or "",
        pod_sets=pod_sets,
        queue_name=wl.spec.queue_name or "",
        priority=wl.spec.priority if wl.spec.priority is not None else 0,
        priority_class=None if ref is None else ref.name,
        priority_class_kind=None if ref is None else ref.kind,
        uid=wl.metadata.uid or "",
        creation_time=epoch(wl.metadata.creation_timestamp) or 0.0,
        active=wl.spec.active,
        admission=admission,
        admission_time=admission_time,
        requeue_time=requeue_time,
        labels=dict(wl.metadata.labels),
        annotations=dict(wl.metadata.annotations),
        finished=finished is not None and finished.status == "True",
        reclaimable_pods=_reclaimable_pods(status),
        last_checkpoint=progress.checkpoint,
        noticed_at=progress.noticed_at,
        eviction_deadline=progress.deadline,
        requeue_count=_requeue_count(status),
        admission_checks=_check_states(status),
        admitted=admission is not None and admitted is not None and admitted.status == "True",
    )


def _progress(wl: Workload) -> WorkloadProgress:
    """The Workload's checkpoint and notice signals (queues.api.progress)."""
    conditions = [
        {"type": c.type, "status": c.status, "lastTransitionTime": c.last_transition_time}
        for c in (wl.status.conditions if wl.status is not None else [])
    ]
    try:
        return workload_progress(
            {
                "metadata": {"annotations": wl.metadata.annotations},
                "status": {"conditions": conditions},
            }
        )
    except ProgressError as exc:
        raise ConvertError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


def _requeue_count(status: Any) -> int:
    """status.requeueState.count (read leniently, like reclaimablePods)."""
    extra = getattr(status, "model_extra", None) or {}
    count = (extra.get("requeueState") or {}).get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _reclaimable_pods(status: Any) -> dict[str, int]:
    """status.reclaimablePods ([{name, count}]): status content is not part of the
    checked schema (StatusModel keeps unknown fields), so it is read leniently here."""
    extra = getattr(status, "model_extra", None) or {}
    out: dict[str, int] = {}
    for item in extra.get("reclaimablePods") or []:
        if not isinstance(item, dict):
            continue
        name, count = item.get("name"), item.get("count")
        if isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool):
            if count > 0:
                out[name] = count
    return out


def _topology_assignment(doc: Any, path: str) -> m.TopologyAssignment | None:
    if doc is None:
        return None
    try:
        return from_v1beta2(doc, path=f"{path}.topologyAssignment")
    except AssignmentFormError as exc:
        raise ConvertError(f"{path}.topologyAssignment", str(exc).split(": ", 1)[-1]) from None
