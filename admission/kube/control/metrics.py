"""Prometheus metrics with Kueue's names (docs/semantics.md §5.1), one registry per process.

Dashboards and alerts written for Kueue keep working: the same metric names and the
same label names where the semantics match. Each service instance owns its own
``CollectorRegistry`` (tests run several in one process).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, float("inf"))
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, float("inf"))


class Metrics:
    """The service's metrics (label sets as in Kueue, without ``replica_role``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.build_info = Info("kueue_build", "Build information", registry=r)
        self.build_info.info({"git_version": "quartermaster-0.1.0"})
        self.admission_attempts = Counter(
            "kueue_admission_attempts_total",
            "Scheduling cycles, by whether a workload was admitted",
            ["result"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "kueue_admission_attempt_duration_seconds",
            "Duration of one scheduling cycle",
            ["result"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "kueue_pending_workloads",
            "Pending workloads per ClusterQueue (active: in the heap; inadmissible: parked)",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.reserving = Gauge(
            "kueue_reserving_active_workloads",
            "Workloads holding a quota reservation",
            ["cluster_queue"],
            registry=r,
        )
        self.admitted_active = Gauge(
            "kueue_admitted_active_workloads",
            "Admitted workloads not yet finished",
            ["cluster_queue"],
            registry=r,
        )
        self.quota_reserved_total = Counter(
            "kueue_quota_reserved_workloads_total",
            "Quota reservations",
            ["cluster_queue"],
            registry=r,
        )
        self.admitted_total = Counter(
            "kueue_admitted_workloads_total",
            "Admissions",
            ["cluster_queue"],
            registry=r,
        )
        self.admission_wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "Time from creation (or requeue) to admission",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.admission_checks_wait = Histogram(
            "kueue_admission_checks_wait_time_seconds",
            "The time from when a workload got the quota reservation until admission",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.evicted_total = Counter(
            "kueue_evicted_workloads_total",
            "Evictions",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.preempted_total = Counter(
            "kueue_preempted_workloads_total",
            "Preemptions issued",
            ["preempting_cluster_queue", "reason"],
            registry=r,
        )
        self.finished_total = Counter(
            "kueue_finished_workloads_total",
            "Finished workloads",
            ["cluster_queue"],
            registry=r,
        )
        self.resource_usage = Gauge(
            "kueue_cluster_queue_resource_usage",
            "Admitted usage per ClusterQueue, flavor and resource",
            ["cluster_queue", "flavor", "resource"],
            registry=r,
        )
        self.resource_reservation = Gauge(
            "kueue_cluster_queue_resource_reservation",
            "Reserved quota per ClusterQueue, flavor and resource",
            ["cluster_queue", "flavor", "resource"],
            registry=r,
        )
        self.nominal_quota = Gauge(
            "kueue_cluster_queue_nominal_quota",
            "Nominal quota per ClusterQueue, flavor and resource",
            ["cluster_queue", "flavor", "resource"],
            registry=r,
        )
        self.weighted_share = Gauge(
            "kueue_cluster_queue_weighted_share",
            "Fair-sharing weighted share",
            ["cluster_queue"],
            registry=r,
        )
        self.cq_status = Gauge(
            "kueue_cluster_queue_status",
            "ClusterQueue status (1 for the current one)",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.api_writes = Counter(
            "quartermaster_api_writes_total",
            "API writes by kind and outcome",
            ["kind", "result"],
            registry=r,
        )
        self.api_requests = Counter(
            "quartermaster_api_requests_total",
            "Requests sent to the API server, by call",
            ["call"],
            registry=r,
        )
        self.api_retries = Counter(
            "quartermaster_api_retries_total",
            "Requests sent again after the API server answered 429 (or a 5xx) with "
            "Retry-After, by call and the status of the answer (each is also counted in "
            "quartermaster_api_requests_total)",
            ["call", "code"],
            registry=r,
        )
        self.api_errors = Counter(
            "quartermaster_api_errors_total",
            "Answers of the API server that were not 2xx, by call and status (0: no "
            "answer): conflicts, throttling, not found (each request is also counted in "
            "quartermaster_api_requests_total)",
            ["call", "code"],
            registry=r,
        )
        self.rate_limit_wait = Histogram(
            "quartermaster_client_rate_limit_wait_seconds",
            "Time requests waited for the client-side rate limit (clientConnection.qps/burst)",
            ["priority"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            "quartermaster_reconcile_errors_total",
            "Failed reconciles, by object kind and API status (0: transport, -1: other)",
            ["kind", "status"],
            registry=r,
        )
        # progress-aware preemption (admission.kube.reconcilers.notices)
        self.notices_total = Counter(
            "quartermaster_preemption_notices_total",
            "Preemption notices given, by the victim's ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.noticed_evictions_total = Counter(
            "quartermaster_noticed_evictions_total",
            "Noticed victims evicted, by what ended the notice (checkpoint or deadline)",
            ["cluster_queue", "trigger"],
            registry=r,
        )
        self.lost_work_total = Counter(
            "quartermaster_preemption_lost_work_unit_seconds_total",
            "Work lost to preemption: units of the lost-work resources × seconds since "
            "the victim's last checkpoint (or admission), summed over evictions",
            ["cluster_queue"],
            registry=r,
        )
        # node failures (admission.kube.reconcilers.node_failures)
        self.node_failure_evictions_total = Counter(
            "quartermaster_node_failure_evictions_total",
            "Workloads evicted for a node failure, by ClusterQueue and what failed "
            "(NodeDeleted, NodeNotReady, NodeTainted, NoReplacement, MultipleNodes)",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.node_failure_recovery = Histogram(
            "quartermaster_node_failure_recovery_seconds",
            "From a node failure being acted on to the workload running again "
            "(re-admitted after an eviction, or its failed node replaced)",
            buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
            registry=r,
        )
        self.flaky_nodes_total = Counter(
            "quartermaster_flaky_node_reports_total",
            "A node failed nodeFailures.flakyNode.workloads distinct workloads within the window",
            ["node"],
            registry=r,
        )
        self.leader = Gauge(
            "quartermaster_leader", "1 when this replica holds the Lease", registry=r
        )
        self.integration_active = Gauge(
            "quartermaster_integration_active",
            "1 while an enabled integration runs, 0 while it waits for its kind's "
            "CustomResourceDefinition",
            ["framework"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "quartermaster_event_loop_lag_seconds",
            "How late the event loop ran a periodic timer (webhooks, probes, the Lease and"
            " the scheduler share the loop: lag delays all of them)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.loop_lag_max = Gauge(
            "quartermaster_event_loop_lag_max_seconds",
            "The largest event-loop lag seen since the service started",
            registry=r,
        )

    def forget_cluster_queue(self, name: str, frs: list[tuple[str, str]]) -> None:
        """Drop the series of a deleted ClusterQueue."""
        for g in (self.reserving, self.admitted_active, self.weighted_share):
            _remove(g, name)
        for status in ("active", "inadmissible"):
            _remove(self.pending, name, status)
        for status in ("pending", "active", "terminated"):
            _remove(self.cq_status, name, status)
        for flavor, resource in frs:
            for g in (self.resource_usage, self.resource_reservation, self.nominal_quota):
                _remove(g, name, flavor, resource)


def _remove(metric: Gauge, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
