"""Small scenarios for the simulator tests, built directly from model objects."""

from __future__ import annotations

from admission.sim.scenario import US_PER_S, Scenario, SimWorkload
from queues.model import (
    BEST_EFFORT_FIFO,
    NEVER,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)


def cq(
    name: str,
    nominal_cpu: float,
    *,
    cohort: str | None = None,
    borrowing: float | None = None,
    within: str = NEVER,
    reclaim: str = NEVER,
    strategy: str = BEST_EFFORT_FIFO,
) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        queueing_strategy=strategy,
        namespace_selector=LabelSelector(),
        preemption=PreemptionPolicy(within_cluster_queue=within, reclaim_within_cohort=reclaim),
        resource_groups=[
            ResourceGroup(
                covered_resources=["cpu"],
                flavors=[
                    FlavorQuotas(
                        name="default",
                        resources={
                            "cpu": ResourceQuota(
                                nominal=int(nominal_cpu * 1000),
                                borrowing_limit=None
                                if borrowing is None
                                else int(borrowing * 1000),
                            )
                        },
                    )
                ],
            )
        ],
    )


def wl(
    name: str,
    queue: str,
    *,
    arrival: float,
    runtime: float,
    cpu: float = 1,
    pods: int = 1,
    priority: int = 0,
    cls: str = "default",
) -> SimWorkload:
    return SimWorkload(
        workload=Workload(
            namespace=queue,
            name=name,
            queue_name="lq",
            priority=priority,
            pod_sets=[PodSet(name="main", count=pods, requests={"cpu": int(cpu * 1000)})],
        ),
        arrival_us=round(arrival * US_PER_S),
        runtime_us=round(runtime * US_PER_S),
        wl_class=cls,
    )


def scenario(
    queues: list[ClusterQueue], workloads: list[SimWorkload], *, name: str = "test"
) -> Scenario:
    return Scenario(
        name=name,
        flavors={"default": ResourceFlavor(name="default")},
        cluster_queues={q.name: q for q in queues},
        cohorts={},
        local_queues={
            f"{q.name}/lq": LocalQueue(namespace=q.name, name="lq", cluster_queue=q.name)
            for q in queues
        },
        workloads=workloads,
    )


GENERATOR_SMALL = """
cohorts:
  - className: cohort
    count: 2
    queuesSets:
    - className: cq
      count: 2
      nominalQuota: 4
      borrowingLimit: 4
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 20
        creationIntervalMs: 50
        workloads:
        - className: small
          runtimeMs: 200
          priority: 50
          request: 1
      - count: 5
        creationIntervalMs: 200
        workloads:
        - className: large
          runtimeMs: 300
          priority: 200
          request: 4
"""

TRACE_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: team-a}
"""
