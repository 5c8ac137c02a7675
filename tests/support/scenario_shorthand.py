"""A scenario's objects: its bases, its own objects, and the shorthand for Workloads and Nodes expanded.

Scenario files (tests/scenarios/, the format is in ``tests.support.scenario_runner``)
write Workloads and Nodes in a short form -- a name, a queue, pod sets with requests, an
admission, progress signals -- that this module expands into real
``kueue.x-k8s.io/v1beta2`` Workloads and v1 Nodes, after the objects of the named bases
(tests/support/scenario_bases/); an object named like a base object replaces it. Tests
that build objects the same way (webhook and CRD tests) use the expansion directly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

BASES = Path(__file__).parent / "scenario_bases"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand_workload(w: dict[str, Any]) -> dict[str, Any]:
    """The fixture shorthand for a Workload, as a real kueue.x-k8s.io/v1beta2 object."""
    pod_sets = []
    raw_sets = w.get("podSets") or [{"requests": w.get("requests", {}), "count": w.get("count", 1)}]
    for i, p in enumerate(raw_sets):
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "requests": {k: str(v) for k, v in p.get("requests", {}).items()},
                        **(
                            {"limits": {k: str(v) for k, v in p["limits"].items()}}
                            if "limits" in p
                            else {}
                        ),
                    },
                }
            ]
        }
        for key in ("nodeSelector", "tolerations", "affinity"):
            if key in p:
                spec[key] = p[key]
        ps: dict[str, Any] = {
            "name": p.get("name", "main" if i == 0 else f"ps{i}"),
            "count": p.get("count", 1),
            "template": {"spec": spec},
        }
        if "minCount" in p:
            ps["minCount"] = p["minCount"]
        if "topologyRequest" in p:
            ps["topologyRequest"] = p["topologyRequest"]
        pod_sets.append(ps)
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": w["name"],
            "namespace": w.get("ns", "default"),
            "uid": w.get("uid", w["name"]),
            "creationTimestamp": _iso(w.get("created", 0)),
        },
        "spec": {"queueName": w.get("queue", "lq"), "podSets": pod_sets},
    }
    if "priority" in w:
        obj["spec"]["priority"] = w["priority"]
    if "active" in w:
        obj["spec"]["active"] = w["active"]
    if "reclaimablePods" in w:
        obj["status"] = {"reclaimablePods": w["reclaimablePods"]}
    if "checks" in w:
        obj.setdefault("status", {})["admissionChecks"] = [
            {
                "name": c["name"],
                "state": c["state"],
                "message": c.get("message", ""),
                "lastTransitionTime": _iso(c.get("at", 0)),
                **{k: c[k] for k in ("requeueAfterSeconds", "retryCount") if k in c},
            }
            for c in w["checks"]
        ]
    _progress_signals(w, obj)
    adm = w.get("admitted")
    if adm:
        psas = []
        for ps, raw in zip(pod_sets, raw_sets, strict=True):
            count = raw.get("count", 1)
            usage = {}
            for r, v in raw.get("requests", {}).items():
                usage[r] = str(_times(v, count))
            psa: dict[str, Any] = {
                "name": ps["name"],
                "flavors": adm["flavors"],
                "resourceUsage": usage,
                "count": count,
            }
            if ps["name"] in adm.get("topology", {}):
                from queues.api.topology_assignment import to_v1beta2
                from queues.model import TopologyAssignment

                levels = tuple(adm.get("topologyLevels", ["kubernetes.io/hostname"]))
                domains = tuple(
                    (tuple(k.split("/")), int(c))
                    for k, c in sorted(adm["topology"][ps["name"]].items())
                )
                psa["topologyAssignment"] = to_v1beta2(TopologyAssignment(levels, domains))
            psas.append(psa)
        status = obj.setdefault("status", {})
        status["admission"] = {"clusterQueue": adm["clusterQueue"], "podSetAssignments": psas}
        status["conditions"] = [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": _iso(adm.get("at", 0)),
            },
            *status.get("conditions", []),
        ]
        if adm.get("admittedCondition"):
            status["conditions"].append(
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                 "lastTransitionTime": _iso(adm.get("at", 0))}
            )  # fmt: skip
    return obj


def _progress_signals(w: dict[str, Any], obj: dict[str, Any]) -> None:
    """The shorthand's checkpoint, notice, requeue count and Finished (queues.api.progress)."""
    from queues.api.progress import (
        CHECKPOINT_ANNOTATION,
        CHECKPOINTED_CONDITION,
        DEADLINE_ANNOTATION,
        NOTICE_CONDITION,
    )

    annotations: dict[str, str] = {}
    conditions: list[dict[str, Any]] = []

    def condition(kind: str, at: float, reason: str) -> None:
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": "",
                "lastTransitionTime": _iso(at),
            }
        )

    if "checkpoint" in w:
        annotations[CHECKPOINT_ANNOTATION] = (
            w["checkpoint"] if isinstance(w["checkpoint"], str) else _iso(w["checkpoint"])
        )
    if "checkpointCondition" in w:
        condition(CHECKPOINTED_CONDITION, w["checkpointCondition"], "CheckpointSaved")
    if "notice" in w:
        condition(NOTICE_CONDITION, w["notice"]["at"], "PreemptionNoticed")
        annotations[DEADLINE_ANNOTATION] = _iso(w["notice"]["deadline"])
    if w.get("finished"):
        condition("Finished", w.get("created", 0), "Succeeded")
    annotations.update(w.get("annotations") or {})
    if annotations:
        obj["metadata"]["annotations"] = annotations
    status = obj.setdefault("status", {})
    if conditions:
        status["conditions"] = conditions
    if "requeueCount" in w:
        status["requeueState"] = {"count": w["requeueCount"]}
    if not status:
        del obj["status"]


