"""The import graph keeps the layers apart (ARCHITECTURE.md).

``queues/`` imports nothing of ours outside itself and nothing that does I/O; only
``admission/kube/`` imports ``kubernetes``; ``admission/`` never imports ``webhooks/``
except from the CLI entry point that starts the webhook server.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUES_ALLOWED = {"pydantic", "sortedcontainers", "queues", "__future__"}
IO_MODULES = {
    "os",
    "io",
    "socket",
    "subprocess",
    "pathlib",
    "shutil",
    "asyncio",
    "aiohttp",
    "requests",
    "urllib",
    "http",
    "yaml",
    "kubernetes",
    "open",
    "tempfile",
    "logging",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def py_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_queues_imports_only_stdlib_pydantic_sortedcontainers() -> None:
    import sys

    stdlib = set(sys.stdlib_module_names)
    for path in py_files("queues"):
        for mod in imports_of(path):
            assert mod in QUEUES_ALLOWED or (mod in stdlib and mod not in IO_MODULES), (
                f"{path.relative_to(ROOT)} imports {mod}"
            )


def test_queues_does_no_file_io() -> None:
    for path in py_files("queues"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"open", "print", "input"}, (
                    f"{path.name} calls {node.func.id}"
                )


def test_only_the_kube_adapter_imports_kubernetes() -> None:
    for package in ("queues", "admission", "webhooks"):
        for path in py_files(package):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("admission/kube/"):
                continue
            assert "kubernetes" not in imports_of(path), f"{rel} imports kubernetes"


def test_admission_does_not_import_webhooks_outside_the_cli() -> None:
    for path in py_files("admission"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("admission/__main__.py",) or rel.startswith("admission/kube/"):
            continue
        assert "webhooks" not in imports_of(path), f"{rel} imports webhooks"


def test_the_layering_check_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import admission.scheduler\nfrom kubernetes import client\n")
    assert {"admission", "kubernetes"} <= imports_of(bad)
