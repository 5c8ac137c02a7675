"""The last whole objects an informer saw: the newest as they are, the rest packed.

The informers of the numerous kinds store slim copies (:mod:`.slim`); what needs the
whole object (a Workload composed from its Job's whole pod templates, the Job copied to
a MultiKueue worker) asks :meth:`Informer.full`, which answers from here when the object
is recent enough and reads it from the API otherwise. A burst of Jobs is reconciled, and
dispatched, some time after the watch brought them: kept as dicts (5-10 KB each), a few
hundred would be all a replica could afford, and every Job beyond them would be read
again. Packed (compact JSON deflated against a dictionary of the kind's first records:
:mod:`.packing`, a few hundred bytes each), thousands fit in a few MiB.

Packing costs tens of µs per object, and every watched Job and pod event brings one,
while few are ever read whole, and most of those soon after their event. So an object
is kept in two tiers:

* **plain**: the last ``max_plain`` objects written (:data:`PLAIN_ENTRIES` by default,
  never more than ``max_entries``), kept by reference as they came: bounded by their
  count, ~0.3-0.6 MiB for the default (a Job or pod is 5-10 KB as dicts). :meth:`put`
  does not copy: the caller must not change the object afterwards (the informer hands
  it over);
* **packed**: an object pushed out of the plain tier by newer writes is packed then,
  and only then; a version replaced or deleted while still plain is never packed.
  At most ``max_entries`` minus the plain entries, and at most ``max_bytes`` of records
  (:data:`MAX_BYTES` by default).

Each object is kept until it is replaced (the new version is plain, the old one gone
from either tier), deleted, or pushed out by newer ones, least recently written first,
when the count (both tiers) or the packed byte budget is exceeded. :meth:`get` returns
a fresh dict from either tier (the same value from both): callers may change it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from admission.kube.digest import dumps, loads
from admission.kube.watch.packing import RecordDeflater, pack_json, unpack_json

Obj = dict[str, Any]

MAX_BYTES = 8 * 1024 * 1024
"""The default byte budget of one informer's packed recent objects."""

PLAIN_ENTRIES = 64
"""The default number of the newest objects kept unpacked, by reference."""


class RecentObjects:
    """Up to ``max_entries`` whole objects by key: the newest ``max_plain`` as written,
    the others packed in at most ``max_bytes``."""

    __slots__ = ("max_entries", "max_bytes", "max_plain", "size", "_plain", "_packed",
                 "_deflater")  # fmt: skip

    def __init__(
        self, max_entries: int, *, max_bytes: int = MAX_BYTES, max_plain: int = PLAIN_ENTRIES
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_plain = max(0, min(max_plain, max_entries))
        self.size = 0  # bytes held by the packed tier
        self._plain: OrderedDict[str, Obj] = OrderedDict()  # oldest first
        self._packed: OrderedDict[str, bytes] = OrderedDict()  # oldest first
        self._deflater = RecordDeflater()

    def __len__(self) -> int:
        return len(self._plain) + len(self._packed)

    def __contains__(self, key: object) -> bool:
        return key in self._plain or key in self._packed

    @property
    def plain(self) -> int:
        """How many objects are kept unpacked."""
        return len(self._plain)

    def put(self, key: str, obj: Obj) -> None:
        """Keep ``obj`` (by reference: not to be changed afterwards) as ``key``'s."""
        if self.max_entries <= 0:
            return
        self._drop_packed(key)
        self._plain.pop(key, None)
        self._plain[key] = obj
        while len(self._plain) > self.max_plain:
            old_key, old = self._plain.popitem(last=False)
            record = self._deflater.deflate(pack_json(old))
            self._packed[old_key] = record
            self.size += len(record)
        while self._packed and (len(self) > self.max_entries or self.size > self.max_bytes):
            _, dropped = self._packed.popitem(last=False)
            self.size -= len(dropped)

    def get(self, key: str) -> Obj | None:
        obj = self._plain.get(key)
        if obj is not None:
            value = loads(dumps(obj))  # a fresh copy, as unpacking gives
        else:
            record = self._packed.get(key)
            if record is None:
                return None
            value = unpack_json(self._deflater.inflate(record))
        return value if isinstance(value, dict) else None

    def pop(self, key: str) -> None:
        self._plain.pop(key, None)
        self._drop_packed(key)

    def clear(self) -> None:
        self._plain.clear()
        self._packed.clear()
        self.size = 0

    def _drop_packed(self, key: str) -> None:
        record = self._packed.pop(key, None)
        if record is not None:
            self.size -= len(record)
