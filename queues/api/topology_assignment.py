"""A TopologyAssignment in Kueue's v1beta2 wire form, and back.

``status.admission.podSetAssignments[].topologyAssignment`` in v1beta2 is compact:
``levels`` plus ``slices``, each slice holding ``domainCount`` domains whose values
per level are either one ``universal`` value or ``individual`` roots with a common
``prefix``/``suffix``, and pod counts likewise (pkg/util/tas/tas_assignment.go). Kueue
writes a single maximally compacted slice by default (the hostname-prefix encoding is
behind a gate), and so do we; we read every form Kueue may write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queues.model import TopologyAssignment

__all__ = ["AssignmentFormError", "from_v1beta2", "node_selectors", "to_v1beta2"]


class AssignmentFormError(ValueError):
    """A topologyAssignment that does not follow the v1beta2 schema."""


def _compact_values(values: Sequence[str]) -> dict[str, Any]:
    """Kueue's fillSingleCompactSliceValues."""
    first = values[0]
    prefix = suffix = first
    min_len = max_len = len(first)
    for s in values[1:]:
        n = len(s)
        min_len, max_len = min(min_len, n), max(max_len, n)
        prefix = prefix[:n]
        suffix = suffix[len(suffix) - n :] if n < len(suffix) else suffix
        for i in range(len(prefix)):
            if s[i] != prefix[i]:
                prefix = prefix[:i]
                break
        for i in range(len(suffix)):
            if s[len(s) - 1 - i] != suffix[len(suffix) - 1 - i]:
                suffix = suffix[len(suffix) - i :]
                break
    if len(prefix) == max_len:
        return {"universal": prefix}
    if len(prefix) + len(suffix) > min_len:
        prefix = prefix[: min_len - len(suffix)]
    ind: dict[str, Any] = {}
    if prefix:
        ind["prefix"] = prefix
    if suffix:
        ind["suffix"] = suffix
    ind["roots"] = [s[len(prefix) : len(s) - len(suffix)] for s in values]
    return {"individual": ind}


def to_v1beta2(ta: TopologyAssignment) -> dict[str, Any]:
    """Kueue's singleCompactTopologyAssignmentEncoding."""
    out: dict[str, Any] = {"levels": list(ta.levels), "slices": []}
    if not ta.domains:
        return out
    counts = [c for _, c in ta.domains]
    slice_: dict[str, Any] = {
        "domainCount": len(ta.domains),
        "valuesPerLevel": [
            _compact_values([values[i] for values, _ in ta.domains]) for i in range(len(ta.levels))
        ],
        "podCounts": {"universal": counts[0]}
        if all(c == counts[0] for c in counts)
        else {"individual": counts},
    }
    out["slices"].append(slice_)
    return out


def _expect(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise AssignmentFormError(f"{path}: {message}")


def from_v1beta2(doc: Mapping[str, Any], *, path: str = "topologyAssignment") -> TopologyAssignment:
    """The internal form of any v1beta2 topologyAssignment (every slice encoding)."""
    _expect(isinstance(doc, Mapping), path, "must be an object")
    levels = doc.get("levels")
    _expect(
        isinstance(levels, list)
        and 1 <= len(levels) <= 16
        and all(isinstance(x, str) for x in levels),
        f"{path}.levels",
        "must be a list of 1 to 16 node label keys",
    )
    assert isinstance(levels, list)
    slices = doc.get("slices") or []
    _expect(isinstance(slices, list), f"{path}.slices", "must be a list")
    domains: list[tuple[tuple[str, ...], int]] = []
    for i, sl in enumerate(slices):
        where = f"{path}.slices[{i}]"
        _expect(isinstance(sl, Mapping), where, "must be an object")
        n = sl.get("domainCount")
        _expect(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1,
            f"{where}.domainCount",
            "must be an integer >= 1",
        )
        assert isinstance(n, int)
        per_level = sl.get("valuesPerLevel")
        _expect(
            isinstance(per_level, list) and len(per_level) == len(levels),
            f"{where}.valuesPerLevel",
            "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment",
        )
        assert isinstance(per_level, list)
        columns: list[list[str]] = []
        for j, lv in enumerate(per_level):
            lwhere = f"{where}.valuesPerLevel[{j}]"
            _expect(
                isinstance(lv, Mapping) and ("universal" in lv) != ("individual" in lv),
                lwhere,
                "exactly one of the fields in [universal individual] must be set",
            )
            if "universal" in lv:
                _expect(isinstance(lv["universal"], str), f"{lwhere}.universal", "must be a string")
                columns.append([lv["universal"]] * n)
                continue
            ind = lv["individual"]
            _expect(isinstance(ind, Mapping), f"{lwhere}.individual", "must be an object")
            roots = ind.get("roots")
            _expect(
                isinstance(roots, list)
                and len(roots) == n
                and all(isinstance(r, str) for r in roots),
                f"{lwhere}.individual.roots",
                "must list domainCount strings",
            )
            prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
            columns.append([f"{prefix}{r}{suffix}" for r in roots])
        pc = sl.get("podCounts")
        _expect(
            isinstance(pc, Mapping) and ("universal" in pc) != ("individual" in pc),
            f"{where}.podCounts",
            "exactly one of the fields in [universal individual] must be set",
        )
        assert isinstance(pc, Mapping)
        if "universal" in pc:
            u = pc["universal"]
            _expect(
                isinstance(u, int) and u >= 1,
                f"{where}.podCounts.universal",
                "must be an integer >= 1",
            )
            counts = [u] * n
        else:
            counts = pc["individual"]
            _expect(
                isinstance(counts, list)
                and len(counts) == n
                and all(isinstance(c, int) and c >= 1 for c in counts),
                f"{where}.podCounts.individual",
                "podCounts.individual must have length equal to domainCount",
            )
        for k in range(n):
            domains.append((tuple(col[k] for col in columns), counts[k]))
    return TopologyAssignment(levels=tuple(levels), domains=tuple(domains))


def node_selectors(ta: TopologyAssignment) -> list[dict[str, str]]:
    """One node selector per pod, in domain order (Kueue's ungater hands them out by
    pod index): each pod pinned to the level values of its domain."""
    out: list[dict[str, str]] = []
    for values, count in ta.domains:
        sel = dict(zip(ta.levels, values, strict=True))
        out.extend(dict(sel) for _ in range(count))
    return out
