"""What happens to a workload whose node fails: the two policies the simulator compares.

**Kueue** (its defaults, with a ``backoffLimitCount`` set, v1beta2 configuration):

* a TAS workload: after the node has been NotReady for 30 s, Kueue's failed-node
  replacement (TASFailedNodeReplacement) moves the node's pods to a healthy node with
  room inside the required domain, without eviction (*hot swap*). With no room it waits
  (FailFast is off by default), retrying as capacity frees, until waitForPodsReady's
  ``recoveryTimeout`` (default: ``timeout``, 30 min) evicts it with ``PodsReadyTimeout``;
  two failed nodes at once evict it with ``NodeFailures``;
* a workload without TAS: Kueue does not watch nodes. The Job's pod on the failed node
  is evicted by the node lifecycle controller after the default ``tolerationSeconds``
  (300 s); its replacement starts if a healthy node has room, else the gang waits until
  ``recoveryTimeout`` evicts it with ``PodsReadyTimeout``;
* a ``PodsReadyTimeout`` eviction counts toward ``requeuingStrategy.backoffLimitCount``
  (past it: deactivated), waits ``60 s · 2^(n−1)`` (at most 1 h) before it is queued
  again, and is queued by its eviction time (``timestamp: Eviction``): behind the work
  that arrived meanwhile;
* no bad-node memory: the workload may be admitted onto the same node once it is back.

**Ours** (this project's node-failure handling):

* every workload: after 30 s NotReady, a TAS workload is hot-swapped when a spare node
  fits (as Kueue), otherwise — and any workload without TAS — evicted with
  ``NodeFailures`` at once and queued again;
* an infrastructure eviction does not count toward ``backoffLimitCount``, adds no
  backoff, and the workload keeps its place (ordered by its creation time);
* bad-node memory: the workload avoids the nodes that failed under it (a required node
  affinity ``NotIn`` on ``kubernetes.io/hostname``; TAS placement excludes them) for
  ``bad_node_memory_seconds``.

Ours is built from the product's own ``nodeFailures`` settings and rules
(:mod:`queues.node_health`: ``NodeFailurePolicy``, ``AvoidedNodes``, ``FlakyNodes``);
the controller's reactions (eviction, hot swap, requeue) are modelled here, after it.

Two variants of ours, reported beside it (not the product's defaults):

* **hold for a spare** (``failFast: false``): a TAS workload with no spare node holds
  its quota and retries the hot swap for ``recovery_timeout_seconds`` before the
  ``NodeFailures`` eviction (Kueue's wait, without its backoff count);
* **another memory** (``avoidNodesFor`` other than the default day);
* **quarantine**: the health tooling the project leaves outside cordons a node the
  product reports as flaky (here: 2 distinct workloads within 24 h) for that window.

Both: a user-side ``PodsReadyTimeout`` (a gang whose pods never all started, e.g. no node
had room: ``timeout``) counts as Kueue counts it; every restart costs
``restart_overhead_seconds`` of the gang's GPUs before it makes progress again (pulling
the image, rendezvous, loading the checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from admission.engine.preemption.checkpoint import RequeuePolicy
from queues.node_health import NodeFailurePolicy

KUEUE, OURS = "kueue", "ours"
POD_EVICTION_SECONDS = 300.0  # the node lifecycle controller's default tolerationSeconds
NOT_READY_DELAY_SECONDS = 30.0  # Kueue's TAS node-failure delay (ours too, configurable)
PODS_READY_TIMEOUT_SECONDS = 30 * 60.0  # waitForPodsReady.timeout (and recoveryTimeout)
BACKOFF_LIMIT_COUNT = 3
RESTART_OVERHEAD_SECONDS = 5 * 60.0
PRODUCT = NodeFailurePolicy()  # the ``nodeFailures`` section's defaults
QUARANTINE = NodeFailurePolicy(flaky_workloads=2, flaky_window=24 * 3600.0)


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """One policy (see the module docstring); build with :func:`kueue` or :func:`ours`."""

    name: str
    detect_seconds: float = NOT_READY_DELAY_SECONDS
    # non-TAS: act on node failures (True: ours) or only through the pods' recovery
    # (False: Kueue — pod evicted after ``POD_EVICTION_SECONDS``, then recoveryTimeout)
    non_tas_node_failures: bool = True
    # TAS with no spare node: evict at once (ours) or hold up to ``recovery_timeout``
    evict_when_no_replacement: bool = True
    # the hold's end is waitForPodsReady's PodsReadyTimeout, counted (Kueue), or an
    # uncounted NodeFailures eviction (ours' hold variant)
    hold_is_pods_ready_timeout: bool = False
    bad_node_memory_seconds: float = PRODUCT.avoid_for
    # a node that failed ``flaky_workloads`` distinct workloads within ``flaky_window``
    # is reported (the product's Event and metric) and, with ``quarantine``, cordoned
    # for that window
    flaky_workloads: int = PRODUCT.flaky_workloads
    flaky_window_seconds: float = PRODUCT.flaky_window
    quarantine: bool = False
    pods_ready_timeout_seconds: float = PODS_READY_TIMEOUT_SECONDS
    recovery_timeout_seconds: float = PODS_READY_TIMEOUT_SECONDS
    restart_overhead_seconds: float = RESTART_OVERHEAD_SECONDS
    requeue: RequeuePolicy = field(
        default_factory=lambda: RequeuePolicy(backoff_limit=BACKOFF_LIMIT_COUNT)
    )

    def __post_init__(self) -> None:
        if self.bad_node_memory_seconds < 0 or self.detect_seconds < 0:
            raise ValueError("bad_node_memory_seconds and detect_seconds must be >= 0")


def kueue(**overrides: object) -> FailurePolicy:
    """Kueue's behaviour (module docstring)."""
    fields: dict[str, object] = {
        "non_tas_node_failures": False,
        "evict_when_no_replacement": False,
        "hold_is_pods_ready_timeout": True,
        "bad_node_memory_seconds": 0.0,
        **overrides,
    }
    return FailurePolicy(KUEUE, **fields)  # type: ignore[arg-type]


