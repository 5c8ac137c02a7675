"""What the service says at INFO: one line per admission and per eviction (a
preemption is an eviction with its reason), where each endpoint listens, one line per
back-off while the API server is unreachable; ``--log-level`` picks the level, and
``serve --webhooks-only`` says where it listens, which CA to trust and which paths
it serves."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from admission.cli.logs import LEVEL_ENV, log_level
from admission.cli.main import _parser
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import KubeClient
from admission.kube.client.unreachable import Outage, transport_reason
from admission.kube.watch.informer import Informer
from tests.support.kube_harness import (
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    priority_class,
    stack,
)

ROOT = Path(__file__).resolve().parents[3]


# -- --log-level -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["serve"], ["simulate"]])
def test_log_level_is_a_flag_that_wins_over_the_environment(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LEVEL_ENV, "WARNING")
    assert log_level(_parser().parse_args([*command, "--log-level", "debug"])) == "DEBUG"
    assert log_level(_parser().parse_args(command)) == "WARNING"
    monkeypatch.delenv(LEVEL_ENV)
    assert log_level(_parser().parse_args(command)) == "INFO"


def test_an_unknown_log_level_is_refused_listing_the_levels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["serve", "--log-level", "loud"])
    assert exit_.value.code == 2
    assert "(choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR')" in capsys.readouterr().err


# -- one line per admission, eviction and preemption -------------------------------------------


def test_admissions_and_preemptions_are_one_info_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    objects = [
        namespace("team-a"),
        flavor("a100"),
        cluster_queue(
            "cq", {"a100": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            low = job("team-a", "victim", queue="lq", cpu="3", priority_class="low")
            await s.user.create(kr.JOBS, low, namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and not j["spec"]["suspend"],
                what="victim runs",
            )
            high = job("team-a", "urgent", queue="lq", cpu="3", priority_class="high")
            await s.user.create(kr.JOBS, high, namespace="team-a")
            await eventually(
                lambda: is_true(s.workload_of_job("team-a", "victim"), "Evicted"),
                what="victim evicted",
            )

    with caplog.at_level(logging.INFO, logger="quartermaster"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("quartermaster.kube")]
    admitted = [ln for ln in lines if ln.startswith("admitted ")]
    evicted = [ln for ln in lines if ln.startswith("evicted ")]
    assert len(admitted) == 1, lines
    assert re.fullmatch(
        r"admitted team-a/job-victim-\w+ in ClusterQueue cq: QuotaReserved on cpu=a100",
        admitted[0],
    )
    assert len(evicted) == 1, lines
    assert re.match(
        r"evicted team-a/job-victim-\w+ from ClusterQueue cq: Preempted \(InClusterQueue\): "
        r"Preempted to accommodate",
        evicted[0],
    )


def test_the_endpoints_say_where_they_listen(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> dict[str, int]:
        async with stack(
            tmp_path, objects=[namespace("team-a")], visibility=True, dashboard_port=0
        ) as s:
            await eventually(lambda: "dashboard" in s.service.ports, what="dashboard up")
            return dict(s.service.ports)

    with caplog.at_level(logging.INFO, logger="quartermaster"):
        ports = asyncio.run(main())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"health endpoint listening on http://127.0.0.1:{ports['health']}" in text
    assert f"metrics endpoint listening on http://127.0.0.1:{ports['metrics']}" in text
    assert f"dashboard listening on http://127.0.0.1:{ports['dashboard']}/" in text
    assert (
        f"visibility API listening on https://127.0.0.1:{ports['visibility']}"
        "/apis/visibility.kueue.x-k8s.io/v1beta1"
    ) in text


# -- an unreachable API server -----------------------------------------------------------------


def test_an_outage_is_one_warning_per_back_off_and_one_line_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = Outage(clock=lambda: now[0])
    reason = "Cannot connect to host 127.0.0.1:1 ssl:default [Connect call failed]"
    with caplog.at_level(logging.DEBUG, logger="quartermaster.kube"):
        for _ in range(20):  # every informer at once
            outage.failed(reason, 2.0, who="pods")
        now[0] += 2.0
        for _ in range(20):
            outage.failed(reason, 4.0, who="jobs")
        outage.recovered()
        outage.recovered()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"API server unreachable ({reason}): retrying in 2.0s",
        f"API server unreachable ({reason}): retrying in 4.0s",
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["API server reachable again after 40 failed requests"]


def test_a_refused_connection_is_said_in_aiohttps_words_not_its_repr() -> None:
    async def main() -> str:
        client = await KubeClient.connect(kubeconfig=None, configuration=_dead_configuration())
        try:
            await client.list(kr.NAMESPACES)
        except ApiError as err:
            return str(err)
        finally:
            await client.close()
        raise AssertionError("the request succeeded")

    text = asyncio.run(main())
    assert "ConnectionKey" not in text and "ClientConnectorError" not in text
    assert re.search(r"Cannot connect to host 127\.0\.0\.1:\d+", text), text
    assert transport_reason(TimeoutError()) == "timed out"


def test_informers_of_an_unreachable_server_log_a_handful_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> int:
        client = await KubeClient.connect(configuration=_dead_configuration(), strict=False)
        informers = [Informer(client, res) for res in _RESOURCES]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        try:
            await eventually(
                lambda: sum(i.stats.errors for i in informers) >= 3 * len(informers),
                what="every informer failed three times",
            )
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()
        return sum(i.stats.errors for i in informers)

    with caplog.at_level(logging.INFO, logger="quartermaster"):
        failures = asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert all(ln.startswith("API server unreachable (Cannot connect to host") for ln in lines)
    assert all("ConnectionKey" not in ln and "\n" not in ln for ln in lines)
    # the informers fail together: a line per back-off, not one per informer and failure
    assert 1 <= len(lines) <= failures // 4, (len(lines), failures)


_RESOURCES = [kr.NAMESPACES, kr.JOBS, kr.WORKLOADS, kr.CLUSTER_QUEUES, kr.LOCAL_QUEUES,
              kr.RESOURCE_FLAVORS, kr.PODS, kr.NODES]  # fmt: skip


def _dead_configuration() -> k.Configuration:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configuration = k.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return configuration


# -- serve --webhooks-only ----------------------------------------------------------------------


def test_webhooks_only_says_its_address_ca_and_paths(tmp_path: Path) -> None:
    model = tmp_path / "model.yaml"
    model.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"
    )
    cert_dir = tmp_path / "certs"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "admission", "serve", "--webhooks-only", "-f", str(model),
         "--cert-dir", str(cert_dir), "--webhook-port", str(port), "--host", "127.0.0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"  # the banner is written right after
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    banner = err.splitlines()
    text = "\n".join(banner)
    assert f"webhooks: https://127.0.0.1:{port}" in text
    assert f"CA: {cert_dir / 'ca.crt'}" in text
    assert "  /mutate-batch-v1-job" in text
    assert "  /validate-kueue-x-k8s-io-v1beta2-clusterqueue" in text
