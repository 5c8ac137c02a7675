"""MultiKueueClusters: a worker's kubeconfig from a Secret of the service's namespace,
refused when unsafe as Kueue 0.15+ refuses it, and the cluster's ``Active`` condition
(Kueue's reasons), with the worker's credentials in no condition and no log line.

The manager and the worker are two API-server doubles; the worker serves HTTPS, so
its kubeconfig carries ``certificate-authority-data`` as a real one does.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.apiserver_double import running_apiserver, write_kubeconfig
from admission.kube.client import rest as k
from admission.kube.multikueue import kubeconfig
from admission.kube.multikueue.clusters import Clusters
from admission.kube.multikueue.remote import RemoteCluster
from tests.support.double_client import kube_client_config
from tests.support.kube_harness import eventually

NS = "quartermaster-system"
WORKER_TOKEN = "worker-secret-token-123"


def config_of(**cluster: Any) -> dict[str, Any]:
    user = cluster.pop("user", {"token": WORKER_TOKEN})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "w", "cluster": {"server": "https://10.0.0.1:6443", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "w", "user": "u"}}],
        "current-context": "c",
    }


@pytest.mark.parametrize(
    ("doc", "reason", "message"),
    [
        (config_of(**{"insecure-skip-tls-verify": True}), kubeconfig.INSECURE,
         "insecure TLS verification is not allowed for cluster w"),
        (config_of(**{"certificate-authority": "/etc/ca.crt"}), kubeconfig.INSECURE,
         "certificate-authority file paths are not allowed, use certificate-authority-data "
         "for cluster w"),
        (config_of(user={"exec": {"command": "aws"}}), kubeconfig.INSECURE,
         "exec plugins are not allowed"),
        (config_of(user={"auth-provider": {"name": "gcp"}}), kubeconfig.INSECURE,
         "auth providers are not allowed"),
        (config_of(user={"tokenFile": "/var/run/token"}), kubeconfig.INSECURE,
         "tokenFile is not allowed"),
        (config_of(user={"client-key": "/k.pem"}), kubeconfig.INSECURE,
         "client-key file paths are not allowed"),
        (config_of(user={"username": "a", "password": "b"}), kubeconfig.INSECURE,
         "basic auth is not allowed"),
        (config_of(server="https://bad_host:1"), kubeconfig.INSECURE, "untrusted server endpoint"),
        (config_of(server=""), kubeconfig.INSECURE, "server URL is required for cluster w"),
        ("[", kubeconfig.BAD, "failed to parse kubeconfig(apiconfig): invalid YAML"),
    ],
)  # fmt: skip
def test_unsafe_kubeconfigs_are_refused_with_kueues_reason(
    doc: Any, reason: str, message: str
) -> None:
    raw = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    with pytest.raises(kubeconfig.Refused) as err:
        kubeconfig.check(raw)
    assert (err.value.reason, str(err.value)) == (reason, message)
    assert WORKER_TOKEN not in str(err.value)


def test_a_token_and_ca_data_kubeconfig_is_accepted() -> None:
    checked = kubeconfig.check(yaml.safe_dump(config_of(**{"certificate-authority-data": "eA=="})))
    assert checked.server == "https://10.0.0.1:6443"


def mk_cluster(name: str, secret: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {"name": name},
        "spec": {"clusterSource": {"kubeConfig": {"location": secret, "locationType": "Secret"}}},
    }


def secret(name: str, raw: bytes | str) -> dict[str, Any]:
    data = raw if isinstance(raw, bytes) else raw.encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"kubeconfig": base64.b64encode(data).decode()},
    }


def active(server: Any, name: str) -> tuple[str, str, str] | None:
    obj = server.get_object("multikueueclusters", name)
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Active":
            return c["status"], c["reason"], c["message"]
    return None


def test_active_follows_the_secret_and_the_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="quartermaster")

    async def main() -> None:
        async with (
            running_apiserver(tls=True, tokens={WORKER_TOKEN: "system:serviceaccount:w:mk"})
            as worker,
            running_apiserver(namespaces=(NS,)) as manager,
        ):  # fmt: skip
            good = write_kubeconfig(
                tmp_path / "w.yaml", worker.url, token=WORKER_TOKEN, ca_pem=worker.ca_pem
            ).read_bytes()
            insecure = yaml.safe_load(good)
            insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
            for obj in (
                mk_cluster("good", "good-secret"),
                mk_cluster("missing", "no-such-secret"),
                mk_cluster("insecure", "insecure-secret"),
                secret("good-secret", good),
                secret("insecure-secret", yaml.safe_dump(insecure)),
            ):
                manager.put_object(obj)
            client = await k.KubeClient.connect(configuration=kube_client_config(manager.url))
            remotes: list[RemoteCluster] = []

            def make(name: str, c: k.KubeClient) -> RemoteCluster:
                r = RemoteCluster(
                    name,
                    c,
                    origin="multikueue",
                    on_change=lambda _k: None,
                    on_state=lambda: None,
                    probe_interval=0.05,
                    probe_timeout=0.5,
                )
                remotes.append(r)
                return r

            clusters = Clusters(client, namespace=NS, make_remote=make, clock=lambda: 0.0)
            try:
                for name in ("good", "missing", "insecure"):
                    await clusters.reconcile(name, manager.get_object("multikueueclusters", name))
                assert active(manager, "missing") == (
                    "False", "BadKubeConfig",
                    'load client config failed: secrets "no-such-secret" not found',
                )  # fmt: skip
                assert active(manager, "insecure") == (
                    "False", "InsecureKubeConfig",
                    "load client config failed: insecure TLS verification is not allowed for "
                    "cluster double",
                )  # fmt: skip

                async def state() -> Any:
                    await clusters.write_state("good")
                    return active(manager, "good")

                assert await eventually(
                    lambda: state_is(state, ("True", "Active", "Connected")),
                    what="the worker is active",
                )
                await worker.stop()  # the worker disappears
                got = await eventually(lambda: state_is(state, None, want_false=True),
                                       what="the lost worker is inactive")  # fmt: skip
                assert got[:2] == ("False", "ClientConnectionFailed")
                # its credentials in no condition and no log line
                for name in ("good", "missing", "insecure"):
                    assert WORKER_TOKEN not in str(manager.get_object("multikueueclusters", name))
                assert WORKER_TOKEN not in caplog.text
            finally:
                await clusters.stop()
                await client.close()

    asyncio.run(main())


async def state_is(state: Any, want: Any, *, want_false: bool = False) -> Any:
    got = await state()
    if want_false:
        return got if got is not None and got[0] == "False" else None
    return got if got == want else None
