"""The cyclic garbage collector off for a block: what dies inside it is freed by
reference counting alone, so a test can show that an object holds no reference cycle
(a weak reference to it dies at once, and ``gc.collect()`` then finds nothing)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[None]:
    """Collect what is pending, turn the collector off, and restore it as it was."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
