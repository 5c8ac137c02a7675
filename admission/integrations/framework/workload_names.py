"""The Workload's name for an owner object (Kueue's workload_names.go)."""

from __future__ import annotations

import hashlib

MAX_WORKLOAD_NAME_LENGTH = 253  # 63 with Kueue's alpha ShortWorkloadNames gate
_HASH_LENGTH = 5
PREFIX_ROOM = MAX_WORKLOAD_NAME_LENGTH - 1 - _HASH_LENGTH
"""The longest ``<lower(kind)>-<owner_name>`` kept whole in a Workload's name."""


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
    prefix = prefix[:PREFIX_ROOM].rstrip(".")
    return f"{prefix}-{digest.hexdigest()[:_HASH_LENGTH]}"
