"""The kueuectl verbs against a live cluster: ``quartermaster <verb> ...`` and, as a
kubectl plugin, ``kubectl qm <verb> ...`` (the ``kubectl-qm`` entry point).

The verbs, columns, aliases and flags are kueuectl's (``cmd/kueuectl/app``):

* ``create localqueue NAME -c CQ [-i] [--dry-run=none|client|server]`` (``client``
  builds and prints the object without contacting the cluster);
* ``list clusterqueues|localqueues|workloads|resourceflavors`` with kueuectl's columns
  (:mod:`.kueuectl_list`; ``-o wide`` adds the columns of :mod:`.kueuectl_format`), ``-l``/``--field-selector``,
  ``-A``, ``-c``/``-q`` filters, ``--status``, ``--active``, ``--for job/NAME``;
  ``POSITION IN QUEUE`` comes from the visibility API;
* ``stop``/``resume`` ``clusterqueue|localqueue NAME [--keep-already-running]`` (the
  ``stopPolicy``: ``HoldAndDrain``, or ``Hold`` with the flag; ``None`` to resume) and
  ``stop``/``resume workload NAME`` (``spec.active``);
* ``version [--client]`` (the client's version needs no cluster).

As kubectl: a table whether stdout is a terminal or a pipe (``-o`` picks another
format), one line on stderr for an error, exit 130 on Ctrl-C.

Beyond kueuectl: ``why WORKLOAD`` (:mod:`.kueuectl_why`) says in numbers why a workload
waits and which quota change would admit it.

The API calls are in :mod:`admission.kube.client.kueuectl_calls`; this module parses and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from admission.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    version,
)
from admission.kube.client import kueuectl_calls as api

from .kueuectl_format import (
    name_of,
    namespace_of,
    print_objects,
)
from .kueuectl_list import (
    STATUSES,
    cmd_list_cluster_queues,
    cmd_list_local_queues,
    cmd_list_resource_flavors,
    cmd_list_workloads,
)

DEPLOYMENT = ("quartermaster-system", "quartermaster-controller-manager", "manager")
Obj = dict[str, Any]

CQ_NAMES = ("clusterqueue", "clusterqueues", "cq")
LQ_NAMES = ("localqueue", "localqueues", "lq")
WL_NAMES = ("workload", "workloads", "wl", "kwl", "kueueworkload", "kueueworkloads")
RF_NAMES = ("resourceflavor", "resourceflavors", "rf")
_STATUS_CHOICES = ", ".join(STATUSES)


# -- the verbs --------------------------------------------------------------------------------


async def _with_api(args: argparse.Namespace, fn: Callable[[api.UserApi], Awaitable[int]]) -> int:
    session = await api.UserApi.connect(kubeconfig=args.kubeconfig, context=args.context)
    try:
        return await fn(session)
    finally:
        await session.close()


async def cmd_create_local_queue(args: argparse.Namespace, session: api.UserApi) -> int:
    ns = namespace_of(args, session)
    if not args.clusterqueue:
        raise UsageError("clusterqueue must be specified")
    if not args.ignore_unknown_cq:
        await session.get(api.CLUSTER_QUEUES, args.clusterqueue)  # 404 is the error
    lq = await session.create(
        api.LOCAL_QUEUES, _local_queue(args, ns), namespace=ns, dry_run=args.dry_run == "server"
    )
    _print_result(args, lq, "created")
    return EXIT_OK


def _print_result(args: argparse.Namespace, obj: Obj, operation: str) -> None:
    output = args.output
    if output in ("", "name"):
        suffix = {"client": " (dry run)", "server": " (server dry run)"}.get(args.dry_run, "")
        op = f"{operation}{suffix}".strip()
        print(name_of(obj, op) if output == "" or op else name_of(obj))
        return
    print_objects(sys.stdout, [obj], output, list_kind="")


async def _patch(
    args: argparse.Namespace,
    session: api.UserApi,
    res: Any,
    *,
    namespaced: bool,
    patch: Obj,
    operation: str,
) -> int:
    ns = namespace_of(args, session) if namespaced else None
    obj = await session.get(res, args.name, namespace=ns)
    if args.dry_run == "client":
        merged = json.loads(json.dumps(obj))
        for k, v in patch.get("spec", {}).items():
            merged.setdefault("spec", {})[k] = v
        obj = merged
    else:
        obj = await session.merge_patch(
            res, args.name, patch, namespace=ns, dry_run=args.dry_run == "server"
        )
    _print_result(args, obj, operation)
    return EXIT_OK


def _stop_policy(args: argparse.Namespace) -> str:
    return "Hold" if args.keep_already_running else "HoldAndDrain"


async def cmd_stop(args: argparse.Namespace, session: api.UserApi) -> int:
    kind, verb = args.kind, "stopped"
    if kind in CQ_NAMES:
        patch = {"spec": {"stopPolicy": _stop_policy(args)}}
        return await _patch(
            args, session, api.CLUSTER_QUEUES, namespaced=False, patch=patch, operation=verb
        )
    if kind in LQ_NAMES:
        patch = {"spec": {"stopPolicy": _stop_policy(args)}}
        return await _patch(
            args, session, api.LOCAL_QUEUES, namespaced=True, patch=patch, operation=verb
        )
    if args.keep_already_running:
        raise UsageError("--keep-already-running applies to clusterqueue and localqueue")
    return await _patch(
        args, session, api.WORKLOADS, namespaced=True, patch={"spec": {"active": False}},
        operation="stopped",
    )  # fmt: skip


async def cmd_resume(args: argparse.Namespace, session: api.UserApi) -> int:
    kind, verb = args.kind, "resumed"
    if kind in CQ_NAMES:
        patch = {"spec": {"stopPolicy": "None"}}
        return await _patch(
            args, session, api.CLUSTER_QUEUES, namespaced=False, patch=patch, operation=verb
        )
    if kind in LQ_NAMES:
        patch = {"spec": {"stopPolicy": "None"}}
        return await _patch(
            args, session, api.LOCAL_QUEUES, namespaced=True, patch=patch, operation=verb
        )
    return await _patch(
        args, session, api.WORKLOADS, namespaced=True, patch={"spec": {"active": True}},
        operation="resumed",
    )  # fmt: skip


def client_version() -> str:
    """The installed package's version, as kubectl writes versions (``v0.1.0``)."""
    return f"v{version()}"


