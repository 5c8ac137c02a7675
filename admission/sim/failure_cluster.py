"""The cluster of the node-failure runs: H100 nodes in racks and blocks, two pools.

* ``blocks × racks × nodes`` nodes of 8 GPUs, labelled with their block, rack and host
  (a Topology ``h100``: block → rack → host). The first ``tas_blocks`` blocks are the
  topology-aware pool (ResourceFlavor ``h100-tas``, ClusterQueue ``tas``); the rest is a
  plain pool (flavor ``h100`` without a topology, ClusterQueue ``plain``) whose pods the
  simulator places the way kube-scheduler would (:mod:`admission.sim.failure_pods`).
* The gang mix of the bundled scenarios at 8 GPUs a node: rack gangs of 2, 4 and 6 pods
  that *require* one rack and block gangs of 16 and 32 pods that *prefer* one block (as
  ``gpu-topology.yaml``), training gangs of 1–8 whole nodes and small 1–4 GPU jobs
  without a topology request (as ``gpu-cluster.yaml``). 15 % are production (priority
  500, preempting research at 100 inside their ClusterQueue). 85 % checkpoint every
  30–60 minutes (±10 %); the rest never do (an interruption reruns them from the start).
* Arrivals spread uniformly over ``days``, until each pool is offered ``load`` × its
  GPU-hours. Deterministic (fixed seed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from admission.engine.tas.domains import HOSTNAME, Node
from admission.sim.scenario import US_PER_S, Scenario, SimWorkload
from queues.model import (
    LOWER_PRIORITY,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Topology,
    TopologyRequest,
    Workload,
)

GPU = "nvidia.com/gpu"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
GPUS_PER_NODE = 8
NAMESPACE = "train"
TAS, PLAIN = "tas", "plain"
HOUR_US = 3600 * US_PER_S

# (class, pods, GPUs a pod, topology request, weight, runtime hours (low, high))
_TAS_MIX = (
    ("rack-2", 2, 8, TopologyRequest(required=RACK), 25, (2.0, 12.0)),
    ("rack-4", 4, 8, TopologyRequest(required=RACK), 30, (2.0, 12.0)),
    ("rack-6", 6, 8, TopologyRequest(required=RACK), 15, (2.0, 12.0)),
    ("block-16", 16, 8, TopologyRequest(preferred=BLOCK), 20, (4.0, 16.0)),
    ("block-32", 32, 8, TopologyRequest(preferred=BLOCK), 10, (4.0, 16.0)),
)
_PLAIN_MIX = (
    ("gang-1", 1, 8, None, 20, (2.0, 12.0)),
    ("gang-2", 2, 8, None, 20, (2.0, 12.0)),
    ("gang-4", 4, 8, None, 15, (2.0, 12.0)),
    ("gang-8", 8, 8, None, 10, (2.0, 12.0)),
    ("small-1", 1, 1, None, 15, (0.5, 3.0)),
    ("small-2", 1, 2, None, 10, (0.5, 3.0)),
    ("small-4", 1, 4, None, 10, (0.5, 3.0)),
)


@dataclass(slots=True)
class FailureCluster:
    """The scenario (queue objects, TAS nodes, workloads) and the plain pool's nodes."""

    scenario: Scenario
    plain_nodes: dict[str, dict[str, str]]  # name -> labels (8 GPUs each)

    @property
    def node_gpus(self) -> dict[str, int]:
        """Every node of both pools -> its GPUs."""
        out = dict.fromkeys(self.scenario.nodes, GPUS_PER_NODE)
        out.update(dict.fromkeys(self.plain_nodes, GPUS_PER_NODE))
        return out


