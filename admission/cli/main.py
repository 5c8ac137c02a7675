"""The ``quartermaster`` command: ``plan``, ``simulate`` and ``serve``.

Exit codes for every command are :mod:`.common`'s (CLI.md).
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from admission.cli import demo, operator
from admission.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PACKAGE,
    BadInput,
    version,
    warn,
    write_plan,
)
from admission.cli.logs import add_log_level, configure_logging, webhooks_only_banner
from queues.times import parse_rfc3339

KUEUE_API = "kueue.x-k8s.io/v1beta2"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their paragraphs; every option shows its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and default not in (None, False, [], argparse.SUPPRESS)
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def _add_filenames(
    p: argparse.ArgumentParser, *, required: bool, what: str, namespace: bool = True
) -> None:
    p.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=required,
        default=None if required else [],
        metavar="PATH",
        help=f"{what}: a YAML or JSON file, a directory of *.yaml, *.yml and *.json files "
        "(read in name order), or - for standard input; repeatable",
    )
    p.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="also read the subdirectories of directories given with -f",
    )
    if not namespace:
        p.set_defaults(default_namespace=None)
        return
    p.add_argument(
        "-n",
        "--namespace",
        dest="default_namespace",
        default=None,
        metavar="NAMESPACE",
        help="namespace of namespaced objects (LocalQueues, Workloads, Jobs) that name none "
        '(default: "default")',
    )


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="the service configuration: a Kueue Configuration "
        "(config.kueue.x-k8s.io/v1beta2) plus this project's extensions; without it "
        "Kueue's defaults apply",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PACKAGE,
        description="Kueue-compatible GPU job admission: queues, quotas and gang admission "
        f"speaking Kueue's API ({KUEUE_API}).",
        epilog="Exit codes: 0 success, 2 bad input (a message naming the file, document "
        "and field), 1 internal error.",
        formatter_class=_Formatter,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"{PACKAGE} {version()} (Kueue API {KUEUE_API})",
        help="print the version and exit",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = sub.add_parser(
        "plan",
        help="what the admission service would do now, offline",
        description="Run the admission service's scheduling cycles over the objects in "
        "the given files (queues, flavors, priority classes, Workloads, Jobs) and print "
        "what would be admitted, preempted and left pending, and why.",
        formatter_class=_Formatter,
    )
    _add_filenames(plan, required=True, what="the objects")
    plan.add_argument(
        "--cycles",
        type=int,
        default=None,
        metavar="N",
        help="run exactly N scheduling cycles (default: until one changes nothing)",
    )
    _add_config(plan)
    plan.add_argument(
        "--now",
        default=None,
        metavar="TIME",
        help="evaluation time (RFC 3339) for usage decay (default: no time passes)",
    )
    plan.add_argument(
        "--what-if",
        dest="what_if",
        action="append",
        default=[],
        metavar="FILE",
        help="objects that replace or add to those of -f (a quota edit); prints what "
        "changes; repeatable",
    )
    plan.add_argument(
        "--worker",
        dest="workers",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a MultiKueue worker cluster: NAME is a MultiKueueCluster of the -f files (the "
        "manager's), PATH a file or directory of that worker's own objects; the plan then "
        "dispatches the manager's workloads and says on which worker each would run; "
        "repeatable",
    )
    plan.add_argument(
        "--what-if-worker",
        dest="what_if_workers",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="with --worker: objects that replace or add to those of worker NAME (a quota "
        "edit on that cluster); prints where each workload's run changes; repeatable",
    )
    plan.add_argument(
        "-o",
        "--output",
        choices=["json", "table", "wide", "yaml"],
        default=None,
        help="output format (default: table on a terminal, json otherwise; wide is the "
        "table with every podSet and message)",
    )

    sim = sub.add_parser(
        "simulate",
        help="run the engine over a scenario on a simulated clock",
        description="Run the admission engine over a workload scenario on a simulated "
        "clock, as Kueue's scheduler performance runner does, and summarise time to "
        "admission, usage and evictions per class.",
        formatter_class=_Formatter,
    )
    sim.add_argument(
        "scenario",
        nargs="?",
        default=None,
        metavar="SCENARIO",
        help="a Kueue scheduler-performance generator config (cohorts[].queuesSets[]...) "
        "or a trace (queue objects plus a trace: list); default: the bundled day in a "
        "GPU cluster",
    )
    _add_config(sim)
    sim.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="write summary.json, per-workload and per-queue CSVs, charts and an index.html to DIR",
    )
    sim.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="seed of the run's random draws: the UIDs that order workloads of equal "
        "priority created at the same instant and, without SCENARIO, the bundled "
        "GPU-cluster day itself (default: the checked-in day, ties broken by name)",
    )
    sim.add_argument(
        "--trace", default=None, metavar="FILE", help="JSON-lines workloads for a trace scenario"
    )
    sim.add_argument(
        "--max-cycles",
        type=int,
        default=None,
        metavar="N",
        help="stop after N scheduling cycles (default: 5,000,000); a run stopped early "
        "says so in its summary (truncated, stoppedEarly: how far it got)",
    )
    sim.add_argument(
        "--cpu-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop once the run has used this many CPU seconds (checked between cycles, so a "
        "long cycle ends first; reported like --max-cycles)",
    )
    add_log_level(sim)
    sim.add_argument(
        "-o",
        "--output",
        choices=["json", "table", "yaml"],
        default=None,
        help="output format (default: table on a terminal, json otherwise)",
    )

    serve = sub.add_parser(
        "serve",
        help="run the admission service",
        description="The admission service: webhook server, controller and scheduler "
        "against a Kubernetes API server (kubeconfig, --kubeconfig or in-cluster).",
        formatter_class=_Formatter,
    )
    _add_config(serve)
    serve.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, then in-cluster)",
    )
    serve.add_argument(
        "--namespace",
        default="quartermaster-system",
        metavar="NS",
        help="the service's own namespace (Lease, certificate Secret, events)",
    )
    serve.add_argument(
        "--webhook-port",
        type=int,
        default=None,
        metavar="PORT",
        help="webhook HTTPS port (default: the Configuration's, else 9443)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="Prometheus metrics port (default: the Configuration's, else 8080)",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=None,
        metavar="PORT",
        help="health port, /healthz and /readyz (default: the Configuration's "
        "health.healthProbeBindAddress, else 8081)",
    )
    serve.add_argument(
        "--cert-dir",
        default=None,
        metavar="DIR",
        help="directory of the webhook's tls.crt and tls.key, and ca.crt (default: the "
        "Configuration's webhook.certDir, else /tmp/k8s-webhook-server/serving-certs)",
    )
    serve.add_argument(
        "--leader-elect",
        action="store_true",
        help="elect a leader through a Lease: only the leader schedules",
    )
    serve.add_argument(
        "--webhooks-only",
        action="store_true",
        help="serve only the webhooks, without a cluster, validating against the "
        "objects of -f (writes a self-signed CA to --cert-dir)",
    )
    serve.add_argument(
        "--host",
        default=None,
        metavar="ADDRESS",
        help="address the servers bind to (default: the Configuration's webhook.host, "
        "else 0.0.0.0)",
    )
    _add_filenames(serve, required=False, what="with --webhooks-only, the objects", namespace=False)
    add_log_level(serve)
    operator.register(sub, serve)  # kueuectl verbs; visibility/dashboard flags of serve
    demo.register(sub, _Formatter)
    return p


def _output_format(choice: str | None) -> str:
    if choice:
        return choice
    return "table" if sys.stdout.isatty() else "json"


def _parse_time(text: str, flag: str) -> float:
    try:
        return parse_rfc3339(text).timestamp()
    except ValueError as e:
        raise BadInput(f"{flag}: {text!r} is not an RFC 3339 time") from e


def _load(args: argparse.Namespace, paths: list[str], config: Any) -> Any:
    from admission.drivers.loader import load_paths

    return load_paths(
        paths,
        recursive=args.recursive,
        namespace=args.default_namespace,
        stdin=sys.stdin,
        frameworks=config.frameworks,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from admission.drivers.batch import without_cyclic_gc

    with without_cyclic_gc():  # a batch run: see admission.drivers.batch
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from admission.config.load import load_config
    from admission.config.schema import ConfigError
    from admission.drivers.documents import LoadError
    from admission.drivers.inputs import merge
    from admission.drivers.lint import input_warnings
    from admission.drivers.plan import (
        plan_json,
        plan_table,
        run_plan,
        what_if_diff,
    )
    from admission.drivers.whatif import what_if

    from .plan_positions import add_positions

    if args.cycles is not None and args.cycles < 0:
        raise BadInput(f"--cycles: must be a non-negative integer, got {args.cycles}")
    if sum(p == "-" for p in [*args.paths, *args.what_if]) > 1:
        raise BadInput("-f -: standard input can be read only once")
    if args.what_if_workers and not args.workers:
        raise BadInput("--what-if-worker: needs the workers, given with --worker NAME=PATH")
    if args.workers:
        from .plan_clusters import plan_clusters

        return plan_clusters(args, _output_format(args.output))
    try:
        config = load_config(args.config)
        inputs = _load(args, args.paths, config)
        overlay = _load(args, args.what_if, config) if args.what_if else None
    except (LoadError, ConfigError) as e:
        raise BadInput(str(e)) from e
    warn("plan", config.warnings)
    warn("plan", inputs.warnings + input_warnings(inputs))
    if args.now:
        config.now = _parse_time(args.now, "--now")
    if overlay is None:
        result = run_plan(inputs, cycles=args.cycles, config=config)
        doc: dict[str, Any] = plan_json(result)
        add_positions(doc, result.cache)
    else:
        warn("plan", overlay.warnings)
        merged = merge(inputs, overlay)
        known = set(input_warnings(inputs))
        warn("plan", [w for w in input_warnings(merged) if w not in known])
        # The webhook's impact warnings run this same what-if (admission.drivers.whatif).
        w = what_if(inputs, merged, config=config, cycles=args.cycles)
        before, doc = plan_json(w.before), plan_json(w.after)
        doc["whatIf"] = {"files": list(args.what_if), "changes": what_if_diff(before, doc)}
        add_positions(doc, w.after.cache)
    sides = [inputs] + ([overlay] if overlay else [])
    write_plan(doc, sides, _output_format(args.output), plan_table)
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    from admission.cli.simulate import run_simulate_command

    if args.log_level:
        configure_logging(args)

    return run_simulate_command(args)


def _listen_flags(args: argparse.Namespace) -> None:
    """Ports, host and certificate directory: the flag, else the Configuration's, else
    the built-in default (a broken configuration is reported by the command itself)."""
    from admission.config.listen import ListenDefaults, listen_defaults
    from admission.config.load import load_config
    from admission.config.schema import ConfigError

    try:
        defaults = listen_defaults(load_config(args.config))
    except ConfigError:
        defaults = ListenDefaults()
    for name in ("webhook_port", "metrics_port", "health_port", "cert_dir", "host"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(defaults, name))


def cmd_serve(args: argparse.Namespace) -> int:
    _listen_flags(args)
    if args.webhooks_only:
        if not args.paths:
            raise BadInput("serve --webhooks-only: at least one -f PATH is required")
        from admission.config.load import load_config
        from admission.config.schema import ConfigError
        from admission.drivers.documents import LoadError
        from queues.api.parse import InputError
        from webhooks.config import WebhookConfig
        from webhooks.server.entry import serve_webhooks_only

        try:
            loaded = load_config(args.config)
            config = WebhookConfig.from_config(loaded, namespace=args.namespace)
            inputs = _load(args, args.paths, loaded)  # bad input is refused before anything listens
        except (LoadError, ConfigError, InputError) as e:
            raise BadInput(str(e)) from e
        warn("serve", loaded.warnings + inputs.warnings)
        configure_logging(args)

        def banner(port: int, paths: list[str]) -> None:
            text = webhooks_only_banner(
                host=args.host, port=port, cert_dir=args.cert_dir, paths=paths
            )
            sys.stderr.write(text)
            sys.stderr.flush()

        try:
            serve_webhooks_only(
                args.paths,
                inputs=inputs,
                cert_dir=args.cert_dir,
                port=args.webhook_port,
                host=args.host,
                config=config,
                on_ready=banner,
            )
        except OSError as e:
            if e.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                raise
            print(f"quartermaster serve: cannot listen: {e}", file=sys.stderr)
            return EXIT_INTERNAL
        return EXIT_OK
    from admission.serve.service import run_service

    configure_logging(args)  # before serve's own basicConfig, which then keeps it
    return run_service(args)


def main(argv: list[str] | None = None) -> int:
    """Run one command; Ctrl-C anywhere exits 130 (128 + SIGINT) without a traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if operator.handles(args.command):
        return operator.run(args)
    if args.command == "demo":
        return demo.run(args)
    handler = {"plan": cmd_plan, "simulate": cmd_simulate, "serve": cmd_serve}[args.command]
    try:
        return handler(args)
    except BadInput as e:
        print(f"quartermaster {args.command}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
