"""The log of the long-running commands (``serve``, ``simulate``): ``--log-level``,
one format, and what ``serve --webhooks-only`` tells its user once it listens.

``--log-level`` wins over ``$QUARTERMASTER_LOG_LEVEL``, which wins over INFO. At INFO
the service says where each endpoint listens, one line per admission, eviction and
preemption, and one line per back-off while the API server is unreachable; DEBUG adds
the detail behind each.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LEVEL_ENV = "QUARTERMASTER_LOG_LEVEL"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_log_level(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=None,
        metavar="LEVEL",
        help=f"log level: {', '.join(LEVELS)} (default: ${LEVEL_ENV}, else INFO)",
    )


def log_level(args: Any) -> str:
    """The level asked for: the flag, else the environment, else INFO."""
    flag = getattr(args, "log_level", None)
    if flag:
        return str(flag)
    env = os.environ.get(LEVEL_ENV, "").strip().upper()
    return env if env in LEVELS else "INFO"


def configure_logging(args: Any) -> None:
    """The root logger at ``args``' level, on stderr, in :data:`FORMAT`."""
    logging.basicConfig(level=log_level(args), format=FORMAT, force=True)


def webhooks_only_banner(*, host: str, port: int, cert_dir: str, paths: list[str]) -> str:
    """What ``serve --webhooks-only`` prints (on stderr) once it listens: the address,
    the CA a webhook configuration must trust, and every webhook path."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    lines = [
        f"webhooks: https://{shown}:{port} (listening on {host or '0.0.0.0'}:{port})",
        f"CA: {os.path.join(cert_dir, 'ca.crt')} (the caBundle of the webhook configurations)",
        f"paths ({len(paths)}):",
        *(f"  {p}" for p in paths),
    ]
    return "\n".join(lines) + "\n"
