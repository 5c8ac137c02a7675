"""``run_service`` wiring: configuration errors, options from the Kueue configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from admission.config.load import parse_config
from admission.serve.options import controller_options, selector_from_dict
from admission.serve.service import run_service


def test_a_bad_configuration_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("waitForPodsReady:\n  timeout: 5m\n  sometimesReady: true\n")
    assert run_service(argparse.Namespace(config=str(cfg))) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "waitForPodsReady.sometimesReady: unknown field" in err


def test_controller_options_follow_the_kueue_configuration() -> None:
    opts = controller_options(parse_config({}), "qm-system")
    assert opts.pods_ready.enabled and opts.pods_ready.timeout == 1800.0  # Kueue's defaults
    assert opts.excluded_namespaces == ("kube-system", "qm-system")
    assert not opts.manage_jobs_without_queue_name and opts.managed_namespaces is None
    doc = {
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
        "waitForPodsReady": {"enable": True, "timeout": "90s",
                             "requeuingStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 10}},
    }  # fmt: skip
    opts = controller_options(parse_config(doc), "qm-system")
    assert opts.manage_jobs_without_queue_name
    assert opts.managed_namespaces is not None and opts.managed_namespaces.matches({"team": "a"})
    assert not opts.managed_namespaces.matches({"team": "b"})
    assert (
        opts.pods_ready.timeout,
        opts.pods_ready.backoff_limit,
        opts.pods_ready.backoff_base,
    ) == (90.0, 3, 10.0)
    assert not controller_options(
        parse_config({"waitForPodsReady": {"enable": False}}), "x"
    ).pods_ready.enabled
    assert selector_from_dict(None) is None


def test_leader_election_follows_the_configuration() -> None:
    from admission.serve.options import options_from_args

    config = parse_config(
        {
            "leaderElection": {
                "leaderElect": True,
                "leaseDuration": "30s",
                "renewDeadline": "20s",
                "retryPeriod": "5s",
                "resourceName": "qm-lock",
                "resourceNamespace": "ops",
            }
        }
    )
    opts = options_from_args(argparse.Namespace(), config)
    assert opts.leader_elect is True  # from the file, without --leader-elect
    assert (opts.lease_duration, opts.renew_deadline, opts.retry_period) == (30.0, 20.0, 5.0)
    assert (opts.lease_name, opts.lease_namespace) == ("qm-lock", "ops")
    off = options_from_args(argparse.Namespace(leader_elect=False), parse_config({}))
    assert off.leader_elect is False and off.lease_duration == 15.0


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"leaseDuration": "5s"}, "renewDeadline must be shorter than leaseDuration"),
        ({"retryPeriod": "soon"}, "leaderElection.retryPeriod: 'soon' is not a duration"),
        ({"resourceLock": "configmaps"}, "leaderElection.resourceLock"),
        ({"leaseDurationSecs": 15}, "leaderElection.leaseDurationSecs: unknown field"),
    ],
)
def test_a_bad_leader_election_section_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: dict, message: str
) -> None:
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"leaderElection": section}))
    assert run_service(argparse.Namespace(config=str(path))) == 2
    assert message in capsys.readouterr().err
