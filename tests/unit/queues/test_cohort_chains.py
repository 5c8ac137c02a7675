"""Deep Cohort chains: no walk of the quota tree recurses, the webhook bounds the depth,
and a chain that reaches the service anyway makes only its own ClusterQueues inactive.

A chain of a thousand Cohorts built directly (bypassing the webhook, as objects that
were there before it, or written while it was off) must neither crash ``plan`` nor
stop ``serve``: the queues elsewhere keep admitting, and the ClusterQueue at the
bottom says why it admits nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.kube.client import resources as k
from queues.cohort_chains import MAX_COHORT_DEPTH, depth_through
from queues.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    ResourceGroup,
    ResourceQuota,
)
from queues.quota_node import QuotaNode
from queues.tree import CohortTree
from tests.support.kube_harness import (
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)
from tests.support.scenario_runner import run_plan_cli
from tests.support.scenario_shorthand import expand_workload
from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review
from tests.unit.engine.test_engine_properties import run as run_engine
from tests.unit.engine.test_engine_properties import world as engine_world
from webhooks.config import WebhookConfig
from webhooks.view import InMemoryView

API = "kueue.x-k8s.io/v1beta2"
DEPTH = 1000


def chain_objects(depth: int) -> list[dict[str, Any]]:
    """Cohorts c0 (root) … c{depth-1}, a ClusterQueue ``deep`` at the bottom and an
    unrelated ClusterQueue ``flat``, a LocalQueue and a Job for each."""
    objs: list[dict[str, Any]] = [namespace("team"), flavor("default")]
    for i in range(depth):
        spec = {"parentName": f"c{i - 1}"} if i else {}
        objs.append({"apiVersion": API, "kind": "Cohort", "metadata": {"name": f"c{i}"},
                     "spec": spec})  # fmt: skip
    objs += [
        cluster_queue("deep", {"default": {"cpu": 4}}, cohort=f"c{depth - 1}"),
        cluster_queue("flat", {"default": {"cpu": 4}}),
        local_queue("team", "deep-lq", "deep"),
        local_queue("team", "flat-lq", "flat"),
    ]
    return objs


# ---------------------------------------------------------------- the tree


def _cq(name: str, cohort: str | None, cpu: int) -> ClusterQueue:
    group = ResourceGroup(
        covered_resources=["cpu"],
        flavors=[FlavorQuotas("default", {"cpu": ResourceQuota(nominal=cpu)})],
    )
    return ClusterQueue(name=name, cohort=cohort, resource_groups=[group])


def _chain(depth: int) -> dict[str, Cohort]:
    return {f"c{i}": Cohort(f"c{i}", parent=f"c{i - 1}" if i else None) for i in range(depth)}


def test_a_thousand_cohorts_deep_tree_is_built_and_answered_without_recursion() -> None:
    cqs = {"deep": _cq("deep", f"c{DEPTH - 1}", 4000), "top": _cq("top", "c0", 4000)}
    tree = CohortTree(cqs, _chain(DEPTH))
    fr = ("default", "cpu")
    deep, top = tree.queues["deep"], tree.queues["top"]
    tree.add_usage("deep", {fr: 1000})
    assert deep.available(fr) == 7000
    assert deep.potential_available(fr) == 8000
    assert tree.cohorts["c0"].height() == DEPTH
    assert deep.height_of_lowest_subtree_that_fits(fr, 5000).height == DEPTH
    # beyond the bound: disabled, with the Cohort that passes it named
    assert deep.disabled_reason is not None
    assert f"Cohort c{MAX_COHORT_DEPTH} is {MAX_COHORT_DEPTH + 1} Cohorts deep" in (
        deep.disabled_reason
    )
    assert top.disabled_reason is None
    assert tree.cohorts[f"c{MAX_COHORT_DEPTH - 1}"].disabled_reason is None


def test_a_chain_at_the_bound_is_active() -> None:
    cqs = {"cq": _cq("cq", f"c{MAX_COHORT_DEPTH - 1}", 1000)}
    tree = CohortTree(cqs, _chain(MAX_COHORT_DEPTH))
    assert tree.queues["cq"].disabled_reason is None


def test_a_long_cycle_is_found_once_and_named_from_its_least_cohort() -> None:
    cohorts = _chain(DEPTH)
    cohorts["c0"] = Cohort("c0", parent=f"c{DEPTH - 1}")
    tree = CohortTree({"cq": _cq("cq", "c5", 1000)}, cohorts)
    reason = tree.queues["cq"].disabled_reason
    assert reason is not None and "is part of a cycle: c0 -> c999 -> c998 -> " in reason


# -- the loops answer what the recursive definitions (Kueue's) answer ------------------


def _rec_available(n: QuotaNode, fr: tuple[str, str]) -> int:
    if n.parent is None:
        return n.subtree_quota.get(fr, 0) - n.usage.get(fr, 0)
    return n._available_with(_rec_available(n.parent, fr), fr)


def _rec_potential(n: QuotaNode, fr: tuple[str, str]) -> int:
    if n.parent is None:
        return n.subtree_quota.get(fr, 0)
    avail = n.local_quota.get(fr, 0) + _rec_potential(n.parent, fr)
    cap = n.borrowing_cap(fr)
    return min(avail, cap) if cap is not None else avail


def _rec_height(n: QuotaNode) -> int:
    if not n.is_cohort:
        return 0
    h = 1 if (n.child_cohorts or n.child_queues) else 0
    return max([h, *(_rec_height(c) + 1 for c in n.child_cohorts)])


def _rec_subtree(n: QuotaNode, fr: tuple[str, str]) -> int:
    q = n.quotas.get(fr)
    own = q.nominal if q is not None else 0
    if not n.is_cohort:
        return own
    total = own
    for c in n.children:
        lend = c.quotas.get(fr)
        sub = _rec_subtree(c, fr)
        kept = max(0, sub - lend.lending_limit) if lend and lend.lending_limit is not None else 0
        total += sub - kept
    return total


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, ClusterQueue], dict[str, Cohort], list[int]]:
    n = draw(st.integers(1, 12))
    cohorts: dict[str, Cohort] = {}
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        cohorts[f"c{i}"] = Cohort(f"c{i}", parent=f"c{parent}" if parent is not None else None)
    cqs: dict[str, ClusterQueue] = {}
    for j in range(draw(st.integers(1, 8))):
        at = draw(st.one_of(st.none(), st.integers(0, n - 1)))
        nominal = draw(st.integers(0, 8)) * 1000
        quota = ResourceQuota(nominal=nominal)
        if at is not None:
            quota.borrowing_limit = draw(st.one_of(st.none(), st.integers(0, 8)))
            quota.lending_limit = draw(st.one_of(st.none(), st.integers(0, nominal // 1000)))
            for attr in ("borrowing_limit", "lending_limit"):
                if getattr(quota, attr) is not None:
                    setattr(quota, attr, getattr(quota, attr) * 1000)
        group = ResourceGroup(
            covered_resources=["cpu"], flavors=[FlavorQuotas("default", {"cpu": quota})]
        )
        cohort = f"c{at}" if at is not None else None
        cqs[f"q{j}"] = ClusterQueue(name=f"q{j}", cohort=cohort, resource_groups=[group])
    usage = [draw(st.integers(0, 10)) * 1000 for _ in cqs]
    return cqs, cohorts, usage


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_the_tree_walks_in_loops_answer_as_the_recursive_definitions(
    world: tuple[dict[str, ClusterQueue], dict[str, Cohort], list[int]],
) -> None:
    cqs, cohorts, usage = world
    tree = CohortTree(cqs, cohorts)
    fr = ("default", "cpu")
    for name, used in zip(sorted(cqs), usage, strict=True):
        tree.add_usage(name, {fr: used})
    for node in [*tree.cohorts.values(), *tree.queues.values()]:
        assert node.available(fr) == _rec_available(node, fr), node
        assert node.potential_available(fr) == _rec_potential(node, fr), node
        assert node.height() == _rec_height(node), node
        assert node.subtree_quota.get(fr, 0) == _rec_subtree(node, fr), node
    # kept answers stay right after usage changes
    first = sorted(cqs)[0]
    tree.remove_usage(first, {fr: usage[0]})
    for node in tree.queues.values():
        assert node.available(fr) == _rec_available(node, fr), node


# ---------------------------------------------------------------- the webhook


def test_depth_through_counts_ancestors_itself_and_the_chain_below() -> None:
    cohorts = _chain(10)
    assert depth_through("c0", None, cohorts) == 10
    assert depth_through("x", "c9", cohorts) == 11
    # re-parenting c5 under a 3-chain: 3 ancestors, itself, c6..c9 below
    other = {**cohorts, "r0": Cohort("r0"), "r1": Cohort("r1", "r0"), "r2": Cohort("r2", "r1")}
    assert depth_through("c5", "r2", other) == 3 + 1 + 4


@pytest.fixture(scope="module")
def deep_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    view = InMemoryView(cohorts=_chain(MAX_COHORT_DEPTH))
    with WebhookServerThread(
        view=view, config=WebhookConfig(), cert_dir=tmp_path_factory.mktemp("certs")
    ) as srv:
        c = srv.client()
        yield c
        c.close()


def _cohort_review(client: ReviewClient, name: str, parent: str | None,
                   old: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    obj = {"apiVersion": API, "kind": "Cohort", "metadata": {"name": name},
           "spec": {"parentName": parent} if parent else {}}  # fmt: skip
    op = "UPDATE" if old is not None else "CREATE"
    status, resp = client.post(
        "/validate-kueue-x-k8s-io-v1beta2-cohort", make_review("Cohort", obj, old=old, operation=op)
    )
    assert status == 200
    return resp["response"]


def test_the_webhook_refuses_a_cohort_beyond_the_depth_bound_and_says_why(
    deep_client: ReviewClient,
) -> None:
    last = f"c{MAX_COHORT_DEPTH - 1}"
    response = _cohort_review(deep_client, "one-more", last)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith(f'spec.parentName: Invalid value: "{last}": ')
    assert f"chain of {MAX_COHORT_DEPTH + 1} Cohorts" in message
    assert f"at most {MAX_COHORT_DEPTH} are supported" in message
    assert "walks the path" in message
    # a root put on top of the chain deepens everything below it
    old = {"apiVersion": API, "kind": "Cohort", "metadata": {"name": "c0"}, "spec": {}}
    assert _cohort_review(deep_client, "c0", "new-root", old)["allowed"] is False
    # within the bound: allowed
    assert _cohort_review(deep_client, "side", f"c{MAX_COHORT_DEPTH - 2}")["allowed"] is True


# ---------------------------------------------------------------- plan and serve


def test_plan_admits_elsewhere_and_says_why_the_deep_queue_is_inactive(tmp_path: Path) -> None:
    objs = chain_objects(DEPTH)
    objs += [job("team", "deep-job", queue="deep-lq"), job("team", "flat-job", queue="flat-lq")]
    path = tmp_path / "chain.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    code, doc, err = run_plan_cli(["-f", str(path)])
    assert code == 0, err
    assert doc is not None
    assert [a["workload"].split("/")[1].rsplit("-", 1)[0] for a in doc["admitted"]] == [
        "job-flat-job"
    ]
    (pending,) = doc["pending"]
    assert pending["reason"] == "Misconfigured"
    assert f"Cohort c{MAX_COHORT_DEPTH} is {MAX_COHORT_DEPTH + 1} Cohorts deep" in json.dumps(
        pending
    )


def test_serve_keeps_admitting_and_marks_the_deep_cluster_queue_inactive(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=chain_objects(DEPTH)) as s:
            for name, lq in (("deep-job", "deep-lq"), ("flat-job", "flat-lq")):
                await s.user.create(k.JOBS, job("team", name, queue=lq), namespace="team")
            await eventually(
                lambda: (w := s.workload_of_job("team", "flat-job")) and is_true(w, "Admitted"),
                what="the job of the unrelated queue is admitted",
                timeout=120,
            )

            def inactive() -> dict[str, Any] | None:
                cq = s.get("clusterqueues", "deep")
                conds = ((cq or {}).get("status") or {}).get("conditions") or []
                return next((c for c in conds if c["type"] == "Active" and
                             c["status"] == "False"), None)  # fmt: skip

            cond = await eventually(inactive, what="the deep ClusterQueue is inactive", timeout=120)
            assert (
                f"Cohort c{MAX_COHORT_DEPTH} is {MAX_COHORT_DEPTH + 1} Cohorts deep"
                in (cond["message"])
            )
            assert not s.task.done()  # the service still runs
            wl = s.workload_of_job("team", "deep-job")
            assert wl is not None and not is_true(wl, "Admitted")

    asyncio.run(main())


@pytest.mark.parametrize("fair_sharing", [False, True], ids=["classical", "fair-sharing"])
def test_preemption_and_fair_sharing_walk_a_deep_tree(tmp_path: Path, fair_sharing: bool) -> None:
    """Reclaiming within the root Cohort searches (and fair sharing orders) the whole
    tree below it, the thousand-deep chain included."""
    objs = chain_objects(DEPTH)
    objs += [
        cluster_queue(
            "top-a",
            {"default": {"cpu": 10}},
            cohort="c0",
            preemption={"reclaimWithinCohort": "Any"},
        ),
        cluster_queue("top-b", {"default": {"cpu": 10}}, cohort="c0"),
        local_queue("team", "lq-a", "top-a"),
        local_queue("team", "lq-b", "top-b"),
        expand_workload(
            {
                "name": "b-low",
                "ns": "team",
                "queue": "lq-b",
                "created": 1,
                "requests": {"cpu": 16},
                "admitted": {"clusterQueue": "top-b", "flavors": {"cpu": "default"}, "at": 1},
            }
        ),
        expand_workload(
            {"name": "a-new", "ns": "team", "queue": "lq-a", "created": 2, "requests": {"cpu": 10}}
        ),
    ]
    path = tmp_path / "chain.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    args = ["-f", str(path)]
    if fair_sharing:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2",
                                          "kind": "Configuration",
                                          "fairSharing": {"enable": True}}))  # fmt: skip
        args += ["--config", str(config)]
    code, doc, err = run_plan_cli(args)
    assert code == 0, err
    assert doc is not None
    assert [p["workload"] for p in doc["preempted"]] == ["team/b-low"]
    assert "team/a-new" in [a["workload"] for a in doc["admitted"]]


# ---------------------------------------------------------------- no over-admission, deep


@st.composite
def deep_worlds(draw: st.DrawFn) -> tuple[dict, dict, list]:
    """The engine property tests' random worlds, their first Cohort hung under a chain
    of Cohorts about as deep as the bound (a few levels short of it, to a few beyond)."""
    cqs, cohorts, ops = draw(engine_world())
    depth = draw(st.integers(MAX_COHORT_DEPTH - 3, MAX_COHORT_DEPTH + 2))
    chain = {f"deep{i}": Cohort(f"deep{i}", parent=f"deep{i - 1}" if i else None)
             for i in range(depth)}  # fmt: skip
    hung = {n: replace(c, parent=f"deep{depth - 1}") if c.parent is None else c
            for n, c in cohorts.items()}  # fmt: skip
    return cqs, {**chain, **hung}, ops


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_worlds())
def test_no_over_admission_under_a_chain_as_deep_as_the_bound(w: tuple) -> None:
    """At every level of a tree this deep, after every cycle: admitted usage within the
    quotas and limits (the engine property tests' check), and nothing admitted at all in
    the ClusterQueues beyond the bound."""
    cqs, cohorts, ops = w
    log = run_engine(cqs, cohorts, ops, check=True)
    tree = CohortTree(cqs, cohorts)
    disabled = {n for n, node in tree.queues.items() if node.disabled_reason}
    admitted_in = {cq for kind, decided in log if kind == "cycle" for _key, cq in decided}
    assert not admitted_in & disabled, log