def ours(node: NodeFailurePolicy = PRODUCT, **overrides: object) -> FailurePolicy:
    """This project's behaviour (module docstring) under the ``nodeFailures`` settings
    ``node`` (default: the product's defaults, the same rules the controller reads)."""
    fields: dict[str, object] = {
        "name": OURS,
        "detect_seconds": node.not_ready_delay,
        "evict_when_no_replacement": node.fail_fast,
        "bad_node_memory_seconds": node.avoid_for,
        "flaky_workloads": node.flaky_workloads,
        "flaky_window_seconds": node.flaky_window,
        **overrides,
    }
    return FailurePolicy(**fields)  # type: ignore[arg-type]


def ours_hold(**overrides: object) -> FailurePolicy:
    """Ours with ``failFast: false``: a TAS gang with no spare node is held, and the hot
    swap retried, for ``recovery_timeout_seconds`` before its eviction."""
    node = NodeFailurePolicy(fail_fast=False)
    return ours(node, **{"name": "oursHoldForSpare", **overrides})


def ours_avoid(seconds: float, **overrides: object) -> FailurePolicy:
    """Ours with ``avoidNodesFor`` set to ``seconds``."""
    node = NodeFailurePolicy(avoid_for=seconds)
    return ours(node, **{"name": f"oursAvoidNodesFor{seconds / 3600:g}h", **overrides})


def ours_quarantine(**overrides: object) -> FailurePolicy:
    """Ours, with a node reported flaky (2 distinct workloads in 24 h) cordoned for 24 h."""
    return ours(QUARANTINE, **{"name": "oursQuarantine", "quarantine": True, **overrides})
