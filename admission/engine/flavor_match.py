"""Whether a podSet's pods may run on a flavor's nodes.

Kueue's flavor checks before any quota is read: the podSet's node selector and required
node affinity (on the keys the flavor labels), the flavor's taints it must tolerate, and
topology-aware scheduling (checkPodSetAndFlavorMatchForTAS). Flavor assignment asks it
for every flavor it tries; the feasibility bound of bounded parking asks it too.
"""

from __future__ import annotations

from collections.abc import Sequence

from admission.engine import messages
from admission.engine.tas.admission import flavor_level_mismatch
from admission.engine.tas.domains import TopologyState
from queues.model import PodSet, ResourceFlavor


def topology_mismatch(
    flavor: ResourceFlavor,
    ps: PodSet,
    *,
    tas_only: bool = False,
    topology: TopologyState | None = None,
    covered: Sequence[str] | None = None,
) -> str | None:
    """Kueue's checkPodSetAndFlavorMatchForTAS.

    A podSet that requests topology-aware scheduling (``topologyRequest`` with
    required, preferred, unconstrained or a slice topology) can only use a flavor with a
    ``topologyName`` whose Topology has the levels it names; in a ClusterQueue whose
    flavors all have a topology every podSet is placed (TAS implied). A podSet that does
    not request it cannot use a topology flavor ("supports only TopologyAwareScheduling").
    """
    tr = ps.topology
    explicit = tr is not None and tr.requests_tas
    if explicit or tas_only:
        if not explicit:
            return None  # implied: the lowest level, unconstrained
        if flavor.topology_name is None:
            pod = ps.requests if ps.declared_requests is None else ps.declared_requests
            if covered is not None and not any(r in pod for r in covered if r != "pods"):
                # Kueue: a flavor sharing none of the resources the pod spec requests is
                # accepted (it may give quota-only resources, a transformation's output;
                # an LWS leader asks for none)
                return None
            return messages.flavor_lacks_topology(flavor)
        assert tr is not None
        wanted = [lv for lv in (tr.required, tr.preferred) if lv is not None]
        wanted += [lv for lv, _ in tr.slice_layers]
        return flavor_level_mismatch(topology, flavor, wanted)
    if flavor.topology_name is not None:
        return messages.flavor_only_topology(flavor)
    return None


def flavor_matches(
    flavor: ResourceFlavor,
    ps: PodSet,
    *,
    tas_only: bool = False,
    topology: TopologyState | None = None,
    covered: Sequence[str] | None = None,
) -> str | None:
    """None if the podSet may run on this flavor's nodes, else why not. ``covered``:
    the resources of the flavor's resource group."""
    if (ps.topology is not None and ps.topology.requests_tas) or tas_only or flavor.topology_name:
        why = topology_mismatch(flavor, ps, tas_only=tas_only, topology=topology, covered=covered)
        if why is not None:
            return why
    labels = flavor.node_labels
    for k, v in ps.node_selector.items():
        if k in labels and labels[k] != v:
            return messages.flavor_affinity_mismatch(flavor.name)
    if ps.required_affinity and labels:
        ok = False
        for term in ps.required_affinity:
            exprs = [e for e in term.match_expressions if e.key in labels]
            if not exprs:  # a term on other keys matches any flavor (terms are ORed)
                ok = True
                break
            if all(e.matches(labels) for e in exprs):
                ok = True
                break
        if not ok:
            return messages.flavor_affinity_mismatch(flavor.name)
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if any(t.tolerates(taint) for t in ps.tolerations):
            continue
        if any(t.tolerates(taint) for t in flavor.tolerations):
            continue
        return messages.untolerated_taint(taint, flavor.name)
    return None
