"""Cheap feasibility checks of the engine agree with the exhaustive ones they replace.

* ``Preemptor._could_free_enough`` reads other ClusterQueues' usage off the root of the
  cohort tree (where no lending limit keeps usage locally) instead of summing every
  queue of the tree: the answer must be the same as the sum's, in every random world
  (lending limits included, where the sum is still taken).
"""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.preemption import Preemptor
from admission.engine.snapshot import Snapshot
from tests.test_engine_properties import FLAVORS, RESOURCES, world
from tests.test_preemption_properties import _filled, _workload


class _Everything:
    """As ``kept_locally``'s answer: every pair is kept locally (always sum the queues)."""

    def __contains__(self, _item: object) -> bool:
        return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_could_free_enough_from_the_root_equals_the_sum_over_queues(
    w: tuple, data: st.DataObject
) -> None:
    cqs, _, _ = w
    cache, _ = _filled(w)
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    for cq in sorted(cqs):
        node = snap.tree.queues[cq]
        for prio in range(4):
            wl = _workload(cq, 9999, 1, 1, 1, prio)
            frs = {(f, r) for f in FLAVORS for r in RESOURCES}
            requests = {
                fr: data.draw(st.integers(0, 24)) * (1000 if fr[1] == "cpu" else 1) for fr in frs
            }
            fast = pre._could_free_enough(snap, wl, node, frs, requests)
            with mock.patch("admission.engine.preemption.kept_locally", lambda _r: _Everything()):
                summed = pre._could_free_enough(snap, wl, node, frs, requests)
            assert fast == summed, (cq, prio, requests)
    snap.release()
