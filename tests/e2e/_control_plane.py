"""What the control-plane end-to-end tests share: the base queue objects and the controller's options.

The tests of tests/e2e/test_e2e_control_plane*.py run the whole stack on the double and
on a real kube-apiserver; they start from the same namespace, flavor, ClusterQueue and
LocalQueue, name the same webhook configurations, and run the controller with short
intervals so that each test ends in seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from admission.kube.control.context import ControllerOptions
from tests.support.kube_harness import SERVICE_NS, cluster_queue, flavor, local_queue, namespace

BASE = [
    namespace("team-a"),
    flavor("f", pool="a"),
    cluster_queue("cq", {"f": {"cpu": 4}}),
    local_queue("team-a", "lq", "cq"),
]


MUTATING = "quartermaster-mutating-webhook-configuration"


VALIDATING = "quartermaster-validating-webhook-configuration"


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def controller(**kw: Any) -> ControllerOptions:
    opts = ControllerOptions(
        status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0, **kw
    )
    opts.excluded_namespaces = ("kube-system", SERVICE_NS)
    return opts