def build(
    *,
    blocks: int = 4,
    racks: int = 8,
    nodes: int = 8,
    tas_blocks: int = 3,
    days: float = 30.0,
    load: float = 0.9,
    seed: int = 30,
) -> FailureCluster:
    """The cluster and its workloads (module docstring)."""
    if not 0 < tas_blocks < blocks:
        raise ValueError("tas_blocks must leave at least one block to each pool")
    tas_nodes: dict[str, Node] = {}
    plain_nodes: dict[str, dict[str, str]] = {}
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                host = f"b{b}-r{r}-n{n}"
                pool = TAS if b < tas_blocks else PLAIN
                labels = {BLOCK: f"b{b}", RACK: f"b{b}-r{r}", HOSTNAME: host, "pool": pool}
                if pool == TAS:
                    tas_nodes[host] = Node(
                        name=host, labels=labels, allocatable={GPU: GPUS_PER_NODE, "pods": 110}
                    )
                else:
                    plain_nodes[host] = labels
    flavors = {
        "h100-tas": ResourceFlavor(
            name="h100-tas", node_labels={"pool": TAS}, topology_name="h100"
        ),
        "h100": ResourceFlavor(name="h100", node_labels={"pool": PLAIN}),
    }
    quotas = {
        TAS: ("h100-tas", len(tas_nodes) * GPUS_PER_NODE),
        PLAIN: ("h100", len(plain_nodes) * GPUS_PER_NODE),
    }
    cluster_queues = {
        name: ClusterQueue(
            name=name,
            namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
            resource_groups=[
                ResourceGroup(
                    covered_resources=[GPU],
                    flavors=[FlavorQuotas(name=flavor, resources={GPU: ResourceQuota(nominal=q)})],
                )
            ],
        )
        for name, (flavor, q) in quotas.items()
    }
    local_queues = {
        f"{NAMESPACE}/{name}": LocalQueue(namespace=NAMESPACE, name=name, cluster_queue=name)
        for name in quotas
    }
    rng = random.Random(seed)
    workloads: list[SimWorkload] = []
    pool_nodes = {TAS: len(tas_nodes), PLAIN: len(plain_nodes)}
    for queue, mix in ((TAS, _TAS_MIX), (PLAIN, _PLAIN_MIX)):
        offered = load * quotas[queue][1] * days * 24  # GPU-hours
        fits = tuple(  # a small cluster leaves out the gangs it cannot hold
            m
            for m in mix
            if m[1] <= (nodes if m[3] is not None and m[3].required else pool_nodes[queue])
        )
        workloads.extend(_workloads(rng, queue, fits, offered, days))
    workloads.sort(key=lambda s: (s.arrival_us, s.workload.name))
    scenario = Scenario(
        name="gpu-failures",
        flavors=flavors,
        cluster_queues=cluster_queues,
        cohorts={},
        local_queues=local_queues,
        workloads=workloads,
        source="admission.sim.failure_cluster",
        topologies={"h100": Topology(name="h100", levels=(BLOCK, RACK, HOSTNAME))},
        nodes=tas_nodes,
    )
    return FailureCluster(scenario=scenario, plain_nodes=plain_nodes)


def _workloads(
    rng: random.Random, queue: str, mix: tuple, offered: float, days: float
) -> list[SimWorkload]:
    weights = [m[4] for m in mix]
    out: list[SimWorkload] = []
    total = 0.0
    i = 0
    while total < offered:
        cls, pods, per_pod, topology, _, (low, high) = rng.choices(mix, weights)[0]
        hours = math.exp(rng.uniform(math.log(low), math.log(high)))
        total += pods * per_pod * hours
        production = rng.random() < 0.15
        ckpt_us = 0
        if rng.random() < 0.85:
            ckpt_us = round(rng.uniform(30, 60) * 60 * US_PER_S)
        wl = Workload(
            namespace=NAMESPACE,
            name=f"{queue}-{cls}-{i:05d}",
            queue_name=queue,
            priority=500 if production else 100,
            pod_sets=[PodSet(name="main", count=pods, requests={GPU: per_pod}, topology=topology)],
        )
        out.append(
            SimWorkload(
                workload=wl,
                arrival_us=round(rng.uniform(0, days * 24) * HOUR_US),
                runtime_us=round(hours * HOUR_US),
                wl_class=cls,
                checkpoint_interval_us=ckpt_us,
                checkpoint_jitter_us=ckpt_us // 10,
            )
        )
        i += 1
    return out
