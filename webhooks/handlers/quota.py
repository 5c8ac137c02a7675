"""Quota CR editing: ClusterQueue, Cohort, ResourceFlavor, LocalQueue,
WorkloadPriorityClass and Workload admission (docs/semantics.md §3.5–§3.8).

Schema-level rules (lendingLimit ≤ nominalQuota, limits only with a cohort/parent,
resource order and coverage, counts, fair-sharing weight, preemption combination, the
Workload's podSet and admission rules, …) live once, in ``queues.api.parse.parse_object``;
this module runs them on every create and update and adds what only a webhook can check:

* update rules: a LocalQueue's ``spec.clusterQueue`` is immutable; a Workload's
  ``status.admission`` may be set only by the service's own identity (the request's
  ``userInfo.username``) and never changed once set; the rest of its status is the
  service's too, whichever kind owns it (``registry.workload_status_is_the_services``);
  its podSets are frozen while it holds quota;
* what Kueue leaves to runtime: a Cohort edit whose ``parentName`` chain comes back to
  itself is denied with the cycle spelled out (``a -> b -> a``), and one that would make
  a chain deeper than ``MAX_COHORT_DEPTH`` Cohorts is denied with the bound and why;
* **impact warnings** on allowed quota edits: the handler returns an
  :class:`ImpactJob` (``Verdict.deferred``) that the server runs off its event loop
  within a deadline (:mod:`webhooks.handlers.offloop`); at most :data:`MAX_WARNINGS` lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from admission.integrations.registry import workload_status_is_the_services
from queues.api import parse as api
from queues.api import topology as topology_api
from queues.api.labels import PRIORITY_BOOST as PRIORITY_BOOST_ANNOTATION
from queues.api.labels import RESOURCE_IN_USE as RESOURCE_IN_USE_FINALIZER
from queues.cohort_chains import MAX_COHORT_DEPTH, depth_through
from queues.model import Cohort, LocalQueue
from webhooks.review import (
    AdmissionRequest,
    FieldErrors,
    HandlerContext,
    JsonObj,
    MalformedObject,
    Mutation,
    Verdict,
    WebhookSpec,
    allow,
    atoi,
    get_list,
    get_map,
    go_value,
    key_path,
    opt_str,
    string_map,
)
from webhooks.view import ModelView

log = logging.getLogger("quartermaster.webhooks")

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
MAX_WARNINGS = 10
QUOTA_RESERVED = "QuotaReserved"


def impact_lines(
    kind: str, obj: Any, snap: Any, config: Any, now: float, deadline: float | None
) -> list[str]:
    """The engine's what-if on a snapshot (the code behind ``plan --what-if``): admitted
    workloads now over quota, preemptions, pending workloads that now fit or can never
    fit, borrowers that become reclaimable. The seam tests replace."""
    from admission.drivers.impact import impact_of_snapshot

    return impact_of_snapshot(
        snap, kind, obj, config=config, now=now, limit=MAX_WARNINGS, deadline=deadline
    )


class ImpactJob:
    """The impact warnings of one allowed quota edit, as a :class:`Deferred`.

    ``snapshot()`` copies what the what-if needs from the view (dicts of the quota
    objects, a shallow copy per workload) and parses the edited object; the returned
    job runs the what-if (:func:`impact_lines`) with the service configuration.
    """

    __slots__ = ("kind", "new", "view", "config")

    def __init__(self, kind: str, new: JsonObj, view: ModelView, config: Any) -> None:
        self.kind, self.new, self.view, self.config = kind, new, view, config

    def warm(self) -> None:
        import admission.drivers.impact  # noqa: F401 - loaded before the server forks a what-if
        import admission.drivers.whatif  # noqa: F401

    def snapshot(self) -> Callable[[float | None], list[str]]:
        from admission.drivers.whatif import snapshot

        kind, config, view = self.kind, self.config, self.view
        obj = api.parse_model(self.new)
        snap = snapshot(
            flavors=view.flavors,
            cluster_queues=view.cluster_queues,
            cohorts=view.cohorts,
            local_queues=view.local_queues,
            workloads=view.workloads,
            namespace_labels=view.namespace_labels,
            extra_namespaces=(cast(LocalQueue, obj).namespace,) if kind == "LocalQueue" else (),
            admission_checks=view.admission_checks,
        )
        now = time.time()

        def job(deadline: float | None) -> list[str]:
            return impact_lines(kind, obj, snap, config, now, deadline)[:MAX_WARNINGS]

        return job

    def failed(self, why: str) -> list[str]:
        return [f"impact of this edit was not computed: {why}"]


def impact_warnings(
    kind: str, old: JsonObj | None, new: JsonObj, view: ModelView, config: Any = None
) -> list[str]:
    """The impact warnings of an allowed edit, computed here and now (no deadline).

    ``kind`` is the object's kind (ClusterQueue, Cohort, ResourceFlavor, LocalQueue,
    WorkloadPriorityClass), ``old`` is None on CREATE, ``config`` the service
    configuration the what-if's scheduler is built from. The server does not call
    this: it runs the :class:`ImpactJob` off its event loop, within a deadline.
    """
    from admission.drivers.impact import KINDS

    if kind not in KINDS:
        return []
    return ImpactJob(kind, new, view, config).snapshot()(None)


def nothing_to_move(kind: str, operation: str, view: ModelView) -> bool:
    """True when the edit cannot change any workload's outcome, so there is no impact
    to compute: no workload at all, or a create (other than a Cohort's) with none
    pending. A new ClusterQueue, ResourceFlavor or LocalQueue only adds quota or a way
    in, which moves nothing but pending workloads; a new Cohort may put limits on an
    existing implicit cohort, under admitted workloads too."""
    workloads = view.workloads
    if not workloads:
        return True
    if operation != "CREATE" or kind == "Cohort":
        return False
    return not any(wl.admission is None and not wl.finished for wl in workloads.values())


def _impact_job(kind: str, req: AdmissionRequest, ctx: HandlerContext) -> ImpactJob | None:
    from admission.drivers.impact import KINDS

    if kind not in KINDS or nothing_to_move(kind, req.operation, ctx.view):
        return None
    assert req.object is not None
    return ImpactJob(kind, req.object, ctx.view, ctx.config.what_if_config)


# ---------------------------------------------------------------- schema (queues.api.parse)


def schema_problems(doc: JsonObj) -> list[str]:
    """Every schema-rule violation of ``doc`` per ``queues.api.parse``, one "path: message" each."""
    try:
        api.parse_object(doc)
    except api.InputError as exc:
        return [f"{path}: {message}" if path else message for path, message in exc.errors]
    return []


def _name_of(obj: JsonObj) -> str:
    return opt_str(get_map(obj, "", "metadata"), "metadata", "name") or ""


def _decide(
    kind: str,
    req: AdmissionRequest,
    ctx: HandlerContext,
    rules: Callable[[FieldErrors], None] | None = None,
    *,
    warn: bool = True,
) -> Verdict:
    """Webhook-only ``rules`` then the schema rules; impact warnings when allowed."""
    assert req.object is not None
    schema = schema_problems(req.object)
    errs = FieldErrors()
    if rules is not None:
        try:
            rules(errs)
        except MalformedObject:
            if not schema:
                raise
    errs.errors.extend(schema)
    if errs:
        return errs.verdict()
    return allow(deferred=_impact_job(kind, req, ctx) if warn else None)


# ---------------------------------------------------------------- mutating


def _add_resource_in_use_finalizer(req: AdmissionRequest, _ctx: HandlerContext) -> Verdict:
    if req.operation != "CREATE" or req.object is None:
        return allow()
    m = Mutation(req.object)
    m.append_unique(("metadata",), "finalizers", RESOURCE_IN_USE_FINALIZER)
    return allow(m.patch())


def mutate_workload(req: AdmissionRequest, _ctx: HandlerContext) -> Verdict:
    """Kueue drops podSets' minCount only when PartialAdmission is off; it is on."""
    return allow()


# ---------------------------------------------------------------- ClusterQueue, RF, LQ, WPC


def validate_cluster_queue(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    return _decide("ClusterQueue", req, ctx)


def validate_resource_flavor(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    return _decide("ResourceFlavor", req, ctx)


def validate_workload_priority_class(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    return _decide("WorkloadPriorityClass", req, ctx)


def validate_local_queue(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    def rules(errs: FieldErrors) -> None:
        if req.operation == "UPDATE":
            assert req.object is not None and req.old_object is not None
            new_cq = get_map(req.object, "", "spec").get("clusterQueue")
            old_cq = get_map(req.old_object, "", "spec").get("clusterQueue")
            if new_cq != old_cq:
                errs.immutable("spec.clusterQueue", new_cq)

    return _decide("LocalQueue", req, ctx, rules)


# ---------------------------------------------------------------- Topology


def _levels(obj: JsonObj | None) -> list[str]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    levels = spec.get("levels") if isinstance(spec, dict) else None
    if not isinstance(levels, list):
        return []
    return [lvl.get("nodeLabel") for lvl in levels if isinstance(lvl, dict)]  # type: ignore[misc]


def validate_topology(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """Kueue's Topology CEL rules, and on UPDATE the levels transition rule."""

    def rules(errs: FieldErrors) -> None:
        if req.operation == "UPDATE":
            old, new = _levels(req.old_object), _levels(req.object)
            for path, msg in topology_api.topology_update_problems(old, new):
                errs.errors.append(f"{path}: Invalid value: {msg}")

    return _decide("Topology", req, ctx, rules, warn=False)


# ---------------------------------------------------------------- Cohort


def cohort_cycle(name: str, parent: str | None, cohorts: Mapping[str, Cohort]) -> list[str] | None:
    """The chain ``[name, parent, …, name]`` when making ``parent`` the parent of ``name``
    closes a cycle (walking the other cohorts' current parents), else None."""
    chain = [name]
    seen = {name}
    current = parent
    while current:
        chain.append(current)
        if current == name:
            return chain
        if current in seen:  # an existing cycle that does not pass through name
            return None
        seen.add(current)
        node = cohorts.get(current)
        current = node.parent if node is not None else None
    return None


def validate_cohort(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    def rules(errs: FieldErrors) -> None:
        assert req.object is not None
        name = _name_of(req.object) or req.name
        parent = opt_str(get_map(req.object, "", "spec"), "spec", "parentName")
        cycle = cohort_cycle(name, parent, ctx.view.cohorts) if name else None
        if cycle is not None:
            errs.invalid(
                "spec.parentName",
                parent,
                "would create a cycle in the cohort tree: " + " -> ".join(cycle),
            )
        elif name and parent:
            depth = depth_through(name, parent, ctx.view.cohorts)
            if depth > MAX_COHORT_DEPTH:
                errs.invalid(
                    "spec.parentName",
                    parent,
                    f"would make a chain of {depth} Cohorts through this one; at most "
                    f"{MAX_COHORT_DEPTH} are supported (every admission walks the path from "
                    "its ClusterQueue to the root, so the depth multiplies its cost)",
                )

    return _decide("Cohort", req, ctx, rules)


# ---------------------------------------------------------------- Workload


def _has_quota_reservation(wl: JsonObj) -> bool:
    for cond in get_list(get_map(wl, "", "status"), "status", "conditions"):
        if (
            isinstance(cond, dict)
            and cond.get("type") == QUOTA_RESERVED
            and cond.get("status") == "True"
        ):
            return True
    return False


def _pod_sets(wl: JsonObj) -> list[JsonObj]:
    sets = get_list(get_map(wl, "", "spec"), "spec", "podSets")
    for i, ps in enumerate(sets):
        if not isinstance(ps, dict):
            raise MalformedObject(f"spec.podSets[{i}]", "must be an object")
    return sets


def _count_of(ps: JsonObj) -> int:
    count = ps.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _reclaimable(wl: JsonObj) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, rp in enumerate(get_list(get_map(wl, "", "status"), "status", "reclaimablePods")):
        if not isinstance(rp, dict) or not isinstance(rp.get("name"), str):
            raise MalformedObject(f"status.reclaimablePods[{i}]", "must be an object with a name")
        count = rp.get("count", 0)
        out[rp["name"]] = count if isinstance(count, int) else 0
    return out


def _validate_workload(wl: JsonObj, errs: FieldErrors) -> None:
    """The Workload rules ``queues.api.parse`` does not check (reclaimablePods, priority boost)."""
    counts = {ps.get("name", "main"): _count_of(ps) for ps in _pod_sets(wl)}
    for name, count in _reclaimable(wl).items():
        path = key_path("status.reclaimablePods", name)
        if name not in counts:
            errs.not_supported(f"{path}.name", name, list(counts))
        elif count > counts[name]:
            errs.invalid(f"{path}.count", count, f"should be less or equal to {counts[name]}")
    boost = string_map(wl, "annotations").get(PRIORITY_BOOST_ANNOTATION)
    if boost is not None and atoi(boost)[0] is None:
        detail = "must be a valid signed integer"
        if boost == "":
            detail += '; use "0" explicitly for no boost'
        errs.invalid(key_path("metadata.annotations", PRIORITY_BOOST_ANNOTATION), boost, detail)


def _validate_workload_update(
    new: JsonObj, old: JsonObj, errs: FieldErrors, *, by_the_service: bool
) -> None:
    if _has_quota_reservation(old):
        new_sets, old_sets = _pod_sets(new), _pod_sets(old)
        if len(new_sets) != len(old_sets):
            errs.invalid(
                "spec.podSets",
                len(new_sets),
                "field is immutable while the workload has quota reserved",
            )
        else:
            for i, (n, o) in enumerate(zip(new_sets, old_sets, strict=True)):
                if n != o:
                    errs.invalid(f"spec.podSets[{i}]", n.get("name", "main"), "field is immutable")
    if not by_the_service and _has_quota_reservation(new) and _has_quota_reservation(old):
        # the service may lower it: it corrects what the job reports (and undoes edits)
        new_r, old_r = _reclaimable(new), _reclaimable(old)
        for name, count in new_r.items():
            if name in old_r and count < old_r[name]:
                errs.invalid(
                    f"{key_path('status.reclaimablePods', name)}.count",
                    count,
                    f"cannot be less than {old_r[name]}",
                )
        for name in old_r:
            if name not in new_r:
                errs.required(key_path("status.reclaimablePods", name), "cannot be removed")
    new_adm = get_map(new, "", "status").get("admission")
    old_adm = get_map(old, "", "status").get("admission")
    if (
        new_adm is not None
        and old_adm is not None
        and _without_topology(new_adm) != _without_topology(old_adm)
    ):
        errs.immutable("status.admission", new_adm)  # topology assignments may change (TAS)
    new_status, old_status = get_map(new, "", "status"), get_map(old, "", "status")
    cluster = new_status.get("clusterName")
    if old_status.get("clusterName") is None and cluster is not None:
        nominated = old_status.get("nominatedClusterNames") or []
        if not isinstance(nominated, list) or cluster not in nominated:
            errs.invalid(
                "status.clusterName",
                cluster,
                "when setting clusterName it must be one of the nominatedClusterNames",
            )


# Status fields other identities may write: admission-check controllers own their
# checks' states, and an external MultiKueue dispatcher the nominated workers (as in
# Kueue); everything else is the scheduler's record of quota.
_STATUS_OPEN_TO_OTHERS = frozenset({"admissionChecks", "nominatedClusterNames"})


def _service_owned(wl: JsonObj | None, ctx: HandlerContext) -> bool:
    """Whether only the service may change ``wl``'s status (the registry's rule, so
    every kind, present and future, is covered)."""
    return workload_status_is_the_services(wl or {}, ctx.config.frameworks)


def _status_owned_by_the_service(
    new: JsonObj, old: JsonObj, service: str, username: str, errs: FieldErrors
) -> None:
    """Only the service may change a Workload's status (conditions such as Finished,
    requeueState, reclaimablePods...): anyone else with ``workloads/status`` could
    release the quota of a Workload whose pods still run."""
    new_status, old_status = get_map(new, "", "status"), get_map(old, "", "status")
    for field in sorted(set(new_status) | set(old_status)):
        if field in _STATUS_OPEN_TO_OTHERS or new_status.get(field) == old_status.get(field):
            continue
        errs.forbidden(
            f"status.{field}",
            f"can only be changed by the admission service ({service}), not by {go_value(username)}",
        )


def validate_workload(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    def rules(errs: FieldErrors) -> None:
        assert req.object is not None
        new = req.object
        _validate_workload(new, errs)
        old_adm = None
        service = ctx.config.service_account_username
        if req.operation == "UPDATE":
            assert req.old_object is not None
            _validate_workload_update(
                new, req.old_object, errs, by_the_service=req.username == service
            )
            old_adm = get_map(req.old_object, "", "status").get("admission")
        new_adm = get_map(new, "", "status").get("admission")
        if new_adm is not None and old_adm is None and req.username != service:
            errs.forbidden(
                "status.admission",
                f"can only be set by the admission service ({service}), not by {go_value(req.username)}",
            )
        elif (
            req.operation == "UPDATE"
            and req.username != service
            and _service_owned(req.old_object, ctx)
        ):
            assert req.old_object is not None
            _status_owned_by_the_service(new, req.old_object, service, req.username, errs)
            # the cluster's garbage collector removes the reference to a deleted owner
            collectors = ctx.config.garbage_collector_usernames or ()
            if not _service_owned(new, ctx) and req.username not in collectors:
                errs.forbidden(
                    "metadata.ownerReferences",
                    "would hand the Workload's status to another controller; only the "
                    f"admission service ({service}) may, not {go_value(req.username)}",
                )

    return _decide("Workload", req, ctx, rules, warn=False)


def _spec(
    path: str,
    kind: str,
    handler: Callable[[AdmissionRequest, HandlerContext], Verdict],
    mutating: bool,
) -> WebhookSpec:
    return WebhookSpec(path, GROUP, VERSION, kind, handler, mutating, reads_owners_on_create=False)


_PREFIX_V = "/validate-kueue-x-k8s-io-v1beta2-"
_PREFIX_M = "/mutate-kueue-x-k8s-io-v1beta2-"

WEBHOOKS = [
    _spec(_PREFIX_M + "clusterqueue", "ClusterQueue", _add_resource_in_use_finalizer, True),
    _spec(_PREFIX_M + "resourceflavor", "ResourceFlavor", _add_resource_in_use_finalizer, True),
    _spec(_PREFIX_M + "workload", "Workload", mutate_workload, True),
    _spec(_PREFIX_V + "clusterqueue", "ClusterQueue", validate_cluster_queue, False),
    _spec(_PREFIX_V + "cohort", "Cohort", validate_cohort, False),
    _spec(_PREFIX_V + "resourceflavor", "ResourceFlavor", validate_resource_flavor, False),
    _spec(_PREFIX_V + "localqueue", "LocalQueue", validate_local_queue, False),
    _spec(_PREFIX_V + "topology", "Topology", validate_topology, False),
    _spec(
        _PREFIX_V + "workloadpriorityclass",
        "WorkloadPriorityClass",
        validate_workload_priority_class,
        False,
    ),
    _spec(_PREFIX_V + "workload", "Workload", validate_workload, False),
]


def _without_topology(admission: object) -> object:
    """``status.admission`` as Kueue's validateAdmissionUpdate compares it under TAS: the
    podSets' ``topologyAssignment`` and ``delayedTopologyRequest`` may be set or changed
    (a failed node replaced), nothing else; the podSet count must stay."""
    if not isinstance(admission, dict):
        return admission
    psas = admission.get("podSetAssignments")
    if not isinstance(psas, list):
        return admission
    return {
        **admission,
        "podSetAssignments": [
            {
                k: v
                for k, v in p.items()
                if k not in ("topologyAssignment", "delayedTopologyRequest")
            }
            if isinstance(p, dict)
            else p
            for p in psas
        ],
    }
