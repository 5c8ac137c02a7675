"""Cohort trees the fair-sharing and credit property tests build: one flavor, CPU (and GPU) quota.

Both property modules (test_fair_sharing_properties.py, test_cohort_credit_properties.py)
generate ClusterQueues in one flavor under a cohort tree, build a cache of them with a
LocalQueue each and submit single-pod workloads; these builders keep the two modules'
worlds the same.
"""

from __future__ import annotations

from admission.engine.cache import Cache
from queues.model import (
    FlavorQuotas,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)

FLAVOR = "default"


def _group(cpu: int, gpu: int | None = None) -> list[ResourceGroup]:
    resources = {"cpu": ResourceQuota(nominal=cpu * 1000)}
    if gpu is not None:
        resources["nvidia.com/gpu"] = ResourceQuota(nominal=gpu)
    return [
        ResourceGroup(
            covered_resources=list(resources),
            flavors=[FlavorQuotas(name=FLAVOR, resources=resources)],
        )
    ]


def _cache(cqs: dict, cohorts: dict) -> Cache:
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    return Cache(
        flavors={FLAVOR: ResourceFlavor(name=FLAVOR)},
        cluster_queues=cqs,
        cohorts=cohorts,
        local_queues=lqs,
    )


def _pending(cq: str, name: str, usage: dict[str, int]) -> Workload:
    return Workload(
        namespace=f"ns-{cq}",
        name=name,
        uid=name,
        queue_name="lq",
        creation_time=1000.0,
        pod_sets=[PodSet(name="main", count=1, requests=dict(usage))],
    )
