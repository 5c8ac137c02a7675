"""The plain pool's pods in a node-failure run: where kube-scheduler would bind them.

Workloads of a flavor without a topology are admitted on quota alone; their pods are
then bound by kube-scheduler, which the simulator stands in for here: every pod of the
gang on a node that is up, has room and is not excluded by the pod's required node
affinity, the fullest such node first (bin packing, ties by name). A gang is bound
whole or not at all (its pods wait for room otherwise), so a held gang never strands a
part of itself. A node that goes down loses its pods; it comes back empty.
"""

from __future__ import annotations

from collections.abc import Iterable


class PlainPool:
    """Nodes (name -> GPUs), their free GPUs and the pods bound on them."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.capacity = dict(nodes)
        self.free = dict(nodes)
        self.down: set[str] = set()
        self.cordoned: set[str] = set()  # up, but nothing new is bound there
        self.pods: dict[str, list[tuple[str, int]]] = {}  # workload -> (node, GPUs) per pod

    def fit(self, need: Iterable[int], exclude: Iterable[str] = ()) -> list[str] | None:
        """Nodes for pods needing ``need`` GPUs each (in that order), or None."""
        skip = set(exclude) | self.down | self.cordoned
        free = {n: f for n, f in self.free.items() if n not in skip}
        out: list[str] = []
        needs = list(need)
        for gpus in needs:
            best = min(
                (n for n, f in free.items() if f >= gpus), key=lambda n: (free[n], n), default=None
            )
            if best is None:
                return None
            free[best] -= gpus
            out.append(best)
        return out

    def bind(self, key: str, need: list[int], exclude: Iterable[str] = ()) -> list[str] | None:
        """Bind more pods of ``key`` (all or none): their nodes, or None."""
        nodes = self.fit(need, exclude)
        if nodes is None:
            return None
        bound = self.pods.setdefault(key, [])
        for node, gpus in zip(nodes, need, strict=True):
            self.free[node] -= gpus
            bound.append((node, gpus))
        return nodes

    def release(self, key: str) -> None:
        for node, gpus in self.pods.pop(key, []):
            if node not in self.down:
                self.free[node] += gpus

    def node_down(self, node: str) -> dict[str, list[int]]:
        """``node`` failed: workload -> the GPUs of each of its pods lost there."""
        self.down.add(node)
        lost: dict[str, list[int]] = {}
        for key, bound in self.pods.items():
            gone = [g for n, g in bound if n == node]
            if gone:
                lost[key] = gone
                bound[:] = [(n, g) for n, g in bound if n != node]
        self.free[node] = 0
        return lost

    def node_up(self, node: str) -> None:
        self.down.discard(node)
        self.free[node] = self.capacity[node]

    def hosts(self, key: str) -> set[str]:
        return {n for n, _ in self.pods.get(key, [])}
