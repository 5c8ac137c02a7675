"""Invariants of ``plan`` across clusters, for any workloads and worker quotas:

* a workload runs on at most one worker, and exactly where its copy holds quota: no
  other worker holds a copy of it any more;
* no worker's ClusterQueue holds more than its nominal quota (no cohort: nothing to
  borrow), whatever the dispatcher;
* the fits dispatcher nominates exactly one worker whenever the gang fits one of them,
  and a workload it admits runs on that worker;
* nothing runs on a worker that the manager did not give quota to.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.config.multikueue import ALL_AT_ONCE, FITS, INCREMENTAL
from admission.drivers.loader import load_documents
from admission.drivers.multicluster import ADMITTED, run_clusters
from admission.drivers.multicluster_inputs import ManagerInputs, WorkerInputs

KUEUE = "kueue.x-k8s.io/v1beta2"


def queues(quota: int, check: bool) -> list[dict[str, Any]]:
    cq: dict[str, Any] = {
        "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"],
                 "flavors": [{"name": "default", "resources": [
                     {"name": "cpu", "nominalQuota": str(quota)}]}]}]},
    }  # fmt: skip
    if check:
        cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "mk"}]}
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        cq,
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": "team"}, "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip


def workload(name: str, cpu: int, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE, "kind": "Workload",
        "metadata": {"name": name, "namespace": "team", "uid": name,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "lq", "priority": priority, "podSets": [{
            "name": "main", "count": 1, "template": {"spec": {"containers": [{
                "name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": str(cpu)}}}]}}}]},
    }  # fmt: skip


def load(docs: list[dict[str, Any]]) -> Any:
    return load_documents([("test", i, d) for i, d in enumerate(docs)])


@settings(max_examples=40, deadline=None)
@given(
    manager_quota=st.integers(1, 40),
    worker_quotas=st.lists(st.integers(0, 12), min_size=1, max_size=3),
    jobs=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=10),
    own=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2)), max_size=3),
    dispatcher=st.sampled_from([ALL_AT_ONCE, INCREMENTAL, FITS]),
)
def test_a_workload_runs_once_and_no_worker_exceeds_its_quota(
    manager_quota: int,
    worker_quotas: list[int],
    jobs: list[tuple[int, int]],
    own: list[tuple[int, int]],
    dispatcher: str,
) -> None:
    names = [f"w{i}" for i in range(len(worker_quotas))]
    mk = [
        {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": "mk"},
         "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {
             "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "cfg"}}},
    ]  # fmt: skip
    manager = ManagerInputs(
        load(queues(manager_quota, True) + mk
             + [workload(f"j{i}", cpu, p) for i, (cpu, p) in enumerate(jobs)]),
        configs={"cfg": names},
        clusters={n: "test" for n in names},
    )  # fmt: skip
    workers = [
        WorkerInputs(n, [n], load(queues(q, False) + [
            workload(f"own{i}", cpu, p) for i, (cpu, p) in enumerate(own) if n == "w0"]))
        for n, q in zip(names, worker_quotas, strict=True)
    ]  # fmt: skip
    config = parse_config({"multiKueue": {"dispatcherName": dispatcher}})
    result = run_clusters(manager, workers, config=config)
    assert result.manager.cache is not None
    reserved = set(result.manager.cache.admitted)
    holders: dict[str, list[str]] = {}
    for n, plan in result.workers.items():
        assert plan.cache is not None
        node = plan.cache.tree.queues["cq"]
        assert node.usage.get(("default", "cpu"), 0) <= node.nominal(("default", "cpu"))
        for key in plan.cache.admitted:
            if key.startswith("team/j"):
                holders.setdefault(key, []).append(n)
    for d in result.dispatches:
        if d.reason == ADMITTED:
            assert d.workload in reserved
            assert holders.get(d.workload) == [d.worker]
            if dispatcher == FITS and not d.dispatcher_reasons[0].startswith("no worker fits"):
                assert d.nominated == [d.worker]
        else:
            assert d.workload not in holders
    assert set(holders) <= reserved
