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

Two variants of ours, reported beside it (not the product's defaults):

* **hold for a spare** (``evict_when_no_replacement=False``): a TAS workload with no
  spare node holds its quota and retries the hot swap for ``recovery_timeout_seconds``
  before the ``NodeFailures`` eviction (Kueue's wait, without its backoff count);
* **quarantine** (``quarantine_after=N``): the health tooling the project leaves outside
  (it publishes the metric and Event of a node that failed N distinct workloads) cordons
  such a node for ``bad_node_memory_seconds``.

Both: a user-side ``PodsReadyTimeout`` (a gang whose pods never all started, e.g. no node
had room: ``timeout``) counts as Kueue counts it; every restart costs
``restart_overhead_seconds`` of the gang's GPUs before it makes progress again (pulling
the image, rendezvous, loading the checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from admission.engine.preemption.checkpoint import RequeuePolicy

KUEUE, OURS = "kueue", "ours"
POD_EVICTION_SECONDS = 300.0  # the node lifecycle controller's default tolerationSeconds
NOT_READY_DELAY_SECONDS = 30.0  # Kueue's TAS node-failure delay (ours too, configurable)
PODS_READY_TIMEOUT_SECONDS = 30 * 60.0  # waitForPodsReady.timeout (and recoveryTimeout)
BACKOFF_LIMIT_COUNT = 3
RESTART_OVERHEAD_SECONDS = 5 * 60.0
BAD_NODE_MEMORY_SECONDS = 24 * 3600.0


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
    bad_node_memory_seconds: float = BAD_NODE_MEMORY_SECONDS
    quarantine_after: int = 0  # 0: no quarantine
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


def ours(**overrides: object) -> FailurePolicy:
    """This project's behaviour (module docstring)."""
    fields: dict[str, object] = {"name": OURS, **overrides}
    return FailurePolicy(**fields)  # type: ignore[arg-type]


def ours_hold(**overrides: object) -> FailurePolicy:
    """Ours, holding a TAS gang with no spare node for ``recovery_timeout_seconds``."""
    return ours(**{"name": "oursHoldForSpare", "evict_when_no_replacement": False, **overrides})


def ours_quarantine(after: int = 2, **overrides: object) -> FailurePolicy:
    """Ours, with a node that failed ``after`` distinct workloads cordoned for the window."""
    return ours(**{"name": "oursQuarantine", "quarantine_after": after, **overrides})
