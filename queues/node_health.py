"""When a node counts as failed for a workload, and what a failure leaves behind.

Pure rules, no I/O, shared by the controller (``admission.kube.reconcilers.node_failures``)
and the simulator:

* **Failure** (:func:`node_failure`): a node hosting pods of an admitted workload has
  failed when it was deleted, when its Ready condition has been False or Unknown for
  longer than ``not_ready_delay`` (Kueue's ``NodeFailureDelay``, 30 s), or when it
  carries a ``NoSchedule`` or ``NoExecute`` taint the workload's pods do not tolerate
  (Kueue's ``TASReplaceNodeOnNodeTaints``; GPU health monitors signal a bad GPU this
  way). A taint tolerated only for ``tolerationSeconds`` still counts as tolerated.
* **Infrastructure, not the job** (:func:`counts_toward_backoff`): an eviction for a
  node failure does not count toward ``waitForPodsReady.requeuingStrategy.backoffLimitCount``
  and adds no backoff; the workload keeps its place (queue order by creation time).
* **Bad-node memory** (:class:`AvoidedNodes`): the nodes a workload was evicted from,
  each until a time, written on the Workload as the annotation
  ``quartermaster.io/avoid-nodes`` so a restarted service, ``why`` and ``list`` read
  the same; the workload's pods get a required ``NotIn`` node affinity on
  ``kubernetes.io/hostname`` and TAS placement skips those hosts.
* **Flaky nodes** (:class:`FlakyNodes`): a node that failed ``workloads`` distinct
  workloads within ``window`` is reported once per window (an Event and a metric), so
  the cluster's health tooling can quarantine it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from queues.model import NodeSelectorTerm, SelectorRequirement, Taint, Toleration
from queues.times import rfc3339_seconds

HOSTNAME = "kubernetes.io/hostname"
AVOID_NODES_ANNOTATION = "quartermaster.io/avoid-nodes"
NODE_FAILURES = "NodeFailures"  # Kueue's WorkloadEvictedDueToNodeFailures
NOT_READY_DELAY = 30.0  # Kueue's tas.NodeFailureDelay
SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# Kueue's FailureRecoveryPolicy: pods opted in (queues.api.labels.SAFE_TO_FORCEFULLY_DELETE) stuck
# terminating on an unreachable node are failed and deleted after this grace period
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
FORCEFUL_TERMINATION_GRACE = 60.0


@dataclass(frozen=True, slots=True)
class NodeFailurePolicy:
    """The ``nodeFailures`` configuration (docs/configuration.md)."""

    enable: bool = True
    not_ready_delay: float = NOT_READY_DELAY
    taints: bool = True  # Kueue's TASReplaceNodeOnNodeTaints
    # Kueue's TASReplaceNodeOnPodTermination: a NotReady node counts as failed for a
    # workload only once its pods there stopped running (terminating or terminated)
    replace_on_pod_termination: bool = False
    # Kueue's TASFailedNodeReplacementFailFast: evict at once when no spare fits (off:
    # keep the gang and retry the replacement until a spare frees up)
    fail_fast: bool = True
    avoid_for: float = 86400.0  # bad-node memory; 0 turns it off
    flaky_workloads: int = 2  # distinct workloads a node fails within the window ...
    flaky_window: float = 86400.0  # ... to be reported as flaky (0 workloads: never)
    forceful_termination_grace: float = FORCEFUL_TERMINATION_GRACE


def counts_toward_backoff(reason: str) -> bool:
    """Whether an eviction for ``reason`` counts toward ``backoffLimitCount`` and its
    backoff: a node failure is the infrastructure's, not the job's."""
    return reason != NODE_FAILURES


# -- taints and tolerations -------------------------------------------------------------------


def taint_text(t: Taint) -> str:
    return f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}"


def taints_of(node: Mapping[str, Any] | None) -> list[Taint]:
    """A Node object's taints (malformed entries skipped)."""
    out = []
    for t in ((node or {}).get("spec") or {}).get("taints") or []:
        if isinstance(t, Mapping) and isinstance(t.get("key"), str):
            out.append(Taint(t["key"], str(t.get("value") or ""), str(t.get("effect") or "")))
    return out


def untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> list[Taint]:
    """The NoSchedule and NoExecute taints no toleration matches (Kubernetes'
    ToleratesTaint; a toleration with ``tolerationSeconds`` still tolerates)."""
    return [
        t
        for t in taints
        if t.effect in SCHEDULING_EFFECTS and not any(tol.tolerates(t) for tol in tolerations)
    ]


