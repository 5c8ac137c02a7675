"""The optional NetworkPolicy that admits only the control plane to the webhook port
(``manifests/overlays/control-plane-only``), rendered as manifests/README.md says: it
is not part of the default install, it selects the service's pods and the ports the
webhook Service reaches, and once its one value is set it admits that range only."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import kubernetes_validate
import pytest

from tests.support.crd_validation import K8S_NEWEST, K8S_OLDEST
from tests.support.install_manifests import (
    MANIFESTS,
    _kustomize,
    _one,
    _policy_rule,
    _selector_matches,
)

OVERLAY = Path("overlays") / "control-plane-only"
PLACEHOLDER = "CONTROL_PLANE_CIDR"


def _rendered_with(tmp_path: Path, cidr: str) -> list[dict]:
    """The overlay after the README's step 1 (the value set), rendered."""
    tree = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, tree)
    patch = tree / OVERLAY / "control-plane.yaml"
    text = patch.read_text(encoding="utf-8")
    assert text.count(f"cidr: {PLACEHOLDER}") == 1
    patch.write_text(text.replace(f"cidr: {PLACEHOLDER}", f"cidr: {cidr}"), encoding="utf-8")
    return _kustomize(tree / OVERLAY)


def test_the_control_plane_policy_admits_only_its_range_to_the_pods_webhook_port(
    tmp_path: Path,
) -> None:
    objs = _rendered_with(tmp_path, "10.0.0.0/24")
    policy = _one(objs, "NetworkPolicy")
    dep = _one(objs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert _selector_matches(policy["spec"]["podSelector"], pod_labels)
    svc = _one(objs, "Service", "quartermaster-webhook-service")
    assert _selector_matches({"matchLabels": svc["spec"]["selector"]}, pod_labels)
    container_ports = {
        p["name"]: p for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    rule = _policy_rule(policy, "webhook")
    assert sorted(p["port"] for p in rule["ports"]) == sorted(
        p["targetPort"] for p in svc["spec"]["ports"]
    )
    assert container_ports["webhook"]["containerPort"] == 9443
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    # the rest is the default policy's: only the API server's rule changes
    shipped = _one(_kustomize(MANIFESTS), "NetworkPolicy")
    assert policy["spec"]["ingress"][1:] == shipped["spec"]["ingress"][1:]
    assert {k: v for k, v in policy["spec"].items() if k != "ingress"} == {
        k: v for k, v in shipped["spec"].items() if k != "ingress"
    }
    for version in (K8S_OLDEST, K8S_NEWEST):
        kubernetes_validate.validate(policy, version, strict=True)


def test_the_control_plane_policy_is_optional_and_unusable_until_its_value_is_set() -> None:
    default = _policy_rule(_one(_kustomize(MANIFESTS), "NetworkPolicy"), "webhook")
    assert [p["ipBlock"]["cidr"] for p in default["from"]] == ["0.0.0.0/0", "::/0"]
    as_shipped = _policy_rule(_one(_kustomize(MANIFESTS / OVERLAY), "NetworkPolicy"), "webhook")
    (peer,) = as_shipped["from"]
    # not a CIDR: the API server refuses the policy rather than locking itself out
    with pytest.raises(ValueError):
        ipaddress.ip_network(peer["ipBlock"]["cidr"])


def test_the_readme_documents_the_control_plane_policy() -> None:
    text = (MANIFESTS / "README.md").read_text(encoding="utf-8")
    assert "kubectl apply -k manifests/overlays/control-plane-only" in text
    assert PLACEHOLDER in text
