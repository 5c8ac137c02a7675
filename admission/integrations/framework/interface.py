"""The job-integration interface: what the service needs to know about one job kind.

Kueue turns every job kind it admits into a Workload through one interface,
``jobframework.GenericJob`` (``IsSuspended``, ``Suspend``, ``RunWithPodSetsInfo``,
``RestorePodSetsInfo``, ``Finished``, ``PodSets``, ``IsActive``, ``PodsReady``, ``GVK``)
plus optional ones (``JobWithPriorityClass``, ``JobWithCustomStop``,
``JobWithCustomValidation``, ``ComposableJob`` …), driven by one generic reconciler.
:class:`Integration` is Quartermaster's equivalent: one instance per kind, registered in
:mod:`admission.integrations.registry`; everything that depends on the kind — the informers and their
selectors, the API calls (hence the RBAC), the webhook paths and their rules, the
``plan`` loader, the Workload name — is read from it.

Integrations are pure: they work on the raw dicts of the API (no I/O, no client), and
answer with merge patches the Kubernetes adapter sends. A kind is described by its
*roles* (:class:`Role`): one per podSet of its Workload, with the pod template, where
that template sits in the object, and the pod count. The generic start, restore and stop
patches below work on roles, and so does the Workload composed from them
(:mod:`.composition`), so most kinds only say where their templates are and how they
show suspension and completion.

Sources: Kueue pkg/controller/jobframework/interface.go and reconciler.go.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from admission.integrations.framework.addressing import ApiUse, Resource
from admission.integrations.framework.fields import (
    IntegrationError,
    Obj,
    Path,
    dotted,
    get_path,
    merge_patch,
    meta_of,
    ref_of,
    set_path,
    spec_field,
    string_map,
)
from admission.integrations.framework.podset_info import (
    PodSetInfo,
    merge_info,
    restore_info,
)
from admission.integrations.framework.workload_names import workload_name
from queues.api.conditions import conditions
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.api.topology_request import (
    TopologyAnnotationError,
    pod_set_group_errors,
    topology_annotation_errors,
    topology_request_from_annotations,
)
from queues.pods import PodSpecError, pod_requests
from queues.quantity import QuantityError


@dataclass(slots=True)
class Role:
    """One podSet as the job object defines it.

    ``path`` is where the ``PodTemplateSpec`` sits in the object (keys and list
    indices), so start and restore patches can be computed for any kind;
    ``count_path`` is where the pod count is written back under partial admission
    (``None``: the kind does not support it)."""

    name: str
    count: int
    template: Mapping[str, Any]
    path: Path
    min_count: int | None = None
    count_path: Path | None = None
    #: how many sub-groups (a JobSet replicatedJob's Jobs) the podSet's pods form,
    #: numbered by the kind's ``sub_group_index_label`` (topology ranks)
    sub_group_count: int | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    succeeded: bool
    message: str


@dataclass(frozen=True, slots=True)
class Step:
    """One write of a stop procedure: a merge patch, on the object or a subresource."""

    patch: Obj
    subresource: str | None = None


ReferenceLookup = Callable[[Resource, str | None, str], Mapping[str, Any] | None]
"""(resource, namespace or None, name) -> the object, None when there is none."""


MAX_POD_SETS = 8  # the Workload CRD's podSets maxItems

# --------------------------------------------------------------------------- the interface


class Integration:
    """One job kind (Kueue's ``IntegrationCallbacks`` + ``GenericJob``).

    Subclasses set the class attributes and implement :meth:`roles`,
    :meth:`finished` and :meth:`is_active`; everything else has Kueue's generic
    behaviour and may be overridden.
    """

    #: Kueue's framework name, as ``integrations.frameworks`` lists it
    framework: ClassVar[str]
    resource: ClassVar[Resource]
    #: where ``suspend`` lives (``spec.runPolicy.suspend`` for the Kubeflow kinds)
    suspend_path: ClassVar[tuple[str, ...]] = ("spec", "suspend")
    #: ``reconciler``: "object" — one Workload per object, driven by the generic
    #: reconciler; "pods" — the object is a gang of pods (the pod-group reconciler);
    #: "parent" — an owner of pods admitted through them (a StatefulSet: its webhook
    #: writes the pod group into the pod template; not watched, read up owner chains)
    reconciler: ClassVar[str] = "object"
    #: whether ``plan`` reads the kind's objects (:meth:`plan_workloads` says what it builds)
    planned: ClassVar[bool] = True
    #: whether the Workload's name hashes the object's UID (Kueue's default); a kind
    #: whose pods name their group before the object has a UID says False
    workload_name_uses_uid: ClassVar[bool] = True
    #: verbs beyond list/watch (the informer) that the service uses on the kind
    writes: ClassVar[tuple[tuple[str, str], ...]] = (("patch", ""),)
    #: integrations that must be enabled with this one (Kueue's ImplicitlyEnabledFrameworkNames)
    implies: ClassVar[tuple[str, ...]] = ()
    #: whether the mutating webhook also sees updates (a pod owner's: its templates
    #: follow the object's queue and priority class, as Kueue's ``Default`` on update)
    mutates_on_update: ClassVar[bool] = False
    #: the webhook entries' objectSelector in manifests/ (None: every object of the kind)
    webhook_object_selector: ClassVar[Obj | None] = None
    #: subresources whose writes change what an object of the kind runs on (a pod's
    #: ``resize``): the validating webhook is registered for their UPDATEs too, on every
    #: object of the kind (no objectSelector: a Job's pods name no queue), its handler
    #: decides them (``AdmissionRequest.sub_resource``) with the object's owners read
    guarded_subresources: ClassVar[tuple[str, ...]] = ()
    #: the label numbering the kind's pods (topology-aware placement hands out domains
    #: in its order; Kueue's PodIndexLabel)
    pod_index_label: ClassVar[str | None] = None
    #: other kinds whose objects supply part of an object's podSets (a TrainJob's
    #: TrainingRuntime): watched whole by the service, read by :meth:`resolve`
    references: ClassVar[tuple[Resource, ...]] = ()
    #: the label numbering a pod's sub-group inside a podSet (a JobSet's Job index), with
    #: ``Role.sub_group_count``; ranks are index + sub-group × group size (Kueue's SubGroup)
    sub_group_index_label: ClassVar[str | None] = None

    # -- identity ------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def api_version(self) -> str:
        return self.resource.api_version

    @property
    def lower_kind(self) -> str:
        """How messages name an object of the kind (``job``, ``jobset`` …)."""
        return self.kind.lower()

    def webhook_paths(self) -> tuple[str, str]:
        """Kueue's paths: ``/mutate-<group with dashes>-<version>-<kind>`` and validate."""
        group = self.resource.group.replace(".", "-")
        tail = f"{group}-{self.resource.version}-{self.kind.lower()}"
        return f"/mutate-{tail}", f"/validate-{tail}"

    def api_uses(self) -> tuple[ApiUse, ...]:
        """Every call the service makes on the kind: the informer's list/watch, the get
        of an owner up a chain (:mod:`admission.integrations.ownership`) and the writes."""
        if self.reconciler == "parent":
            return (ApiUse(self.resource, ("get",)),)  # read up a pod's owner chain
        by_sub: dict[str, list[str]] = {"": ["list", "watch", "get"]}
        for verb, sub in self.writes:
            if verb not in by_sub.setdefault(sub, []):
                by_sub[sub].append(verb)
        uses = tuple(ApiUse(self.resource, tuple(v), sub) for sub, v in by_sub.items())
        return uses + tuple(ApiUse(r, ("list", "watch")) for r in self.references)

    def label_selector(self, *, manage_without_queue_name: bool) -> str | None:
        """The informer's label selector: objects that name a queue, unless every
        object is managed (``manageJobsWithoutQueueName``)."""
        return None if manage_without_queue_name else QUEUE_NAME_LABEL

    # -- the object ----------------------------------------------------------------------

    def skip(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object is not Kueue's to manage at all though it names a queue
        (Kueue's ``JobWithSkip``: a RayJob that runs on an existing cluster)."""
        return False

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        """The podSets of ``obj``'s Workload; IntegrationError naming the field on bad input."""
        raise NotImplementedError

    def resolve(self, obj: Mapping[str, Any], lookup: ReferenceLookup) -> Mapping[str, Any]:
        """``obj`` with the objects it references (:attr:`references`) at hand for
        :meth:`roles` and :meth:`run_patch`, read with ``lookup``; IntegrationError
        naming the field when one is missing. The default: ``obj`` itself."""
        return obj

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        node: Any = obj
        for key in self.suspend_path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return node is True

    def suspend_edits(
        self, obj: Mapping[str, Any], labels: Mapping[str, str]
    ) -> list[tuple[tuple[str, ...], str, Any]]:
        """What the mutating webhook sets to hold a new queued object ((path, key,
        value) edits; ``labels``: its labels after the queue defaults): ``suspend``
        true, unless it is suspended already."""
        if self.is_suspended(obj):
            return []
        *parents, leaf = self.suspend_path
        return [(tuple(parents), leaf, True)]

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        raise NotImplementedError

    def pod_group_of(self, pod: Mapping[str, Any]) -> str | None:
        """For a "parent" kind whose pods form several groups (a LeaderWorkerSet's
        groups): the ``pod-group-name`` the pod webhook gives one of its pods, from the
        labels its controller set; None: the template names the group."""
        return None

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        """Whether pods of the object may still be running (the quota of an evicted
        workload is released only once none is)."""
        raise NotImplementedError

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        """Whether all ``count`` admitted pods are ready (waitForPodsReady); None: unknown."""
        return None

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """podSet name -> pods that finished and will not run again, whose quota the
        Workload gives back before the whole object finishes (Kueue's
        ``JobWithReclaimablePods``, written to ``status.reclaimablePods``); ``{}`` for a
        kind that cannot tell."""
        return {}

    def priority_class_name(self, obj: Mapping[str, Any], roles: Sequence[Role]) -> tuple[str, str]:
        """The pod PriorityClass the Workload's priority comes from when no
        WorkloadPriorityClass label is set, and the field it is read from: the first
        podSet's ``priorityClassName`` that is set (Kueue's ``JobWithPriorityClass``)."""
        for role in roles:
            spec = role.template.get("spec") or {}
            name = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
            where = spec_field(role.path, "spec.priorityClassName")
            if name:
                if not isinstance(name, str):
                    raise IntegrationError(
                        f"{self.lower_kind} {ref_of(obj)}: {where}: expected a string, got {name!r}"
                    )
                return name, where
        return "", ""

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        """Field errors of the kind's own webhook rules (beyond the shared ones), as
        ``(path: message)`` lines; the generic rules check podSet count and names."""
        errors: list[str] = []
        try:
            roles = self.roles(new)
        except IntegrationError:
            return errors  # the Workload side reports it; the API server validates shape
        if len(roles) > MAX_POD_SETS:
            errors.append(f"spec: Too many: {len(roles)}: must have at most {MAX_POD_SETS} podSets")
        seen: set[str] = set()
        groups = []
        for role in roles:
            try:
                annotations = template_annotations(self.lower_kind, ref_of(new), role)
            except IntegrationError:
                annotations = {}
            meta_path = spec_field(role.path, "metadata")
            errors += topology_annotation_errors(annotations, path=meta_path, count=role.count)
            try:
                tr = topology_request_from_annotations(
                    annotations, path=meta_path, count=role.count
                )
            except TopologyAnnotationError:
                tr = None
            groups.append((role.name, role.count, tr))
            try:  # what the Workload would count: negative overhead or requests refused
                pod_requests(role.template.get("spec") or {})
            except (QuantityError, PodSpecError) as err:
                errors.append(f"{spec_field(role.path, 'spec')}: Invalid value: {err}")
            where = dotted(role.path)
            if role.name in seen:
                errors.append(
                    f"{where}: Duplicate value: {role.name!r}: podSet names must be unique"
                )
            seen.add(role.name)
            if not _DNS1123_LABEL.fullmatch(role.name):
                errors.append(
                    f"{where}: Invalid value: {role.name!r}: a podSet name must be a DNS-1123 "
                    "label (lower case alphanumerics and '-', at most 63 characters)"
                )
        paths = {r.name: spec_field(r.path, "metadata") for r in roles}
        errors += pod_set_group_errors(groups, paths=paths)
        return errors

    # -- start and stop ------------------------------------------------------------------

    def run_patch(self, obj: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> Obj:
        """Merge patch that unsuspends ``obj`` with each podSet's info merged into its
        template (Kueue's ``RunWithPodSetsInfo`` + ``podset.Merge``)."""
        new = copy.deepcopy(dict(obj))
        set_path(new, self.suspend_path, False)
        for role, info in zip(self.roles(obj), infos, strict=True):
            tmpl = get_path(new, role.path)
            merge_info(tmpl, info)
            if (
                role.count_path is not None
                and role.min_count is not None
                and info.count < role.count
            ):
                set_path(new, role.count_path, info.count)
        return merge_patch(obj, new)

    def restore_patch(self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo]) -> Obj:
        """Merge patch putting back each template's scheduling fields from the
        Workload's copy (Kueue's ``RestorePodSetsInfo``); ``{}`` when nothing differs."""
        new = copy.deepcopy(dict(obj))
        roles = self.roles(obj)
        if len(roles) != len(originals):
            return {}  # podSets changed: the Workload is recreated, nothing to restore
        for role, info in zip(roles, originals, strict=True):
            restore_info(get_path(new, role.path), info)
            if role.count_path is not None and info.min_count is not None:
                set_path(new, role.count_path, info.count)
        return merge_patch(obj, new)

    def stop_step(
        self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo] | None
    ) -> Step | None:
        """The next write that stops ``obj`` (suspended, templates restored), or None
        when it is stopped. Called again on the written object until None, so a
        kind whose API allows the stop only in steps (batch/v1 Job) says so here;
        the generic stop is one patch (Kueue: ``Suspend`` + ``RestorePodSetsInfo``)."""
        new = copy.deepcopy(dict(obj))
        set_path(new, self.suspend_path, True)
        if originals is not None:
            try:
                roles = self.roles(obj)
            except IntegrationError:  # edited into something invalid: suspended as it is
                roles = []
            if len(roles) == len(originals):
                for role, info in zip(roles, originals, strict=True):
                    restore_info(get_path(new, role.path), info)
                    if role.count_path is not None and info.min_count is not None:
                        set_path(new, role.count_path, info.count)
        patch = merge_patch(obj, new)
        return Step(patch) if patch else None

    def plan_workloads(self, obj: Mapping[str, Any]) -> list[tuple[str | None, list[Role]]]:
        """The Workloads ``plan`` builds for ``obj``, offline, as the service would:
        (name, roles) each, None naming the object's own Workload. One by default; a
        kind admitted through its pods builds its pods' Workloads (a Deployment's
        replicas, a LeaderWorkerSet's groups)."""
        return [(None, self.roles(obj))]

    # -- ownership -----------------------------------------------------------------------

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """None when ``child`` (controlled by ``obj``) is one ``obj``'s controller makes,
        covered by ``obj``'s admission; otherwise why not, and ``child`` is queued on its
        own (:mod:`.children`). By default a kind covers no child."""
        from admission.integrations.framework.children import refuse

        return refuse(obj, child)

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        m = meta_of(obj)
        return workload_name(
            owner_name=str(m.get("name") or ""),
            owner_uid=str(m.get("uid") or "") if self.workload_name_uses_uid else "",
            kind=self.kind,
            group=self.resource.group,
        )


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def template_annotations(kind_noun: str, ref: str, role: Role) -> dict[str, str]:
    tmeta = role.template.get("metadata")
    if not isinstance(tmeta, Mapping):
        return {}
    return string_map(
        tmeta.get("annotations"), kind_noun, ref, spec_field(role.path, "metadata.annotations")
    )


def finished_by_conditions(
    obj: Mapping[str, Any], *, succeeded: Iterable[str], failed: Iterable[str]
) -> Finished | None:
    """A Finished from the first True condition among ``succeeded``/``failed`` types."""
    ok, bad = set(succeeded), set(failed)
    for c in conditions(obj):
        if c.get("status") != "True":
            continue
        if c.get("type") in ok:
            return Finished(True, str(c.get("message") or ""))
        if c.get("type") in bad:
            return Finished(False, str(c.get("message") or c.get("reason") or ""))
    return None
