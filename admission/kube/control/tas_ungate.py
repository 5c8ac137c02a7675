"""Which gated pod goes to which topology domain (Kueue's TopologyUngater assignment).

A TAS podSet's pods are created behind the scheduling gate ``kueue.x-k8s.io/topology``
(the Job, JobSet … template carries it from the start patch; the pod webhook adds it to
pod-group pods). For each pod still gated, this module picks the domain of the podSet's
``topologyAssignment`` whose node selector it gets when it is ungated, as Kueue's
``assignGatedPodsToDomains`` does:

* **by rank**, when the podSet's ``topologyRequest`` names a ``podIndexLabel`` (a Job's
  completion index, a JobSet's with its Job index as ``subGroupIndexLabel``) and every
  live pod carries valid, distinct indexes: rank *r* gets the domain that holds the
  assignment's *r*-th pod (domains in assignment order, ``count`` ranks each), so
  neighbouring ranks share a domain. Ranks are offset by the podSet's place in a
  podSet group (an LWS leader is rank 0, its workers 1…N) and by the pods'
  ``kueue.x-k8s.io/pod-index-offset`` annotation. A running pod whose node selector
  disagrees with its rank's domain makes ranks unusable;
* otherwise **greedily**: pods already ungated count against the domain their node
  selector names; the gated pods (oldest first) fill each domain's remaining places in
  assignment order. Pods beyond the assignment stay gated.

Terminated pods are ignored (their replacements need the place). Pods on a node that
is in ``unhealthy`` (awaiting a replacement, :mod:`.topology`) are not ungated.

Pure: raw pod and Workload dicts in, ``pod key -> node selector`` out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from admission.engine.tas.domains import HOSTNAME
from admission.kube import objects as kobj
from queues.api.labels import POD_INDEX_OFFSET, TOPOLOGY_GATE
from queues.api.topology_assignment import AssignmentFormError, from_v1beta2

log = logging.getLogger("quartermaster.kube.topology")

Obj = dict[str, Any]
Domain = tuple[str, ...]

__all__ = ["topology_domains", "topology_gated"]


def topology_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == TOPOLOGY_GATE for g in gates)


def _terminated(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _age(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def _ranks_window(wl: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Per podSet name: (first rank, end rank) — a podSet group's smaller podSet (the
    leader) takes ranks 0…n-1, the larger one follows (Kueue's rankOffsets/maxRank)."""
    requests = _requests(wl)
    groups: dict[str, list[tuple[str, int]]] = {}
    for i, psa in enumerate((kobj.admission_of(wl) or {}).get("podSetAssignments") or []):
        name = str(psa.get("name", "main"))
        group = (requests.get(name) or {}).get("podSetGroupName") or str(i)
        groups.setdefault(group, []).append((name, int(psa.get("count") or 0)))
    out: dict[str, tuple[int, int]] = {}
    for members in groups.values():
        if len(members) > 1:
            small, large = members[0], members[1]
            if small[1] > large[1]:
                small, large = large, small
            out[small[0]] = (0, small[1])
            out[large[0]] = (small[1], small[1] + large[1])
        else:
            out[members[0][0]] = (0, members[0][1])
    return out


def _requests(wl: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        str(ps.get("name")): ps.get("topologyRequest") or {}
        for ps in (wl.get("spec") or {}).get("podSets") or []
        if isinstance(ps, Mapping)
    }


def _label_index(pod: Mapping[str, Any], label: str, bound: int) -> int | None:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(label)
    if raw is None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(label)  # a Job's completion index is also an annotation
    try:
        value = int(str(raw))
    except ValueError:
        return None
    return value if 0 <= value < bound else None


