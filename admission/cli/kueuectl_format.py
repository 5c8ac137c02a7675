"""How the kueuectl verbs print: kubectl's tab writer and name printer, ages as
``HumanDuration``, a Workload's status as ``pkg/workload.Status``, and the extra
columns of ``-o wide``; and the namespace a verb addresses."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any, TextIO

import yaml

from queues.api.conditions import condition, is_true
from queues.node_health import AvoidedNodes
from queues.times import rfc3339_seconds

Obj = dict[str, Any]


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // (24 * 365), (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // (24 * 365)}y"


def age(obj: Obj, now: float) -> str:
    created = rfc3339_seconds((obj.get("metadata") or {}).get("creationTimestamp"))
    return human_duration(now - created) if created is not None else "<unknown>"


def print_table(out: TextIO, headers: list[str], rows: Iterable[list[Any]]) -> None:
    """kubectl's tab writer: columns padded to the widest cell plus three spaces."""
    table = [headers] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    for r in table:
        out.write("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def workload_status(wl: Obj) -> str:
    """``pkg/workload.Status``: finished, admitted, quotaReserved or pending."""
    if is_true(wl, "Finished"):
        return "finished"
    if is_true(wl, "Admitted"):
        return "admitted"
    if is_true(wl, "QuotaReserved"):
        return "quotaReserved"
    return "pending"


def print_objects(out: TextIO, objs: list[Obj], fmt: str, *, list_kind: str) -> None:
    if fmt == "name":
        for obj in objs:
            out.write(name_of(obj) + "\n")
        return
    doc: Any = (
        objs[0]
        if list_kind == ""
        else {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": objs}
    )
    if fmt == "json":
        json.dump(doc, out, indent=4)
        out.write("\n")
    else:
        yaml.safe_dump(doc, out, sort_keys=False)


def name_of(obj: Obj, operation: str = "") -> str:
    """kubectl's name printer: ``kind.group/name [operation]``."""
    group = (obj.get("apiVersion") or "").rpartition("/")[0]
    kind = (obj.get("kind") or "").lower()
    qualified = f"{kind}.{group}" if group else kind
    name = (obj.get("metadata") or {}).get("name", "")
    return f"{qualified}/{name}" + (f" {operation}" if operation else "")


# -- -o wide -------------------------------------------------------------------------------------

WIDE_CLUSTER_QUEUE = ["QUEUEING STRATEGY", "STOP POLICY", "RESERVING WORKLOADS", "FLAVORS"]
WIDE_LOCAL_QUEUE = ["STOP POLICY", "RESERVING WORKLOADS", "FLAVORS"]
WIDE_WORKLOAD = ["PRIORITY", "PRIORITY CLASS", "REASON", "UNHEALTHY NODES", "AVOIDED NODES"]
WIDE_RESOURCE_FLAVOR = ["NODE TAINTS", "TOPOLOGY"]


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def wide_cluster_queue(cq: Obj) -> list[Any]:
    """Queueing strategy, stop policy, workloads holding quota, and the flavors of its
    resource groups in order."""
    spec = _spec(cq)
    flavors = [
        str(f.get("name", ""))
        for group in spec.get("resourceGroups") or []
        for f in group.get("flavors") or []
    ]
    return [
        spec.get("queueingStrategy", "BestEffortFIFO"),
        spec.get("stopPolicy", "None"),
        _status(cq).get("reservingWorkloads", 0),
        ",".join(dict.fromkeys(flavors)),
    ]


def wide_local_queue(lq: Obj) -> list[Any]:
    """Stop policy, workloads holding quota, and the flavors its ClusterQueue offers."""
    status = _status(lq)
    flavors = [str(f.get("name", "")) for f in status.get("flavors") or []]
    return [
        _spec(lq).get("stopPolicy", "None"),
        status.get("reservingWorkloads", 0),
        ",".join(flavors),
    ]


def wide_workload(wl: Obj) -> list[Any]:
    """Priority, its class, and the reason of its latest QuotaReserved (or Evicted,
    Finished) condition: why it waits, or how it ended; a reservation waiting for its
    AdmissionChecks names them with their states (``UnsatisfiedAdmissionChecks:
    prov=Pending``). Then its failed nodes awaiting a replacement
    (``status.unhealthyNodes``) and the nodes it avoids after a node failure
    (``quartermaster.io/avoid-nodes``, still in force)."""
    spec = _spec(wl)
    ref = spec.get("priorityClassRef") or {}
    klass = ref.get("name") if isinstance(ref, dict) else None
    reason = ""
    for type_ in ("Finished", "Evicted", "Admitted", "QuotaReserved"):
        c = condition(wl, type_)
        if c is not None and (c.get("status") == "True" or type_ == "QuotaReserved"):
            reason = str(c.get("reason") or "")
            break
    if workload_status(wl) == "quotaReserved" and not is_true(wl, "Evicted"):
        waiting = ",".join(
            f"{c.get('name')}={c.get('state')}"
            for c in _status(wl).get("admissionChecks") or []
            if isinstance(c, dict) and c.get("state") != "Ready"
        )
        if waiting:
            reason = f"{(condition(wl, 'Admitted') or {}).get('reason') or reason}: {waiting}"
    unhealthy = [
        str(n.get("name"))
        for n in ((wl.get("status") or {}).get("unhealthyNodes") or [])
        if isinstance(n, dict)
    ]
    avoided = AvoidedNodes.of((wl.get("metadata") or {}).get("annotations")).active(time.time())
    return [
        spec.get("priority", ""),
        klass or spec.get("priorityClassName", ""),
        reason,
        ",".join(unhealthy),
        ",".join(avoided),
    ]


def wide_resource_flavor(rf: Obj) -> list[Any]:
    """The taints of its nodes and its topology."""
    spec = _spec(rf)
    taints = [
        f"{t.get('key', '')}"
        + (f"={t['value']}" if t.get("value") else "")
        + f":{t.get('effect', '')}"
        for t in spec.get("nodeTaints") or []
    ]
    return [", ".join(taints), spec.get("topologyName", "")]


def namespace_of(args: Any, session: Any) -> str:
    """The namespace a verb addresses: ``-n``, else the kubeconfig context's."""
    return args.namespace or session.namespace
