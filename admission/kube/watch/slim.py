"""What the informers keep of each Job, Workload and Pod: the fields the service reads.

A cluster's backlog is mostly pod templates: every suspended Job carries its own image,
arguments, environment and volumes (~1.5 KB of JSON, 5-10 KB as Python dicts), its
Workload carries a copy, and none of it is read to schedule. Kept in full, 70,000
pending Jobs would push every replica past a 1 GiB limit while using no quota. So the
informers of the three kinds that come in large numbers store a *slim* object:

* ``metadata``: name, namespace, uid, resourceVersion, generation, timestamps,
  finalizers, ownerReferences, and only the labels and annotations of the domains the
  service reads (``*kueue.x-k8s.io/…``, ``*quartermaster.io/…``) — no managedFields, no
  ``last-applied-configuration``;
* every pod template keeps what admission reads (per container: name, resources and,
  for init containers, restartPolicy; pod-level resources, overhead, nodeSelector,
  required node affinity, tolerations, priorityClassName, resourceClaims) and its kept
  labels and annotations, plus :data:`DIGEST`, a 64-bit digest of the template it replaced, so a
  changed image or environment is still noticed (``objects.workload_spec_drift``);
* the rest of ``spec`` and ``status`` as they were (a Job's ``selector`` excepted); a
  ``Finished`` Workload keeps only its queue name and conditions.

Stored objects are then *packed* (:class:`Slimmer.pack`): the parts that repeat across
objects (the slimmed template specs and metadata, condition messages) are interned
once and referenced, the rest is one compact JSON ``bytes``, deflated against a
dictionary of the kind's first records (:mod:`.packing`). A slim pending Job
costs ~200 bytes instead of ~10 KB. ``Informer.get`` unpacks a fresh dict on each call; the
interned parts are shared between objects and must never be modified in place (no
code here does: every write computes a new body).

Whatever needs the whole object — building a Workload from its Job or pods, patching a
Workload's template after its Job changed — asks ``Informer.full(key)``, which returns
the last full version seen (a small recent-object buffer) or reads it from the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from admission.kube.digest import DIGEST, template_digest
from admission.kube.watch.packing import Interner, RecordDeflater, pack_json, unpack_json
from queues.api import labels

Obj = dict[str, Any]
Path = tuple[str, ...]  # "*" stands for every element of a list

KEPT_DOMAINS = ("kueue.x-k8s.io", "quartermaster.io")
"""Label and annotation keys kept on slim objects: those whose prefix is one of these
domains or a subdomain of one (``kueue.x-k8s.io/queue-name``,
``provreq.kueue.x-k8s.io/…``)."""

_META_KEYS = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "ownerReferences",
)
_CONTAINER_KEYS = ("name", "resources", "restartPolicy")
_POD_SPEC_KEYS = (
    "resources",
    "overhead",
    "nodeSelector",
    "tolerations",
    "priorityClassName",
    "priority",
    "runtimeClassName",
    "schedulingGates",  # a TAS podSet's template carries the topology gate while it runs
    "resourceClaims",  # DRA devices count against quota (queues.dra)
)


_UNREAD = frozenset(
    {
        # written on Workloads for Kueue's tools; the ownerReference says the same
        labels.JOB_OWNER_GVK,
        labels.JOB_OWNER_NAME,
    }
)


def kept_key(key: Any) -> bool:
    if not isinstance(key, str) or "/" not in key or key in _UNREAD:
        return False
    domain = key.split("/", 1)[0]
    return any(domain == d or domain.endswith("." + d) for d in KEPT_DOMAINS)


def _kept_map(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    kept = {k: v for k, v in value.items() if kept_key(k)}
    return kept or None


def slim_metadata(meta: Any) -> Obj:
    if not isinstance(meta, Mapping):
        return {}
    out: Obj = {k: meta[k] for k in _META_KEYS if meta.get(k) is not None}
    for key in ("labels", "annotations"):
        kept = _kept_map(meta.get(key))
        if kept:
            out[key] = kept
    return out


def _slim_containers(value: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(value, list):
        return value
    return [
        {k: c[k] for k in fields if c.get(k) is not None} if isinstance(c, Mapping) else c
        for c in value
    ]


def slim_pod_spec(spec: Any, *, container_fields: tuple[str, ...] = _CONTAINER_KEYS,
                  keep: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """The part of a PodSpec that admission reads (``queues.pods``), plus ``keep``."""
    if not isinstance(spec, Mapping):
        return spec
    out: Obj = {}
    for key in ("initContainers", "containers"):
        if key in spec:
            out[key] = _slim_containers(spec[key], container_fields)
    for key in (*_POD_SPEC_KEYS, *keep):
        if spec.get(key) is not None:
            out[key] = spec[key]
    if "affinity" in keep:
        return out
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    if required is not None:
        out["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return out


def without_digests(obj: Obj) -> Obj:
    """``obj`` (a Workload) without :data:`DIGEST` in its podSet templates, for parsers
    that refuse unknown fields; unchanged (the same object) when it has none."""
    pod_sets = (obj.get("spec") or {}).get("podSets")
    if not isinstance(pod_sets, list) or not any(
        isinstance(p, dict) and DIGEST in (p.get("template") or {}) for p in pod_sets
    ):
        return obj
    out = _copy_along(obj, ("spec", "podSets", "*", "template"))
    for container, key in list(_get_all(out, ("spec", "podSets", "*", "template"))):
        if isinstance(container[key], dict):
            container[key] = {k: v for k, v in container[key].items() if k != DIGEST}
    return out


def slim_template(template: Any, **spec_options: Any) -> Any:
    """A PodTemplateSpec cut to what admission reads, with the digest of the original."""
    if not isinstance(template, Mapping):
        return template
    if DIGEST in template:
        return template  # already slim
    out: Obj = {"spec": slim_pod_spec(template.get("spec") or {}, **spec_options)}
    meta = template.get("metadata")
    if isinstance(meta, Mapping):
        kept = {k: m for k in ("labels", "annotations") if (m := _kept_map(meta.get(k)))}
        if kept:
            out["metadata"] = kept
    out[DIGEST] = template_digest(template)
    return out


# -- walking paths ----------------------------------------------------------------------------


def _get_all(obj: Any, path: Path) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value at ``path`` that exists, in document order."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                if rest:
                    yield from _get_all(item, rest)
                else:
                    yield obj, i
        return
    if not isinstance(obj, dict) or head not in obj:
        return
    if rest:
        yield from _get_all(obj[head], rest)
    else:
        yield obj, head


def _copy_along(obj: Any, path: Path) -> Any:
    """A copy of ``obj`` whose containers along ``path`` are new (the rest shared)."""
    if not path:
        return obj
    head, rest = path[0], path[1:]
    if head == "*":
        if not isinstance(obj, list):
            return obj
        return [_copy_along(item, rest) for item in obj]
    if not isinstance(obj, dict) or head not in obj:
        return obj
    out = dict(obj)
    out[head] = _copy_along(obj[head], rest)
    return out


# -- slimmers -----------------------------------------------------------------------------------


class Slimmer:
    """Slim, pack and unpack one kind's objects (see the module docstring).

    ``templates``: paths of the kind's PodTemplateSpecs; ``spec_drop``: top-level spec
    keys never read; ``lift``: paths of values interned and stored by reference."""

    def __init__(
        self,
        *,
        templates: Iterable[Path] = (),
        spec_drop: Iterable[str] = (),
        lift: Iterable[Path] = (),
        spec_options: Mapping[str, Any] | None = None,
        interner: Interner | None = None,
    ) -> None:
        self.templates = tuple(templates)
        self.spec_drop = frozenset(spec_drop)
        self.lift = tuple(lift)
        self.spec_options = dict(spec_options or {})
        self.interner = interner or Interner()
        self.deflater = RecordDeflater()

    def slim(self, obj: Obj) -> Obj:
        """The slim copy of a full object (slimming a slim one changes nothing)."""
        out: Obj = {k: v for k, v in obj.items() if k not in ("metadata", "spec")}
        out["metadata"] = slim_metadata(obj.get("metadata"))
        spec = obj.get("spec")
        if isinstance(spec, Mapping):
            out["spec"] = {k: v for k, v in spec.items() if k not in self.spec_drop}
        elif spec is not None:
            out["spec"] = spec
        for path in self.templates:
            out = _copy_along(out, path)
            for container, key in list(_get_all(out, path)):
                container[key] = slim_template(container[key], **self.spec_options)
        return self._share(out)

    def __call__(self, obj: Obj) -> Obj:  # usable as an Informer ``transform``
        return self.slim(obj)

    def _share(self, slim: Obj) -> Obj:
        """Intern the lifted parts (on copies: the caller's object is left as it was)."""
        for path in self.lift:
            slim = _copy_along(slim, path)
            for container, key in list(_get_all(slim, path)):
                container[key] = self.interner(container[key])
        return slim

    def pack(self, slim: Obj) -> bytes | tuple[Any, ...]:
        """A compact record of a slim object: its JSON (without apiVersion and kind,
        which the store adds back), and the interned parts it references."""
        skeleton = {k: v for k, v in slim.items() if k not in ("apiVersion", "kind")}
        shared: list[Any] = []
        for path in self.lift:
            skeleton = _copy_along(skeleton, path)
            for container, key in list(_get_all(skeleton, path)):
                shared.append(container[key])
                container[key] = None
        raw = self.deflater.deflate(pack_json(skeleton))
        return (raw, *shared) if shared else raw

    def unpack(self, record: bytes | tuple[Any, ...]) -> Obj:
        if isinstance(record, bytes):
            return unpack_json(self.deflater.inflate(record))  # type: ignore[no-any-return]
        obj: Obj = unpack_json(self.deflater.inflate(record[0]))
        it = iter(record[1:])
        for path in self.lift:
            for container, key in list(_get_all(obj, path)):
                container[key] = next(it)
        return obj


class WorkloadSlimmer(Slimmer):
    """Workloads: podSet templates slimmed; a ``Finished`` Workload keeps only its
    queue name and conditions (it holds no quota and is never scheduled again)."""

    def __init__(self, interner: Interner | None = None) -> None:
        super().__init__(
            templates=[("spec", "podSets", "*", "template")],
            lift=[
                ("spec", "podSets", "*", "template", "spec"),
                ("spec", "podSets", "*", "template", "metadata"),
                ("status", "conditions", "*", "message"),
            ],
            interner=interner,
        )

    def slim(self, obj: Obj) -> Obj:
        status = obj.get("status") or {}
        for c in status.get("conditions") or [] if isinstance(status, dict) else []:
            if isinstance(c, dict) and c.get("type") == "Finished" and c.get("status") == "True":
                obj = {
                    "apiVersion": obj.get("apiVersion"),
                    "kind": obj.get("kind"),
                    "metadata": obj.get("metadata"),
                    "spec": {"queueName": (obj.get("spec") or {}).get("queueName")},
                    "status": {"conditions": status.get("conditions")},
                }
                break
        return super().slim(obj)


def job_slimmer(interner: Interner | None = None) -> Slimmer:
    """batch/v1 Jobs: the pod template slimmed; spec fields the service never reads
    (the selector, failure and retry policies) dropped."""
    return Slimmer(
        templates=[("spec", "template")],
        spec_drop=(  # never read; the selector is unique per Job
            "selector",
            "backoffLimit",
            "backoffLimitPerIndex",
            "maxFailedIndexes",
            "podFailurePolicy",
            "podReplacementPolicy",
            "successPolicy",
            "ttlSecondsAfterFinished",
        ),
        lift=[("spec", "template", "spec"), ("spec", "template", "metadata")],
        interner=interner,
    )


def pod_slimmer(interner: Interner | None = None) -> Slimmer:
    """Managed Pods (pod groups): the spec keeps what the group reconciler reads — the
    containers' images and resources and the scheduling fields (a pod's *shape*), its
    scheduling gates and node; status keeps phase, conditions and reason."""
    return _PodSlimmer(interner)


class _PodSlimmer(Slimmer):
    _SPEC_KEEP = ("schedulingGates", "nodeName", "affinity")
    _STATUS_KEEP = ("phase", "conditions", "reason", "startTime")

    def __init__(self, interner: Interner | None) -> None:
        super().__init__(lift=[("spec",)], interner=interner)

    def slim(self, obj: Obj) -> Obj:
        out: Obj = {k: v for k, v in obj.items() if k not in ("metadata", "spec", "status")}
        out["metadata"] = slim_metadata(obj.get("metadata"))
        out["spec"] = slim_pod_spec(
            obj.get("spec") or {},
            container_fields=("name", "image", "resources", "restartPolicy"),
            keep=self._SPEC_KEEP,
        )
        status = obj.get("status")
        if isinstance(status, Mapping):
            out["status"] = {k: status[k] for k in self._STATUS_KEEP if k in status}
        return self._share(out)


class PackedStore(MutableMapping[str, Obj]):
    """An informer's store of packed records: reads unpack a fresh slim dict."""

    def __init__(self, slimmer: Slimmer, *, api_version: str, kind: str) -> None:
        self.slimmer = slimmer
        self.api_version = api_version
        self.kind = kind
        self.records: dict[str, Any] = {}

    def _unpack(self, record: Any) -> Obj:
        obj = self.slimmer.unpack(record)
        obj["apiVersion"] = self.api_version
        obj["kind"] = self.kind
        return obj

    def __getitem__(self, key: str) -> Obj:
        return self._unpack(self.records[key])

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        record = self.records.get(key)
        return default if record is None else self._unpack(record)

    def record(self, key: str) -> Any:
        """The packed record of ``key`` as stored (a new one on every change; no unpack)."""
        return self.records.get(key)

    def __setitem__(self, key: str, obj: Obj) -> None:
        """Store ``obj``, which the caller has slimmed (``Slimmer.slim``)."""
        self.records[key] = self.slimmer.pack(obj)

    def __delitem__(self, key: str) -> None:
        del self.records[key]

    def __contains__(self, key: object) -> bool:
        return key in self.records

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def pop(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        record = self.records.pop(key, None)
        return default if record is None else self._unpack(record)


def slimmer_for(plural: str, group: str) -> Slimmer | None:
    """The slimmer of a watched resource's informer (None: stored whole, as the kinds
    that come in small numbers are)."""
    makers = {
        ("batch", "jobs"): job_slimmer,
        ("kueue.x-k8s.io", "workloads"): WorkloadSlimmer,
        ("", "pods"): pod_slimmer,
    }
    make = makers.get((group, plural))
    return make() if make is not None else None