def _read_ranks(
    pods: Sequence[Mapping[str, Any]],
    request: Mapping[str, Any],
    *,
    count: int,
    offset: int,
    end: int,
) -> dict[int, Mapping[str, Any]] | None:
    """Kueue's readRanksForLabels: rank -> pod, or None when ranks cannot be used."""
    index_label = request.get("podIndexLabel")
    if not index_label:
        return None
    sub_label = request.get("subGroupIndexLabel")
    raw_count = request.get("subGroupCount")
    sub_count = raw_count if isinstance(raw_count, int) else 0
    single = count
    if sub_label:
        if sub_count <= 0:
            return None
        single = count // sub_count
    out: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        idx = _label_index(pod, index_label, end)
        if idx is None:
            return None
        rank = idx - offset
        if sub_label:
            job = _label_index(pod, sub_label, sub_count)
            if job is None or idx >= single:
                return None
            rank = idx + job * single - offset
        if not 0 <= rank < count or rank in out:
            return None
        out[rank] = pod
    return out


def topology_domains(
    wl: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    role: Callable[[Any], str],
    *,
    unhealthy: Collection[str] = (),
) -> dict[str, dict[str, str]]:
    """For each gated pod of a TAS podSet of ``wl`` that gets a domain now: its pod key
    -> the domain's node selector. ``role`` names a pod's podSet."""
    out: dict[str, dict[str, str]] = {}
    requests = _requests(wl)
    windows = _ranks_window(wl)
    for psa in (kobj.admission_of(wl) or {}).get("podSetAssignments") or []:
        wire = psa.get("topologyAssignment") if isinstance(psa, dict) else None
        if not wire:
            continue
        name = str(psa.get("name", "main"))
        try:
            ta = from_v1beta2(wire)
        except AssignmentFormError as err:
            log.error("workload %s podSet %s: unreadable topologyAssignment: %s",
                      kobj.ns_key(wl), name, err)  # fmt: skip
            continue
        mine = sorted((p for p in pods if role(p) == name and not _terminated(p)), key=_age)
        first, end = windows.get(name, (0, int(psa.get("count") or 0)))
        if mine:
            raw = ((mine[0].get("metadata") or {}).get("annotations") or {}).get(POD_INDEX_OFFSET)
            if raw is not None:
                try:
                    shift = int(raw)
                except ValueError:
                    log.error("pod %s: %s=%r is not an integer", kobj.ns_key(mine[0]),
                              POD_INDEX_OFFSET, raw)  # fmt: skip
                    continue
                first, end = first + shift, end + shift
        by_rank = [values for values, count in ta.domains for _ in range(count)]
        picked = _by_ranks(mine, requests.get(name) or {}, ta.levels, by_rank, first, end)
        if picked is None:
            picked = _greedy(mine, ta.levels, ta.domains)
        for pod, values in picked:
            selector = dict(zip(ta.levels, values, strict=True))
            if unhealthy and ta.levels[-1] == HOSTNAME and values[-1] in unhealthy:
                continue  # its node awaits a replacement: ungated onto the new one
            out[kobj.ns_key(pod)] = selector
    return out


def _by_ranks(
    pods: Sequence[Mapping[str, Any]],
    request: Mapping[str, Any],
    levels: Sequence[str],
    by_rank: Sequence[Domain],
    first: int,
    end: int,
) -> list[tuple[Mapping[str, Any], Domain]] | None:
    ranks = _read_ranks(pods, request, count=len(by_rank), offset=first, end=end)
    if ranks is None:
        return None
    out = []
    for rank in sorted(ranks):
        pod = ranks[rank]
        if not topology_gated(pod):
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            if tuple(selector.get(k) for k in levels) != by_rank[rank]:
                return None  # a running pod is not where its rank says: no ranks
            continue
        out.append((pod, by_rank[rank]))
    return out


def _greedy(
    pods: Sequence[Mapping[str, Any]],
    levels: Sequence[str],
    domains: Sequence[tuple[Domain, int]],
) -> list[tuple[Mapping[str, Any], Domain]]:
    gated = []
    ungated: dict[Domain, int] = {}
    for pod in pods:
        if topology_gated(pod):
            gated.append(pod)
        else:
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            values = tuple(str(selector.get(k, "")) for k in levels)
            ungated[values] = ungated.get(values, 0) + 1
    out: list[tuple[Mapping[str, Any], Domain]] = []
    for values, count in domains:
        room = max(count - ungated.get(values, 0), 0)
        for pod in gated[len(out) : len(out) + room]:
            out.append((pod, values))
    return out
