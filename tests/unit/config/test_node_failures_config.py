"""The ``nodeFailures`` section: Kueue's delays by default, each knob read, bad values
refused naming the field."""

from __future__ import annotations

import pytest

from admission.config.load import parse_config
from admission.config.schema import ConfigError
from admission.serve.options import controller_options
from queues.node_health import NodeFailurePolicy


def test_defaults_are_kueues_delays_and_memory_on() -> None:
    policy = parse_config({}).doc.nodeFailures.policy()
    assert policy == NodeFailurePolicy()
    assert policy.not_ready_delay == 30 and policy.forceful_termination_grace == 60
    assert policy.taints and policy.fail_fast
    # the memory outlasts a repair (~2 h); a node that fails two workloads in a day is reported
    assert policy.avoid_for == 86400
    assert (policy.flaky_workloads, policy.flaky_window) == (2, 86400)


def test_every_knob_reaches_the_controller() -> None:
    config = parse_config({"nodeFailures": {
        "notReadyDelay": "5s", "taints": False, "replaceOnPodTermination": True,
        "failFast": False, "avoidNodesFor": "10m", "flakyNode": {"workloads": 2, "window": "30m"},
        "forcefulTerminationGracePeriod": "15s"}})  # fmt: skip
    policy = controller_options(config, "quartermaster-system").node_failures
    assert policy == NodeFailurePolicy(
        not_ready_delay=5, taints=False, replace_on_pod_termination=True, fail_fast=False,
        avoid_for=600, flaky_workloads=2, flaky_window=1800, forceful_termination_grace=15,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"notReadyDelay": "soon"}, "nodeFailures.notReadyDelay"),
        ({"flakyNode": {"workloads": -1}}, "nodeFailures.flakyNode.workloads"),
        ({"failFast": "yes"}, "nodeFailures.failFast"),
        ({"avoidNodes": "1h"}, "nodeFailures.avoidNodes"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config({"nodeFailures": section})
