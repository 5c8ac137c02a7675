"""The warnings of a configuration file: every field set that Quartermaster parses but
does not act on ("<field>: has no effect (why)"), printed by the commands on stderr."""

from __future__ import annotations

from admission.config.listen import port_of
from admission.config.schema import ConfigurationDoc
from admission.integrations.registry import BY_FRAMEWORK


def unimplemented(doc: ConfigurationDoc) -> list[str]:
    """ "<field>: has no effect ..." for every field set that Quartermaster does not act on.

    Kueue's defaults count as unset: a field written with the value Kueue would use
    anyway changes nothing here either.
    """
    out: list[str] = []

    def no_effect(path: str, why: str) -> None:
        out.append(f"{path}: has no effect ({why})")

    if doc.controller is not None:
        no_effect("controller", "Quartermaster reconciles on one event loop, not per kind")
    fair = doc.fairSharing is not None and doc.fairSharing.enable is not False
    if doc.parkUntilFeasible and (fair or doc.admissionFairSharing is not None):
        no_effect(
            "parkUntilFeasible",
            "not with fairSharing or admissionFairSharing: their preemption is not bounded "
            "by quota alone, so heads are parked as Kueue parks them",
        )
    if doc.pprofBindAddress not in (None, "", "0"):
        no_effect("pprofBindAddress", "no pprof; send SIGUSR1 for every thread's stack")
    if doc.tls is not None:
        no_effect("tls", "the webhook server uses Python's TLS defaults")
    mk = doc.multiKueue
    if mk is not None:
        if mk.externalFrameworks:
            no_effect("multiKueue.externalFrameworks", "only the built-in job kinds dispatch")
        if mk.clusterProfile is not None:
            no_effect("multiKueue.clusterProfile", "workers connect by kubeconfig Secrets only")
    for gate in sorted(doc.featureGates or {}):
        if gate != "TASBalancedPlacement":  # the one gate honoured (TAS placement)
            no_effect(f"featureGates.{gate}", "Quartermaster has no feature gates")
    if doc.objectRetentionPolicies is not None:
        no_effect("objectRetentionPolicies", "Workloads are not deleted automatically")
    if doc.visibilityServer is not None:
        no_effect("visibilityServer", "not implemented")
    if doc.queueVisibility is not None:
        no_effect("queueVisibility", "removed in Kueue v1beta2")
    m = doc.metrics
    if m is not None:
        if m.bindAddress is not None and port_of(m.bindAddress) is None:
            no_effect("metrics.bindAddress", f"{m.bindAddress!r}: metrics are always served")
        if m.enableClusterQueueResources is False:
            no_effect(
                "metrics.enableClusterQueueResources",
                "ClusterQueue resource metrics are always reported",
            )
        if m.customLabels:
            no_effect("metrics.customLabels", "not implemented")
        if m.localQueueMetrics is not None:
            no_effect("metrics.localQueueMetrics", "not implemented")
    h = doc.health
    if h is not None:
        if h.healthProbeBindAddress is not None and port_of(h.healthProbeBindAddress) is None:
            no_effect("health.healthProbeBindAddress", "health probes are always served")
        for name, default in (
            ("readinessEndpointName", "readyz"),
            ("livenessEndpointName", "healthz"),
        ):
            value = getattr(h, name)
            if value not in (None, default):
                no_effect(f"health.{name}", f"the endpoint is /{default}")
    w = doc.waitForPodsReady
    if w is not None:
        if w.blockAdmission:
            no_effect("waitForPodsReady.blockAdmission", "admission is never blocked")
        if w.recoveryTimeout is not None:
            no_effect("waitForPodsReady.recoveryTimeout", "not implemented")
    i = doc.integrations
    if i is not None:
        other = i.unregistered()
        if other:
            no_effect(
                "integrations.frameworks",
                f"{', '.join(other)}: Quartermaster has integrations for "
                f"{', '.join(sorted(BY_FRAMEWORK))}",
            )
        if i.labelKeysToCopy:
            no_effect("integrations.labelKeysToCopy", "labels are not copied to Workloads")
        if i.podOptions is not None:
            no_effect("integrations.podOptions", "use managedJobsNamespaceSelector")
    r = doc.resources
    if r is not None:
        if r.quotaCheckStrategy == "IgnoreUndeclared":
            no_effect(
                "resources.quotaCheckStrategy",
                "IgnoreUndeclared is not implemented: every resource is checked",
            )
    return out
