"""What every command of the command line shares: exit codes, the errors that become
exit code 2, the package's version, and warnings and YAML on the standard streams.

Exit codes (CLI.md): 0 success, 2 bad input (one paragraph on stderr naming the file,
document and field), 1 internal error; 130 when stopped with Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Any

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a command stopped by SIGINT
PACKAGE = "quartermaster"


class BadInput(Exception):
    """Input the user can fix; printed as one paragraph, exit code 2."""


class UsageError(Exception):
    """Bad flags or arguments of a kueuectl verb (exit 2)."""


def version() -> str:
    """The installed package's version (the source tree's when run uninstalled)."""
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "0.0.0+source"


def warn(command: str, lines: list[str]) -> None:
    """Warnings on stderr, one line each; they never change the exit code (CLI.md)."""
    for line in lines:
        print(f"quartermaster {command}: warning: {line}", file=sys.stderr)


def write_yaml(doc: Any) -> None:
    """A JSON document as YAML, keys in the JSON's order (what ``-o yaml`` prints)."""
    import yaml

    yaml.safe_dump(doc, sys.stdout, sort_keys=False, allow_unicode=True, width=1_000_000)


def write_plan(doc: dict[str, Any], sides: list[Any], fmt: str, table: Any) -> None:
    """Finish a plan document and print it: the generated names and the jobs that name
    no queue, from every side of the inputs (the files, then the what-if overlay), then
    the document as JSON, YAML, or the ``table`` function's text (``wide`` for -o wide)."""
    from admission.drivers.plan import plan_json_text

    generated = [g for side in sides for g in side.generated_names]
    if generated:
        doc["generatedNames"] = [
            {"kind": g.kind, "generateName": g.generate_name, "name": g.name, "source": g.where}
            for g in generated
        ]
    not_queued = [n.json() for side in sides for n in side.not_queued]
    if not_queued:
        doc["notQueued"] = not_queued
    if fmt == "json":
        sys.stdout.write(plan_json_text(doc))
        sys.stdout.write("\n")
    elif fmt == "yaml":
        write_yaml(doc)
    else:
        sys.stdout.write(table(doc, wide=fmt == "wide"))
