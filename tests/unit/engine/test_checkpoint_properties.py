"""Property tests of progress-aware preemption (admission.engine.preemption.checkpoint).

Over random cohort trees, workloads and event orders, with random notice windows,
minimum runtimes and victim orders: a noticed victim keeps running (and its quota)
until it is due, so no cycle may admit anything into quota a noticed victim still
holds — the usage actually running never goes further over any quota or limit than
it was before the cycle. A notice is never given twice, and no workload is lost.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.engine.build import build_scheduler
from admission.engine.cache import Cache
from queues.model import LocalQueue, ResourceFlavor
from tests.unit.engine.test_engine_properties import FLAVORS, violations, world
from tests.unit.engine.test_preemption_properties import _workload


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_notice_windows_never_over_admit(w: tuple, data: st.DataObject) -> None:
    cqs, cohorts, ops = w
    section: dict = {
        "victimOrder": data.draw(st.sampled_from(["Kueue", "LostWork"])),
        "noticeWindow": data.draw(st.sampled_from([0, 30, 90, 300])),
        "minimumRuntime": data.draw(st.sampled_from([0, 0, 60])),
        "clusterQueues": {
            name: {"noticeWindow": data.draw(st.sampled_from([0, 60, 600]))}
            for name in sorted(cqs)
            if data.draw(st.booleans())
        },
    }
    config = parse_config({"progressAwarePreemption": section})
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    now = [1000.0]
    sched = build_scheduler(config.engine_policy(), cache, clock=lambda: now[0])
    book = cache.progress
    submitted: set[str] = set()
    finished: set[str] = set()
    seq = 0
    for op in ops:
        if op[0] in ("submit", "burst"):
            targets = [op[1]] if op[0] == "submit" else sorted(cqs)
            for cq in targets:
                seq += 1
                if op[0] == "submit":
                    _, _, count, cpu, gpu, prio = op
                else:
                    _, count, cpu, gpu = op
                    prio = seq % 3
                cache.add_workload(_workload(cq, seq, count, cpu, gpu, prio))
                submitted.add(f"ns-{cq}/w{seq}")
        elif op[0] == "cycle":
            now[0] += data.draw(st.sampled_from([1.0, 20.0, 120.0]))
            for key in book.due(now[0]):  # the driver evicts what is due
                cache.evicted(key)
            before = violations(cache.tree)
            noticed_before = set(book.notices)
            r = sched.schedule()
            for p in r.preempted:
                key = p.workload.key
                assert key not in noticed_before, f"{key} noticed twice"
                if p.notice_deadline is None:
                    cache.evicted(key)  # Kueue: the eviction completes at once
                else:
                    assert p.notice_deadline > now[0]
                    assert key in cache.admitted and key in book.notices
            after = violations(cache.tree)  # what really runs, noticed victims included
            for k, v in after.items():
                assert v <= before.get(k, 0), f"over quota at {k}: {v} > {before.get(k, 0)}"
        elif op[0] == "finish":
            noticed = sorted(book.notices)
            if noticed and op[1] % 2:  # a noticed victim checkpoints: it yields
                key = noticed[op[1] % len(noticed)]
                now[0] += 0.5  # a checkpoint after the notice (one at its instant is not)
                book.report(key, "pod/0", now[0])
                assert key in book.due(now[0])
            else:
                admitted = sorted(cache.admitted)
                if admitted:
                    key = admitted[op[1] % len(admitted)]
                    cache.finish(key)  # a noticed victim may simply finish
                    finished.add(key)
                    assert key not in book.notices
    # No workload is lost: each is admitted, pending, or finished.
    pending = {wl.key for wl, _ in cache.pending_workloads()}
    assert submitted <= set(cache.admitted) | pending | finished
