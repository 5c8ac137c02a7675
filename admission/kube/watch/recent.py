"""The last whole objects an informer saw, packed, within a byte budget.

The informers of the numerous kinds store slim copies (:mod:`.slim`); what needs the
whole object (a Workload composed from its Job's whole pod templates, the Job copied to
a MultiKueue worker) asks :meth:`Informer.full`, which answers from here when the object
is recent enough and reads it from the API otherwise. A burst of Jobs is reconciled, and
dispatched, some time after the watch brought them: kept as dicts (5-10 KB each), a few
hundred would be all a replica could afford, and every Job beyond them would be read
again. Packed (compact JSON deflated against a dictionary of the kind's first records:
:mod:`.packing`, a few hundred bytes each), thousands fit in a few MiB.

Each object is kept until it is replaced, deleted, or pushed out by newer ones (least
recently written first) when the count or the byte budget is exceeded. :meth:`get`
returns a fresh dict: callers may change it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from admission.kube.watch.packing import RecordDeflater, pack_json, unpack_json

Obj = dict[str, Any]

MAX_BYTES = 8 * 1024 * 1024
"""The default byte budget of one informer's recent objects."""


class RecentObjects:
    """Up to ``max_entries`` whole objects by key, at most ``max_bytes`` packed."""

    __slots__ = ("max_entries", "max_bytes", "size", "_records", "_deflater")

    def __init__(self, max_entries: int, *, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = 0  # bytes held
        self._records: OrderedDict[str, bytes] = OrderedDict()
        self._deflater = RecordDeflater()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def put(self, key: str, obj: Obj) -> None:
        if self.max_entries <= 0:
            return
        record = self._deflater.deflate(pack_json(obj))
        old = self._records.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._records[key] = record
        self.size += len(record)
        while self._records and (
            len(self._records) > self.max_entries or self.size > self.max_bytes
        ):
            _, dropped = self._records.popitem(last=False)
            self.size -= len(dropped)

    def get(self, key: str) -> Obj | None:
        record = self._records.get(key)
        if record is None:
            return None
        value = unpack_json(self._deflater.inflate(record))
        return value if isinstance(value, dict) else None

    def pop(self, key: str) -> None:
        record = self._records.pop(key, None)
        if record is not None:
            self.size -= len(record)

    def clear(self) -> None:
        self._records.clear()
        self.size = 0
