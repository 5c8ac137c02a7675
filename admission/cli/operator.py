"""The operator-facing additions to the ``quartermaster`` command, registered by
``admission.cli.main`` with one hook: the kueuectl verbs (:mod:`.kueuectl`) and the
``serve`` flags of the visibility API and the dashboard."""

from __future__ import annotations

import argparse
from typing import Any

from .kueuectl import VERBS, add_commands, run


def register(sub: Any, serve: argparse.ArgumentParser) -> None:
    """Add the kueuectl verbs to ``sub`` and the operator endpoints' flags to ``serve``."""
    add_commands(sub)
    serve.add_argument(
        "--visibility-port", type=int, default=8082,
        help="port of Kueue's visibility API (an aggregated API server; -1: off)",
    )  # fmt: skip
    serve.add_argument(
        "--dashboard-port", type=int, default=-1,
        help="port of the read-only dashboard (-1, the default: off)",
    )  # fmt: skip
    serve.add_argument(
        "--dashboard-host", default="127.0.0.1",
        help="address the dashboard binds (default loopback: reach it with kubectl port-forward)",
    )  # fmt: skip


def handles(command: str) -> bool:
    return command in VERBS


__all__ = ["handles", "register", "run"]
