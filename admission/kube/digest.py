"""Canonical JSON bytes and the digest of a pod template.

A slim pod template (``admission.kube.watch.slim``) keeps, under :data:`DIGEST`, a
64-bit digest of the template it replaced, so comparing a Job's template with its
Workload's copy (``objects.workload_spec_drift``) notices a changed image or environment
whether it reads full or slim templates. The JSON encoders here are orjson's when it is
installed, the standard library's otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.composition import SLIM_DIGEST

try:
    from orjson import OPT_SORT_KEYS, loads
    from orjson import dumps as _orjson_dumps

    def dumps(value: Any) -> bytes:
        return _orjson_dumps(value)

    def canonical(value: Any) -> bytes:
        return _orjson_dumps(value, option=OPT_SORT_KEYS)
except ImportError:  # pragma: no cover - orjson comes with the aiohttp extras
    import json

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    def canonical(value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    loads = json.loads  # type: ignore[assignment]

DIGEST = SLIM_DIGEST
"""Key of a slimmed pod template: the digest (:func:`template_digest`) of the template
it replaced. Never sent to the API server (every write is built from full objects)."""


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
        raw = canonical(projection)
    except TypeError:  # not JSON (a test's odd value): never equal to anything else
        return id(template)
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")
