"""Read-your-writes: once this replica has written an object, nothing older is acted on.

The API server answers a write with the object as written, and the informer delivers
that version moments later; meanwhile it may still deliver, or hold, versions from
before the write. Acting on one of those would undo or repeat the write (admit a
workload twice, release a quota it still holds, patch a pod again). So every write's
answer is kept until the informer has caught up with it:

* :class:`LastWrites` — what reconcilers read: the newer of the informer's copy and our
  last write of that object. The write is dropped once the informer's copy is at least
  as new, or the object is deleted. The Workload and job-object writer
  (``control.context.Writer``) keeps one, and so does each pod index
  (:mod:`.grouped_pods`).
* :class:`StaleEvents` — what the engine's cache applies (:mod:`.cachesync`): a
  Workload event older than our last write of it is ignored, once that write's
  answer has come back.
* :func:`read_back` — when a write failed ambiguously (a lost connection, a 5xx: it may
  have landed), the object is read back; a write found to have landed is remembered
  like any answered one.

Versions are ordered by resourceVersion (:func:`rv_at_least`, :func:`newer`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError

Obj = dict[str, Any]
K = TypeVar("K", bound=Hashable)


def rv_at_least(obj: Obj | None, rv: str) -> bool:
    """Whether ``obj`` is at least as new as resourceVersion ``rv``.

    Kubernetes documents resourceVersions as opaque, but every etcd-backed server (and
    the test double) uses the store revision, an increasing integer; when either side is
    not an integer only equality counts.
    """
    if obj is None:
        return True  # deleted: nothing older can come back
    have = kobj.rv(obj)
    if have == rv:
        return True
    try:
        return int(have) >= int(rv)
    except ValueError:
        return False


def newer(a: Obj | None, b: Obj | None) -> Obj | None:
    """The more recent of two versions of one object (by resourceVersion)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if rv_at_least(a, kobj.rv(b)) else b


class LastWrites(Generic[K]):
    """Our last write of each object (by key) until the informer's copy catches up."""

    def __init__(self) -> None:
        self._mine: dict[K, Obj] = {}

    def remember(self, key: K, obj: Obj) -> None:
        self._mine[key] = obj

    def mine(self, key: K) -> Obj | None:
        """Our last write of ``key`` while the informer has not caught up (no check)."""
        return self._mine.get(key)

    def forget(self, key: K) -> None:
        """The object is gone (deleted): nothing of ours is newer than that."""
        self._mine.pop(key, None)

    def read(self, key: K, stored: Obj | None) -> Obj | None:
        """The newer of ``stored`` (the informer's copy, None when it has none) and our
        last write of ``key``; our write is dropped once ``stored`` is as new."""
        mine = self._mine.get(key)
        if mine is None:
            return stored
        if stored is not None and rv_at_least(stored, kobj.rv(mine)):
            del self._mine[key]
            return stored
        return newer(stored, mine)  # stored None: not delivered yet (deletions forget)

    def __len__(self) -> int:
        return len(self._mine)


class StaleEvents:
    """Per Workload, the resourceVersion of our last write while the informer has not
    delivered it yet: events older than that are stale."""

    def __init__(self) -> None:
        self.floor: dict[str, str] = {}

    def written(self, key: str, obj: Obj | None) -> None:
        """We wrote ``obj``: ignore older versions the informer may still deliver."""
        if obj is not None and kobj.rv(obj):
            self.floor[key] = kobj.rv(obj)

    def stale(self, key: str, obj: Obj | None) -> bool:
        """Whether this event of ``key`` (``obj``, None when deleted) predates our last
        write; the first one that does not ends the wait."""
        want = self.floor.get(key)
        if want is None:
            return False
        if not rv_at_least(obj, want):
            return True
        del self.floor[key]
        return False


async def read_back(
    read: Callable[[], Awaitable[Obj | None]],
    landed: Callable[[Obj], bool],
    remember: Callable[[Obj], None],
    *,
    attempts: int = 5,
) -> bool | None:
    """After an ambiguous write failure, read the object back (``read``) to learn
    whether the write landed: True (and the object read is remembered) when
    ``landed(obj)``, False when it did not, None when no read succeeded in
    ``attempts`` tries (a failed read is retried after 0.05 s, doubling, at most 2 s)."""
    delay = 0.05
    for _ in range(attempts):
        try:
            obj = await read()
        except ApiError:
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
            continue
        if obj is None or not landed(obj):
            return False
        remember(obj)
        return True
    return None
