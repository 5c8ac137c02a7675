"""Where ``serve`` listens when no flag says, from the file's ``webhook``, ``metrics``
and ``health`` sections; and the Go listen addresses they are written as."""

from __future__ import annotations

from dataclasses import dataclass

from admission.config.schema import Config


def port_of(address: str) -> int | None:
    """The port of a Go listen address (":8080", "127.0.0.1:8080"); None for "0" or ""."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return int(port)


@dataclass(frozen=True, slots=True)
class ListenDefaults:
    """Where ``serve`` listens when no flag says: from ``webhook``, ``metrics``, ``health``."""

    webhook_port: int = 9443
    metrics_port: int = 8080
    health_port: int = 8081
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    host: str = "0.0.0.0"


def listen_defaults(config: Config) -> ListenDefaults:
    doc = config.doc
    base = ListenDefaults()
    web, met, hea = doc.webhook, doc.metrics, doc.health
    return ListenDefaults(
        webhook_port=(web.port if web and web.port else base.webhook_port),
        metrics_port=(port_of(met.bindAddress or "") if met else None) or base.metrics_port,
        health_port=(port_of(hea.healthProbeBindAddress or "") if hea else None)
        or base.health_port,
        cert_dir=(web.certDir if web and web.certDir else base.cert_dir),
        host=(web.host if web and web.host else base.host),
    )
