"""The ``quartermaster`` command: ``plan``, ``simulate`` and ``serve``.

Exit codes for every command (CLI.md): 0 success, 2 bad input (one paragraph on
stderr naming the file, document and field), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from admission.cli import operator

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the user can fix; printed as one paragraph, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="quartermaster", description="Kueue-compatible GPU job admission"
    )
    sub = p.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="what the admission service would do now, offline")
    plan.add_argument(
        "-f", "--filename", dest="paths", action="append", required=True, metavar="PATH"
    )
    plan.add_argument("--cycles", type=int, default=None)
    plan.add_argument("--config", default=None)
    plan.add_argument("--now", default=None, help="evaluation time (RFC 3339)")
    plan.add_argument("--what-if", dest="what_if", action="append", default=[], metavar="FILE")
    plan.add_argument("-o", "--output", choices=["json", "table"], default=None)

    sim = sub.add_parser("simulate", help="run the engine over a scenario on a simulated clock")
    sim.add_argument("scenario", nargs="?", default=None)
    sim.add_argument("--config", default=None)
    sim.add_argument("--report", default=None, metavar="DIR")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--trace", default=None, metavar="FILE", help="JSON-lines workloads for a trace scenario"
    )
    sim.add_argument("-o", "--output", choices=["json", "table"], default=None)

    serve = sub.add_parser("serve", help="run the admission service")
    serve.add_argument("--config", default=None)
    serve.add_argument("--kubeconfig", default=None)
    serve.add_argument("--namespace", default="quartermaster-system")
    serve.add_argument("--webhook-port", type=int, default=9443)
    serve.add_argument("--metrics-port", type=int, default=8080)
    serve.add_argument("--health-port", type=int, default=8081)
    serve.add_argument("--cert-dir", default="/tmp/k8s-webhook-server/serving-certs")
    serve.add_argument("--leader-elect", action="store_true")
    serve.add_argument("--webhooks-only", action="store_true")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument(
        "-f", "--filename", dest="paths", action="append", default=[], metavar="PATH"
    )
    operator.register(sub, serve)  # kueuectl verbs; visibility/dashboard flags of serve
    return p


def _output_format(choice: str | None) -> str:
    if choice:
        return choice
    return "table" if sys.stdout.isatty() else "json"


def _parse_time(text: str, flag: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise BadInput(f"{flag}: {text!r} is not an RFC 3339 time") from e


def cmd_plan(args: argparse.Namespace) -> int:
    from admission.config import ConfigError, load_config
    from admission.drivers.loader import LoadError, load_paths, merge
    from admission.drivers.plan import plan_json, plan_table, run_plan, what_if_diff
    from admission.drivers.whatif import what_if

    if args.cycles is not None and args.cycles < 0:
        raise BadInput(f"--cycles: must be a non-negative integer, got {args.cycles}")
    try:
        config = load_config(args.config)
        inputs = load_paths(args.paths, frameworks=config.frameworks)
        overlay = load_paths(args.what_if, frameworks=config.frameworks) if args.what_if else None
    except (LoadError, ConfigError) as e:
        raise BadInput(str(e)) from e
    if args.now:
        config.now = _parse_time(args.now, "--now")
    if overlay is None:
        doc: dict[str, Any] = plan_json(run_plan(inputs, cycles=args.cycles, config=config))
    else:
        # The webhook's impact warnings run this same what-if (admission.drivers.whatif).
        w = what_if(inputs, merge(inputs, overlay), config=config, cycles=args.cycles)
        before, doc = plan_json(w.before), plan_json(w.after)
        doc["whatIf"] = {"files": list(args.what_if), "changes": what_if_diff(before, doc)}
    if _output_format(args.output) == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(plan_table(doc))
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    from admission.cli.simulate import run_simulate_command

    return run_simulate_command(args)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.webhooks_only:
        if not args.paths:
            raise BadInput("serve --webhooks-only: at least one -f PATH is required")
        from admission.config import ConfigError, load_config
        from admission.drivers.loader import LoadError, load_paths
        from queues.api import InputError
        from webhooks.config import WebhookConfig
        from webhooks.server import serve_webhooks_only

        try:
            config = WebhookConfig.from_config(load_config(args.config), namespace=args.namespace)
            load_paths(args.paths)  # bad input is refused before anything listens
        except (LoadError, ConfigError, InputError) as e:
            raise BadInput(str(e)) from e
        serve_webhooks_only(
            args.paths,
            cert_dir=args.cert_dir,
            port=args.webhook_port,
            host=args.host,
            config=config,
        )
        return EXIT_OK
    from admission.serve.service import run_service

    return run_service(args)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if operator.handles(args.command):
        return operator.run(args)
    handler = {"plan": cmd_plan, "simulate": cmd_simulate, "serve": cmd_serve}[args.command]
    try:
        return handler(args)
    except BadInput as e:
        print(f"quartermaster {args.command}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERNAL
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
