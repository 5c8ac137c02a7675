"""The job-integration interface: what the service needs to know about one job kind.

Kueue turns every job kind it admits into a Workload through one interface,
``jobframework.GenericJob`` (``IsSuspended``, ``Suspend``, ``RunWithPodSetsInfo``,
``RestorePodSetsInfo``, ``Finished``, ``PodSets``, ``IsActive``, ``PodsReady``, ``GVK``)
plus optional ones (``JobWithPriorityClass``, ``JobWithCustomStop``,
``JobWithCustomValidation``, ``ComposableJob`` …), driven by one generic reconciler.
:class:`Integration` is Quartermaster's equivalent: one instance per kind, registered in
:mod:`.registry`; everything that depends on the kind — the informers and their
selectors, the API calls (hence the RBAC), the webhook paths and their rules, the
``plan`` loader, the Workload name — is read from it.

Integrations are pure: they work on the raw dicts of the API (no I/O, no client), and
answer with merge patches the Kubernetes adapter sends. A kind is described by its
*roles* (:class:`Role`): one per podSet of its Workload, with the pod template, where
that template sits in the object, and the pod count. The generic parts below
(podSets, the Workload body, start and restore patches) work on roles, so most kinds
only say where their templates are and how they show suspension and completion.

Sources: Kueue pkg/controller/jobframework/interface.go, reconciler.go
(``ConstructWorkload``, ``EquivalentToWorkload``, ``ExtractPriority``),
pkg/podset/podset.go (``PodSetInfo``, ``Merge``, ``RestorePodSpec``) and
workload_names.go.
"""

from __future__ import annotations

import copy
import hashlib
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import quote

from queues.api import labels
from queues.api.conditions import conditions
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import PODSET_UNCONSTRAINED_TOPOLOGY, TOPOLOGY_GATE
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.api.labels import WORKLOAD as WORKLOAD_ANNOTATION
from queues.api.topology_request import (
    TopologyAnnotationError,
    pod_set_group_errors,
    topology_annotation_errors,
    topology_request_from_annotations,
    topology_request_json,
)
from queues.model import (
    PodSet,
    PriorityClass,
    ResourceFlavor,
    Toleration,
    TopologyRequest,
    Workload,
)
from queues.pods import PodSpecError, pod_requests, podset_from_template
from queues.quantity import QuantityError
from queues.times import aware_seconds, parse_rfc3339

Obj = dict[str, Any]
Path = tuple[str | int, ...]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
JOB_UID_LABEL = labels.JOB_UID
OWNER_GVK_ANNOTATION = labels.JOB_OWNER_GVK
OWNER_NAME_ANNOTATION = labels.JOB_OWNER_NAME
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
POD_PRIORITY_CLASS = "PriorityClass"
MAX_POD_SETS = 8  # the Workload CRD's podSets maxItems
MAX_WORKLOAD_NAME_LENGTH = 253  # 63 with Kueue's alpha ShortWorkloadNames gate
_HASH_LENGTH = 5
_INT32_MAX = 2**31 - 1

# Namespace for UIDs invented for objects that carry none (files, tests), so that the
# derived Workload names stay the same from run to run.
_FAKE_UID_NAMESPACE = uuid.UUID("6f1c1d0e-8a53-4b8e-9a52-7b1f4c0d9e21")
_RFC3339_RE = re.compile(
    r"(?P<base>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]+))?(?P<tz>[Zz]|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)


class IntegrationError(ValueError):
    """An object cannot be turned into a Workload; the message names the object and field."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where it lives and how it is addressed (the job kinds', and
    every other resource ``admission.kube`` reads or writes)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path (``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]``)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base

    def key_of(self, obj: Mapping[str, Any]) -> str:
        """``namespace/name`` for namespaced resources, ``name`` otherwise."""
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        return sys.intern(f"{meta.get('namespace') or ''}/{name}") if self.namespaced else name


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


@dataclass(slots=True)
class PodSetInfo:
    """What an admission injects into one podSet's pod template (Kueue's PodSetInfo):
    the admitted count, the flavors' node selector and tolerations, our labels and
    annotations, and scheduling gates (a TAS podSet's pods wait behind
    ``kueue.x-k8s.io/topology`` for the ungater to give each its domain)."""

    name: str
    count: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Obj] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    min_count: int | None = None  # the podSet's minCount: its count is restored on stop
    annotations: dict[str, str] = field(default_factory=dict)
    scheduling_gates: list[str] = field(default_factory=list)


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


@dataclass(frozen=True, slots=True)
class ApiUse:
    """A verb on a resource (or one of its subresources) an integration needs."""

    resource: Resource
    verbs: tuple[str, ...]
    subresource: str = ""


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
    def what(self) -> str:
        """How messages name an object of the kind (``job``, ``jobset`` …)."""
        return self.kind.lower()

    def webhook_paths(self) -> tuple[str, str]:
        """Kueue's paths: ``/mutate-<group with dashes>-<version>-<kind>`` and validate."""
        group = self.resource.group.replace(".", "-")
        tail = f"{group}-{self.resource.version}-{self.kind.lower()}"
        return f"/mutate-{tail}", f"/validate-{tail}"

    def api_uses(self) -> tuple[ApiUse, ...]:
        """Every call the service makes on the kind: the informer's list/watch, the get
        of an owner up a chain (:mod:`.ownership`) and the writes."""
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
                        f"{self.what} {ref_of(obj)}: {where}: expected a string, got {name!r}"
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
                annotations = template_annotations(self.what, ref_of(new), role)
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


