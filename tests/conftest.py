"""Shared fixtures: the two backends the e2e tests run on.

``backend`` parametrizes a test over the in-repo API-server double (``[double]``) and a
real kube-apiserver + etcd (``[real]``) started from ``KUBEBUILDER_ASSETS`` once per
session (the envtest convention). Without that variable the real variants are skipped
with one reason, so ``KUBEBUILDER_ASSETS=DIR python -m pytest -k real`` runs exactly the
real-server set.

Hypothesis runs without its per-example deadline: the suite must pass while other work
loads the machine, and a property is about what the code decides, not how fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.support.kube_harness import DOUBLE
from tests.support.realserver.controlplane import assets_dir, skip_reason

settings.register_profile("quartermaster", deadline=None)
settings.load_profile("quartermaster")


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[Any]:
    assets = assets_dir()
    if assets is None:
        pytest.skip(skip_reason())
    from tests.support.realserver.cluster import RealCluster

    cluster = RealCluster(assets)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=[DOUBLE, "real"])
def backend(request: pytest.FixtureRequest) -> Any:
    """``DOUBLE`` or the session's :class:`~tests.support.realserver.cluster.RealCluster`."""
    if request.param == DOUBLE:
        return DOUBLE
    return request.getfixturevalue("real_cluster")
