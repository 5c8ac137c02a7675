"""``quartermaster plan -f MANAGER --worker NAME=PATH ...``: the plan across clusters
(:mod:`admission.drivers.multicluster`), with ``plan``'s options and output formats."""

from __future__ import annotations

import argparse
import sys

from admission.cli.common import EXIT_OK, BadInput, warn, write_yaml
from queues.times import parse_rfc3339


def plan_clusters(args: argparse.Namespace, fmt: str) -> int:
    from admission.config.load import load_config
    from admission.config.schema import ConfigError
    from admission.drivers.documents import LoadError
    from admission.drivers.lint import input_warnings
    from admission.drivers.multicluster import run_clusters
    from admission.drivers.multicluster_inputs import (
        load_manager,
        load_workers,
        parse_worker_flag,
    )
    from admission.drivers.multicluster_report import clusters_json, clusters_table
    from admission.drivers.plan import plan_json_text

    from .plan_positions import add_positions

    if args.what_if:
        raise BadInput("--what-if: not available with --worker (edit a copy of the files)")
    try:
        flags = [parse_worker_flag(v) for v in args.workers]
    except ValueError as e:
        raise BadInput(str(e)) from e
    try:
        config = load_config(args.config)
        manager = load_manager(
            args.paths,
            recursive=args.recursive,
            namespace=args.default_namespace,
            stdin=sys.stdin,
            frameworks=config.frameworks,
        )
        workers = load_workers(
            flags,
            manager,
            recursive=args.recursive,
            namespace=args.default_namespace,
            frameworks=config.frameworks,
        )
    except (LoadError, ConfigError) as e:
        raise BadInput(str(e)) from e
    warn("plan", config.warnings)
    warn("plan", manager.inputs.warnings + input_warnings(manager.inputs))
    for w in workers:
        warn("plan", [f"--worker {w.name}: {line}" for line in
                      w.inputs.warnings + input_warnings(w.inputs)])  # fmt: skip
    given = {w.name for w in workers}
    warn(
        "plan",
        [
            f"MultiKueueCluster {name} ({where}): no --worker {name}=PATH given: "
            "taken as not connected"
            for name, where in sorted(manager.clusters.items())
            if name not in given
        ],
    )
    if args.now:
        try:
            config.now = parse_rfc3339(args.now).timestamp()
        except ValueError as e:
            raise BadInput(f"--now: {args.now!r} is not an RFC 3339 time") from e
    result = run_clusters(manager, workers, config=config, cycles=args.cycles)
    doc = clusters_json(result)
    add_positions(doc, result.manager.cache)
    if fmt == "json":
        sys.stdout.write(plan_json_text(doc))
        sys.stdout.write("\n")
    elif fmt == "yaml":
        write_yaml(doc)
    else:
        sys.stdout.write(clusters_table(doc, wide=fmt == "wide"))
    return EXIT_OK
