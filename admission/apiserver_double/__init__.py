"""A Kubernetes API-server double: an in-process stand-in for kube-apiserver.

The tests run the service, ``kubectl`` and the official client against it, and it ships
in the package so the live service can run without a cluster; it is held to test
quality: where it and kube-apiserver disagree, it is wrong.  See ``README.md``
beside this file for what it models and what not.  Entry points:

* :func:`start_apiserver` -> :class:`ApiServerThread` (sync tests; thread + own loop);
* :func:`running_apiserver` (async context manager on the caller's loop) -> :class:`ApiServer`;
* :func:`write_kubeconfig` for ``kubectl`` and the service;
* :func:`make_serving_cert` for HTTPS webhooks in tests.
"""

from .admission import UserInfo
from .authn import ADMIN_TOKEN
from .certs import ServingCert, make_serving_cert
from .crds import default_resources
from .errors import ApiError
from .fixture import (
    ApiServerThread,
    enable_aggregation,
    load_webhook_configurations,
    running_apiserver,
    start_apiserver,
    write_kubeconfig,
)
from .hooks import FaultRule, RecordedRequest
from .resources import BUILTIN_RESOURCES, ResourceType
from .server import DEFAULT_NAMESPACES, ApiServer

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
    "default_resources",
    "enable_aggregation",
    "load_webhook_configurations",
    "make_serving_cert",
    "running_apiserver",
    "start_apiserver",
    "write_kubeconfig",
]
