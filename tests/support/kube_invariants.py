"""The invariant checker for controller runs against the API-server double.

Installed on a double's store, it sees every write of a Workload as it happens and
checks, from the Workload objects alone (never from the service's memory):

* **no over-admission** — for every ClusterQueue without a cohort, the usage of the
  Workloads holding quota (``QuotaReserved=True`` + ``status.admission``, not
  ``Finished``) stays within the nominal quota, per flavor and resource;
* **no double admission** — how many times each Workload went from "no admission" to
  "admission" (a run without preemption must admit each one at most once).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from queues.quantity import to_units

Obj = dict[str, Any]


def holds_quota(wl: Obj | None) -> bool:
    if not wl:
        return False
    status = wl.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return (
        bool(status.get("admission"))
        and conds.get("QuotaReserved") == "True"
        and conds.get("Finished") != "True"
    )


def usage_by_cq(workloads: list[Obj]) -> dict[str, dict[tuple[str, str], int]]:
    out: dict[str, dict[tuple[str, str], int]] = {}
    for wl in workloads:
        if not holds_quota(wl):
            continue
        adm = wl["status"]["admission"]
        acc = out.setdefault(adm["clusterQueue"], {})
        for psa in adm.get("podSetAssignments") or []:
            for r, q in (psa.get("resourceUsage") or {}).items():
                fr = (psa["flavors"][r], r)
                acc[fr] = acc.get(fr, 0) + to_units(r, q)
    return out


def quotas_of(cluster_queues: list[Obj]) -> dict[str, dict[tuple[str, str], int]]:
    out: dict[str, dict[tuple[str, str], int]] = {}
    for cq in cluster_queues:
        acc = out.setdefault(cq["metadata"]["name"], {})
        for g in cq["spec"].get("resourceGroups") or []:
            for f in g["flavors"]:
                for r in f["resources"]:
                    acc[(f["name"], r["name"])] = to_units(r["name"], r["nominalQuota"])
    return out


@dataclass
class InvariantChecker:
    quotas: dict[str, dict[tuple[str, str], int]]
    admissions: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    checks: int = 0

    def install(self, server: Any) -> InvariantChecker:
        """Wrap the double's store so every Workload event is checked (server's loop);
        on the real backend, a watch of Workloads feeds :meth:`on_event` instead."""
        if hasattr(server, "watch_invariants"):
            server.watch_invariants(self)
            return self
        store = server.store
        rt = server.registry.resolve("workloads")
        emit = store._emit

        def checked_emit(rtype: Any, event: Any) -> None:
            emit(rtype, event)
            if rtype.key == rt.key:
                self.on_event(event.type, event.obj, event.old, store.list(rt))

        store._emit = checked_emit
        return self

    def on_event(self, kind: str, new: Obj | None, old: Obj | None, everything: list[Obj]) -> None:
        self.checks += 1
        had = bool(((old or {}).get("status") or {}).get("admission"))
        has = kind != "DELETED" and bool(((new or {}).get("status") or {}).get("admission"))
        if has and not had:
            m = (new or {}).get("metadata") or {}
            self.admissions[f"{m.get('namespace')}/{m.get('name')}"] += 1
        for cq, used in usage_by_cq(everything).items():
            quota = self.quotas.get(cq, {})
            for fr, v in used.items():
                if v > quota.get(fr, 0):
                    self.violations.append(f"{cq} {fr}: {v} used > {quota.get(fr, 0)} quota")

    def twice(self) -> dict[str, int]:
        return {k: n for k, n in self.admissions.items() if n > 1}
