"""Interning and packing: how the informers' slim records take little memory.

The parts that repeat across objects are stored once (:class:`Interner` for raw JSON
values, :class:`ModelInterner` for the engine's parsed Workloads); a record is one
compact JSON ``bytes`` with its most frequent keys replaced by one byte each, deflated
against a dictionary of its kind's first records (:class:`RecordDeflater`).
"""

from __future__ import annotations

import zlib
from typing import Any

from admission.kube.digest import DIGEST, canonical, dumps, loads
from queues.api import labels


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
            raw = canonical(value)
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


def pack_json(value: Any) -> bytes:
    raw = dumps(value)
    for text, token in _TOKENS:
        raw = raw.replace(text, token)
    return raw


def unpack_json(raw: bytes) -> Any:
    for text, token in _TOKENS:
        raw = raw.replace(token, text)
    return loads(raw)


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