# --------------------------------------------------------------------------- Workloads


def workload_name(
    *, owner_name: str, owner_uid: str, kind: str = "Job", group: str = "batch"
) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK``.

    ``<lower(kind)>-<owner_name>`` truncated so the whole name fits 253 characters,
    then ``-`` and the first 5 hex digits of sha1("<kind>\\n<group>\\n<name>\\n<uid>")
    (the kind keeps its case in the hash). A truncation that ends on a ``.`` drops it
    (Kueue keeps it, and ``x.-1a2b3`` is no DNS subdomain: the Workload could never be
    created).
    """
    digest = hashlib.sha1(usedforsecurity=False)
    for i, part in enumerate((kind, group, owner_name, owner_uid)):
        if i:
            digest.update(b"\n")
        digest.update(part.encode())
    prefix = f"{kind.lower()}-{owner_name}"
    prefix = prefix[: MAX_WORKLOAD_NAME_LENGTH - 1 - _HASH_LENGTH].rstrip(".")
    return f"{prefix}-{digest.hexdigest()[:_HASH_LENGTH]}"


def pod_set_model(
    what: str,
    ref: str,
    role: Role,
    *,
    pod_index_label: str | None = None,
    sub_group_index_label: str | None = None,
) -> PodSet:
    """The engine's podSet for a role: per-pod requests and placement from the
    template, and the topology request its annotations make — the one place
    pod-template annotations become a ``topologyRequest``, for every kind."""
    spec = role.template.get("spec")
    if spec is None:
        spec = {}
    elif not isinstance(spec, Mapping):
        raise IntegrationError(
            f"{what} {ref}: {spec_field(role.path, 'spec')}: expected an object, got {type(spec).__name__}"
        )
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise IntegrationError(
            f"{what} {ref}: {spec_field(role.path, 'spec.containers')}: at least one container is required"
        )
    try:
        pod_set = podset_from_template(
            name=role.name, count=role.count, template=role.template, min_count=role.min_count
        )
    except (QuantityError, PodSpecError) as err:
        raise IntegrationError(f"{what} {ref}: {spec_field(role.path, 'spec')}: {err}") from err
    annotations = template_annotations(what, ref, role)
    if annotations:
        try:
            pod_set.topology = topology_request_from_annotations(
                annotations,
                path=spec_field(role.path, "metadata"),
                count=role.count,
                pod_index_label=pod_index_label,
                sub_group=(
                    (sub_group_index_label, role.sub_group_count)
                    if sub_group_index_label is not None and role.sub_group_count is not None
                    else None
                ),
            )
        except TopologyAnnotationError as err:
            raise IntegrationError(f"{what} {ref}: {err}") from err
    return pod_set


def template_annotations(what: str, ref: str, role: Role) -> dict[str, str]:
    tmeta = role.template.get("metadata")
    if not isinstance(tmeta, Mapping):
        return {}
    return string_map(
        tmeta.get("annotations"), what, ref, spec_field(role.path, "metadata.annotations")
    )


def workload_model(
    integration: Integration,
    obj: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    roles: Sequence[Role] | None = None,
    name: str | None = None,
) -> Workload:
    """The Workload Kueue creates for ``obj`` (the engine's model): one podSet per
    role, queue from the ``queue-name`` label, priority from :func:`workload_priority`.
    Raises IntegrationError naming the object and the field on bad input."""
    what = integration.what
    if not isinstance(obj, Mapping):
        raise IntegrationError(f"{what}: expected an object, got {type(obj).__name__}")
    metadata = as_object(obj.get("metadata"), what, "<unknown>", "metadata")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise IntegrationError(
            f"{what} <unknown>: metadata.namespace: expected a string, got {namespace!r}"
        )
    obj_name = metadata.get("name")
    if not isinstance(obj_name, str) or not obj_name:
        raise IntegrationError(
            f"{what} {namespace}/<unnamed>: metadata.name: required, got {obj_name!r}"
        )
    ref = f"{namespace}/{obj_name}"
    for key, expected in (("kind", integration.kind), ("apiVersion", integration.api_version)):
        if key in obj and obj[key] != expected:
            raise IntegrationError(f"{what} {ref}: {key}: expected {expected!r}, got {obj[key]!r}")
    labels = string_map(metadata.get("labels"), what, ref, "metadata.labels")
    annotations = string_map(metadata.get("annotations"), what, ref, "metadata.annotations")
    uid = metadata.get("uid")
    if uid is None or uid == "":
        uid = str(uuid.uuid5(_FAKE_UID_NAMESPACE, ref))
    elif not isinstance(uid, str):
        raise IntegrationError(f"{what} {ref}: metadata.uid: expected a string, got {uid!r}")
    creation_time = creation_time_of(metadata.get("creationTimestamp"), what, ref)
    if roles is None:
        roles = integration.roles(obj)
    if not roles:
        raise IntegrationError(f"{what} {ref}: spec: no podSets (nothing to run)")
    pod_sets = [
        pod_set_model(
            what,
            ref,
            role,
            pod_index_label=integration.pod_index_label,
            sub_group_index_label=integration.sub_group_index_label,
        )
        for role in roles
    ]
    pc_name, pc_field = integration.priority_class_name(obj, roles)
    priority_class, kind, priority = workload_priority(
        labels=labels,
        priority_class_name=pc_name,
        what=what,
        ref=ref,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
        field_name=pc_field,
    )
    if name is None:
        name = workload_name(owner_name=obj_name,
                             owner_uid=uid if integration.workload_name_uses_uid else "",
                             kind=integration.kind, group=integration.resource.group)  # fmt: skip
    return Workload(
        namespace=namespace,
        name=name,
        pod_sets=pod_sets,
        queue_name=labels.get(QUEUE_NAME_LABEL, ""),
        priority=priority,
        priority_class=priority_class,
        priority_class_kind=kind,
        uid=uid,
        creation_time=creation_time,
        labels=labels,
        annotations=annotations,
    )


SLIM_DIGEST = "x-quartermaster-digest"
"""Key of a pod template the service's informers slimmed (admission/kube/watch/slim.py): the
digest of the whole template. Carried into the Workload body built from it, which is
then compared with the stored Workload, never written."""


def pod_set_json(role: Role, topology: TopologyRequest | None = None) -> Obj:
    """A Workload ``spec.podSets[]`` entry: the template's labels, annotations and spec,
    and the ``topologyRequest`` its annotations make (``pod_set_model``'s)."""
    tmeta = role.template.get("metadata") or {}
    pod_template: Obj = {"spec": copy.deepcopy(dict(role.template.get("spec") or {}))}
    kept = {k: copy.deepcopy(tmeta[k]) for k in ("labels", "annotations") if tmeta.get(k)}
    if kept:
        pod_template["metadata"] = kept
    if SLIM_DIGEST in role.template:
        pod_template[SLIM_DIGEST] = role.template[SLIM_DIGEST]
    out: Obj = {"name": role.name, "count": role.count, "template": pod_template}
    if role.min_count is not None:
        out["minCount"] = role.min_count
    if topology is not None:
        out["topologyRequest"] = topology_request_json(topology)
    return out


def workload_spec(wl: Workload, pod_sets: list[Obj]) -> Obj:
    """A Workload's ``spec``: podSets, queue, priority and the priority class it came from."""
    return spec_json(
        pod_sets,
        queue_name=wl.queue_name,
        priority=wl.priority,
        priority_class=wl.priority_class,
        priority_class_kind=wl.priority_class_kind,
    )


def spec_json(
    pod_sets: list[Obj],
    *,
    queue_name: str,
    priority: int,
    priority_class: str | None,
    priority_class_kind: str | None,
) -> Obj:
    spec: Obj = {"podSets": pod_sets, "priority": priority}
    spec.update({"queueName": queue_name} if queue_name else {})  # omitempty: "" is invalid
    if priority_class:
        group = (
            "scheduling.k8s.io" if priority_class_kind == POD_PRIORITY_CLASS else "kueue.x-k8s.io"
        )
        spec["priorityClassRef"] = {
            "group": group,
            "kind": priority_class_kind or WORKLOAD_PRIORITY_CLASS,
            "name": priority_class,
        }
    return spec


def workload_body(
    integration: Integration, obj: Mapping[str, Any], wl: Workload, roles: Sequence[Role]
) -> Obj:
    """The Workload object Kueue's reconciler creates for ``obj``: owned by it
    (controller reference, ``job-uid`` label, owner annotations)."""
    m = meta_of(obj)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": wl.name,
            "namespace": m.get("namespace") or "default",
            "labels": {JOB_UID_LABEL: str(m.get("uid") or "")},
            "annotations": {
                OWNER_GVK_ANNOTATION: f"{integration.api_version}, Kind={integration.kind}",
                OWNER_NAME_ANNOTATION: str(m.get("name") or ""),
            },
            "ownerReferences": [
                {
                    "apiVersion": integration.api_version,
                    "kind": integration.kind,
                    "name": m.get("name"),
                    "uid": m.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": workload_spec(
            wl, [pod_set_json(r, ps.topology) for r, ps in zip(roles, wl.pod_sets, strict=True)]
        ),
    }


def compose(
    integration: Integration,
    obj: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> tuple[Workload, Obj]:
    """The Workload for ``obj``: the engine's model and the API object Kueue creates."""
    roles = integration.roles(obj)
    wl = workload_model(
        integration,
        obj,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
        roles=roles,
    )
    return wl, workload_body(integration, obj, wl, roles)


def workload_priority(
    *,
    labels: Mapping[str, str],
    priority_class_name: str,
    what: str,
    ref: str,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    field_name: str = "spec.template.spec.priorityClassName",
) -> tuple[str | None, str | None, int]:
    """Kueue's ``ExtractPriority``: (class name, class kind, priority value) from the
    WorkloadPriorityClass label, else the pod PriorityClass, else the lowest global
    default PriorityClass, else 0."""
    wpc_name = labels.get(PRIORITY_CLASS_LABEL, "")
    if wpc_name:
        wpc = workload_priority_classes.get(wpc_name)
        if wpc is None:
            raise IntegrationError(
                f'{what} {ref}: metadata.labels["{PRIORITY_CLASS_LABEL}"]: '
                f"WorkloadPriorityClass {wpc_name!r} not found (WorkloadPriorityClassNotFound)"
            )
        return wpc.name, WORKLOAD_PRIORITY_CLASS, wpc.value
    if priority_class_name:
        pc = priority_classes.get(priority_class_name)
        if pc is None:
            raise IntegrationError(
                f"{what} {ref}: {field_name}: PriorityClass {priority_class_name!r} not found"
            )
        return pc.name, POD_PRIORITY_CLASS, pc.value
    # Several global defaults can exist after a race; Kueue takes the lowest value.
    defaults = [pc for pc in priority_classes.values() if pc.global_default]
    if defaults:
        pc = min(defaults, key=lambda p: (p.value, p.name))
        return pc.name, POD_PRIORITY_CLASS, pc.value
    return None, None, 0


# --------------------------------------------------------------------------- pod set infos


def toleration_json(t: Toleration) -> Obj:
    out: Obj = {}
    if t.key:
        out["key"] = t.key
    if t.operator:
        out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def flavor_info(name: str, count: int, flavors: Iterable[ResourceFlavor]) -> PodSetInfo:
    """The PodSetInfo of an admitted podSet (Kueue's ``podset.FromAssignment``): the
    flavors' node labels and tolerations, and the podset label."""
    info = PodSetInfo(name=name, count=count, labels={PODSET_LABEL: name})
    for flv in flavors:
        info.node_selector.update(flv.node_labels)
        for t in flv.tolerations:
            tj = toleration_json(t)
            if tj not in info.tolerations:
                info.tolerations.append(tj)
    return info


TAS_ANNOTATIONS = (WORKLOAD_ANNOTATION, PODSET_UNCONSTRAINED_TOPOLOGY)
"""The pod-template annotations :func:`tas_info` adds (removed again on stop)."""


def tas_info(info: PodSetInfo, *, wl_name: str, pod_set: Mapping[str, Any]) -> PodSetInfo:
    """Add to an admitted podSet's info what a topology assignment needs (Kueue's
    ``FromAssignment`` under TAS): the ``kueue.x-k8s.io/topology`` scheduling gate, so
    each pod waits for the ungater to give it its domain's node selector; the
    ``kueue.x-k8s.io/workload`` annotation naming the Workload its pods belong to; and,
    for a podSet that asked for no topology (implicit TAS), the unconstrained
    annotation. ``pod_set`` is the Workload's ``spec.podSets[]`` entry. In place."""
    tr = pod_set.get("topologyRequest") or {}
    if not any(tr.get(k) is not None for k in ("required", "preferred", "unconstrained")):
        info.annotations[PODSET_UNCONSTRAINED_TOPOLOGY] = "true"
    info.annotations[WORKLOAD_ANNOTATION] = wl_name
    if TOPOLOGY_GATE not in info.scheduling_gates:
        info.scheduling_gates.append(TOPOLOGY_GATE)
    return info


def original_info(pod_set: Mapping[str, Any]) -> PodSetInfo:
    """The PodSetInfo of a Workload ``spec.podSets[]`` entry: the original template's
    scheduling fields (Kueue's ``podset.FromPodSet``), to restore on stop."""
    tmpl = pod_set.get("template") or {}
    tspec = tmpl.get("spec") or {}
    tmeta = tmpl.get("metadata") or {}
    return PodSetInfo(
        name=str(pod_set.get("name") or ""),
        count=int(pod_set.get("count") or 0),
        node_selector=dict(tspec.get("nodeSelector") or {}),
        tolerations=[dict(t) for t in tspec.get("tolerations") or [] if isinstance(t, Mapping)],
        labels=dict(tmeta.get("labels") or {}),
        min_count=pod_set.get("minCount") if isinstance(pod_set.get("minCount"), int) else None,
        annotations=dict(tmeta.get("annotations") or {}),
        scheduling_gates=[
            str(g["name"])
            for g in tspec.get("schedulingGates") or []
            if isinstance(g, Mapping) and "name" in g
        ],
    )


def merge_info(template: Obj, info: PodSetInfo) -> None:
    """``podset.Merge``: add the info's labels, annotations, node selector, tolerations
    and scheduling gates to a PodTemplateSpec (in place; none duplicated)."""
    tmeta = template.setdefault("metadata", {})
    if info.labels:
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **info.labels}
    if info.annotations:
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **info.annotations}
    tspec = template.setdefault("spec", {})
    gates = [g for g in tspec.get("schedulingGates") or [] if isinstance(g, dict)]
    have = {g.get("name") for g in gates}
    new_gates = [{"name": g} for g in info.scheduling_gates if g not in have]
    if new_gates:
        tspec["schedulingGates"] = gates + new_gates
    if info.node_selector:
        tspec["nodeSelector"] = {**(tspec.get("nodeSelector") or {}), **info.node_selector}
    tolerations = [t for t in tspec.get("tolerations") or [] if isinstance(t, dict)]
    added = [t for t in info.tolerations if t not in tolerations]
    if added:
        tspec["tolerations"] = tolerations + added


def restore_info(template: Obj, info: PodSetInfo) -> None:
    """``podset.RestorePodSpec``: the template's labels, annotations, node selector,
    tolerations and scheduling gates become the original's again (in place)."""
    tmeta = template.setdefault("metadata", {})
    for mkey, mwant in (("labels", info.labels), ("annotations", info.annotations)):
        if dict(tmeta.get(mkey) or {}) != mwant:
            if mwant:
                tmeta[mkey] = dict(mwant)
            else:
                tmeta.pop(mkey, None)
    if not tmeta:
        template.pop("metadata", None)
    tspec = template.setdefault("spec", {})
    gates = [{"name": g} for g in info.scheduling_gates]
    for key, want in (
        ("nodeSelector", info.node_selector),
        ("tolerations", info.tolerations),
        ("schedulingGates", gates),
    ):
        if (tspec.get(key) or type(want)()) != want:
            if want:
                tspec[key] = copy.deepcopy(want)
            else:
                tspec.pop(key, None)


# --------------------------------------------------------------------------- raw dicts


def meta_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    m = (obj or {}).get("metadata")
    return m if isinstance(m, Mapping) else {}


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``metav1.GetControllerOf``: the owner reference with ``controller: true``."""
    refs = meta_of(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def ref_of(obj: Mapping[str, Any] | None) -> str:
    m = meta_of(obj)
    return f"{m.get('namespace') or 'default'}/{m.get('name') or '<unnamed>'}"


def spec_field(path: Path, rest: str) -> str:
    """The field ``rest`` (``spec.containers`` …) of the pod template at ``path``."""
    return f"{dotted(path)}.{rest}" if path else rest


def dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def get_path(obj: Any, path: Path) -> Any:
    node = obj
    for part in path:
        node = node[part]
    return node


def set_path(obj: Obj, path: Sequence[str | int], value: Any) -> None:
    node: Any = obj
    for part in path[:-1]:
        if isinstance(part, str) and not isinstance(node.get(part), (dict, list)):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def merge_patch(old: Any, new: Any) -> Obj:
    """The RFC 7386 merge patch taking ``old`` to ``new`` (lists are replaced whole)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        raise TypeError("merge_patch compares two objects")
    out: Obj = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                out[key] = sub
        else:
            out[key] = copy.deepcopy(value)
    return out


_MISSING = object()


def apply_merge_patch(obj: Any, patch: Any) -> Any:
    """``obj`` with the RFC 7386 merge patch applied, as the API server applies it."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(obj) if isinstance(obj, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


def as_object(value: Any, what: str, ref: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IntegrationError(
            f"{what} {ref}: {where}: expected an object, got {type(value).__name__}"
        )
    return value


def string_map(value: Any, what: str, ref: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, val in as_object(value, what, ref, where).items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise IntegrationError(
                f"{what} {ref}: {where}: keys and values must be strings, got {key!r}: {val!r}"
            )
        out[key] = val
    return out


def count_field(value: Any, what: str, ref: str, where: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise IntegrationError(
            f"{what} {ref}: {where}: must be an integer between 0 and {_INT32_MAX}, got {value!r}"
        )
    return value


def template_at(obj: Mapping[str, Any], path: Path, what: str) -> Mapping[str, Any]:
    """The PodTemplateSpec at ``path`` (an object), IntegrationError when missing."""
    node: Any = obj
    for i, part in enumerate(path):
        ok = isinstance(node, list) if isinstance(part, int) else isinstance(node, Mapping)
        if (
            not ok
            or (isinstance(part, int) and part >= len(node))
            or (isinstance(part, str) and node.get(part) is None)
        ):
            raise IntegrationError(f"{what} {ref_of(obj)}: {dotted(path[: i + 1])}: required")
        node = node[part]
    if not isinstance(node, Mapping):
        raise IntegrationError(
            f"{what} {ref_of(obj)}: {dotted(path)}: expected an object, got {type(node).__name__}"
        )
    return node


def creation_time_of(value: Any, what: str, ref: str) -> float:
    where = "metadata.creationTimestamp"
    if value is None:
        return 0.0
    if isinstance(value, datetime):
        return aware_seconds(value)
    if not isinstance(value, str):
        raise IntegrationError(f"{what} {ref}: {where}: expected an RFC 3339 string, got {value!r}")
    match = _RFC3339_RE.fullmatch(value)
    if match is None:
        raise IntegrationError(f"{what} {ref}: {where}: not an RFC 3339 timestamp: {value!r}")
    tz = match["tz"]
    iso = f"{match['base']}T{match['time']}{'+00:00' if tz in 'Zz' else tz}"
    try:
        whole = parse_rfc3339(iso)
    except ValueError as err:
        raise IntegrationError(
            f"{what} {ref}: {where}: not a valid timestamp: {value!r} ({err})"
        ) from err
    frac = float(f"0.{match['frac']}") if match["frac"] else 0.0
    return whole.timestamp() + frac


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
