"""The default of ``integrations.frameworks``: the code, the shipped configuration and
manifests/README.md say the same.

Every registered integration is enabled when the list is left out (Kueue's shipped
configuration enables its kinds likewise); the shipped ``config.yaml`` lists them all
explicitly, and the README's configuration table names exactly that list.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from admission.config.load import parse_config
from admission.config.schema import Config
from admission.integrations.registry import ALL, DEFAULT_FRAMEWORKS, INTEGRATIONS

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "manifests" / "base" / "config" / "config.yaml"
README = ROOT / "manifests" / "README.md"


def readme_frameworks() -> list[str]:
    (row,) = [
        line
        for line in README.read_text().splitlines()
        if line.startswith("| `integrations.frameworks`")
    ]
    default_cell = row.split("|")[2]
    return re.findall(r"`([^`]+)`", default_cell)


def test_the_default_is_every_registered_integration() -> None:
    assert DEFAULT_FRAMEWORKS == tuple(i.framework for i in INTEGRATIONS)
    assert Config().frameworks == ALL


def test_a_section_without_a_frameworks_list_gets_the_default() -> None:
    config = parse_config({"integrations": {"externalFrameworks": ["Widget.v1.example.com"]}})
    assert config.frameworks.enabled == ALL.enabled
    assert ("example.com/v1", "Widget") in config.frameworks.external


def test_the_shipped_configuration_lists_the_default() -> None:
    shipped = yaml.safe_load(SHIPPED.read_text())
    assert shipped["integrations"]["frameworks"] == list(DEFAULT_FRAMEWORKS)


def test_the_readme_names_the_shipped_default() -> None:
    assert readme_frameworks() == list(DEFAULT_FRAMEWORKS)