# -- node failure --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeState:
    """What failure detection reads of a Node: Ready, since when, and its taints."""

    name: str
    ready: bool = True
    since: float | None = None  # the Ready condition's lastTransitionTime
    taints: tuple[Taint, ...] = ()

    @classmethod
    def of(cls, name: str, node: Mapping[str, Any]) -> NodeState:
        ready, since = True, None
        for c in ((node.get("status") or {}).get("conditions")) or []:
            if isinstance(c, Mapping) and c.get("type") == "Ready":
                ready = c.get("status") == "True"
                since = rfc3339_seconds(c.get("lastTransitionTime"))
        return cls(name, ready, since, tuple(taints_of(node)))


def not_ready_for(state: NodeState, now: float) -> float:
    """Seconds the node has been NotReady or Unknown (0 when Ready; a NotReady node
    without a transition time counts as NotReady since forever)."""
    if state.ready:
        return 0.0
    return float("inf") if state.since is None else max(0.0, now - state.since)


def node_failure(
    state: NodeState | None,
    *,
    name: str,
    now: float,
    policy: NodeFailurePolicy,
    tolerations: Sequence[Toleration] = (),
) -> str | None:
    """Why ``name`` counts as failed for a workload whose pods tolerate
    ``tolerations`` (None: it does not). ``state`` None: the node was deleted."""
    if state is None:
        return f"node {name} was deleted"
    if not state.ready and not_ready_for(state, now) >= policy.not_ready_delay:
        return f"node {name} has been NotReady for {policy.not_ready_delay:g}s"
    if policy.taints:
        bad = untolerated(state.taints, tolerations)
        if bad:
            return f"node {name} has the untolerated taint {taint_text(bad[0])}"
    return None


def reachable(state: NodeState | None) -> bool:
    """The node still runs its pods as far as the control plane knows (Ready, not
    deleted): a preemption notice can reach them."""
    return state is not None and state.ready


# -- bad-node memory -------------------------------------------------------------------------


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class AvoidedNodes:
    """Nodes a workload avoids, each until a time (epoch seconds)."""

    until: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> AvoidedNodes:
        """The annotation's ``node=RFC3339,node=RFC3339`` (unreadable entries dropped:
        the memory is advice, a bad entry must not block the workload)."""
        out: dict[str, float] = {}
        for part in (text or "").split(","):
            name, _, when = part.strip().partition("=")
            t = rfc3339_seconds(when)
            if name and t is not None:
                out[name] = max(t, out.get(name, t))
        return cls(out)

    @classmethod
    def of(cls, annotations: Mapping[str, Any] | None) -> AvoidedNodes:
        value = (annotations or {}).get(AVOID_NODES_ANNOTATION)
        return cls.parse(value if isinstance(value, str) else None)

    def render(self) -> str:
        return ",".join(f"{n}={_rfc3339(t)}" for n, t in sorted(self.until.items()))

    def active(self, now: float) -> tuple[str, ...]:
        """The nodes still avoided at ``now``, sorted."""
        return tuple(sorted(n for n, t in self.until.items() if t > now))

    def remember(self, nodes: Iterable[str], *, now: float, duration: float) -> AvoidedNodes:
        """These nodes avoided for ``duration`` more; expired entries dropped."""
        out = {n: t for n, t in self.until.items() if t > now}
        for n in nodes:
            out[n] = max(out.get(n, 0.0), now + duration)
        return AvoidedNodes(out)


def with_avoided_nodes(
    affinity: Mapping[str, Any] | None, avoid: Sequence[str], *, drop: Iterable[str] = ()
) -> dict[str, Any] | None:
    """``affinity`` with a required ``kubernetes.io/hostname NotIn avoid`` in every
    required node selector term (terms are ORed: each must exclude the nodes).

    A hostname ``NotIn`` requirement whose values are all in ``drop`` (nodes an earlier
    start excluded) is replaced, so the exclusion is not stacked or kept after the
    memory expired. None when the result is empty."""
    out: dict[str, Any] = {k: v for k, v in (affinity or {}).items()}
    node_aff = dict(out.get("nodeAffinity") or {})
    required = dict(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    stale = set(drop) | set(avoid)
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]
    cleaned = []
    for term in terms:
        exprs = [
            e
            for e in term.get("matchExpressions") or []
            if not (
                isinstance(e, Mapping)
                and e.get("key") == HOSTNAME
                and e.get("operator") == "NotIn"
                and set(e.get("values") or []) <= stale
            )
        ]
        term["matchExpressions"] = exprs
        if not exprs:
            term.pop("matchExpressions")
        if term:
            cleaned.append(term)
    if avoid:
        req = {"key": HOSTNAME, "operator": "NotIn", "values": sorted(avoid)}
        cleaned = [
            {**t, "matchExpressions": [*(t.get("matchExpressions") or []), req]}
            for t in cleaned or [{}]
        ]
    if cleaned:
        required["nodeSelectorTerms"] = cleaned
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = required
    else:
        node_aff.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if node_aff:
        out["nodeAffinity"] = node_aff
    else:
        out.pop("nodeAffinity", None)
    return out or None


