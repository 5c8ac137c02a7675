"""The MultiKueueClusters: one :class:`~.remote.RemoteCluster` per cluster whose
kubeconfig Secret is usable, and each cluster's ``Active`` condition, as Kueue's
``clustersReconciler`` keeps them:

* ``Active=True``, reason ``Active``, message ``Connected``: the worker answers;
* ``Active=False``, reason ``BadKubeConfig`` or ``InsecureKubeConfig``, message ``load
  client config failed: <why>``: the Secret is missing, has no ``kubeconfig`` key, or
  its kubeconfig is refused (:mod:`.kubeconfig`);
* ``Active=False``, reason ``ClientConnectionFailed``: the worker does not answer.

Not supported, each with a condition that says so: ``clusterProfileRef`` (reason
``MultiKueueClusterProfileFeatureDisabled``, as Kueue with its feature gate off: the
ClusterProfile API and its access providers are not implemented) and ``locationType:
Path`` (reason ``BadKubeConfig``: a file in the service's container is not something
this service reads; the kubeconfig goes in a Secret).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import MULTIKUEUE_CLUSTERS, SECRETS
from admission.kube.client.rest import KubeClient, Obj
from admission.kube.multikueue import kubeconfig
from admission.kube.multikueue.remote import RemoteCluster
from queues.api.conditions import condition

log = logging.getLogger("quartermaster.kube.multikueue")

ACTIVE = "Active"
FAILED = "ClientConnectionFailed"
PROFILE_DISABLED = "MultiKueueClusterProfileFeatureDisabled"

#: name, client -> RemoteCluster (the manager wires its callbacks and options)
MakeRemote = Callable[[str, KubeClient], RemoteCluster]


class Clusters:
    """The workers by MultiKueueCluster name, and their conditions."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        make_remote: MakeRemote,
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.make_remote = make_remote
        self.clock = clock
        self.remotes: dict[str, RemoteCluster] = {}
        self._raw: dict[str, bytes] = {}  # name -> the kubeconfig its remote was made from
        self.objects: dict[str, Obj] = {}  # name -> MultiKueueCluster

    def remote(self, name: str) -> RemoteCluster | None:
        return self.remotes.get(name)

    def active(self, name: str) -> bool:
        remote = self.remotes.get(name)
        return remote is not None and remote.connected

    async def stop(self) -> None:
        for name in list(self.remotes):
            await self._drop(name)

    async def _drop(self, name: str) -> None:
        remote = self.remotes.pop(name, None)
        self._raw.pop(name, None)
        if remote is not None:
            await remote.stop()

    async def reconcile(self, name: str, obj: Obj | None) -> None:
        """Connect, reconnect or drop worker ``name`` and write its condition."""
        if obj is None or kobj.deleting(obj):
            self.objects.pop(name, None)
            await self._drop(name)
            return
        self.objects[name] = obj
        try:
            raw = await self._kubeconfig(obj)
            checked = kubeconfig.check(raw)
        except kubeconfig.Refused as refused:
            log.warning("MultiKueueCluster %s: %s", name, refused)
            await self._drop(name)
            await self.write_condition(
                name, False, refused.reason, f"load client config failed: {refused}"
            )
            return
        if self._raw.get(name) != raw:
            await self._drop(name)
            config = await kubeconfig.configuration(checked)
            remote = self.make_remote(name, await KubeClient.connect(configuration=config,
                                                                     strict=False))  # fmt: skip
            self.remotes[name] = remote
            self._raw[name] = raw
            remote.start()
        await self.write_state(name)

    async def write_state(self, name: str) -> None:
        """``Active`` from whether the worker answers."""
        remote = self.remotes.get(name)
        if remote is None:
            return
        if remote.connected:
            await self.write_condition(name, True, ACTIVE, "Connected")
        else:
            await self.write_condition(
                name, False, FAILED, remote.last_error or "the worker has not answered yet"
            )

    async def _kubeconfig(self, obj: Obj) -> bytes:
        source = (obj.get("spec") or {}).get("clusterSource") or {}
        if source.get("clusterProfileRef"):
            raise kubeconfig.Refused(
                PROFILE_DISABLED, "MultiKueueClusterProfile feature gate is disabled"
            )
        ref = source.get("kubeConfig") or {}
        location = str(ref.get("location") or "")
        if ref.get("locationType", "Secret") != "Secret":
            raise kubeconfig.Refused(
                kubeconfig.BAD,
                "locationType Path is not supported: put the kubeconfig in a Secret of "
                f"namespace {self.namespace} (key kubeconfig)",
            )
        try:
            secret = await self.client.get(SECRETS, location, namespace=self.namespace)
        except ApiError as err:
            if err.not_found:
                raise kubeconfig.Refused(
                    kubeconfig.BAD, f'secrets "{location}" not found'
                ) from None
            raise kubeconfig.Refused(
                kubeconfig.BAD, f'secret "{location}" cannot be read: {err.status} {err.reason}'
            ) from None
        data = (secret.get("data") or {}).get(kubeconfig.SECRET_KEY)
        if not isinstance(data, str):
            raise kubeconfig.Refused(
                kubeconfig.BAD,
                f'key "{kubeconfig.SECRET_KEY}" not found in secret "{location}"',
            )
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise kubeconfig.Refused(
                kubeconfig.BAD,
                f'key "{kubeconfig.SECRET_KEY}" of secret "{location}" is not base64',
            ) from None

    async def write_condition(self, name: str, active: bool, reason: str, message: str) -> None:
        obj = self.objects.get(name)
        if obj is None:
            return
        old = condition(obj, ACTIVE) or {}
        value = "True" if active else "False"
        if (old.get("status"), old.get("reason"), old.get("message")) == (value, reason, message):
            return
        conds = kobj.set_condition(
            list(((obj.get("status") or {}).get("conditions")) or []),
            type_=ACTIVE,
            status=active,
            reason=reason,
            message=message,
            now=self.clock(),
            observed_generation=kobj.generation(obj),
        )
        try:
            new = await self.client.patch(
                MULTIKUEUE_CLUSTERS, name, {"status": {"conditions": conds}}, subresource="status"
            )
        except ApiError as err:
            if not err.not_found:
                log.warning("MultiKueueCluster %s: condition not written: %s", name, err.reason)
            return
        self.objects[name] = new
