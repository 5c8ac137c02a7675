"""The collector policy of a batch command (``plan``): no cyclic garbage collection.

A batch run builds one large, long-lived object graph (every input object, then the
cache, then the decisions) and frees almost all of its garbage by reference counting.
CPython's cyclic collector still runs full collections as that graph grows, each one
traversing every live object and finding next to nothing: with 50,000 workloads about
a sixth of ``plan``'s CPU time (``python -m bench plan-50k``). :func:`without_cyclic_gc`
switches it off for the run and restores what it found, so a nested use leaves the
process as it was.

Only for a process that ends when the run does (the command line). ``serve`` and its
webhook's what-if keep the collector: ``gc.disable`` is process-wide, and a long-lived
service must collect the cycles its threads make.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
