"""Integrations whose kind is a custom resource run only while its API is served.

A cluster has the JobSet, Kubeflow, Ray or LeaderWorkerSet CRDs only when their
operators are installed. Like Kueue (``jobframework.SetupControllers``: "No matching API
in the server for job framework, skipped setup of controller and webhook", then
``waitForAPI``), an enabled integration whose API is not served is not watched, does
not hold back readiness (that waits for the core informers alone: Kueue's own kinds,
Jobs, Pods, Nodes, Namespaces, PriorityClasses), is logged once as waiting, naming the
missing group/version/resource, and starts as soon as the API appears, without a
restart. An integration whose CRD is deleted stops: its informer ends and its cache is
emptied; its Workloads are kept (the reconciler leaves a Workload alone while its
owner's informer has not synced, ``jobs.reconcile_workload``), and it starts again,
relisting, if the CRD comes back.

**How the service learns that an API is served: it watches CustomResourceDefinitions.**
One informer on ``apiextensions.k8s.io/v1`` ``customresourcedefinitions`` (list and
watch, granted in ``manifests/base/rbac.yaml``; objects slimmed to the few fields read
here) reports a CRD the moment it is ``Established`` and the moment it is deleted. Kueue
instead polls its REST mapper (discovery) with a backoff of up to two minutes; a poll
either delays the start of an integration by up to its period or costs the API server
a discovery round every few seconds forever, and detecting a removal needs the same
poll. A watch costs one idle connection and is exact; the price is one read-only RBAC
rule on a cluster-scoped kind that holds no secrets. The built-in kinds (``batch``,
``apps`` and the core group) and Kueue's own are always served and never gated.

What needs no start: the webhooks and the owner checks of an integration's children
follow the configuration (``integrations.frameworks``), not this gate. An object of a
kind whose API is not served cannot exist, so its webhook is never called; and an
object created in the moment between a CRD's installation and this watch's event is
still suspended by its webhook, and a child's owner is read from the API when the
informer does not have it yet (:mod:`.owners`). Gating them as well would let such an
object run outside quota.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.interface import Integration
from admission.kube.client.resources import CUSTOM_RESOURCE_DEFINITIONS, KUEUE
from admission.kube.client.rest import KubeClient, Obj
from admission.kube.control.metrics import Metrics
from admission.kube.watch.informer import Informer
from queues.api.conditions import is_true

log = logging.getLogger("quartermaster.kube.integrations")

BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})
"""The API groups of the built-in job kinds: served by every kube-apiserver."""

ACTIVE, WAITING = "active", "waiting"


def needs_crd(res: Resource) -> bool:
    """Whether ``res`` is served only when its CustomResourceDefinition is installed."""
    return res.group not in BUILT_IN_GROUPS and res.group != KUEUE


def crd_name(res: Resource) -> str:
    return f"{res.plural}.{res.group}"


def describe(res: Resource) -> str:
    """``group/version/resource``, as the missing API is named in logs and status."""
    return f"{res.group}/{res.version}/{res.plural}"


def serves(crd: Obj | None, res: Resource) -> bool:
    """Whether ``crd`` makes the API server serve ``res``: it names the group and
    plural, serves the version, is ``Established`` and is not being deleted."""
    if crd is None or (crd.get("metadata") or {}).get("deletionTimestamp"):
        return False
    spec = crd.get("spec") or {}
    if spec.get("group") != res.group or (spec.get("names") or {}).get("plural") != res.plural:
        return False
    if not any(
        v.get("name") == res.version and v.get("served") for v in spec.get("versions") or []
    ):
        return False
    return is_true(crd, "Established")


def slim_crd(crd: Obj) -> Obj:
    """What :func:`serves` reads of a CRD (their schemas run to megabytes)."""
    meta = crd.get("metadata") or {}
    spec = crd.get("spec") or {}
    return {
        "apiVersion": crd.get("apiVersion"),
        "kind": crd.get("kind"),
        "metadata": {
            k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in meta
        },
        "spec": {
            "group": spec.get("group"),
            "names": {"plural": (spec.get("names") or {}).get("plural")},
            "versions": [
                {"name": v.get("name"), "served": v.get("served")}
                for v in spec.get("versions") or []
            ],
        },
        "status": {"conditions": list((crd.get("status") or {}).get("conditions") or [])},
    }


def api_resources(integration: Integration) -> tuple[Resource, ...]:
    """The APIs an integration reads: its kind's and those of the kinds it references."""
    own = () if integration.reconciler == "parent" else (integration.resource,)
    return (*own, *integration.references)


