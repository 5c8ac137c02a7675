"""The API calls of the kueuectl-style command line (``quartermaster list|stop|...``,
``kubectl qm ...``): a user's client, not the service's.

It runs with the *user's* credentials (their kubeconfig, ``--context``, the context's
namespace, as kubectl does), so what it may do is what their RBAC allows; none of it is
part of the service's :data:`.client.API_CALLS`. Like kueuectl it pages lists
(``KUEUECTL_LIST_REQUEST_LIMIT``, default 100), writes with merge patches and supports
``--dry-run=server``, and asks the visibility API for pending positions.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes.aio import config as kube_config

from admission.kube.client.errors import ApiError
from admission.kube.client.kubeconfig import KubeconfigError, check_kubeconfig
from admission.kube.client.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    COHORTS,
    DRA_WATCHED,
    LOCAL_QUEUES,
    NAMESPACES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)
from admission.kube.client.rest import MERGE_PATCH, WRITE_QUERY, KubeClient, Obj, Resource

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"
LIST_LIMIT_ENV = "KUEUECTL_LIST_REQUEST_LIMIT"
__all__ = [
    "ADMISSION_CHECKS",
    "CLUSTER_QUEUES",
    "DRA_WATCHED",
    "COHORTS",
    "NAMESPACES",
    "PRIORITY_CLASSES",
    "WORKLOAD_PRIORITY_CLASSES",
    "DEPLOYMENTS",
    "LOCAL_QUEUES",
    "RESOURCE_FLAVORS",
    "WORKLOADS",
    "ApiError",
    "ConfigError",
    "UserApi",
]


class ConfigError(Exception):
    """No usable kubeconfig / context (the user can fix it; exit 2)."""


def list_limit() -> int:
    raw = os.environ.get(LIST_LIMIT_ENV)
    if not raw:
        return 100
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{LIST_LIMIT_ENV}={raw!r}: invalid list request limit") from None
    if value <= 0:
        raise ConfigError(f"{LIST_LIMIT_ENV}={raw!r}: invalid list request limit")
    return value


def _kubeconfig_path(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    env = os.environ.get("KUBECONFIG")
    if env:
        return env.split(os.pathsep)[0]
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


def context_namespace(*, kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (current or named) context, read from the
    file alone, without contacting the cluster; ``default`` when none says one."""
    path = _kubeconfig_path(kubeconfig)
    if path is None or (kubeconfig is None and not os.path.isfile(path)):
        return "default"
    try:
        doc = check_kubeconfig(path, flag="--kubeconfig" if kubeconfig else "")
    except KubeconfigError as err:
        raise ConfigError(str(err)) from None
    name = context or doc.get("current-context")
    for entry in doc.get("contexts") or []:
        if entry.get("name") == name:
            return str((entry.get("context") or {}).get("namespace") or "default")
    if context is not None:
        raise ConfigError(f'context "{context}" does not exist in {path}')
    return "default"


@dataclass
class UserApi:
    """One user's session: the client and the namespace their context defaults to."""

    client: KubeClient
    namespace: str

    @classmethod
    async def connect(cls, *, kubeconfig: str | None = None, context: str | None = None) -> UserApi:
        path = _kubeconfig_path(kubeconfig)
        namespace = "default"
        try:
            if path is None:
                client = await KubeClient.connect(strict=False)  # in-cluster
                sa_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                if sa_ns.exists():
                    namespace = sa_ns.read_text().strip() or namespace
            else:
                check_kubeconfig(path, flag="--kubeconfig" if kubeconfig else "")
                contexts, active = kube_config.list_kube_config_contexts(config_file=path)
                chosen = active
                if context is not None:
                    chosen = next((c for c in contexts if c.get("name") == context), None)
                    if chosen is None:
                        raise ConfigError(f'context "{context}" does not exist in {path}')
                namespace = ((chosen or {}).get("context") or {}).get("namespace") or namespace
                client = await KubeClient.connect(kubeconfig=path, context=context, strict=False)
        except KubeconfigError as err:
            raise ConfigError(str(err)) from None
        except (kube_config.ConfigException, OSError, ValueError) as err:
            where = path or "the in-cluster service account"
            raise ConfigError(f"cannot use {where}: {err}") from err
        return cls(client, namespace)

    async def close(self) -> None:
        await self.client.close()

    # -- reads --------------------------------------------------------------------------------

    async def list_all(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[list[Obj]]:
        """Pages of ``res`` (kueuectl prints page by page)."""
        token: str | None = None
        limit = list_limit()
        while True:
            page = await self.client.list(
                res,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=token,
            )
            yield list(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    async def get(self, res: Resource, name: str, *, namespace: str | None = None) -> Obj:
        return await self.client.get(res, name, namespace=namespace)

    async def get_or_none(
        self, res: Resource, name: str, *, namespace: str | None = None
    ) -> Obj | None:
        try:
            return await self.client.get(res, name, namespace=namespace)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def raw_get(self, path: str, query: list[tuple[str, Any]] | None = None) -> Obj:
        return await self.client._send("GET", path, call=f"get {path}", query=query)  # noqa: SLF001

    async def pending_in_cluster_queue(self, cq: str, *, limit: int = 100_000) -> list[Obj]:
        body = await self.raw_get(
            f"{VISIBILITY}/clusterqueues/{quote(cq, safe='')}/pendingworkloads",
            [("limit", limit)],
        )
        return list(body.get("items") or [])

    async def pending_in_local_queue(
        self, namespace: str, lq: str, *, limit: int = 100_000
    ) -> list[Obj]:
        path = (
            f"{VISIBILITY}/namespaces/{quote(namespace, safe='')}/localqueues/"
            f"{quote(lq, safe='')}/pendingworkloads"
        )
        body = await self.raw_get(path, [("limit", limit)])
        return list(body.get("items") or [])

    # -- writes -------------------------------------------------------------------------------

    def _write_query(self, dry_run: bool) -> list[tuple[str, Any]]:
        q = list(WRITE_QUERY)
        if dry_run:
            q.append(("dryRun", "All"))
        return q

    async def create(
        self, res: Resource, body: Obj, *, namespace: str | None, dry_run: bool = False
    ) -> Obj:
        return await self.client._send(  # noqa: SLF001
            "POST",
            res.path(namespace=namespace),
            call=f"create {res.plural}",
            query=self._write_query(dry_run),
            body=body,
            content_type="application/json",
        )

    async def merge_patch(
        self,
        res: Resource,
        name: str,
        patch: Obj,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        return await self.client._send(  # noqa: SLF001
            "PATCH",
            res.path(namespace=namespace, name=name),
            call=f"patch {res.plural}",
            query=self._write_query(dry_run),
            body=patch,
            content_type=MERGE_PATCH,
        )
