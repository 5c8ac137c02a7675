"""The documents say what a reader can check: no work sessions, internal issue numbers
or "this machine"; the feature table of docs/semantics.md matches the code; the README
says what the browser tests need."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Kueue's own issues (#477) are public and may be cited; this project's tracker is not.
PRIVATE = re.compile(
    r"\bsessions? \d+|\bsession \d+'s|this session|this machine|\bthe issue\b|\bissue \d+",
    re.IGNORECASE,
)


def test_no_document_cites_sessions_internal_issues_or_this_machine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for path in DOCS
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in PRIVATE.finditer(line)
    ]
    assert found == []


def _feature_table() -> list[list[str]]:
    text = (ROOT / "docs" / "semantics.md").read_text()
    section = text.split("## 7. Feature summary", 1)[1]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_feature_table_lists_kueuectl_and_the_visibility_api_as_implemented() -> None:
    by_feature = {row[0]: row[2] for row in _feature_table()}
    for feature in ("kueuectl", "Visibility API"):
        (ours,) = [v for k, v in by_feature.items() if feature.lower() in k.lower()]
        assert "not implemented" not in ours, feature


def test_every_path_the_feature_table_names_exists() -> None:
    missing = []
    for row in _feature_table():
        for path in re.findall(r"`((?:admission|queues|webhooks|manifests)/[^`]*)`", row[2]):
            if not list(ROOT.glob(path.replace("{", "").split(" ")[0])):
                missing.append(path)
    assert missing == []


def test_the_readme_says_the_browser_tests_need_chromium() -> None:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    after_tests = setup.split("python -m pytest", 1)[1]
    assert "Chromium" in after_tests
    assert "skipped" in after_tests
