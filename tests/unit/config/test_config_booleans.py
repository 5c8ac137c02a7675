"""Configuration booleans are booleans: a quoted ``"yes"`` or ``"true"`` is refused,
naming the field, instead of being read as true (it would, for
``manageJobsWithoutQueueName``, put every job of every namespace under the queues)."""

from __future__ import annotations

from typing import Any

import pytest

from admission.config.load import parse_config
from admission.config.schema import ConfigError

BASE = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}


def _nested(path: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = dict(BASE)
    node = doc
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return doc


@pytest.mark.parametrize(
    "path",
    [
        "manageJobsWithoutQueueName",
        "waitForPodsReady.enable",
        "waitForPodsReady.blockAdmission",
        "fairSharing.enable",
        "featureGates.TopologyAwareScheduling",
        "reserveEvictingCapacity",
        "parkUntilFeasible",
        "schedulingRefill.enable",
    ],
)
@pytest.mark.parametrize("value", ["yes", "true", "1", 1])
def test_a_quoted_or_numeric_boolean_is_refused_naming_the_field(path: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_nested(path, value), source="config.yaml")
    assert str(err.value) == (
        f"config.yaml: {path}: must be a boolean (true or false, unquoted), got {value!r}"
    )


def test_a_real_boolean_is_read() -> None:
    assert parse_config(_nested("manageJobsWithoutQueueName", True)).doc.manageJobsWithoutQueueName
