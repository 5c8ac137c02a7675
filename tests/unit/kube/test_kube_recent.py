"""The informers' recent whole objects (admission/kube/watch/recent.py): the newest kept
as they came, by reference, with no packing per event; older ones packed when they
leave the plain tier; both tiers answer the same fresh dict, within one count bound."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from admission.kube.client import resources as k
from admission.kube.watch.recent import RecentObjects
from admission.kube.watch.slim import job_slimmer
from bench.jobgen import realistic_job


def job(i: int, rv: int | None = None) -> dict[str, Any]:
    out = realistic_job(i, namespace="ns", queue="lq")
    out["metadata"].update(uid=f"uid-{i}", resourceVersion=str(rv if rv is not None else 100 + i))
    return out


def key(i: int) -> str:
    return f"ns/{job(i)['metadata']['name']}"


def packed_size(*objs: dict[str, Any]) -> int:
    """The bytes ``objs`` take packed (by a store that packs every object at once)."""
    packed = RecentObjects(4096, max_plain=0)
    for obj in objs:
        packed.put(f"{obj['metadata']['name']}", obj)
    return packed.size


def test_an_object_read_right_after_its_event_is_the_one_kept_by_reference_unpacked() -> None:
    recent = RecentObjects(4096, max_plain=4)
    obj = job(1)
    recent.put(key(1), obj)
    assert recent.plain == 1 and recent.size == 0  # nothing packed for the event
    got = recent.get(key(1))
    assert got == job(1) and got is not obj
    got["spec"]["template"]["spec"]["containers"].clear()  # the caller's copy to change
    assert recent.get(key(1)) == job(1)


def test_an_object_pushed_out_of_the_plain_tier_is_packed_and_read_back_whole() -> None:
    recent = RecentObjects(4096, max_plain=4)
    for i in range(5):
        recent.put(key(i), job(i))
    assert len(recent) == 5 and recent.plain == 4
    assert recent.size == packed_size(job(0))  # only job 0 is packed
    assert recent.get(key(0)) == job(0)
    for i in range(20):  # every tier answers the same value
        recent.put(key(100 + i), job(100 + i))
    assert recent.plain == 4 and all(recent.get(key(i)) == job(i) for i in range(5))


def test_the_count_bound_covers_both_tiers_and_drops_the_least_recently_written() -> None:
    recent = RecentObjects(10, max_plain=4)
    for i in range(25):
        recent.put(key(i), job(i))
    assert len(recent) == 10 and recent.plain == 4
    assert [i for i in range(25) if key(i) in recent] == list(range(15, 25))
    assert recent.get(key(14)) is None and recent.get(key(15)) == job(15)
    small = RecentObjects(3, max_plain=64)  # fewer entries than the plain tier: all plain
    for i in range(5):
        small.put(key(i), job(i))
    assert len(small) == 3 and small.plain == 3 and small.size == 0
    assert [i for i in range(5) if key(i) in small] == [2, 3, 4]


def test_the_packed_tier_keeps_to_its_byte_budget() -> None:
    recent = RecentObjects(4096, max_plain=2, max_bytes=2_000)
    for i in range(60):  # past the deflater's samples: records of a few hundred bytes
        recent.put(key(i), job(i))
    assert recent.size <= 2_000 and recent.plain == 2
    assert 2 < len(recent) < 60 and key(59) in recent and key(0) not in recent


def test_a_newer_version_replaces_the_older_one_in_whichever_tier_it_is() -> None:
    recent = RecentObjects(4096, max_plain=2)
    recent.put(key(1), job(1, rv=5))
    recent.put(key(1), job(1, rv=6))  # replaced while plain: never packed
    assert len(recent) == 1 and recent.size == 0
    recent.put(key(2), job(2))
    recent.put(key(3), job(3))  # pushes version 6 into the packed tier
    assert recent.size == packed_size(job(1, rv=6))
    recent.put(key(1), job(1, rv=7))  # pushes job 2 there; version 6 is gone
    assert len(recent) == 3 and recent.plain == 2 and recent.size == packed_size(job(2))
    assert recent.get(key(1)) == job(1, rv=7)
    recent.pop(key(1))
    assert key(1) not in recent and recent.get(key(1)) is None


def test_a_watched_object_is_kept_whole_without_packing_and_read_whole() -> None:
    """The informer hands a watch event's object over as it is: the event costs no
    packing, and ``full`` answers it, slimmed nowhere."""
    from admission.kube.watch.informer import Informer

    inf = Informer(None, k.JOBS, slimmer=job_slimmer(), keep_recent=4096)  # type: ignore[arg-type]
    obj = job(1)
    key_, slim = inf._ingest(obj)
    inf.store[key_] = slim
    assert inf._recent.plain == 1 and inf._recent.size == 0
    assert asyncio.run(inf.full(key_)) == obj


def test_a_whole_object_read_from_the_api_and_changed_by_its_reader_is_kept_unchanged() -> None:
    """``full`` reads what it does not keep, and keeps it: its reader may change what
    it got without changing what the next ``full`` answers."""
    from admission.kube.watch.informer import Informer

    class Client:
        gets = 0

        async def get(self, res: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
            Client.gets += 1
            return copy.deepcopy(job(1))

    inf = Informer(Client(), k.JOBS, slimmer=job_slimmer(), keep_recent=4096)  # type: ignore[arg-type]
    first = asyncio.run(inf.full(key(1)))
    assert first == job(1)
    first["spec"]["template"]["spec"]["containers"].clear()
    assert asyncio.run(inf.full(key(1))) == job(1) and Client.gets == 1


def test_the_objects_of_a_list_are_not_kept_whole_and_full_reads_them() -> None:
    """A (re)list brings every object at once (a restart's: thousands), and few of them
    are ever read whole: none is kept as a recent object, so the list packs nothing, and
    ``full`` reads a listed object from the API (once: then it is kept)."""
    from admission.kube.watch.informer import Informer

    listed = [job(i) for i in range(200)]

    class Client:
        gets = 0

        async def list(self, res: Any, **_kw: Any) -> dict[str, Any]:
            return {"metadata": {"resourceVersion": "500"}, "items": copy.deepcopy(listed)}

        async def get(self, res: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
            Client.gets += 1
            return next(copy.deepcopy(j) for j in listed if j["metadata"]["name"] == name)

    inf = Informer(Client(), k.JOBS, slimmer=job_slimmer(), keep_recent=4096)  # type: ignore[arg-type]

    async def main() -> None:
        await inf._relist()
        assert len(inf.store) == len(listed)
        assert (len(inf._recent), inf._recent.size) == (0, 0)
        assert await inf.full(key(7)) == listed[7] and Client.gets == 1
        assert await inf.full(key(7)) == listed[7] and Client.gets == 1

    asyncio.run(main())
