"""Keep the ``caBundle`` of the webhook configurations and of the visibility API's
APIServices equal to the service's CA, always.

With ``failurePolicy: Fail``, a webhook configuration without the right ``caBundle``
refuses every Job/Pod create and every quota edit with an x509 error. Writing the bundle
only when the service issues or rotates its certificate is not enough: configurations
come back without it whenever they are re-applied (delete + apply, GitOps, ``kubectl
replace``). So, like Kueue's cert controller, this reconciler watches our two
configurations (by name: ``fieldSelector=metadata.name=…``, which the RBAC rule's
``resourceNames`` allows) and patches any webhook whose bundle differs from the CA —
on start, on every change of a configuration, when the CA changes, and periodically as
a backstop.

The aggregation layer is the same story: an APIService that trusts the service's CA
(``spec.caBundle``, ``insecureSkipTLSVerify: false``) instead of skipping TLS
verification, as Kueue's and metrics-server's manifests do, means a caller's request
and the identity headers the aggregator adds reach only the holder of the serving key.
The manifests ship the APIServices with neither field; this reconciler sets both in
one merge patch (the API server refuses ``insecureSkipTLSVerify: true`` next to a
``caBundle``) and puts them back whenever the object is re-applied.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from collections.abc import Callable, Iterable

from admission.kube.client.errors import ApiError
from admission.kube.client.rest import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient, Obj, Resource
from admission.kube.watch.informer import DELETED, Informer

log = logging.getLogger("quartermaster.kube.cabundle")


def stale_webhooks(config: Obj, ca_b64: str) -> list[str]:
    """Names of ``config``'s webhooks whose ``clientConfig.caBundle`` is not ``ca_b64``."""
    out = []
    for hook in config.get("webhooks") or []:
        if not isinstance(hook, dict) or not hook.get("name"):
            continue
        if ((hook.get("clientConfig") or {}).get("caBundle") or "") != ca_b64:
            out.append(str(hook["name"]))
    return out


def stale_api_service(api_service: Obj, ca_b64: str) -> bool:
    """An APIService that does not trust exactly ``ca_b64`` (or skips verification)."""
    spec = api_service.get("spec") or {}
    return spec.get("caBundle") != ca_b64 or bool(spec.get("insecureSkipTLSVerify"))


def bundle_patch(resource: Resource, obj: Obj, ca_b64: str) -> tuple[Obj, str, str] | None:
    """(patch body, content type, what it fixes) that makes ``obj`` trust ``ca_b64``;
    None when it already does."""
    if resource.kind == "APIService":
        if not stale_api_service(obj, ca_b64):
            return None
        spec: Obj = {"caBundle": ca_b64, "insecureSkipTLSVerify": False}
        return {"spec": spec}, MERGE_PATCH, "spec.caBundle"
    stale = stale_webhooks(obj, ca_b64)
    if not stale:
        return None
    hooks: list[Obj] = [{"name": n, "clientConfig": {"caBundle": ca_b64}} for n in stale]
    return {"webhooks": hooks}, STRATEGIC_MERGE_PATCH, ", ".join(stale)


class CABundleReconciler:
    """Watches ``configurations`` (webhook configurations and APIServices, by name) and
    keeps their caBundle equal to ``ca_pem()``."""

    def __init__(
        self,
        client: KubeClient,
        configurations: Iterable[tuple[Resource, str]],
        *,
        ca_pem: Callable[[], bytes | None],
        period: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.ca_pem = ca_pem
        self.period = period
        self.patches = 0
        self._dirty = asyncio.Event()
        rng = rng or random.Random()
        self.informers = [
            Informer(
                client,
                res,
                field_selector=f"metadata.name={name}",
                handler=self._on_event,
                rng=random.Random(rng.random()),
            )
            for res, name in configurations
        ]

    def _on_event(self, kind: str, key: str, new: Obj | None, old: Obj | None) -> None:
        if kind != DELETED:
            self._dirty.set()

    def ca_changed(self) -> None:
        """Call when the CA may have changed (issued, rotated, copied from the Secret)."""
        self._dirty.set()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(inf.run(), name=f"cabundle-{inf.name}") for inf in self.informers
        ]
        try:
            await asyncio.gather(*(inf.synced.wait() for inf in self.informers))
            self._dirty.set()
            while True:
                try:
                    await asyncio.wait_for(self._dirty.wait(), timeout=self.period)
                except TimeoutError:
                    pass
                self._dirty.clear()
                await self.reconcile()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def reconcile(self) -> int:
        """Patch every stale bundle now; returns how many configurations were patched."""
        pem = self.ca_pem()
        if not pem:
            return 0
        ca_b64 = base64.b64encode(pem).decode()
        patched = 0
        for inf in self.informers:
            for name, config in list(inf.store.items()):
                fix = bundle_patch(inf.resource, config, ca_b64)
                if fix is None:
                    continue
                body, content_type, fixed = fix
                try:
                    await self.client.patch(inf.resource, name, body, content_type=content_type)
                except ApiError as err:
                    if not err.not_found:
                        log.warning(
                            "caBundle of %s %s not written: %s", inf.resource.kind, name, err
                        )
                        self._retry_soon()
                    continue
                patched += 1
                self.patches += 1
                log.info("caBundle of %s %s set (%s)", inf.resource.kind, name, fixed)
        return patched

    def _retry_soon(self) -> None:
        asyncio.get_running_loop().call_later(1.0, self._dirty.set)
