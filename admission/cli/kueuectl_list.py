"""The kueuectl ``list`` verbs: ClusterQueues, LocalQueues, ResourceFlavors and Workloads
with kueuectl's columns and filters; a pending Workload's ``POSITION IN QUEUE`` comes
from the visibility API."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from admission.cli import kueuectl_format as fmt
from admission.cli.common import EXIT_OK, UsageError
from admission.kube.client import kueuectl_calls as api
from queues.api.conditions import condition, is_true
from queues.times import rfc3339_seconds

from .kueuectl_format import (
    age,
    human_duration,
    namespace_of,
    print_objects,
    print_table,
    workload_status,
)

Obj = dict[str, Any]
STATUSES = ("all", "pending", "quotareserved", "admitted", "finished")
_STATUS_QUOTED = ", ".join(f'"{v}"' for v in STATUSES[:-1]) + f' or "{STATUSES[-1]}"'


def no_resources(args: argparse.Namespace, session: api.UserApi, *, namespaced: bool) -> None:
    if namespaced and not getattr(args, "all_namespaces", False):
        print(f"No resources found in {namespace_of(args, session)} namespace.", file=sys.stderr)
    else:
        print("No resources found", file=sys.stderr)


async def cmd_list_cluster_queues(args: argparse.Namespace, session: api.UserApi) -> int:
    now = time.time()
    active = _active_filter(args.active)
    items: list[Obj] = []
    async for page in session.list_all(
        api.CLUSTER_QUEUES, label_selector=args.selector, field_selector=args.field_selector
    ):
        items += [cq for cq in page if active is None or is_true(cq, "Active") == active]
    if not items:
        no_resources(args, session, namespaced=False)
        return EXIT_OK
    if args.output not in ("", "wide"):
        print_objects(sys.stdout, items, args.output, list_kind="List")
        return EXIT_OK
    wide = args.output == "wide"
    rows = [
        [
            cq["metadata"]["name"],
            (cq.get("spec") or {}).get("cohortName", ""),
            (cq.get("status") or {}).get("pendingWorkloads", 0),
            (cq.get("status") or {}).get("admittedWorkloads", 0),
            str(is_true(cq, "Active")).lower(),
            age(cq, now),
            *(fmt.wide_cluster_queue(cq) if wide else []),
        ]
        for cq in items
    ]
    headers = ["NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE", "AGE"]
    print_table(sys.stdout, headers + (fmt.WIDE_CLUSTER_QUEUE if wide else []), rows)
    return EXIT_OK


def _active_filter(values: list[str] | None) -> bool | None:
    if not values:
        return None
    if len(values) > 1:
        raise UsageError("only one active flag can be provided")
    v = values[0].lower()
    if v not in ("true", "false"):
        raise UsageError(f'--active: invalid value "{values[0]}": must be true or false')
    return v == "true"


async def cmd_list_local_queues(args: argparse.Namespace, session: api.UserApi) -> int:
    now = time.time()
    ns = None if args.all_namespaces else namespace_of(args, session)
    items: list[Obj] = []
    async for page in session.list_all(
        api.LOCAL_QUEUES,
        namespace=ns,
        label_selector=args.selector,
        field_selector=args.field_selector,
    ):
        items += [
            lq
            for lq in page
            if not args.clusterqueue
            or (lq.get("spec") or {}).get("clusterQueue") == args.clusterqueue
        ]
    if not items:
        no_resources(args, session, namespaced=True)
        return EXIT_OK
    if args.output not in ("", "wide"):
        print_objects(sys.stdout, items, args.output, list_kind="List")
        return EXIT_OK
    wide = args.output == "wide"
    headers = ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "AGE"]
    headers += fmt.WIDE_LOCAL_QUEUE if wide else []
    rows = []
    for lq in items:
        row = [
            lq["metadata"]["name"],
            (lq.get("spec") or {}).get("clusterQueue", ""),
            (lq.get("status") or {}).get("pendingWorkloads", 0),
            (lq.get("status") or {}).get("admittedWorkloads", 0),
            age(lq, now),
            *(fmt.wide_local_queue(lq) if wide else []),
        ]
        rows.append([lq["metadata"]["namespace"], *row] if args.all_namespaces else row)
    print_table(sys.stdout, ["NAMESPACE", *headers] if args.all_namespaces else headers, rows)
    return EXIT_OK


async def cmd_list_resource_flavors(args: argparse.Namespace, session: api.UserApi) -> int:
    now = time.time()
    items: list[Obj] = []
    async for page in session.list_all(
        api.RESOURCE_FLAVORS, label_selector=args.selector, field_selector=args.field_selector
    ):
        items += page
    if not items:
        no_resources(args, session, namespaced=False)
        return EXIT_OK
    if args.output not in ("", "wide"):
        print_objects(sys.stdout, items, args.output, list_kind="List")
        return EXIT_OK
    wide = args.output == "wide"
    rows = []
    for rf in items:
        labels = (rf.get("spec") or {}).get("nodeLabels") or {}
        rows.append(
            [
                rf["metadata"]["name"],
                ", ".join(sorted(f"{k}={v}" for k, v in labels.items())),
                age(rf, now),
                *(fmt.wide_resource_flavor(rf) if wide else []),
            ]
        )
    headers = ["NAME", "NODE LABELS", "AGE"] + (fmt.WIDE_RESOURCE_FLAVOR if wide else [])
    print_table(sys.stdout, headers, rows)
    return EXIT_OK


def _status_filter(values: list[str] | None) -> set[str] | None:
    if not values:
        return None
    out = set()
    for v in values:
        if v.lower() not in STATUSES:
            raise UsageError(f"invalid status value ({v}). Must be {_STATUS_QUOTED}")
        out.add(v.lower())
    return None if "all" in out else out


async def cmd_list_workloads(args: argparse.Namespace, session: api.UserApi) -> int:
    now = time.time()
    statuses = _status_filter(args.status)
    for_kind, for_name = _for_object(args.for_object)
    ns = None if args.all_namespaces else namespace_of(args, session)
    items: list[Obj] = []
    async for page in session.list_all(
        api.WORKLOADS,
        namespace=ns,
        label_selector=args.selector,
        field_selector=args.field_selector,
    ):
        for wl in page:
            spec, status = wl.get("spec") or {}, wl.get("status") or {}
            if args.localqueue and spec.get("queueName") != args.localqueue:
                continue
            cq = (status.get("admission") or {}).get("clusterQueue")
            if args.clusterqueue and cq != args.clusterqueue:
                continue
            if statuses is not None and workload_status(wl).lower() not in statuses:
                continue
            if for_kind and not any(
                r.get("kind", "").lower() == for_kind and r.get("name") == for_name
                for r in (wl["metadata"].get("ownerReferences") or [])
            ):
                continue
            items.append(wl)
    if not items:
        no_resources(args, session, namespaced=True)
        return EXIT_OK
    if args.output not in ("", "wide"):
        print_objects(sys.stdout, items, args.output, list_kind="List")
        return EXIT_OK
    wide = args.output == "wide"
    cq_of = await _cluster_queues_of(session, items)
    positions = await _positions(session, items, cq_of)
    headers = ["NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS",
               "POSITION IN QUEUE", "EXEC TIME", "AGE"]  # fmt: skip
    headers += fmt.WIDE_WORKLOAD if wide else []
    rows = []
    for wl in items:
        meta, spec = wl["metadata"], wl.get("spec") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        owners = meta.get("ownerReferences") or []
        job_types = sorted(
            {_job_type(r.get("kind", ""), r.get("apiVersion", "")) for r in owners if r.get("kind")}
        )
        row = [
            meta["name"],
            ", ".join(job_types),
            ", ".join(sorted({r.get("name", "") for r in owners})),
            spec.get("queueName", ""),
            cq_of.get(key, ""),
            workload_status(wl).upper(),
            positions.get(key, ""),
            _exec_time(wl, now),
            age(wl, now),
            *(fmt.wide_workload(wl) if wide else []),
        ]
        rows.append([meta["namespace"], *row] if args.all_namespaces else row)
    print_table(sys.stdout, ["NAMESPACE", *headers] if args.all_namespaces else headers, rows)
    return EXIT_OK


def _job_type(kind: str, api_version: str) -> str:
    """kueuectl's JOB TYPE: the owner's singular resource name and group (``job.batch``),
    whole (``pytorchjob.kubeflow.org``): a cut type names no kind."""
    group = api_version.rpartition("/")[0]
    return f"{kind.lower()}.{group}" if group else kind.lower()


def _exec_time(wl: Obj, now: float) -> str:
    admitted = condition(wl, "Admitted")
    if admitted is None or admitted.get("status") != "True":
        return ""
    start = rfc3339_seconds(admitted.get("lastTransitionTime"))
    if start is None:
        return ""
    end = now
    finished = condition(wl, "Finished")
    if finished is not None and finished.get("status") == "True":
        end = rfc3339_seconds(finished.get("lastTransitionTime")) or now
    return human_duration(end - start)


def _for_object(value: str | None) -> tuple[str, str]:
    if not value:
        return "", ""
    parts = value.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError("--for must be in resource/name form")
    kind = parts[0].lower().split(".", 1)[0]
    kind = {"jobs": "job"}.get(kind, kind.rstrip("s") if kind.endswith("s") else kind)
    return kind, parts[1]


async def _cluster_queues_of(session: api.UserApi, items: list[Obj]) -> dict[str, str]:
    """Each workload's ClusterQueue: from its admission, else from its LocalQueue."""
    out: dict[str, str] = {}
    lqs: dict[tuple[str, str], str] = {}
    for wl in items:
        meta, spec = wl["metadata"], wl.get("spec") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if cq:
            out[key] = cq
            continue
        lq_key = (meta["namespace"], spec.get("queueName", ""))
        if lq_key not in lqs and lq_key[1]:
            lq = await session.get_or_none(api.LOCAL_QUEUES, lq_key[1], namespace=lq_key[0])
            lqs[lq_key] = ((lq or {}).get("spec") or {}).get("clusterQueue", "")
        out[key] = lqs.get(lq_key, "")
    return out