NODE_KEYS = {"names", "labels", "allocatable", "taints", "ready", "unschedulable"}


def expand_nodes(group: dict[str, Any]) -> list[dict[str, Any]]:
    """The shorthand for v1 Nodes: ``{names: [a, b], labels: {...}, allocatable: {...},
    taints: [...], ready: false, unschedulable: true}``; each node also gets the label
    kubernetes.io/hostname=<name>; ``names`` may be ``"prefix[0-3]"`` for prefix0..prefix3."""
    names = group["names"]
    if isinstance(names, str):
        prefix, _, rng = names.partition("[")
        lo, _, hi = rng.rstrip("]").partition("-")
        names = [f"{prefix}{i}" for i in range(int(lo), int(hi) + 1)]
    out = []
    for name in names:
        status: dict[str, Any] = {
            "allocatable": {k: str(v) for k, v in group.get("allocatable", {}).items()}
        }
        if "ready" in group:
            status["conditions"] = [
                {"type": "Ready", "status": "True" if group["ready"] else "False"}
            ]
        spec: dict[str, Any] = {}
        if "taints" in group:
            spec["taints"] = group["taints"]
        if group.get("unschedulable"):
            spec["unschedulable"] = True
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {**group.get("labels", {}), "kubernetes.io/hostname": name},
                },
                "spec": spec,
                "status": status,
            }
        )
    return out


def _times(v: Any, n: int) -> str:
    from queues.quantity import parse_quantity

    total = parse_quantity(str(v)) * n
    return str(int(total)) if total.denominator == 1 else f"{float(total)}"


def object_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """What names an object: kind, namespace and name."""
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name")))


def base_objects(name: str) -> list[dict[str, Any]]:
    path = BASES / f"{name}.yaml"
    assert path.exists(), f"bases: no base {name!r} in {BASES} (known: {known_bases()})"
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def known_bases() -> list[str]:
    return sorted(p.stem for p in BASES.glob("*.yaml"))


def scenario_objects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The bases' objects, in order, then the scenario's own and its workloads.

    An object with the kind, namespace and name of one given earlier *replaces* it: a
    later base (an overlay such as ``cq-a-reclaims-any``) or the scenario's own
    ``objects`` change one ClusterQueue of a base, say its preemption policy, without
    copying the rest. A replacement identical to what it replaces is an error, so the
    tables stay factored."""
    objects: list[dict[str, Any]] = []
    index: dict[tuple[str, str, str], int] = {}
    where: dict[tuple[str, str, str], str] = {}

    def put(obj: dict[str, Any], source: str) -> None:
        key = object_key(obj)
        i = index.get(key)
        if i is None:
            index[key] = len(objects)
            objects.append(obj)
        else:
            assert obj != objects[i], (
                f"{source}: {key} is the same as in base {where[key]!r}; leave it out"
            )
            objects[i] = obj
        where[key] = source

    for base in spec.get("bases", []):
        for obj in base_objects(base):
            put(obj, base)
    for obj in spec.get("objects") or []:
        put(obj, "objects")
    objects += [n for group in spec.get("nodes") or [] for n in expand_nodes(group)]
    objects += [expand_workload(w) for w in spec.get("workloads") or []]
    return objects
