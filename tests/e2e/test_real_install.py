"""Installing Quartermaster on a real API server, as ``manifests/README.md`` says.

Each test starts its own empty control plane (no kube-controller-manager) from
``KUBEBUILDER_ASSETS`` and drives it with the real ``kubectl``: the kustomization applies
whole, ``kubectl explain`` reads our CRDs' schemas, the examples pass server-side
validation (schemas, CEL rules), and a CRD the API server would refuse is refused by
the double too. The plain-cluster scenario (``tests/support/plain_cluster.py``, also run on
the double by ``tests/e2e/test_plain_cluster.py``) installs the product with ``kubectl apply
-k manifests/`` on a control plane without any operator's CRD, runs the service with the
shipped configuration and RBAC, and installs the JobSet CRD while it runs. Skipped
without ``KUBEBUILDER_ASSETS``.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.apiserver_double.crds import crd_errors
from tests.support.kube_harness import stack
from tests.support.plain_cluster import plain_cluster_scenario, queue_objects, shipped_config
from tests.support.realserver.cluster import RealCluster
from tests.support.realserver.controlplane import (
    ControlPlane,
    assets_dir,
    skip_reason,
    start_control_plane,
)
from tests.support.realserver.retry import run_kubectl

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def running(start: Callable[[Path], Any]) -> Iterator[Any]:
    """What ``start`` starts from ``KUBEBUILDER_ASSETS`` (skipped without), stopped after."""
    assets = assets_dir()
    if assets is None:
        pytest.skip(skip_reason())
    started = start(assets)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def empty_cluster() -> Iterator[ControlPlane]:
    yield from running(lambda assets: start_control_plane(assets, controller_manager=False))


def kubectl(
    cp: ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_kubectl(["kubectl", "--kubeconfig", str(cp.kubeconfig()), *args], input=stdin)


def test_real_kubectl_apply_k_installs_everything(empty_cluster: ControlPlane) -> None:
    res = kubectl(empty_cluster, "apply", "-k", str(MANIFESTS))  # one step, as the README says
    assert res.returncode == 0, res.stderr
    for kind in ("clusterqueues", "cohorts", "localqueues", "resourceflavors", "workloads"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{kind}.kueue.x-k8s.io" in res.stdout
    assert "deployment.apps/quartermaster-controller-manager" in res.stdout
    again = kubectl(empty_cluster, "apply", "-k", str(MANIFESTS), "--dry-run=server")
    assert again.returncode == 0, again.stderr
    # the service's webhooks point at a Service with no pods here: remove them so the
    # next tests' objects are not refused by failurePolicy: Fail
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        kubectl(empty_cluster, "delete", kind, "-l", "app.kubernetes.io/name=quartermaster")


def test_real_kubectl_explain_reads_the_crd_schema(empty_cluster: ControlPlane) -> None:
    kubectl(
        empty_cluster,
        "apply",
        "--server-side",
        "-f",
        str(MANIFESTS / "crd" / "kueue.x-k8s.io_clusterqueues.yaml"),
    )
    kubectl(
        empty_cluster, "wait", "--for=condition=Established", "crd/clusterqueues.kueue.x-k8s.io"
    )
    res = kubectl(empty_cluster, "explain", "clusterqueue.spec.resourceGroups")
    assert res.returncode == 0, res.stderr
    assert "FIELD: resourceGroups <[]Object>" in res.stdout
    assert "coveredResources" in res.stdout and "flavors" in res.stdout


def test_real_examples_pass_server_side_validation(empty_cluster: ControlPlane) -> None:
    crds = sorted(str(p) for p in (MANIFESTS / "crd").glob("kueue.x-k8s.io_*.yaml"))
    # the examples' JobSet and PyTorchJob need their operators' CRDs (our test fixtures)
    crds += sorted(str(p) for p in (MANIFESTS.parent / "tests" / "support" / "crds").glob("*.yaml"))
    kubectl(empty_cluster, "apply", "--server-side", *sum((["-f", c] for c in crds), []))
    kubectl(empty_cluster, "wait", "--for=condition=Established", "crd", "--all")
    examples = MANIFESTS / "examples"
    res = kubectl(empty_cluster, "apply", "-f", str(examples / "00-namespaces.yaml"))
    assert res.returncode == 0, res.stderr
    others = [str(p) for p in sorted(examples.glob("*.yaml")) if p.name != "00-namespaces.yaml"]
    res = kubectl(empty_cluster, "apply", "--dry-run=server", *sum((["-f", p] for p in others), []))
    assert res.returncode == 0, res.stderr
    assert "(server dry run)" in res.stdout


def test_real_server_refuses_a_cel_violation_and_an_unknown_field(
    empty_cluster: ControlPlane,
) -> None:
    crd = str(MANIFESTS / "crd" / "kueue.x-k8s.io_clusterqueues.yaml")
    kubectl(empty_cluster, "apply", "--server-side", "-f", crd)
    kubectl(
        empty_cluster, "wait", "--for=condition=Established", "crd/clusterqueues.kueue.x-k8s.io"
    )
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "no-cohort"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "f",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "4", "borrowingLimit": "1"}
                            ],
                        }
                    ],
                }
            ]
        },
    }
    res = kubectl(empty_cluster, "create", "-f", "-", stdin=yaml.safe_dump(cq))
    assert res.returncode != 0
    assert "borrowingLimit must be nil when cohort is empty" in res.stderr
    typo = copy.deepcopy(cq)
    del typo["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"]
    typo["spec"]["cohortNmae"] = "x"
    res = kubectl(empty_cluster, "create", "-f", "-", stdin=yaml.safe_dump(typo))
    assert res.returncode != 0
    assert 'unknown field "spec.cohortNmae"' in res.stderr


def test_real_server_refuses_a_crd_with_a_description_on_root_metadata(
    empty_cluster: ControlPlane,
) -> None:
    """What the first release's CRDs did: the real server refuses it, and the double's
    CRD check (D1) refuses the same document."""
    crd = yaml.safe_load((MANIFESTS / "crd" / "kueue.x-k8s.io_cohorts.yaml").read_text())
    bad = copy.deepcopy(crd)
    bad["metadata"]["name"] = "widgets.example.com"
    bad["spec"]["group"] = "example.com"
    bad["spec"]["names"] = {
        "plural": "widgets",
        "singular": "widget",
        "kind": "Widget",
        "listKind": "WidgetList",
    }
    for v in bad["spec"]["versions"]:
        props = v["schema"]["openAPIV3Schema"].setdefault("properties", {})
        props["metadata"] = {"type": "object", "description": "Standard object's metadata."}
    double = crd_errors(bad)
    assert any("generateName" in str(e) for e in double), double
    res = kubectl(empty_cluster, "create", "-f", "-", stdin=yaml.safe_dump(bad))
    assert res.returncode != 0
    assert "must not specify anything other than name and generateName" in res.stderr


@pytest.fixture
def readme_cluster() -> Iterator[RealCluster]:
    """A control plane of its own, installed with ``kubectl apply -k manifests/`` only."""
    yield from running(lambda assets: RealCluster(assets, kustomize=True))


def test_real_plain_cluster_is_ready_admits_a_job_then_a_jobset_once_its_crd_exists(
    readme_cluster: RealCluster, tmp_path: Path
) -> None:
    assert (
        readme_cluster.view.get_object("customresourcedefinitions", "jobsets.jobset.x-k8s.io")
        is None
    )

    async def main() -> None:
        async with stack(
            tmp_path,
            backend=readme_cluster,
            objects=queue_objects(),
            config=shipped_config(),
            crds=(),
        ) as s:
            await plain_cluster_scenario(s)

    asyncio.run(main())
