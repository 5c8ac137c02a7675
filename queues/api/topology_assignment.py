"""A TopologyAssignment in Kueue's v1beta2 wire form, and back.

``status.admission.podSetAssignments[].topologyAssignment`` in v1beta2 is compact:
``levels`` plus ``slices``, each slice holding ``domainCount`` domains whose values
per level are either one ``universal`` value or ``individual`` roots with a common
``prefix``/``suffix``, and pod counts likewise (pkg/util/tas/tas_assignment.go).

We write what Kueue writes with its default gates (TASAssignmentsEncodingByHostnamePrefix
on): when the lowest level is the hostname, consecutive hosts that share a reusable
``-``-delimited prefix ("pool-a-node-") form one slice each, a slice holds at most
100,000 domains and an assignment at most 1,000 slices; that form is kept when it
has one slice, when the assignment is over the single-slice limit, or when its JSON is
not longer than the single maximally compacted slice's. We read every form Kueue may
write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from queues.model import TopologyAssignment

__all__ = [
    "AssignmentFormError",
    "from_v1beta2",
    "hostname_prefix_encoding",
    "node_selectors",
    "single_slice_encoding",
    "to_v1beta2",
]

HOSTNAME = "kubernetes.io/hostname"
MAX_DOMAINS_PER_SLICE = 100_000  # the v1beta2 roots / individual pod counts MaxItems
MAX_SLICES = 1_000  # the v1beta2 slices MaxItems

Domains = Sequence[tuple[tuple[str, ...], int]]


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


def _slice(levels: Sequence[str], domains: Domains) -> dict[str, Any]:
    """Kueue's compactSliceEncoding: one slice, every compression it allows."""
    counts = [c for _, c in domains]
    return {
        "domainCount": len(domains),
        "valuesPerLevel": [
            _compact_values([values[i] for values, _ in domains]) for i in range(len(levels))
        ],
        "podCounts": {"universal": counts[0]}
        if all(c == counts[0] for c in counts)
        else {"individual": counts},
    }


def single_slice_encoding(ta: TopologyAssignment) -> dict[str, Any]:
    """Kueue's singleCompactTopologyAssignmentEncoding: no slice when empty, else one."""
    out: dict[str, Any] = {"levels": list(ta.levels), "slices": []}
    if ta.domains:
        out["slices"].append(_slice(ta.levels, ta.domains))
    return out


def _prefix_keys(domains: Domains) -> list[str] | None:
    """Kueue's reusableHostnamePrefixKeys: per domain, its longest ``-``-delimited
    hostname prefix that at least two hosts share, backing off to shorter prefixes
    until the runs fit ``MAX_SLICES``; None when no depth does."""
    ends: list[list[int]] = []
    seen: dict[str, int] = {}
    for values, _ in domains:
        host = values[-1]
        mine = [i + 1 for i in range(len(host) - 1) if host[i] == "-"]
        ends.append(mine)
        for e in mine:
            p = host[:e]
            if seen.get(p, 0) < 2:
                seen[p] = seen.get(p, 0) + 1
    max_depth = max((len(e) for e in ends), default=0)
    for depth in range(max_depth, 0, -1):
        keys = [""] * len(domains)
        for i, (values, _) in enumerate(domains):
            host = values[-1]
            for e in reversed(ends[i][:depth]):
                if seen[host[:e]] >= 2:
                    keys[i] = host[:e]
                    break
        slices, start = 0, 0
        for i in range(1, len(keys)):
            if keys[i] != keys[start]:
                slices += -(-(i - start) // MAX_DOMAINS_PER_SLICE)
                start = i
        slices += -(-(len(keys) - start) // MAX_DOMAINS_PER_SLICE)
        if slices <= MAX_SLICES:
            return keys
    return None


def hostname_prefix_encoding(ta: TopologyAssignment) -> dict[str, Any]:
    """Kueue's compactTopologyAssignmentEncodingWithHostnamePrefixRuns: runs of
    consecutive hosts with the same reusable prefix key, each chunked at
    ``MAX_DOMAINS_PER_SLICE``, one slice per chunk, domain order kept."""
    domains = list(ta.domains)
    out: dict[str, Any] = {"levels": list(ta.levels), "slices": []}
    if not domains:
        return out
    keys = _prefix_keys(domains) if len(domains) > 1 and ta.levels[-1] == HOSTNAME else None
    runs: list[list[tuple[tuple[str, ...], int]]] = []
    if not keys:
        runs = [domains]
    else:
        start = 0
        for i in range(1, len(domains)):
            if keys[i] != keys[start]:
                runs.append(domains[start:i])
                start = i
        runs.append(domains[start:])
    for run in runs:
        for lo in range(0, len(run), MAX_DOMAINS_PER_SLICE):
            out["slices"].append(_slice(ta.levels, run[lo : lo + MAX_DOMAINS_PER_SLICE]))
    return out


def _json_size(doc: Mapping[str, Any]) -> int:
    """The length of the compact JSON Kueue compares (Go's encoding/json field order)."""
    return len(json.dumps(doc, separators=(",", ":")))


def to_v1beta2(ta: TopologyAssignment) -> dict[str, Any]:
    """Kueue's V1Beta2From with its default gates (compactTopologyAssignmentEncoding):
    the hostname-prefix form when it has at most one slice, when the assignment has
    more domains than one slice may hold, or when it is not longer than one slice."""
    prefixed = hostname_prefix_encoding(ta)
    if len(prefixed["slices"]) <= 1 or len(ta.domains) > MAX_DOMAINS_PER_SLICE:
        return prefixed
    single = single_slice_encoding(ta)
    return single if _json_size(single) < _json_size(prefixed) else prefixed


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
