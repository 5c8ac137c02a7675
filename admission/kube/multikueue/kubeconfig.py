"""A worker's kubeconfig, read from its Secret and refused when it is unsafe.

Kueue 0.15+ (``validateKubeconfig`` and ``validateRestConfig`` in
pkg/controller/admissionchecks/multikueue/multikueuecluster.go) refuses a kubeconfig
that skips TLS verification, names files (``tokenFile``, ``certificate-authority``,
client certificate or key files), uses basic auth, an exec or auth-provider plugin, or
an untrusted server address. Each refusal becomes the MultiKueueCluster's condition
``Active=False`` with Kueue's reason (``BadKubeConfig`` when the Secret or its key is
missing or the file does not parse, ``InsecureKubeConfig`` for the rest) and a message
that names the problem, never the credentials.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes.aio import config as kube_config
from kubernetes.aio.client import Configuration

SECRET_KEY = "kubeconfig"
BAD = "BadKubeConfig"
INSECURE = "InsecureKubeConfig"
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_FILE_FIELDS = {
    "tokenFile": "tokenFile is not allowed",
    "client-certificate": "client-certificate file paths are not allowed",
    "client-key": "client-key file paths are not allowed",
}


class Refused(ValueError):
    """A kubeconfig that cannot be used: ``reason`` is the condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """A checked kubeconfig: the document and the server it points at."""

    doc: dict[str, Any]
    server: str


def _named(doc: dict[str, Any], key: str, inner: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for item in doc.get(key) or []:
        if isinstance(item, dict) and isinstance(item.get(inner), dict):
            out.append((str(item.get("name") or ""), item[inner]))
    return out


def _valid_host(server: str) -> bool:
    try:
        host = urlsplit(server).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and bool(_DNS1123_SUBDOMAIN.match(host.lower()))


def check(raw: bytes | str) -> WorkerConfig:
    """The kubeconfig ``raw`` when it is safe to use (its current context), else
    :class:`Refused` with Kueue's reason and message."""
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise Refused(BAD, "failed to parse kubeconfig(apiconfig): invalid YAML") from None
    if not isinstance(doc, dict):
        raise Refused(BAD, "failed to parse kubeconfig(apiconfig): not a kubeconfig")
    for _, user in _named(doc, "users", "user"):
        for field, message in _FILE_FIELDS.items():
            if user.get(field):
                raise Refused(INSECURE, message)
        if user.get("username") or user.get("password"):
            raise Refused(INSECURE, "basic auth is not allowed")
        if user.get("exec"):
            raise Refused(INSECURE, "exec plugins are not allowed")
        if user.get("auth-provider"):
            raise Refused(INSECURE, "auth providers are not allowed")
    clusters = dict(_named(doc, "clusters", "cluster"))
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            raise Refused(INSECURE, f"insecure TLS verification is not allowed for cluster {name}")
        if cluster.get("certificate-authority"):
            raise Refused(
                INSECURE,
                "certificate-authority file paths are not allowed, use "
                f"certificate-authority-data for cluster {name}",
            )
        if not cluster.get("server"):
            raise Refused(INSECURE, f"server URL is required for cluster {name}")
    contexts = dict(_named(doc, "contexts", "context"))
    current = doc.get("current-context") or next(iter(contexts), "")
    context = contexts.get(current)
    if context is None or context.get("cluster") not in clusters:
        raise Refused(BAD, "failed to load kubeconfig: no current context with a cluster")
    server = str(clusters[context["cluster"]]["server"])
    if not _valid_host(server):
        raise Refused(INSECURE, "untrusted server endpoint")
    return WorkerConfig(doc=doc, server=server)


async def configuration(worker: WorkerConfig) -> Configuration:
    """A client configuration for a checked kubeconfig."""
    config = Configuration()
    await kube_config.load_kube_config_from_dict(worker.doc, client_configuration=config)
    config.client_session_kwargs = {"trust_env": False}
    return config
