"""The quota webhook's impact warnings and ``plan --what-if`` are one what-if
(``admission.drivers.whatif``), built from the same configuration, and the webhook computes
it off its event loop within a deadline. Over real HTTPS."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.config.load import load_config
from admission.drivers.loader import load_paths
from tests.support.scenario_runner import run_plan_cli
from tests.support.scenario_shorthand import expand_workload
from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review
from webhooks.config import WebhookConfig
from webhooks.view import InMemoryView

LQ_PATH = "/validate-kueue-x-k8s-io-v1beta2-localqueue"


def _cq(name: str, **preemption: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cohortName": "pool",
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "10"}]}
                ],
            }
        ],
    }
    if preemption:
        spec["preemption"] = preemption
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _lq(ns: str, name: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cq},
    }


# Fair sharing decides differently from the classical order here. cq-a borrows 2 of the
# cohort's cpu, cq-b 0; team-b's LocalQueue lq-b does not exist yet, so b-new waits
# unroutable. Creating lq-b: b-new (cq-b, share after admission lower than cq-a's) wins
# the tournament for the idle cpu over the older, higher-priority a-new; and b-big,
# within cq-b's nominal quota, reclaims what cq-a borrows (the classical order admits
# a-new and leaves b-new pending).
OBJECTS: list[dict[str, Any]] = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default"},
    },
    _cq("cq-a"),
    _cq("cq-b"),
    _cq("cq-c"),
    _lq("team-a", "lq-a", "cq-a"),
    _lq("team-c", "lq-c", "cq-c"),
    *(
        expand_workload(w)
        for w in [
            {
                "name": "a-run",
                "ns": "team-a",
                "queue": "lq-a",
                "requests": {"cpu": 12},
                "admitted": {"clusterQueue": "cq-a", "flavors": {"cpu": "default"}},
            },
            {
                "name": "b-run",
                "ns": "team-b",
                "queue": "lq-b",
                "requests": {"cpu": 10},
                "admitted": {"clusterQueue": "cq-b", "flavors": {"cpu": "default"}},
            },
            {
                "name": "c-run",
                "ns": "team-c",
                "queue": "lq-c",
                "requests": {"cpu": 2},
                "admitted": {"clusterQueue": "cq-c", "flavors": {"cpu": "default"}},
            },
            {
                "name": "a-new",
                "ns": "team-a",
                "queue": "lq-a",
                "priority": 100,
                "created": 1,
                "requests": {"cpu": 3},
            },
            {
                "name": "b-new",
                "ns": "team-b",
                "queue": "lq-b",
                "priority": 0,
                "created": 2,
                "requests": {"cpu": 4},
            },
        ]
    ),
]
NEW_LQ = _lq("team-b", "lq-b", "cq-b")

# Fair-sharing preemption targets the ClusterQueue with the highest share (cq-b, 6 cpu
# borrowed) although cq-c's workloads have the lower priority; team-a's lq-a does not
# exist yet. Creating it: a-new (cq-a is within nominal) preempts one of cq-b's.
PREEMPT_OBJECTS: list[dict[str, Any]] = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default"},
    },
    _cq("cq-a", reclaimWithinCohort="Any"),
    _cq("cq-b"),
    _cq("cq-c"),
    _cq("cq-d"),
    _lq("team-b", "lq-b", "cq-b"),
    _lq("team-c", "lq-c", "cq-c"),
    *(
        expand_workload(w)
        for w in [
            {
                "name": "a-run",
                "ns": "team-a",
                "queue": "lq-a",
                "requests": {"cpu": 10},
                "admitted": {"clusterQueue": "cq-a", "flavors": {"cpu": "default"}},
            },
            *(
                {
                    "name": f"b{i}",
                    "ns": "team-b",
                    "queue": "lq-b",
                    "requests": {"cpu": 2},
                    "admitted": {"clusterQueue": "cq-b", "flavors": {"cpu": "default"}, "at": i},
                }
                for i in range(1, 9)
            ),
            *(
                {
                    "name": f"c{i}",
                    "ns": "team-c",
                    "queue": "lq-c",
                    "priority": -1,
                    "requests": {"cpu": 2},
                    "admitted": {
                        "clusterQueue": "cq-c",
                        "flavors": {"cpu": "default"},
                        "at": 10 + i,
                    },
                }
                for i in range(1, 8)
            ),
            {
                "name": "a-new",
                "ns": "team-a",
                "queue": "lq-a",
                "created": 20,
                "requests": {"cpu": 2},
            },
        ]
    ),
]
PREEMPT_LQ = _lq("team-a", "lq-a", "cq-a")
FAIR = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "fairSharing": {}}


def _files(d: Path, objects: list[dict[str, Any]], lq: dict[str, Any]) -> dict[str, Path]:
    out = {"objects": d / "objects.yaml", "lq": d / "lq.yaml", "config": d / "config.yaml"}
    out["objects"].write_text(yaml.safe_dump_all(objects, sort_keys=False))
    out["lq"].write_text(yaml.safe_dump(lq, sort_keys=False))
    out["config"].write_text(yaml.safe_dump(FAIR))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("whatif"), OBJECTS, NEW_LQ)


def _plan_what_if(files: dict[str, Path], *config: str) -> dict[str, Any]:
    code, doc, err = run_plan_cli(
        ["-f", str(files["objects"]), "--what-if", str(files["lq"]), *config]
    )
    assert code == 0, err
    assert doc is not None
    return doc["whatIf"]["changes"]


@pytest.fixture(scope="module")
def fair_server(
    files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReviewClient]:
    view = InMemoryView.from_inputs(load_paths([str(files["objects"])]))
    config = WebhookConfig(what_if_config=load_config(str(files["config"])))
    with WebhookServerThread(
        view=view, config=config, cert_dir=tmp_path_factory.mktemp("certs")
    ) as srv:
        c = srv.client()
        yield c
        c.close()


def _lq_warnings(client: ReviewClient, lq: dict[str, Any] = NEW_LQ) -> list[str]:
    status, body = client.post(LQ_PATH, make_review("LocalQueue", lq))
    assert status == 200, body
    assert body["response"]["allowed"] is True
    return body["response"].get("warnings", [])


def test_under_fair_sharing_the_webhook_warns_what_plan_what_if_predicts(
    files: dict[str, Path], fair_server: ReviewClient
) -> None:
    changes = _plan_what_if(files, "--config", str(files["config"]))
    admitted = [
        c
        for c in changes
        if (c["after"] or {}).get("outcome") == "admitted"
        and (c["before"] or {}).get("outcome") != "admitted"
    ]
    assert [c["workload"] for c in admitted] == ["team-b/b-new"]
    # the classical order (no --config) predicts something else: that is the bug
    classical = _plan_what_if(files)
    assert classical != changes
    warnings = _lq_warnings(fair_server)
    assert (
        "1 pending workload(s) now fit and will be admitted: 1 in ClusterQueue cq-b" in warnings
    ), warnings


def test_under_fair_sharing_the_webhook_warns_the_preemptions_plan_what_if_predicts(
    tmp_path: Path,
) -> None:
    files = _files(tmp_path, PREEMPT_OBJECTS, PREEMPT_LQ)
    changes = _plan_what_if(files, "--config", str(files["config"]))
    preempted = sorted(
        c["workload"] for c in changes if (c["after"] or {}).get("outcome") == "preempted"
    )
    assert preempted == ["team-b/b8"], changes
    assert _plan_what_if(files) != changes  # the classical order picks another victim
    view = InMemoryView.from_inputs(load_paths([str(files["objects"])]))
    config = WebhookConfig(what_if_config=load_config(str(files["config"])))
    with WebhookServerThread(view=view, config=config, cert_dir=tmp_path / "certs") as srv:
        client = srv.client()
        warnings = _lq_warnings(client, PREEMPT_LQ)
        client.close()
    assert (
        "1 admitted workload(s) would be preempted: 1 in ClusterQueue cq-b (InCohortFairSharing)"
        in warnings
    ), warnings
    # counts, never names: no other tenant's workload is named
    assert not any("team-b/" in w or "team-c/" in w for w in warnings), warnings


# ---------------------------------------------------------------- off the event loop


CQ_PATH = "/validate-kueue-x-k8s-io-v1beta2-clusterqueue"
JOB_PATH = "/mutate-batch-v1-job"


def _job(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"j{i}",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
        },
        "spec": {
            "parallelism": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }


SLOW_FLAGS: dict[str, Path] = {}


def _slow_impact(*_args: Any) -> list[str]:
    """The engine at 20k pending: pure Python holding the GIL (or a core) until the test
    releases it (a file, so that a forked what-if process sees it too), at most 60 s; it
    leaves a file saying it finished."""
    release, finished = SLOW_FLAGS["release"], SLOW_FLAGS["finished"]
    end = time.monotonic() + 60.0
    n = 0
    while time.monotonic() < end and not release.exists():
        n += sum(range(100))
    finished.touch()
    return ["never returned in time"]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_slow_what_if_answers_by_the_deadline_and_job_reviews_do_not_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    from tests.support.webhook_server import cluster_queue_doc, pending_view
    from webhooks.handlers import quota
    from webhooks.server.site import ServerLimits

    monkeypatch.setattr(quota, "impact_lines", _slow_impact)
    release, finished = tmp_path / "release", tmp_path / "finished"
    monkeypatch.setitem(SLOW_FLAGS, "release", release)
    monkeypatch.setitem(SLOW_FLAGS, "finished", finished)
    view = pending_view(2000)
    config = WebhookConfig(impact_deadline=0.3)
    limits = ServerLimits(what_if_mode=mode)
    with WebhookServerThread(view=view, config=config, cert_dir=tmp_path, limits=limits) as srv:
        jobs, edits = srv.client(), srv.client()
        for i in range(20):  # warm the connection and the job path
            assert jobs.post(JOB_PATH, make_review("Job", _job(i)))[0] == 200
        result: dict[str, Any] = {}

        def edit() -> None:
            new = cluster_queue_doc("cq-1", cohort="cohort-1", nominal="5")
            old = cluster_queue_doc("cq-1", cohort="cohort-1", nominal="0")
            result["status"], result["body"] = edits.post(
                CQ_PATH, make_review("ClusterQueue", new, old=old, operation="UPDATE")
            )
            result["what_if_running"] = not finished.exists()

        t = threading.Thread(target=edit)
        t.start()
        answered_while_running = 0
        try:
            # job reviews are answered while the what-if still runs (it runs until released)
            while t.is_alive() or answered_while_running < 5:
                assert jobs.post(JOB_PATH, make_review("Job", _job(0)))[0] == 200
                if not finished.exists():
                    answered_while_running += 1
                elif not t.is_alive():
                    break
        finally:
            release.touch()
            t.join()
            jobs.close()
            edits.close()
    assert result["status"] == 200
    assert result["what_if_running"], "the edit was answered by the deadline, not the what-if"
    response = result["body"]["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "impact of this edit was not computed: the what-if did not finish within the 0.3 s "
        "deadline (webhook.impactDeadline); plan --what-if computes it offline"
    ]
    assert answered_while_running >= 5, "job reviews do not wait behind the what-if"


def test_the_engine_what_if_on_a_backlog_gives_up_at_the_deadline(tmp_path: Path) -> None:
    from tests.support.webhook_server import cluster_queue_doc, pending_view

    view = pending_view(3000)
    config = WebhookConfig(impact_deadline=0.02)
    with WebhookServerThread(view=view, config=config, cert_dir=tmp_path) as srv:
        client = srv.client()
        new = cluster_queue_doc("cq-1", cohort="cohort-1", nominal="5")
        t0 = time.monotonic()
        status, body = client.post(
            CQ_PATH, make_review("ClusterQueue", new, old=new, operation="UPDATE")
        )
        seconds = time.monotonic() - t0
        client.close()
    assert status == 200
    assert seconds < 0.5
    assert body["response"]["warnings"][0].startswith(
        "impact of this edit was not computed: the what-if did not finish"
    )


def test_the_impact_deadline_comes_from_the_configuration() -> None:
    from admission.config.load import parse_config

    cfg = parse_config({"webhook": {"impactDeadline": "750ms"}})
    assert WebhookConfig.from_config(cfg).impact_deadline == 0.75
    assert WebhookConfig().impact_deadline == 2.0


# ---------------------------------------------------------------- edits that arrive together


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_edits_that_arrive_together_each_get_their_impact_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """``kubectl apply -f DIR`` and controllers send quota edits close together: each
    waits for the what-if ahead of it instead of being answered without its impact."""
    from tests.support.webhook_server import cluster_queue_doc, pending_view
    from webhooks.handlers import quota
    from webhooks.server.site import ServerLimits

    def slowish(kind: str, obj: Any, *_args: Any) -> list[str]:
        time.sleep(0.2)  # long enough for the other edits to arrive meanwhile
        return [f"impact of {kind} {obj.name}"]

    monkeypatch.setattr(quota, "impact_lines", slowish)
    config = WebhookConfig(impact_deadline=60.0)  # the subject is the order, not the deadline
    limits = ServerLimits(what_if_mode=mode)
    view = pending_view(10, cluster_queues=4, cohorts=1)
    answers: dict[str, Any] = {}
    with WebhookServerThread(view=view, config=config, cert_dir=tmp_path, limits=limits) as srv:
        clients = [srv.client() for _ in range(4)]
        started = threading.Barrier(len(clients))

        def edit(i: int) -> None:
            new = cluster_queue_doc(f"cq-{i}", cohort="cohort-0", nominal="5")
            old = cluster_queue_doc(f"cq-{i}", cohort="cohort-0", nominal="0")
            started.wait(timeout=60)
            status, body = clients[i].post(
                CQ_PATH, make_review("ClusterQueue", new, old=old, operation="UPDATE")
            )
            answers[f"cq-{i}"] = (status, body["response"].get("warnings"))

        threads = [threading.Thread(target=edit, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for c in clients:
            c.close()
    assert answers == {
        f"cq-{i}": (200, [f"impact of ClusterQueue cq-{i}"]) for i in range(len(clients))
    }


def test_an_edit_whose_turn_does_not_come_by_its_deadline_says_what_was_ahead() -> None:
    import asyncio

    from webhooks.handlers.offloop import OffLoopRunner

    release = threading.Event()

    class Stuck:
        def snapshot(self) -> Any:
            return lambda _deadline: ["never"] if release.wait(60) else []

        def failed(self, why: str) -> list[str]:
            return [f"not computed: {why}"]

    async def main() -> list[list[str]]:
        runner = OffLoopRunner(0.2, "thread")
        first = asyncio.ensure_future(runner.run(Stuck()))
        await asyncio.sleep(0)  # the first has its turn
        return [*(await asyncio.gather(first, runner.run(Stuck())))]

    try:
        first, second = asyncio.run(main())
    finally:
        release.set()
    assert first == [
        "not computed: the what-if did not finish within the 0.2 s deadline "
        "(webhook.impactDeadline); plan --what-if computes it offline"
    ]
    assert second == [
        "not computed: the what-if did not start within the 0.2 s deadline "
        "(webhook.impactDeadline): the impact of 1 earlier quota edit(s) was being "
        "computed first; plan --what-if computes it offline"
    ]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_impact_what_if_takes_its_state_only_once_the_running_cycle_has_ended(
    mode: str,
) -> None:
    import asyncio

    from webhooks.handlers.offloop import OffLoopRunner

    if mode == "process" and not hasattr(os, "fork"):
        pytest.skip("no os.fork")
    cycle = {"running": True}  # a scheduling cycle changes the model now

    class Probe:
        def snapshot(self) -> Any:
            seen = cycle["running"]  # where the state is taken: the loop, or the child
            return lambda _deadline: [f"taken during a cycle: {seen}"]

        def failed(self, why: str) -> list[str]:
            return [f"not computed: {why}"]

    async def main() -> list[str]:
        idle = asyncio.Event()

        async def quiet() -> None:
            await idle.wait()

        def cycle_returns() -> None:
            cycle["running"] = False
            idle.set()

        asyncio.get_running_loop().call_later(0.05, cycle_returns)
        return await OffLoopRunner(10.0, mode, quiet=quiet).run(Probe())

    assert asyncio.run(main()) == ["taken during a cycle: False"]


def test_a_cycle_longer_than_the_deadline_leaves_the_impact_not_computed() -> None:
    import asyncio

    from webhooks.handlers.offloop import OffLoopRunner

    class Never:
        def snapshot(self) -> Any:
            raise AssertionError("the state was taken while the cycle ran")

        def failed(self, why: str) -> list[str]:
            return [f"not computed: {why}"]

    async def main() -> tuple[list[str], list[str]]:
        stuck = asyncio.Event()

        async def quiet() -> None:
            await stuck.wait()

        runner = OffLoopRunner(0.1, "thread", quiet=quiet)
        first = await runner.run(Never())
        stuck.set()  # the cycle returns: the next edit's turn is free again

        class Fine:
            def snapshot(self) -> Any:
                return lambda _deadline: ["computed"]

            def failed(self, why: str) -> list[str]:
                return [why]

        return first, await runner.run(Fine())

    first, second = asyncio.run(main())
    assert first == [
        "not computed: the what-if did not finish within the 0.1 s deadline "
        "(webhook.impactDeadline); plan --what-if computes it offline"
    ]
    assert second == ["computed"]
