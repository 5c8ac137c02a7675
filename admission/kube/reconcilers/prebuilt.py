"""Prebuilt Workloads: a job labelled ``kueue.x-k8s.io/prebuilt-workload-name`` runs
on that Workload instead of getting one of its own (MultiKueue's worker side creates
the Workload first, then the job; docs/semantics.md §3.3).

As Kueue's reconciler (``ensureOneWorkload`` with ``PrebuiltWorkloadFor``,
``ensurePrebuiltWorkloadOwnership``, ``ensurePrebuiltWorkloadInSync``):

* no Workload is ever generated for such a job; until the named one exists it stays
  suspended (and is queued again when the Workload appears);
* the job takes a Workload without a controller as its own (controller reference and
  the ``job-uid`` label), so it is charged once and goes with the job; a Workload
  controlled by another object is not used, and the job waits (an event says why);
* a Workload whose podSets are not the job's (pod counts, per-pod requests) is marked
  ``Finished`` with reason ``OutOfSync`` ("The prebuilt workload is out of sync with
  its user job") and not used: the job never runs on an admission of another shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from admission.integrations.framework.composition import JOB_UID_LABEL
from admission.integrations.framework.fields import controller_ref
from admission.integrations.framework.interface import Integration
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.control.context import Context, Obj
from queues.api.conditions import conditions
from queues.api.labels import PREBUILT_WORKLOAD as PREBUILT_WORKLOAD_LABEL

log = logging.getLogger("quartermaster.kube.prebuilt")

OUT_OF_SYNC = "OutOfSync"
OUT_OF_SYNC_MESSAGE = "The prebuilt workload is out of sync with its user job"

#: the job's Workload body as the service would build it (None: it cannot be built)
Compose = Callable[[Integration, str, Obj], Obj | None]


def prebuilt_name(obj: Mapping[str, Any]) -> str:
    """The Workload ``obj`` names with the prebuilt-workload label ("" when none)."""
    value = (kobj.meta(obj).get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
    return value if isinstance(value, str) else ""


class PrebuiltWorkloads:
    """Decides whether a job may run on the Workload it names, taking it when free."""

    def __init__(self, ctx: Context, compose: Compose) -> None:
        self.ctx = ctx
        self.compose = compose
        self._waiting: dict[str, set[tuple[str, str]]] = {}  # Workload key -> jobs
        self._told: dict[tuple[str, str], str] = {}  # job -> the last reason told

    def waiting_for(self, wkey: str) -> set[tuple[str, str]]:
        """The jobs (kind, key) waiting for Workload ``wkey`` to appear or change."""
        return set(self._waiting.get(wkey, ()))

    def forget(self, job: tuple[str, str]) -> None:
        for jobs in self._waiting.values():
            jobs.discard(job)
        self._told.pop(job, None)

    async def usable(
        self, integ: Integration, key: str, obj: Obj, wkey: str, wl: Obj | None
    ) -> bool:
        """Whether the job ``key`` may go on with its prebuilt Workload ``wl`` (at
        ``wkey``) now; False after a write (its event brings the job back)."""
        job = (integ.lower_kind, key)
        self._waiting.setdefault(wkey, set()).add(job)
        if wl is None or kobj.deleting(wl) or kobj.is_finished(wl):
            self._tell(obj, job, f"waiting for the prebuilt Workload {wkey}")
            return False
        ref = controller_ref(wl)
        uid = str(kobj.meta(obj).get("uid") or "")
        if ref is None:
            await self._take(obj, integ, wkey, wl)
            return False
        if str(ref.get("uid") or "") != uid:
            self._tell(obj, job, f"the prebuilt Workload {wkey} is controlled by "
                                 f"{ref.get('kind')} {ref.get('name')}")  # fmt: skip
            return False
        body = self.compose(integ, key, obj)
        if body is None:
            return False
        why = kobj.job_mismatch(wl, body, started=not integ.is_suspended(obj))
        if why is not None:
            log.info(
                "%s %s: prebuilt Workload %s out of sync: %s", integ.lower_kind, key, wkey, why
            )
            await self._out_of_sync(wkey)
            return False
        self._told.pop(job, None)
        return True

    def _tell(self, obj: Obj, job: tuple[str, str], why: str) -> None:
        if self._told.get(job) != why:
            self._told[job] = why
            self.ctx.record_event(obj, "Normal", "PrebuiltWorkload", why)

    async def _take(self, obj: Obj, integ: Integration, wkey: str, wl: Obj) -> None:
        """Make ``obj`` the Workload's controller (Kueue's ``SetControllerReference``)."""
        ns, name = kobj.split_key(wkey)
        m = kobj.meta(obj)
        ref = {"apiVersion": integ.api_version, "kind": integ.kind, "name": m.get("name"),
               "uid": m.get("uid"), "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        refs = [
            r for r in kobj.meta(wl).get("ownerReferences") or [] if r.get("uid") != m.get("uid")
        ]
        labels = dict(kobj.meta(wl).get("labels") or {})
        labels.setdefault(JOB_UID_LABEL, str(m.get("uid") or ""))
        patch = {"metadata": {"ownerReferences": [*refs, ref], "labels": labels,
                              "resourceVersion": kobj.rv(wl)}}  # fmt: skip
        try:
            new = await self.ctx.client.patch(WORKLOADS, name, patch, namespace=ns)
        except ApiError as err:
            if err.conflict or err.not_found:
                return  # a newer version is on its way
            raise
        self.ctx.writer.remember(WORKLOADS, wkey, new)
        self.ctx.sync.workload(wkey, new)

    async def _out_of_sync(self, wkey: str) -> None:
        now = self.ctx.clock()

        def finished(w: Obj) -> Obj | None:
            if kobj.is_finished(w):
                return None
            conds = kobj.set_condition(conditions(w), type_=kobj.FINISHED, status=True,
                                    reason=OUT_OF_SYNC, message=OUT_OF_SYNC_MESSAGE, now=now,
                                    observed_generation=kobj.generation(w))  # fmt: skip
            return {"conditions": conds}

        new = await self.ctx.writer.update_status(wkey, finished)
        if new is not None:
            self.ctx.sync.workload(wkey, new)
            self.ctx.wake()
