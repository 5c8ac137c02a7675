"""A Kubernetes API-server test double (a test fixture, never part of the product).

See ``tests/apiserver/README.md`` for what it models and what not.  Entry points:

* :func:`start_apiserver` -> :class:`ApiServerThread` (sync tests; thread + own loop);
* :func:`running_apiserver` (async context manager on the caller's loop) -> :class:`ApiServer`;
* :func:`kube_client_config` / :func:`write_kubeconfig` for ``kubernetes.aio`` / ``kubectl``;
* :func:`make_serving_cert` for HTTPS webhooks in tests.
"""

from .admission import UserInfo
from .certs import ServingCert, make_serving_cert
from .errors import ApiError
from .fixture import (
    ApiServerThread,
    kube_client_config,
    load_webhook_configurations,
    running_apiserver,
    start_apiserver,
    write_kubeconfig,
)
from .hooks import FaultRule, RecordedRequest
from .resources import BUILTIN_RESOURCES, ResourceType, default_resources
from .server import ADMIN_TOKEN, DEFAULT_NAMESPACES, ApiServer

__all__ = [
    "ADMIN_TOKEN",
    "DEFAULT_NAMESPACES",
    "BUILTIN_RESOURCES",
    "ApiError",
    "ApiServer",
    "ApiServerThread",
    "FaultRule",
    "RecordedRequest",
    "ResourceType",
    "ServingCert",
    "UserInfo",
    "kube_client_config",
    "default_resources",
    "load_webhook_configurations",
    "make_serving_cert",
    "running_apiserver",
    "start_apiserver",
    "write_kubeconfig",
]
