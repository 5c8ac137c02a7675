"""``quartermaster why WORKLOAD`` / ``kubectl qm why WORKLOAD``: the pending reason in
numbers, the workload's place in its queues, and the single quota changes that would
admit it (:mod:`admission.drivers.why` runs the engine's what-if on the cluster's
current objects, read with the user's credentials)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from admission.cli.common import EXIT_BAD_INPUT, EXIT_OK, UsageError
from admission.config.load import load_config
from admission.config.schema import ConfigError
from admission.drivers.why import Explanation, explain, inputs_from_objects
from admission.kube.client import kueuectl_calls as api
from admission.serve.queueview import positions
from queues.api.parse import InputError
from queues.api.progress import format_time
from queues.node_health import AvoidedNodes
from queues.quantity import format_quantity

KINDS = (
    api.ADMISSION_CHECKS,
    api.RESOURCE_FLAVORS,
    api.CLUSTER_QUEUES,
    api.COHORTS,
    api.LOCAL_QUEUES,
    api.WORKLOAD_PRIORITY_CLASSES,
    api.PRIORITY_CLASSES,
    api.NAMESPACES,
    api.WORKLOADS,
)


async def _workload_name(args: argparse.Namespace, session: api.UserApi, ns: str) -> str:
    """``NAME``, or ``job/NAME``: the Workload owned by that Job."""
    target = args.workload
    if "/" not in target:
        return target
    kind, _, name = target.partition("/")
    async for page in session.list_all(api.WORKLOADS, namespace=ns):
        for wl in page:
            for ref in wl["metadata"].get("ownerReferences") or []:
                if (
                    ref.get("kind", "").lower() == kind.lower().rstrip("s")
                    and ref.get("name") == name
                ):
                    return str(wl["metadata"]["name"])
    raise UsageError(f"no Workload in namespace {ns} belongs to {target}")


async def run_why(args: argparse.Namespace, session: api.UserApi, ns: str) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as err:
        raise UsageError(str(err)) from err
    name = await _workload_name(args, session, ns)
    wl = await session.get(api.WORKLOADS, name, namespace=ns)  # NotFound: the error
    docs: list[dict[str, Any]] = []
    for res in KINDS:
        async for page in session.list_all(res):
            docs += [{"apiVersion": res.api_version, "kind": res.kind, **o} for o in page]
    try:
        inputs = inputs_from_objects(docs)
    except InputError as err:
        print(f"why: the cluster holds an object the engine cannot read: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    inputs.dra = await _dra_objects(session)
    key = f"{ns}/{name}"
    why = explain(inputs, key, config=config)
    report = as_json(why) | node_failures(wl, time.time())
    if args.output == "json":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(as_text(report))
    return EXIT_OK


async def _dra_objects(session: api.UserApi) -> dict[tuple[str, str], dict[str, Any]]:
    """The DRA objects quota reads (DeviceClasses, ResourceClaimTemplates, ResourceSlices),
    by (kind, [namespace/]name); none when the cluster does not serve resource.k8s.io/v1
    or the user may not list them (the plan then says which claim it cannot count)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for res in api.DRA_WATCHED:
        try:
            async for page in session.list_all(res):
                for o in page:
                    meta = o.get("metadata") or {}
                    key = (
                        f"{meta.get('namespace')}/{meta.get('name')}"
                        if res.namespaced
                        else str(meta.get("name"))
                    )
                    out[(res.kind, key)] = {"apiVersion": res.api_version, "kind": res.kind, **o}
        except api.ApiError as err:
            if err.status not in (403, 404):
                raise
    return out


