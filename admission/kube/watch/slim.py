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
  required node affinity, tolerations, priorityClassName) and its kept labels and
  annotations, plus :data:`DIGEST`, a 64-bit digest of the template it replaced, so a
  changed image or environment is still noticed (``objects.workload_spec_drift``);
* the rest of ``spec`` and ``status`` as they were (a Job's ``selector`` excepted); a
  ``Finished`` Workload keeps only its queue name and conditions.

Stored objects are then *packed* (:class:`Slimmer.pack`): the parts that repeat across
objects (the slimmed template specs and metadata, condition messages) are interned
once and referenced, the rest is one compact JSON ``bytes``, deflated against a
dictionary of the kind's first records (:class:`RecordDeflater`). A slim pending Job
costs ~200 bytes instead of ~10 KB. ``Informer.get`` unpacks a fresh dict on each call; the
interned parts are shared between objects and must never be modified in place (no
code here does: every write computes a new body).

Whatever needs the whole object — building a Workload from its Job or pods, patching a
Workload's template after its Job changed — asks ``Informer.full(key)``, which returns
the last full version seen (a small recent-object buffer) or reads it from the API.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

try:
    from orjson import OPT_SORT_KEYS
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _loads

    def _dumps(value: Any) -> bytes:
        return _orjson_dumps(value)

    def _canonical(value: Any) -> bytes:
        return _orjson_dumps(value, option=OPT_SORT_KEYS)
except ImportError:  # pragma: no cover - orjson comes with the aiohttp extras
    import json

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    def _canonical(value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    _loads = json.loads  # type: ignore[assignment]


from admission.integrations.framework.composition import SLIM_DIGEST
from queues.api import labels

Obj = dict[str, Any]
Path = tuple[str, ...]  # "*" stands for every element of a list

DIGEST = SLIM_DIGEST
"""Key of a slimmed pod template: the digest (:func:`template_digest`) of the template
it replaced. Never sent to the API server (every write is built from full objects)."""

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


def template_digest(template: Any) -> int:
    """A digest of a pod template as ``objects.workload_for_job`` copies it into a
    Workload (its spec, labels and annotations), equal for equal templates whichever
    object (Job or Workload) carried them. A slim template has it under :data:`DIGEST`."""
    if isinstance(template, Mapping) and isinstance(template.get(DIGEST), int):
        return int(template[DIGEST])
    t = template if isinstance(template, Mapping) else {}
    meta = t.get("metadata") if isinstance(t.get("metadata"), Mapping) else {}
    projection = {
        "spec": t.get("spec") or {},
        "labels": (meta or {}).get("labels") or {},
        "annotations": (meta or {}).get("annotations") or {},
    }
    try:
        raw = _canonical(projection)
    except TypeError:  # not JSON (a test's odd value): never equal to anything else
        return id(template)
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


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


class Interner:
    """One shared copy of equal JSON values, bounded: when full, it starts afresh (the
    copies already handed out stay valid; only later equal values are not shared)."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._table: dict[bytes, Any] = {}
        self._strings: dict[str, str] = {}
        self.max_entries = max_entries

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            if len(self._strings) >= self.max_entries:
                self._strings.clear()
            return self._strings.setdefault(value, value)
        try:
            raw = _canonical(value)
        except TypeError:
            return value
        shared = self._table.get(raw)
        if shared is None:
            if len(self._table) >= self.max_entries:
                self._table.clear()
            shared = self._table[raw] = value
        return shared

    def __len__(self) -> int:
        return len(self._table) + len(self._strings)


# -- packed JSON --------------------------------------------------------------------------------

# Keys (with their quotes and colon) that every packed object repeats, each replaced by
# one control byte. JSON text never holds a raw control byte (orjson escapes them in
# strings), and ``"key":`` with an unescaped quote only occurs as a key, so the
# substitution is exact both ways.
_TOKENS = tuple(
    (f'"{k}":'.encode(), bytes([i + 1]))
    for i, k in enumerate(
        (
            "metadata", "name", "namespace", "uid", "resourceVersion", "generation",
            "creationTimestamp", "labels", "annotations", "ownerReferences", "apiVersion",
            "kind", "spec", "status", "conditions",
            "type", "reason", "message", "lastTransitionTime", "observedGeneration",
            "podSets", "count", "template", DIGEST, "queueName", "priority", "active",
            "parallelism", "completions", "suspend",
        )
    )
)  # fmt: skip
assert len(_TOKENS) < 32


def _pack_json(value: Any) -> bytes:
    raw = _dumps(value)
    for text, token in _TOKENS:
        raw = raw.replace(text, token)
    return raw


def _unpack_json(raw: bytes) -> Any:
    for text, token in _TOKENS:
        raw = raw.replace(token, text)
    return _loads(raw)


class RecordDeflater:
    """Deflate packed records with a preset dictionary learnt from the first ones.

    A pending Job's record is ~200 bytes and its Workload's ~470, and most of that is
    what every record of the kind repeats (keys, the queue label, the owner reference,
    the pending condition): alone, so little text barely compresses; against a
    dictionary of the kind's first :attr:`SAMPLES` records it comes to ~80 and ~120
    bytes, for ~15 µs per write and ~3 µs per read. The dictionary is fixed once learnt
    (every record deflated with it needs it); records stored before it stay as they
    are, and so does any record that would not shrink. A deflated record starts with a
    0 byte, which packed JSON (an object: ``{``) never does."""

    SAMPLES = 40
    SIZE = 4096  # the dictionary: the end of the samples (nearest text is cheapest)
    _WBITS = -12  # raw deflate, a 4 KiB window: the dictionary and a record fit in it

    def __init__(self) -> None:
        self._samples: list[bytes] = []
        self._zdict: bytes | None = None

    def deflate(self, raw: bytes) -> bytes:
        zdict = self._zdict
        if zdict is None:
            self._samples.append(raw)
            if len(self._samples) >= self.SAMPLES:
                self._zdict = b"".join(self._samples)[-self.SIZE :]
                self._samples = []
            return raw
        z = zlib.compressobj(6, zlib.DEFLATED, self._WBITS, 8, zlib.Z_DEFAULT_STRATEGY, zdict)
        out = b"\0" + z.compress(raw) + z.flush()
        return out if len(out) < len(raw) else raw

    def inflate(self, record: bytes) -> bytes:
        if not record or record[0] != 0:
            return record
        assert self._zdict is not None  # only records deflated with it start with 0
        z = zlib.decompressobj(self._WBITS, self._zdict)
        return z.decompress(record[1:]) + z.flush()


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
        raw = self.deflater.deflate(_pack_json(skeleton))
        return (raw, *shared) if shared else raw

    def unpack(self, record: bytes | tuple[Any, ...]) -> Obj:
        if isinstance(record, bytes):
            return _unpack_json(self.deflater.inflate(record))  # type: ignore[no-any-return]
        obj: Obj = _unpack_json(self.deflater.inflate(record[0]))
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


ENGINE_LABELS = frozenset({labels.JOB_UID})
"""The Workload labels the engine reads (preemption messages name the job's UID); it
reads no annotations. The informer's slim copy keeps the others."""
_EMPTY: dict[str, str] = {}  # shared: never written to (the engine builds new dicts)


class ModelInterner:
    """One copy of the equal parts of the engine's Workload models: the parsed podSets
    (backlogs are made of few shapes), and the names every workload of a queue repeats;
    labels and annotations the engine never reads are dropped (:data:`ENGINE_LABELS`).

    The engine never changes a parsed ``PodSet`` in place (they are built once at the
    edge; ``tests/unit/kube/test_kube_slim.py`` pins that sharing them is invisible)."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._pod_sets: dict[str, list[Any]] = {}
        self._strings: dict[str, str] = {}
        self.max_entries = max_entries

    def _str(self, value: str | None) -> str | None:
        if value is None:
            return None
        if len(self._strings) >= self.max_entries:
            self._strings.clear()
        return self._strings.setdefault(value, value)

    def __call__(self, wl: Any) -> Any:
        key = repr(wl.pod_sets)
        shared = self._pod_sets.get(key)
        if shared is None:
            if len(self._pod_sets) >= self.max_entries:
                self._pod_sets.clear()
            shared = self._pod_sets[key] = wl.pod_sets
        wl.pod_sets = shared
        wl.namespace = self._str(wl.namespace)
        wl.queue_name = self._str(wl.queue_name)
        wl.priority_class = self._str(wl.priority_class)
        wl.priority_class_kind = self._str(wl.priority_class_kind)
        labels = {k: v for k, v in wl.labels.items() if k in ENGINE_LABELS}
        wl.labels = labels or _EMPTY
        wl.annotations = _EMPTY
        if not wl.reclaimable_pods:
            wl.reclaimable_pods = _EMPTY  # type: ignore[assignment]
        return wl


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
