"""``quartermaster demo``: its flags and help; what it runs is :mod:`admission.serve.demo`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Try the live service without a cluster. Starts an in-process Kubernetes API server
(HTTPS on loopback, with the project's CRDs), runs the admission service against it as
`serve` does (controller, scheduler, webhooks, metrics, Kueue's visibility API and the
dashboard), creates the example GPU organisation of manifests/examples/ through the
API, and prints the dashboard's address and a kubeconfig for `quartermaster
list|why|stop|resume` and `kubectl`.

A stand-in Job controller runs every admitted Job for a while and a new example Job
arrives every few seconds, so the dashboard moves; --no-jobs turns both off (admitted
Jobs then keep their quota). Runs until Ctrl-C (exit code 130) and removes everything it
created. It reads the repository's manifests/, so run it from a clone installed with
`pip install -e .`."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def register(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``demo`` to the ``quartermaster`` subcommands."""
    demo = sub.add_parser(
        "demo",
        help="the live service with its dashboard on an in-process API server (no cluster)",
        description=DESCRIPTION,
        formatter_class=formatter,
    )
    demo.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="the service configuration, as for serve (without it Kueue's defaults apply)",
    )
    demo.add_argument("--host", default="127.0.0.1", help="address the dashboard binds")
    demo.add_argument(
        "--port", type=int, default=8083, help="port of the dashboard (0: any free port)"
    )
    demo.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the kubeconfig here (a file that does not exist yet; removed when the "
        "demo stops) instead of in the demo's temporary directory",
    )
    demo.add_argument(
        "--no-jobs",
        dest="jobs",
        action="store_false",
        default=argparse.SUPPRESS,
        help="no stand-in Job controller and no new Jobs: only the examples, as admitted",
    )
    demo.set_defaults(jobs=True)
    demo.add_argument(
        "--seed", type=int, default=None, help="seed of the example Jobs' sizes and run times"
    )
    demo.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=LOG_LEVELS,
        help="the service's log level",
    )


def run(args: argparse.Namespace) -> int:
    from admission.config.load import load_config
    from admission.config.schema import ConfigError
    from admission.serve.demo import EXIT_BAD_INPUT, DemoOptions, run_demo

    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not 0 <= args.port <= 65535:
        print(f"quartermaster demo: --port {args.port}: not a port (0-65535)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"quartermaster demo: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    options = DemoOptions(
        config=config,
        host=args.host,
        port=args.port,
        kubeconfig_out=args.kubeconfig_out,
        jobs=args.jobs,
        seed=args.seed,
    )
    return run_demo(options)