async def _positions(
    session: api.UserApi, items: list[Obj], cq_of: dict[str, str]
) -> dict[str, int]:
    """``positionInLocalQueue`` of every pending workload listed, from the visibility API:
    per ClusterQueue as kueuectl asks; where the user may not read a ClusterQueue's
    positions (a namespace's viewer), per LocalQueue."""
    pending = [wl for wl in items if workload_status(wl) == "pending"]
    out: dict[str, int] = {}
    by_cq: dict[str, list[Obj]] = {}
    for wl in pending:
        cq = cq_of.get(f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
        if cq:
            by_cq.setdefault(cq, []).append(wl)
    for cq, wls in sorted(by_cq.items()):
        try:
            summary = await session.pending_in_cluster_queue(cq)
        except api.ApiError as err:
            if err.status != 403:
                if not err.not_found:
                    print(f"warning: positions in {cq}: {err}", file=sys.stderr)
                continue
            summary = []
            for ns, lq in sorted(
                {
                    (w["metadata"]["namespace"], (w.get("spec") or {}).get("queueName", ""))
                    for w in wls
                }
            ):
                try:
                    summary += await session.pending_in_local_queue(ns, lq)
                except api.ApiError as lq_err:
                    if not lq_err.not_found and lq_err.status != 403:
                        print(f"warning: positions in {ns}/{lq}: {lq_err}", file=sys.stderr)
        for item in summary:
            m = item.get("metadata") or {}
            out[f"{m.get('namespace')}/{m.get('name')}"] = int(item.get("positionInLocalQueue", 0))
    return out