def as_json(why: Explanation) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "workload": why.workload,
        "clusterQueue": why.cluster_queue,
        "reason": why.reason,
        "message": why.message,
        "admittedWithoutChange": why.admitted_now,
        **({"admissionChecks": list(why.checks)} if why.checks else {}),
        "changes": [
            {
                "kind": c.owner_kind,
                "name": c.owner,
                "field": c.field,
                "flavor": c.flavor,
                "resource": c.resource,
                "current": format_quantity(c.resource, c.current)
                if c.current is not None
                else None,
                "needed": format_quantity(c.resource, c.needed),
            }
            for c in why.changes
        ],
    }
    cache = why.result.cache if why.result is not None else None
    if cache is not None and why.cluster_queue and not why.admitted_now:
        for entry in positions(cache, why.cluster_queue):
            if entry.workload.key == why.workload:
                doc["positionInClusterQueue"] = entry.position_in_cluster_queue
                doc["positionInLocalQueue"] = entry.position_in_local_queue
                doc["localQueue"] = entry.local_queue
                break
    return doc


def node_failures(wl: dict[str, Any], now: float) -> dict[str, Any]:
    """The workload's failed nodes awaiting a replacement (``status.unhealthyNodes``)
    and the nodes it avoids after a node failure, each until when."""
    doc: dict[str, Any] = {}
    unhealthy = [
        str(n.get("name"))
        for n in ((wl.get("status") or {}).get("unhealthyNodes") or [])
        if isinstance(n, dict)
    ]
    if unhealthy:
        doc["unhealthyNodes"] = unhealthy
    mem = AvoidedNodes.of((wl.get("metadata") or {}).get("annotations"))
    active = mem.active(now)
    if active:
        doc["avoidedNodes"] = {n: format_time(mem.until[n]) for n in active}
    return doc


def _node_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    if doc.get("unhealthyNodes"):
        lines.append(f"  failed node(s) awaiting a replacement: {', '.join(doc['unhealthyNodes'])}")
    for node, until in sorted((doc.get("avoidedNodes") or {}).items()):
        lines.append(f"  avoids node {node} until {until} (it failed on it)")
    return lines


def as_text(doc: dict[str, Any]) -> str:
    wl = doc["workload"]
    if doc["admittedWithoutChange"] and doc.get("admissionChecks"):
        return (
            f"Workload {wl} fits now: the next scheduling cycles reserve quota in ClusterQueue "
            f"{doc['clusterQueue']}; it is admitted once its AdmissionChecks are Ready: "
            f"{', '.join(doc['admissionChecks'])}.\n"
        )
    if doc["admittedWithoutChange"]:
        head = f"Workload {wl} fits now: the next scheduling cycles admit it in ClusterQueue {doc['clusterQueue']}."
        return "\n".join([head, *_node_lines(doc)]) + "\n"
    if doc["reason"] == "Admitted":
        head = f"Workload {wl} is admitted in ClusterQueue {doc['clusterQueue']}."
        return "\n".join([head, *_node_lines(doc)]) + "\n"
    if doc["reason"] == "UnsatisfiedAdmissionChecks":
        head = f"Workload {wl} is not admitted yet: {doc['reason']}\n  {doc['message']}"
        return "\n".join([head, *_node_lines(doc)]) + "\n"
    lines = [f"Workload {wl} is pending: {doc['reason']}", f"  {doc['message']}"]
    lines += _node_lines(doc)
    if "positionInClusterQueue" in doc:
        lines.append(
            f"  position {doc['positionInClusterQueue']} in ClusterQueue {doc['clusterQueue']}, "
            f"{doc['positionInLocalQueue']} in LocalQueue {doc['localQueue']}"
        )
    if doc["changes"]:
        lines.append("It would be admitted if (any one of):")
        for c in doc["changes"]:
            now = c["current"] if c["current"] is not None else "unset"
            lines.append(
                f"  {c['kind']} {c['name']}'s {c['field']} for {c['flavor']}/{c['resource']} "
                f"were {c['needed']} (now {now})"
            )
    elif doc["clusterQueue"]:
        lines.append("No single quota change of its ClusterQueue or Cohorts admits it.")
    return "\n".join(lines) + "\n"
