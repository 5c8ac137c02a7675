"""The document and the table of ``plan`` across clusters.

The document is the manager's plan document (CLI.md) with one more key,
``multiKueue``: the dispatcher, one entry per workload of a ClusterQueue with a
MultiKueue check (the worker it runs on, or why it waits, and the dispatcher's
reasons), and each worker's own plan document, copies included. With a what-if,
``whatIf`` holds the manager's ``changes`` (as a single-cluster what-if) and
``dispatchChanges``: the workloads whose worker or reason differs.
"""

from __future__ import annotations

from typing import Any

from admission.drivers.multicluster import ClustersResult
from admission.drivers.plan import _table, plan_json, plan_table, what_if_diff


def clusters_json(result: ClustersResult) -> dict[str, Any]:
    """The manager's plan document plus ``multiKueue`` (see the module docstring)."""
    doc = plan_json(result.manager)
    doc["multiKueue"] = {
        "dispatcher": result.dispatcher,
        "workloads": [d.json() for d in result.dispatches],
        "workers": {
            name: {"paths": result.paths[name], "plan": plan_json(plan)}
            for name, plan in result.workers.items()
        },
    }
    return doc


def clusters_what_if(
    before: dict[str, Any],
    after: dict[str, Any],
    files: list[str],
    worker_files: dict[str, list[str]],
) -> dict[str, Any]:
    """``whatIf`` of two documents of :func:`clusters_json`: what the edit changes on
    the manager, and where the MultiKueue workloads run."""

    def where(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            w["workload"]: {"worker": w["worker"], "reason": w["reason"]}
            for w in doc["multiKueue"]["workloads"]
        }

    b, a = where(before), where(after)
    return {
        "files": files,
        "workerFiles": worker_files,
        "changes": what_if_diff(before, after),
        "dispatchChanges": [
            {"workload": k, "before": b.get(k), "after": a.get(k)}
            for k in sorted(set(b) | set(a))
            if b.get(k) != a.get(k)
        ],
    }


def _where(o: dict[str, Any] | None) -> str:
    if o is None:
        return "-"
    return f"runs on {o['worker']}" if o["worker"] else f"waits ({o['reason']})"


def clusters_table(doc: dict[str, Any], *, wide: bool = False) -> str:
    """The manager's plan table, then where each MultiKueue workload runs and each
    worker's usage (``wide``: the dispatcher's reasons, and every worker's whole plan)."""
    mk = doc["multiKueue"]
    lines = [
        plan_table(doc, wide=wide).rstrip("\n"),
        "",
        f"MULTIKUEUE (dispatcher {mk['dispatcher']})",
    ]
    header: tuple[str, ...] = ("WORKLOAD", "CLUSTERQUEUE", "WORKER", "REASON", "MESSAGE")
    rows: list[tuple[str, ...]] = [(*header, "DISPATCHER") if wide else header]
    for d in mk["workloads"]:
        row: tuple[str, ...] = (
            d["workload"],
            d["clusterQueue"] or "-",
            d["worker"] or "-",
            d["reason"],
            d["message"],
        )
        rows.append((*row, "; ".join(d["dispatcherReasons"])) if wide else row)
    lines += _table(rows)
    if "whatIf" in doc:
        lines += ["", "WHAT-IF DISPATCH CHANGES"]
        rows = [("WORKLOAD", "BEFORE", "AFTER")]
        for c in doc["whatIf"]["dispatchChanges"]:
            rows.append((c["workload"], _where(c["before"]), _where(c["after"])))
        lines += _table(rows)
    for name, w in mk["workers"].items():
        lines += ["", f"WORKER {name} ({', '.join(w['paths'])})"]
        if wide:
            lines.append(plan_table(w["plan"], wide=True).rstrip("\n"))
            continue
        rows = [("CLUSTERQUEUE", "FLAVOR", "RESOURCE", "TOTAL", "BORROWED")]
        for cq, flavors in w["plan"]["usage"].items():
            for flv, res in flavors.items():
                for r, u in res.items():
                    rows.append((cq, flv, r, u["total"], u["borrowed"]))
        lines += _table(rows)
    return "\n".join(lines) + "\n"
