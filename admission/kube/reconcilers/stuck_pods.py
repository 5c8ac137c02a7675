"""Pods stuck terminating on an unreachable node (Kueue's FailureRecoveryPolicy).

A pod on a node the control plane cannot reach stays ``Terminating`` for ever: nobody
confirms that its containers stopped. A Job with ``podReplacementPolicy: Failed``
then never replaces it, and an evicted workload whose job must be inactive before its
quota is released holds that quota, and the head of its queue waits.

Opt-in per pod, with Kueue's annotation ``kueue.x-k8s.io/safe-to-forcefully-delete:
"true"``: once such a pod has been terminating for its own grace period plus
``nodeFailures.forcefulTerminationGracePeriod`` (Kueue's 60 s) and its node carries
the ``node.kubernetes.io/unreachable`` taint, it is marked ``Failed`` (condition
``KueueFailureRecovery``, reason ``KueueForcefullyDeleted``, a Warning Event with
Kueue's message) and deleted with a zero grace period. Read from the bound-pods
informer (the annotation, ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` are
kept); checked on the leader's ticker, so a node that becomes unreachable after the
deadline is still acted on.
"""

from __future__ import annotations

import logging

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import PODS
from admission.kube.control.context import BOUND_PODS, Context, Obj
from admission.kube.watch.informer import DELETED
from queues.api.labels import SAFE_TO_FORCEFULLY_DELETE
from queues.node_health import UNREACHABLE_TAINT, taints_of
from queues.times import rfc3339_seconds

log = logging.getLogger("quartermaster.kube.stuckpods")

RECOVERY_CONDITION = "KueueFailureRecovery"  # Kueue's KueueFailureRecoveryConditionType
FORCEFULLY_DELETED = "KueueForcefullyDeleted"  # Kueue's KueueForcefulTerminationReason


class StuckPods:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.grace = ctx.options.node_failures.forceful_termination_grace
        self.due: dict[str, float] = {}  # pod key -> when it may be force-failed

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        """A bound pod: watched while it is opted in and terminating."""
        if event == DELETED or new is None:
            self.due.pop(key, None)
            return
        meta = kobj.meta(new)
        opted = (meta.get("annotations") or {}).get(SAFE_TO_FORCEFULLY_DELETE) == "true"
        since = rfc3339_seconds(meta.get("deletionTimestamp"))
        if opted and since is not None:
            self.due[key] = since + self.grace
        else:
            self.due.pop(key, None)

    async def check(self) -> None:
        ctx = self.ctx
        now = ctx.clock()
        pods = ctx.informers.get(BOUND_PODS)
        nodes = ctx.informers.get("nodes")
        for key, at in sorted(self.due.items()):
            if at > now:
                continue
            pod = pods.store.get(key) if pods is not None else None
            if pod is None:
                self.due.pop(key, None)
                continue
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            node = nodes.store.get(node_name) if nodes is not None else None
            if node is None or not any(t.key == UNREACHABLE_TAINT for t in taints_of(node)):
                continue  # not (yet) unreachable: checked again next tick
            await self._force(key, pod, node_name)
            self.due.pop(key, None)

    async def _force(self, key: str, pod: Obj, node: str) -> None:
        ctx = self.ctx
        ns, name = kobj.split_key(key)
        total = float(kobj.meta(pod).get("deletionGracePeriodSeconds") or 0) + self.grace
        message = (
            f"Pod forcefully terminated after {total:g}s grace period due to unreachable node "
            f"`{node}` (triggered by `{SAFE_TO_FORCEFULLY_DELETE}` annotation)"
        )
        status: Obj = {
            "conditions": [
                {
                    "type": RECOVERY_CONDITION,
                    "status": "True",
                    "reason": FORCEFULLY_DELETED,
                    "message": message,
                    "lastTransitionTime": kobj.rfc3339(ctx.clock()),
                }
            ]
        }
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            status["phase"] = "Failed"
        try:
            await ctx.client.patch(
                PODS, name, {"status": status}, namespace=ns, subresource="status"
            )
            await ctx.client.delete(PODS, name, namespace=ns, grace_period_seconds=0)
        except ApiError as err:
            if err.not_found:
                return
            log.warning("force-failing pod %s failed: %s", key, err)
            return
        log.info("pod %s: %s", key, message)
        ctx.record_event(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}},
            "Warning",
            FORCEFULLY_DELETED,
            message,
        )
