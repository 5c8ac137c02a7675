"""``quartermaster plan -f MANAGER --worker NAME=PATH ...``: the plan across clusters
(:mod:`admission.drivers.multicluster`), with ``plan``'s options and output formats;
``--what-if`` edits the manager's objects and ``--what-if-worker NAME=FILE`` a worker's,
and the plan says what the edit changes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from admission.cli.common import EXIT_OK, BadInput, warn, write_plan
from queues.times import parse_rfc3339


def _flags(values: list[str], flag: str) -> list[tuple[str, str]]:
    from admission.drivers.multicluster_inputs import parse_worker_flag

    try:
        return [parse_worker_flag(v, flag) for v in values]
    except ValueError as e:
        raise BadInput(str(e)) from e


def plan_clusters(args: argparse.Namespace, fmt: str) -> int:
    from admission.config.load import load_config
    from admission.config.schema import ConfigError
    from admission.drivers.documents import LoadError
    from admission.drivers.lint import input_warnings
    from admission.drivers.multicluster import run_clusters
    from admission.drivers.multicluster_inputs import (
        load_manager,
        load_workers,
        merge_manager,
        overlay_workers,
    )
    from admission.drivers.multicluster_report import (
        clusters_json,
        clusters_table,
        clusters_what_if,
    )

    from .plan_positions import add_positions

    flags = _flags(args.workers, "--worker")
    edits = _flags(args.what_if_workers, "--what-if-worker")
    common: dict[str, Any] = {"recursive": args.recursive, "namespace": args.default_namespace}
    try:
        config = load_config(args.config)
        common["frameworks"] = config.frameworks
        manager = load_manager(args.paths, stdin=sys.stdin, **common)
        workers = load_workers(flags, manager, **common)
        overlay = load_manager(args.what_if, stdin=sys.stdin, **common) if args.what_if else None
        edited = overlay_workers(workers, edits, **common) if edits else workers
    except (LoadError, ConfigError) as e:
        raise BadInput(str(e)) from e
    warn("plan", config.warnings)
    warn("plan", manager.inputs.warnings + input_warnings(manager.inputs))
    for w in workers:
        warn("plan", [f"--worker {w.name}: {line}" for line in
                      w.inputs.warnings + input_warnings(w.inputs)])  # fmt: skip
    if overlay is not None:
        warn("plan", overlay.inputs.warnings)
    given = {w.name for w in workers}
    clusters = manager.clusters if overlay is None else {**manager.clusters, **overlay.clusters}
    warn(
        "plan",
        [
            f"MultiKueueCluster {name} ({where}): no --worker {name}=PATH given: "
            "taken as not connected"
            for name, where in sorted(clusters.items())
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
    if overlay is not None or edits:
        after_manager = merge_manager(manager, overlay) if overlay is not None else manager
        after = run_clusters(after_manager, edited, config=config, cycles=args.cycles)
        before, doc, result = doc, clusters_json(after), after
        files: dict[str, list[str]] = {}
        for name, path in edits:
            files.setdefault(name, []).append(path)
        doc["whatIf"] = clusters_what_if(before, doc, list(args.what_if), files)
    add_positions(doc, result.manager.cache)
    sides = [manager.inputs] + ([overlay.inputs] if overlay is not None else [])
    write_plan(doc, sides, fmt, clusters_table)
    return EXIT_OK