def version_offline(args: argparse.Namespace) -> int:
    """``version``: the client's version first, from nothing but the package; then the
    installed service's image when a cluster is configured and reachable. Without one
    (or with ``--client``) the client version is the whole answer."""
    print(f"Client Version: {client_version()}", flush=True)
    if args.client:
        return EXIT_OK
    try:
        return asyncio.run(_with_api(args, lambda session: cmd_version(args, session)))
    except (api.ConfigError, api.ApiError) as err:
        reason = err.message if isinstance(err, api.ApiError) else str(err)
        print(f"no server version: {reason}", file=sys.stderr)
        return EXIT_OK


def create_offline(args: argparse.Namespace) -> int | None:
    """``create localqueue --dry-run=client``: the object, built and printed without
    contacting a cluster (kubectl's client dry run); the namespace is ``-n``, else the
    kubeconfig context's, else ``default``."""
    if args.dry_run != "client":
        return None
    ns = args.namespace or api.context_namespace(kubeconfig=args.kubeconfig, context=args.context)
    _print_result(args, _local_queue(args, ns), "created")
    return EXIT_OK


def _local_queue(args: argparse.Namespace, ns: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": args.name, "namespace": ns},
        "spec": {"clusterQueue": args.clusterqueue},
    }


async def cmd_version(args: argparse.Namespace, session: api.UserApi) -> int:
    """The server half of ``version`` (see :func:`version_offline`)."""
    ns, name, container = DEPLOYMENT
    try:
        dep = await session.get(api.DEPLOYMENTS, name, namespace=ns)
    except api.ApiError as err:
        if err.not_found:
            return EXIT_OK
        raise
    for c in dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []:
        if c.get("name") == container:
            print(f"Quartermaster Controller Manager Image: {c.get('image')}")
    return EXIT_OK


