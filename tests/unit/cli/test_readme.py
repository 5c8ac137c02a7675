"""The README's two set-up commands stay true: CI runs its test command, and its main
command works from a clean checkout."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands() -> None:
    cmds = setup_commands()
    assert len(cmds) == 2, cmds
    assert cmds[0].startswith("pip install -e . && quartermaster ")
    assert cmds[1] == "pip install -e '.[test]' && python -m pytest"


def test_ci_runs_the_readmes_test_command_in_a_fresh_virtualenv() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = setup_commands()[1].split(" && ", 1)[1]
    assert "python3 -m venv" in ci
    assert "pip install -q -e '.[test]'" in ci
    assert ci.rstrip().splitlines()[-1] == test_cmd
    assert "set -euo pipefail" in ci


def test_the_main_job_command_runs() -> None:
    from admission.cli.main import main

    argv = shlex.split(setup_commands()[0].split(" && ", 1)[1])
    assert argv[0] == "quartermaster"
    out = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
        code = main(argv[1:])
    assert code == 0
    assert out.getvalue().strip()
