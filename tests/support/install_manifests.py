"""Reading what a cluster admin applies: the files of ``manifests/``, rendered or read as they are.

The manifest tests (tests/unit/config/, tests/unit/webhooks/) read the base install
straight from its files or render it with ``kubectl kustomize`` (skipping when kubectl is
missing), read the examples the way ``quartermaster plan -f manifests/examples/`` does,
and match label selectors and NetworkPolicy rules the way the API server and a network
plugin would, so each test states only the property it checks.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


MANIFESTS = REPO / "manifests"


BASE = MANIFESTS / "base"


EXAMPLES = MANIFESTS / "examples"


NAMESPACE = "quartermaster-system"


KUEUE = "kueue.x-k8s.io/v1beta2"


def _load_all(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _base_objects() -> list[dict[str, Any]]:
    """The base install read straight from its files (no kubectl needed)."""
    kust = _load_all(BASE / "kustomization.yaml")[0]
    objs: list[dict[str, Any]] = []
    for name in kust["resources"]:
        path = BASE / name
        if path.is_dir():  # ../crd: a kustomization of its own
            for sub in _load_all(path / "kustomization.yaml")[0]["resources"]:
                objs.extend(_load_all(path / sub))
        else:
            objs.extend(_load_all(path))
    return objs


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    proc = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


def _kind_counts(objs: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for o in objs:
        key = (o["apiVersion"], o["kind"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _example_objects() -> list[dict[str, Any]]:
    """What ``plan -f manifests/examples/`` reads: top-level *.yaml, sorted."""
    objs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("*.yml")):
        objs.extend(_load_all(path))
    return objs


def _of_kind(objs: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    return (o for o in objs if o["kind"] == kind)


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _policy_rule(policy: dict[str, Any], port: str) -> dict[str, Any]:
    (rule,) = [r for r in policy["spec"]["ingress"] if port in [p["port"] for p in r["ports"]]]
    return rule