async def cmd_why(args: argparse.Namespace, session: api.UserApi) -> int:
    from .kueuectl_why import run_why

    return await run_why(args, session, namespace_of(args, session))


# -- parsing ----------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, help="path to the kubeconfig file to use")
    p.add_argument("--context", default=None, help="the kubeconfig context to use")
    p.add_argument(
        "-n", "--namespace", default=None,
        help="the namespace (default: the context's namespace)",
    )  # fmt: skip


def _selectors(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-l",
        "--selector",
        default=None,
        help="label selector (label query) to filter on, e.g. -l key1=value1",
    )
    p.add_argument("--field-selector", default=None,
                   help="field selector to filter on, e.g. --field-selector metadata.name=x")  # fmt: skip


def _output(p: argparse.ArgumentParser, choices: tuple[str, ...]) -> None:
    """``-o``: without it, kubectl's human-readable table (or sentence), on a terminal
    and in a pipe alike."""
    p.add_argument(
        "-o", "--output", default="", choices=choices,
        help=f"output format: {', '.join(choices)} (default: a table)",
    )  # fmt: skip


def _dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", nargs="?", const="client", default="none",
        choices=("none", "client", "server"),
        help='"server" sends the request as a dry run, "client" only prints it',
    )  # fmt: skip


def add_commands(sub: Any) -> None:
    """Register the verbs on a subparsers object (``quartermaster`` and the plugin)."""
    create = sub.add_parser("create", help="create a LocalQueue (kueuectl create localqueue)")
    csub = create.add_subparsers(dest="kind", required=True, metavar="localqueue")
    lq = csub.add_parser("localqueue", aliases=["lq"], help="create a LocalQueue")
    lq.add_argument("name", help="the LocalQueue's name")
    lq.add_argument("-c", "--clusterqueue", required=True, help="the ClusterQueue it feeds")
    lq.add_argument("-i", "--ignore-unknown-cq", action="store_true",
                    help="create it even when the ClusterQueue does not exist")  # fmt: skip
    _dry_run(lq)
    _output(lq, ("json", "yaml", "name"))
    _common(lq)
    lq.set_defaults(run=cmd_create_local_queue, offline=create_offline)

    lst = sub.add_parser(
        "list", help="list ClusterQueues, LocalQueues, Workloads or ResourceFlavors"
    )
    lsub = lst.add_subparsers(dest="kind", required=True, metavar="KIND")
    cq = lsub.add_parser(CQ_NAMES[0], aliases=list(CQ_NAMES[1:]), help="list ClusterQueues")
    cq.add_argument("--active", action="append", default=None,
                    help="only active (true) or inactive (false) ClusterQueues")  # fmt: skip
    cq.set_defaults(run=cmd_list_cluster_queues)
    lqs = lsub.add_parser(LQ_NAMES[0], aliases=list(LQ_NAMES[1:]), help="list LocalQueues")
    lqs.add_argument(
        "-c", "--clusterqueue", default=None, help="only those feeding this ClusterQueue"
    )
    lqs.set_defaults(run=cmd_list_local_queues)
    wl = lsub.add_parser(WL_NAMES[0], aliases=list(WL_NAMES[1:]), help="list Workloads")
    wl.add_argument(
        "-c", "--clusterqueue", default=None, help="only those admitted by this ClusterQueue"
    )
    wl.add_argument("-q", "--localqueue", default=None, help="only those in this LocalQueue")
    wl.add_argument(
        "--status",
        action="append",
        default=None,
        metavar="STATUS",
        help=f"only workloads in this status, one of {_STATUS_CHOICES}; repeatable",
    )
    wl.add_argument("--for", dest="for_object", default=None, metavar="TYPE/NAME",
                    help="only the workloads of this job, e.g. --for job/my-job")  # fmt: skip
    wl.set_defaults(run=cmd_list_workloads)
    rf = lsub.add_parser(RF_NAMES[0], aliases=list(RF_NAMES[1:]), help="list ResourceFlavors")
    rf.set_defaults(run=cmd_list_resource_flavors)
    for p, namespaced in ((cq, False), (lqs, True), (wl, True), (rf, False)):
        _selectors(p)
        _output(p, ("wide", "json", "yaml", "name"))
        _common(p)
        if namespaced:
            p.add_argument("-A", "--all-namespaces", action="store_true",
                           help="list across all namespaces")  # fmt: skip

    for verb, run, summary in (
        ("stop", cmd_stop, "put a ClusterQueue, LocalQueue or Workload on hold"),
        ("resume", cmd_resume, "resume a held ClusterQueue, LocalQueue or Workload"),
    ):
        vp = sub.add_parser(verb, help=summary)
        vsub = vp.add_subparsers(dest="kind", required=True, metavar="KIND")
        for names, target in ((CQ_NAMES, "ClusterQueue"), (LQ_NAMES, "LocalQueue"),
                              (WL_NAMES, "Workload")):  # fmt: skip
            p = vsub.add_parser(names[0], aliases=list(names[1:]), help=f"{verb} a {target}")
            p.add_argument("name", help=f"the {target}'s name")
            p.set_defaults(kind=names[0])
            if verb == "stop" and target != "Workload":
                p.add_argument(
                    "--keep-already-running", action="store_true",
                    help="admitted workloads keep running (stopPolicy Hold); without it "
                    "they are evicted (HoldAndDrain)",
                )  # fmt: skip
            else:
                p.set_defaults(keep_already_running=False)
            _dry_run(p)
            _output(p, ("json", "yaml", "name"))
            _common(p)
            p.set_defaults(run=run)

    ver = sub.add_parser("version", help="the client version and the installed service's image")
    ver.add_argument("--client", action="store_true", help="only the client version")
    _common(ver)
    ver.set_defaults(run=cmd_version, offline=version_offline)

    why = sub.add_parser(
        "why", help="why a workload is pending, in numbers, and what quota change would admit it"
    )
    why.add_argument("workload", help="the Workload's name (or job/NAME for a Job's workload)")
    why.add_argument(
        "--config", default=None, help="the service's Configuration file, if not Kueue's defaults"
    )
    _output(why, ("json",))
    _common(why)
    why.set_defaults(run=cmd_why)