def excluding_hosts(
    terms: Sequence[NodeSelectorTerm], hosts: Sequence[str]
) -> list[NodeSelectorTerm]:
    """A podSet's required node affinity terms with ``hostname NotIn hosts`` added to
    each (the model's side of :func:`with_avoided_nodes`: TAS placement skips them)."""
    if not hosts:
        return list(terms)
    req = SelectorRequirement(HOSTNAME, "NotIn", tuple(sorted(hosts)))
    return [NodeSelectorTerm((*t.match_expressions, req)) for t in terms or [NodeSelectorTerm()]]


def avoid_in_start_patch(
    obj: Mapping[str, Any], patch: dict[str, Any], avoid: Sequence[str], *, podset_label: str
) -> dict[str, Any]:
    """A job's start patch with ``avoid`` excluded from every pod template it starts
    (a template carries ``podset_label``). The hosts excluded are written on the
    template too (``AVOID_NODES_ANNOTATION``, a plain list), so the next start replaces
    exactly those and leaves a user's own requirements alone. ``obj`` is the job the
    patch applies to (a merge patch: a template's missing fields are the object's)."""

    def template(t: dict[str, Any], current: Mapping[str, Any] | None) -> None:
        cur = current or {}
        meta_ann = ((t.get("metadata") or {}).get("annotations")) or {}
        had_ann = ((cur.get("metadata") or {}).get("annotations")) or {}
        before = str(
            meta_ann.get(AVOID_NODES_ANNOTATION) or had_ann.get(AVOID_NODES_ANNOTATION) or ""
        )
        prev = [n for n in before.split(",") if n]
        if not prev and not avoid:
            return
        spec = t.get("spec") or {}
        aff = spec["affinity"] if "affinity" in spec else (cur.get("spec") or {}).get("affinity")
        new = with_avoided_nodes(aff, avoid, drop=prev)
        if new != aff:
            t.setdefault("spec", {})["affinity"] = new
        if sorted(prev) != sorted(avoid):
            annotations = t.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[AVOID_NODES_ANNOTATION] = ",".join(sorted(avoid)) or None

    def walk(node: Any, current: Any) -> None:
        if isinstance(node, dict):
            labels = (
                (node.get("metadata") or {}).get("labels")
                if isinstance(node.get("metadata"), dict)
                else None
            )
            if isinstance(labels, dict) and podset_label in labels:
                template(node, current if isinstance(current, Mapping) else None)
                return
            for k, v in node.items():
                walk(v, current.get(k) if isinstance(current, Mapping) else None)
        elif isinstance(node, list):
            for item in node:  # a list in a merge patch replaces the object's: whole copies
                walk(item, None)

    walk(patch, obj)
    return patch


# -- flaky nodes -------------------------------------------------------------------------------


class FlakyNodes:
    """Which distinct workloads each node failed, and when; a node crossing the
    threshold is reported once per window."""

    def __init__(self, *, workloads: int, window: float) -> None:
        self.workloads = workloads
        self.window = window
        self._seen: dict[str, dict[str, float]] = {}  # node -> workload -> last failure
        self._reported: dict[str, float] = {}  # node -> when it was last reported

    def record(self, node: str, workload: str, now: float) -> int | None:
        """Count ``workload`` failed by ``node`` at ``now``; the number of distinct
        workloads within the window when this crosses the threshold (report it), else None."""
        if self.workloads <= 0:
            return None
        seen = self._seen.setdefault(node, {})
        seen[workload] = now
        for w, t in list(seen.items()):
            if now - t > self.window:
                del seen[w]
        last = self._reported.get(node)
        if len(seen) >= self.workloads and (last is None or now - last > self.window):
            self._reported[node] = now
            return len(seen)
        return None