class IntegrationGate:
    """Starts and stops the informers of CRD-backed kinds as their APIs come and go."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: Mapping[str, Informer],
        integrations: Iterable[Integration],
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.integrations = tuple(integrations)
        wanted = {r.plural for i in self.integrations for r in api_resources(i) if needs_crd(r)}
        self.gated: dict[str, Informer] = {
            key: inf
            for key, inf in informers.items()
            if needs_crd(inf.resource) and inf.resource.plural in wanted
        }
        self.crds = Informer(
            client,
            CUSTOM_RESOURCE_DEFINITIONS,
            handler=self._on_crd,
            rng=rng,
            transform=slim_crd,
        )
        self.metrics = metrics
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._stopping: set[asyncio.Task[Any]] = set()  # cancelled, still unwinding
        self._states: dict[str, str] = {}
        self._decided = False  # the first list of CRDs has been acted on

    def is_gated(self, key: str) -> bool:
        return key in self.gated

    def settled(self) -> bool:
        """The CRDs have been read and every informer started since has synced: what
        readiness would mean if it waited for the integrations too (tests start from
        this steady state)."""
        if self.gated and not self._decided:
            return False
        return all(self.gated[key].synced.is_set() for key in self._tasks)

    def served(self, res: Resource) -> bool:
        return not needs_crd(res) or serves(self.crds.store.get(crd_name(res)), res)

    def missing(self, integration: Integration) -> list[Resource]:
        """The APIs of ``integration`` that are not served now."""
        return [r for r in api_resources(integration) if not self.served(r)]

    def state(self, integration: Integration) -> str:
        return self._states.get(integration.framework, WAITING)

    def status_lines(self) -> list[str]:
        """One line per enabled integration, for the readiness output."""
        lines = []
        for integ in self.integrations:
            missing = self.missing(integ) if self.crds.synced.is_set() else []
            if self.state(integ) == ACTIVE:
                lines.append(f"integration {integ.framework}: active")
            elif not self.crds.synced.is_set():
                lines.append(
                    f"integration {integ.framework}: waiting (CustomResourceDefinitions not read yet)"
                )
            else:
                apis = ", ".join(describe(r) for r in missing)
                lines.append(f"integration {integ.framework}: waiting for CRD ({apis} not served)")
        return lines

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch CRDs and start/stop the gated informers until cancelled."""
        for integ in self.integrations:  # the built-in kinds' are active from the start
            if not any(needs_crd(r) for r in api_resources(integ)):
                self._set_state(integ, ACTIVE, [])
        if not self.gated:
            await asyncio.Event().wait()
        crd_task = asyncio.create_task(self.crds.run(), name="informer-crds")
        try:
            await self.crds.synced.wait()
            self._update()
            self._decided = True
            await crd_task
        finally:
            crd_task.cancel()
            tasks = [*self._tasks.values(), *self._stopping, crd_task]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _on_crd(self, _event: str, _key: str, _new: Obj | None, _old: Obj | None) -> None:
        if self.crds.synced.is_set():  # the first list is decided at once, after it
            self._update()

    def _update(self) -> None:
        for key, inf in self.gated.items():
            running = key in self._tasks
            if self.served(inf.resource) and not running:
                self._tasks[key] = asyncio.create_task(inf.run(), name=f"informer-{key}")
            elif not self.served(inf.resource) and running:
                task = self._tasks.pop(key)
                task.cancel()
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
                # the cancelled task resumes only to unwind: the store is not touched again
                inf.reset()
        for integ in self.integrations:
            missing = self.missing(integ)
            self._set_state(integ, WAITING if missing else ACTIVE, missing)

    def _set_state(self, integ: Integration, state: str, missing: list[Resource]) -> None:
        before = self._states.get(integ.framework)
        self._states[integ.framework] = state
        if self.metrics is not None:
            self.metrics.integration_active.labels(integ.framework).set(state == ACTIVE)
        if state == before:
            return
        apis = ", ".join(f"{describe(r)} (CRD {crd_name(r)})" for r in missing)
        if state == WAITING and before is None:
            log.info(
                "integration %s (%s) not started: API not served: %s; it starts when the "
                "CRD is installed",
                integ.framework,
                integ.kind,
                apis,
            )
        elif state == WAITING:
            log.warning(
                "integration %s (%s) stopped: API no longer served: %s; its Workloads are "
                "kept, and it starts again when the CRD is installed",
                integ.framework,
                integ.kind,
                apis,
            )
        elif before == WAITING:
            log.info("integration %s (%s) started: its API is served", integ.framework, integ.kind)