VERBS = ("create", "list", "stop", "resume", "version", "why")


def run(args: argparse.Namespace) -> int:
    """Run a parsed verb; errors become exit codes with one line on stderr."""
    prog = getattr(args, "prog_name", "quartermaster")
    offline = getattr(args, "offline", None)
    try:
        code = offline(args) if offline is not None else None
        if code is not None:
            return code
        return asyncio.run(_with_api(args, lambda session: args.run(args, session)))
    except (UsageError, api.ConfigError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except api.ApiError as err:
        if err.status == 0:  # no answer at all: kubectl's wording
            print(f"Unable to connect to the server: {err.message}", file=sys.stderr)
            return EXIT_INTERNAL
        print(f"Error from server ({err.reason}): {err.message}", file=sys.stderr)
        return EXIT_INTERNAL if err.status >= 500 else EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


def plugin_main(argv: list[str] | None = None) -> int:
    """``kubectl-qm``: the verbs alone, as a kubectl plugin (``kubectl qm list workloads``)."""
    p = argparse.ArgumentParser(
        prog="kubectl qm", description="Quartermaster's kueuectl: queues, workloads, positions"
    )
    sub = p.add_subparsers(dest="command", required=True)
    add_commands(sub)
    args = p.parse_args(argv)
    args.prog_name = "kubectl qm"
    return run(args)
