"""The install renders with kustomize into the expected objects, and its overlays change only what they are for.

``kubectl apply -k manifests/`` must give exactly the kinds of the base install, the
generated configuration wired into the Deployment, and job-integration RBAC and webhook
entries generated from the registry (``hack/gen_manifests.py``); the cert-manager overlay
must replace the internal certificate management and nothing else, and the Prometheus
overlay must add a ServiceMonitor. The webhook entries, the Deployment and its
neighbours, and the examples have modules of their own beside this one.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import yaml

from tests.support.install_manifests import (
    BASE,
    MANIFESTS,
    NAMESPACE,
    REPO,
    _kind_counts,
    _kustomize,
    _load_all,
    _one,
    _selector_matches,
)

BASE_KINDS = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): 10,
    ("v1", "Namespace"): 1,
    ("v1", "ServiceAccount"): 1,
    ("v1", "Secret"): 1,
    ("v1", "Service"): 2,
    ("v1", "ConfigMap"): 1,
    ("apps/v1", "Deployment"): 1,
    ("policy/v1", "PodDisruptionBudget"): 1,
    ("networking.k8s.io/v1", "NetworkPolicy"): 1,
    # the manager's, plus the two pending-workloads viewer roles for users
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): 3,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): 1,
    # the manager's (quartermaster-system) and the trust-anchor reader (kube-system)
    ("rbac.authorization.k8s.io/v1", "Role"): 2,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): 2,
    ("apiregistration.k8s.io/v1", "APIService"): 2,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): 1,
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): 1,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): 2,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): 2,
}


def test_kustomize_renders_the_install_with_the_expected_kinds() -> None:
    objs = _kustomize(MANIFESTS)
    assert _kind_counts(objs) == BASE_KINDS
    for o in objs:
        if o["kind"] not in {
            "CustomResourceDefinition",
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "APIService",
        }:
            expected = (
                "kube-system"
                if o["metadata"]["name"]
                == "quartermaster-extension-apiserver-authentication-reader"
                else NAMESPACE
            )
            assert o["metadata"].get("namespace") == expected, o["metadata"]["name"]


def test_kustomize_wires_the_generated_configmap_into_the_deployment() -> None:
    objs = _kustomize(MANIFESTS)
    cm = _one(objs, "ConfigMap")
    assert cm["metadata"]["name"].startswith("quartermaster-config-")
    dep = _one(objs, "Deployment")
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["kind"] == "Configuration"


def test_cert_manager_overlay_replaces_internal_certificate_management() -> None:
    objs = _kustomize(MANIFESTS / "overlays" / "cert-manager")
    counts = _kind_counts(objs)
    assert counts[("cert-manager.io/v1", "Certificate")] == 1
    assert counts[("cert-manager.io/v1", "Issuer")] == 1
    # cert-manager creates the Secret itself (kubernetes.io/tls, type immutable).
    assert ("v1", "Secret") not in counts
    cert = _one(objs, "Certificate")
    assert cert["spec"]["secretName"] == "quartermaster-webhook-server-cert"
    assert "quartermaster-webhook-service.quartermaster-system.svc" in cert["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = _one(objs, kind)["metadata"]["annotations"]
        assert (
            annotations["cert-manager.io/inject-ca-from"]
            == "quartermaster-system/quartermaster-serving-cert"
        )
    config = yaml.safe_load(_one(objs, "ConfigMap")["data"]["config.yaml"])
    assert config["internalCertManagement"] == {"enable": False}
    pod = _one(objs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cert"] == {
        "name": "cert",
        "secret": {"secretName": "quartermaster-webhook-server-cert", "defaultMode": 0o440},
    }
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["cert"]["readOnly"] is True


def test_cert_manager_overlay_drops_the_rights_only_internal_certificates_need() -> None:
    from admission.config.load import parse_config
    from admission.serve.options import cert_options

    objs = _kustomize(MANIFESTS / "overlays" / "cert-manager")
    base = _kustomize(BASE)
    # (resource, by name): MultiKueue's Secrets (any name: the workers' kubeconfigs) stay
    resources = lambda os_: {  # noqa: E731
        (r, bool(rule.get("resourceNames"))) for o in os_ if o["kind"] in ("Role", "ClusterRole")
        for rule in o["rules"] for r in rule["resources"]
    }  # fmt: skip
    gone = {(r, True) for r in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations",
                                "apiservices", "secrets")}  # fmt: skip
    assert gone <= resources(base)
    assert not gone & resources(objs)
    assert resources(base) - gone == resources(objs)  # nothing else removed
    # ... and in that mode the service makes none of those calls
    config = yaml.safe_load(_one(objs, "ConfigMap")["data"]["config.yaml"])
    opts = cert_options(parse_config(config))
    assert opts["manage_certificates"] is False and opts["inject_ca_bundle"] is False
    # cert-manager's cainjector writes the CA instead, into the APIServices too
    for obj in objs:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                           "APIService"):  # fmt: skip
            annotations = obj["metadata"].get("annotations") or {}
            assert annotations.get("cert-manager.io/inject-ca-from") == (
                "quartermaster-system/quartermaster-serving-cert"
            ), obj["metadata"]["name"]


def test_cert_manager_overlay_config_differs_from_base_only_in_cert_management() -> None:
    base = _load_all(BASE / "config" / "config.yaml")[0]
    overlay = _load_all(MANIFESTS / "overlays" / "cert-manager" / "config.yaml")[0]
    assert base.pop("internalCertManagement")["enable"] is True
    assert overlay.pop("internalCertManagement") == {"enable": False}
    assert base == overlay


def test_prometheus_overlay_adds_a_servicemonitor_for_the_metrics_service() -> None:
    objs = _kustomize(MANIFESTS / "overlays" / "prometheus")
    sm = _one(objs, "ServiceMonitor")
    svc = _one(objs, "Service", "quartermaster-metrics-service")
    assert _selector_matches(sm["spec"]["selector"], svc["metadata"]["labels"])
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["http-metrics"]
    assert "http-metrics" in port_names


def test_the_job_integrations_manifests_are_generated_from_the_registry(tmp_path: Path) -> None:
    """RBAC rules and webhook entries of every registered job kind come from
    ``hack/gen_manifests.py``; the check mode says when they are stale."""
    spec = importlib.util.spec_from_file_location("gen_manifests", REPO / "hack/gen_manifests.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.stale_files() == [], "run: python hack/gen_manifests.py"
    shutil.copytree(BASE, tmp_path / "base")
    rbac = tmp_path / "base" / "rbac.yaml"
    rbac.write_text(
        rbac.read_text().replace(
            "resources: [jobs]\n  verbs: [list, watch, get, patch]",
            "resources: [jobs]\n  verbs: [list]",
        )
    )
    out: list[str] = []
    assert gen.main(["--check", "--dir", str(tmp_path / "base")], out=out.append) == 1
    assert "rbac.yaml" in out[0]
    assert gen.main(["--dir", str(tmp_path / "base")], out=out.append) == 0
    assert rbac.read_text() == (BASE / "rbac.yaml").read_text()
