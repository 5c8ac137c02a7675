"""What ``serve`` is told: :class:`ServiceOptions`, and how the command line and Kueue's
Configuration (``leaderElection``, ``internalCertManagement``, the managed namespaces)
fill it in."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission.config.schema import Config
from admission.kube.control.context import ControllerOptions
from admission.kube.control.leader import DEFAULT_LEASE_NAME
from admission.kube.reconcilers.podsready import pods_ready_options
from queues.model import LabelSelector

SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


@dataclass(slots=True)
class ServiceOptions:
    config: Config = field(default_factory=Config)
    kubeconfig: str | None = None
    client_configuration: Any = None  # kubernetes.aio Configuration (tests)
    namespace: str = "quartermaster-system"
    host: str = "0.0.0.0"
    webhook_port: int = 9443
    metrics_port: int = 8080
    health_port: int = 8081
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    webhooks: bool = True
    inject_ca_bundle: bool = True
    # internalCertManagement (Kueue's config): share a generated certificate through a
    # Secret and rotate it; off when cert-manager mounts the certificate.
    manage_certificates: bool = True
    cert_secret: str = "quartermaster-webhook-server-cert"
    webhook_service: str = "quartermaster-webhook-service"
    cert_check_seconds: float = 600.0
    ca_bundle_period: float = 60.0  # backstop re-check of the webhook configurations' caBundle
    leader_elect: bool = False
    identity: str | None = None
    lease_duration: float = 15.0
    lease_name: str = DEFAULT_LEASE_NAME
    lease_namespace: str | None = None  # None: the service's namespace
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    service_account_username: str | None = None
    clock: Callable[[], float] = time.time
    seed: int | None = None
    controller: ControllerOptions | None = None
    drain_seconds: float = 5.0
    # Kueue's visibility API (an aggregated API server; None: off) and the read-only
    # dashboard (None: off; loopback unless told otherwise, reached by port-forward).
    visibility_port: int | None = None
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    # freeze the heap's survivors after the startup sync (.heap): process-wide, so for a
    # service that owns its process (``quartermaster serve``), off for one among others
    freeze_heap: bool = False


def selector_from_dict(doc: dict[str, Any] | None) -> LabelSelector | None:
    """A metav1.LabelSelector dict as the model's LabelSelector (None stays None)."""
    from queues.api.parse import parse_label_selector

    return None if doc is None else parse_label_selector(doc, path="managedJobsNamespaceSelector")


def controller_options(config: Config, namespace: str) -> ControllerOptions:
    doc = config.doc
    return ControllerOptions(
        manage_jobs_without_queue_name=doc.manageJobsWithoutQueueName,
        managed_namespaces=selector_from_dict(doc.managedJobsNamespaceSelector),
        excluded_namespaces=("kube-system", namespace),
        pods_ready=pods_ready_options(config),
        node_failures=doc.nodeFailures.policy(),
        frameworks=config.frameworks,
    )


def service_account_username() -> str | None:
    """Our own username: ``$QUARTERMASTER_USERNAME``, else the mounted token's subject."""
    env = os.environ.get("QUARTERMASTER_USERNAME")
    if env:
        return env
    try:
        token = SA_TOKEN.read_text().strip()
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    sub = claims.get("sub")
    return sub if isinstance(sub, str) else None


def options_from_args(args: Any, config: Config) -> ServiceOptions:
    return ServiceOptions(
        config=config,
        kubeconfig=getattr(args, "kubeconfig", None),
        namespace=getattr(args, "namespace", None) or "quartermaster-system",
        host=getattr(args, "host", None) or "0.0.0.0",
        webhook_port=getattr(args, "webhook_port", 9443),
        metrics_port=getattr(args, "metrics_port", 8080),
        health_port=getattr(args, "health_port", 8081),
        cert_dir=getattr(args, "cert_dir", None) or "/tmp/k8s-webhook-server/serving-certs",
        identity=os.environ.get("POD_NAME") or None,
        visibility_port=_port_or_none(getattr(args, "visibility_port", None)),
        dashboard_port=_port_or_none(getattr(args, "dashboard_port", None)),
        dashboard_host=getattr(args, "dashboard_host", None) or "127.0.0.1",
        freeze_heap=True,
        **leader_options(config, flag=bool(getattr(args, "leader_elect", False))),
        **cert_options(config),
    )


def _port_or_none(port: int | None) -> int | None:
    """A port flag: a negative value (or none given) turns the endpoint off."""
    return None if port is None or port < 0 else port


def leader_options(config: Config, *, flag: bool = False) -> dict[str, Any]:
    """Kueue's ``leaderElection`` section (``--leader-elect`` turns it on as well)."""
    le = config.doc.leaderElection
    if le is None:
        return {"leader_elect": flag}
    lease, renew, retry = le.seconds()
    return {
        "leader_elect": flag or bool(le.leaderElect),
        "lease_duration": lease,
        "renew_deadline": renew,
        "retry_period": retry,
        "lease_name": le.resourceName,
        "lease_namespace": le.resourceNamespace,
    }


def cert_options(config: Config) -> dict[str, Any]:
    """Kueue's ``internalCertManagement`` section: enable, webhookServiceName, webhookSecretName."""
    icm = config.doc.internalCertManagement or {}
    out: dict[str, Any] = {"manage_certificates": bool(icm.get("enable", True))}
    if icm.get("webhookServiceName"):
        out["webhook_service"] = str(icm["webhookServiceName"])
    if icm.get("webhookSecretName"):
        out["cert_secret"] = str(icm["webhookSecretName"])
    out["inject_ca_bundle"] = out["manage_certificates"]
    return out
