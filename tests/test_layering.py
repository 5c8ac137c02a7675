"""The import graph keeps the layers apart.

The layers are declared as import-linter contracts in ``pyproject.toml``
(``[tool.importlinter]``): ``queues/`` is the pure model (nothing of ours outside it, no
I/O, no third-party package but pydantic and sortedcontainers), only ``admission.kube``
imports ``kubernetes``, ``webhooks/`` never reaches the Kubernetes adapter, and
``admission/`` imports ``webhooks/`` only where ``serve`` starts the webhook server.
This test runs ``lint-imports`` as CI does, plus the two checks an import graph cannot
express.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# A distribution's name -> the module it installs, where they differ.
MODULE_OF = {
    "PyYAML": "yaml",
    "prometheus-client": "prometheus_client",
    "kubernetes-validate": "kubernetes_validate",
    "cel-python": "celpy",
    "import-linter": "importlinter",
    "pytest-xdist": "xdist",
}
QUEUES_MAY_IMPORT = {"pydantic", "sortedcontainers"}


def lint_imports() -> list[str]:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed (pip install -e '.[test]')")
    return [exe, "--no-cache"]


def test_the_import_contracts_hold() -> None:
    proc = subprocess.run(lint_imports(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_queues_forbids_every_other_declared_dependency() -> None:
    """The forbidden list is how "no third-party package but pydantic and
    sortedcontainers" is enforced, so it must name every dependency we declare."""
    (queues,) = [
        c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["id"] == "queues-pure"
    ]
    project = PYPROJECT["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    modules = set()
    for requirement in declared:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        modules.add(MODULE_OF.get(name, name.replace("-", "_")))
    # import-linter and mypy are never imported by code; the rest must be forbidden.
    missing = modules - QUEUES_MAY_IMPORT - {"importlinter", "mypy", "ruff"}
    missing -= set(queues["forbidden_modules"])
    assert not missing, f"add to the queues-pure contract: {sorted(missing)}"


def test_queues_does_no_file_io() -> None:
    """Calls of the I/O builtins are not imports, so import-linter cannot see them."""
    for path in sorted((ROOT / "queues").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"open", "print", "input"}, (
                    f"{path.relative_to(ROOT)} calls {node.func.id}"
                )


def test_the_contracts_catch_a_violation(tmp_path: Path) -> None:
    for package in ("queues", "admission", "webhooks"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "webhooks" / "review.py").open("a") as f:
        f.write("\nimport kubernetes  # noqa\n")
    with (tmp_path / "queues" / "quantity.py").open("a") as f:
        f.write("\nimport os  # noqa\n")
    proc = subprocess.run(lint_imports(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "webhooks.review -> kubernetes" in proc.stdout
    assert "queues.quantity -> os" in proc.stdout


def test_an_import_circle_in_the_engine_is_caught_even_when_only_for_typing(
    tmp_path: Path,
) -> None:
    """engine-layers: the engine's modules form layers, so a module importing one above
    it (here usage -> scheduler, which imports usage) breaks the contract, also when
    the import is only under TYPE_CHECKING (the circle mypy and readers still see)."""
    for package in ("queues", "admission", "webhooks"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "admission" / "engine" / "usage.py").open("a") as f:
        f.write(
            "\nfrom typing import TYPE_CHECKING  # noqa\n"
            "if TYPE_CHECKING:\n    from admission.engine.scheduler import Scheduler  # noqa\n"
        )
    proc = subprocess.run(lint_imports(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "admission.engine.usage -> admission.engine.scheduler" in proc.stdout


# A Kueue label or annotation name spelled out (not an API version, not a prefix).
_KUEUE_NAME = re.compile(
    r"""["']kueue\.x-k8s\.io/(?!v1(?:alpha|beta)\d["'])[a-z][a-z0-9.-]*[a-z0-9]["']"""
)


def test_kueue_label_and_annotation_names_are_spelled_only_in_queues_labels() -> None:
    """queues/api/labels.py owns Kueue's label, annotation, finalizer and gate names, so
    the webhooks, reconcilers, engine messages and loader cannot drift apart (issue 12,
    bug 8). The one other Kueue string is a priorityClassSource value, not a label."""
    allowed = {("queues/api/v1beta1.py", "kueue.x-k8s.io/workloadpriorityclass")}
    found = [
        (str(path.relative_to(ROOT)), m.group(0)[1:-1])
        for package in ("queues", "admission", "webhooks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != "queues/api/labels.py"
        for m in _KUEUE_NAME.finditer(path.read_text())
    ]
    assert [f for f in found if f not in allowed] == []
