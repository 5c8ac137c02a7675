"""Checks on what a cluster admin applies: ``manifests/`` and the GPU examples.

The install manifests must render with kustomize and keep the properties the issue
asks for (hardened Deployment, Kueue-style webhooks that can never lock out
kube-system or the service itself, least-privilege RBAC). The examples must be
valid input for ``quartermaster plan`` and keep Kueue's ClusterQueue rules; when
the plan command is available, its outcome must match the table in
``manifests/examples/README.md``. Validation against the generated CRD schemas
comes with the CRDs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.config.load import parse_config
from admission.integrations.registry import INTEGRATIONS

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
EXAMPLES = MANIFESTS / "examples"
NAMESPACE = "quartermaster-system"
KUEUE = "kueue.x-k8s.io/v1beta2"

PLAN_KINDS = {
    (KUEUE, "ResourceFlavor"),
    (KUEUE, "ClusterQueue"),
    (KUEUE, "Cohort"),
    (KUEUE, "LocalQueue"),
    (KUEUE, "WorkloadPriorityClass"),
    (KUEUE, "Workload"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("v1", "Namespace"),
    # every job kind plan reads (one Workload per object)
    *((i.api_version, i.kind) for i in INTEGRATIONS if i.reconciler == "object"),
}

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

# (webhook name) -> (path, resources, operations); Kueue's paths (semantics §3.1): two
# per job integration of the registry, then the queue objects'.
# Kueue's markers: the pod owners' defaulters run on updates too (verbs=create;update)
MUTATED_ON_UPDATE = {"statefulsets", "deployments", "leaderworkersets"}
MUTATING = {
    **{
        f"m{i.kind.lower()}.kb.io": (
            i.webhook_paths()[0],
            [i.resource.plural],
            ["CREATE", "UPDATE"] if i.resource.plural in MUTATED_ON_UPDATE else ["CREATE"],
        )
        for i in INTEGRATIONS
    },
    "mclusterqueue.kb.io": (
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        ["clusterqueues"],
        ["CREATE"],
    ),
    "mresourceflavor.kb.io": (
        "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
        ["resourceflavors"],
        ["CREATE"],
    ),
    "mworkload.kb.io": ("/mutate-kueue-x-k8s-io-v1beta2-workload", ["workloads"], ["CREATE"]),
}
VALIDATING = {
    **{
        f"v{i.kind.lower()}.kb.io": (
            i.webhook_paths()[1],
            [i.resource.plural],
            ["CREATE", "UPDATE"],
        )
        for i in INTEGRATIONS
    },
    # updates of the pods the service gated that carry no queue-name label
    "vmanagedpod.kb.io": ("/validate--v1-pod", ["pods"], ["UPDATE"]),
    # every in-place resize: a pod that runs on quota may not grow (any kind's pods)
    **{
        f"v{i.kind.lower()}{sub}.kb.io": (
            i.webhook_paths()[1], [f"{i.resource.plural}/{sub}"], ["UPDATE"]
        )
        for i in INTEGRATIONS
        for sub in i.guarded_subresources
    },
    "vclusterqueue.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
        ["clusterqueues"],
        ["CREATE", "UPDATE"],
    ),
    "vcohort.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-cohort",
        ["cohorts"],
        ["CREATE", "UPDATE"],
    ),
    "vresourceflavor.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
        ["resourceflavors"],
        ["CREATE", "UPDATE"],
    ),
    "vworkload.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-workload",
        ["workloads", "workloads/status"],
        ["CREATE", "UPDATE"],
    ),
    "vlocalqueue.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-localqueue",
        ["localqueues"],
        ["CREATE", "UPDATE"],
    ),
    "vtopology.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-topology",
        ["topologies"],
        ["CREATE", "UPDATE"],
    ),
}
NAMESPACED_RESOURCES = {"workloads", "localqueues", *(i.resource.plural for i in INTEGRATIONS)}
OBJECT_SELECTORS = {i.resource.plural: i.webhook_object_selector for i in INTEGRATIONS}
_QUEUE_NAME = {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}
POD_SELECTORS = {
    "mpod.kb.io": {"matchExpressions": [_QUEUE_NAME]},
    "vpod.kb.io": {"matchExpressions": [_QUEUE_NAME]},
    "vmanagedpod.kb.io": {
        "matchExpressions": [
            {"key": "kueue.x-k8s.io/managed", "operator": "Exists"},
            {"key": "kueue.x-k8s.io/queue-name", "operator": "DoesNotExist"},
        ]
    },
}


# ----------------------------------------------------------------------------- helpers


def _load_all(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _base_objects() -> list[dict[str, Any]]:
    """The base install read straight from its files (no kubectl needed)."""
    kust = _load_all(BASE / "kustomization.yaml")[0]
    objs: list[dict[str, Any]] = []
    for name in kust["resources"]:
        path = BASE / name
        if path.is_dir():  # ../crd: a kustomization of its own
            for sub in _load_all(path / "kustomization.yaml")[0]["resources"]:
                objs.extend(_load_all(path / sub))
        else:
            objs.extend(_load_all(path))
    return objs


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    proc = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


def _kind_counts(objs: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for o in objs:
        key = (o["apiVersion"], o["kind"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _example_objects() -> list[dict[str, Any]]:
    """What ``plan -f manifests/examples/`` reads: top-level *.yaml, sorted."""
    objs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("*.yml")):
        objs.extend(_load_all(path))
    return objs


def _of_kind(objs: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    return (o for o in objs if o["kind"] == kind)


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# ------------------------------------------------------------------ install manifests


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
                if o["metadata"]["name"] == "quartermaster-extension-apiserver-authentication-reader"
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


def test_webhooks_use_kueue_paths_and_never_lock_out_system_namespaces() -> None:
    objs = _base_objects()
    for kind, expected in (
        ("MutatingWebhookConfiguration", MUTATING),
        ("ValidatingWebhookConfiguration", VALIDATING),
    ):
        hooks = {h["name"]: h for h in _one(objs, kind)["webhooks"]}
        assert set(hooks) == set(expected), kind
        for name, (path, resources, operations) in expected.items():
            hook = hooks[name]
            assert hook["admissionReviewVersions"] == ["v1"], name
            assert hook["sideEffects"] == "None", name
            assert hook["timeoutSeconds"] == 10, name
            assert hook["failurePolicy"] == "Fail", name
            assert hook["matchPolicy"] == "Equivalent", name
            if resources == ["pods"]:  # never every pod in the cluster
                assert hook["objectSelector"] == POD_SELECTORS[name], name
            elif "/" in resources[0]:  # a guarded subresource: every object's writes of it
                assert "objectSelector" not in hook, name
            elif OBJECT_SELECTORS.get(resources[0]) is not None:
                assert hook["objectSelector"] == OBJECT_SELECTORS[resources[0]], name
            else:
                assert "objectSelector" not in hook, name
            assert hook["clientConfig"]["service"] == {
                "name": "quartermaster-webhook-service",
                "namespace": NAMESPACE,
                "path": path,
                "port": 443,
            }
            (rule,) = hook["rules"]
            assert rule["resources"] == resources, name
            assert rule["operations"] == operations, name
            if resources[0].partition("/")[0] in NAMESPACED_RESOURCES:
                selector = hook["namespaceSelector"]
                for ns in ("kube-system", NAMESPACE):
                    labels = {"kubernetes.io/metadata.name": ns}
                    assert not _selector_matches(selector, labels), (name, ns)
                assert _selector_matches(selector, {"kubernetes.io/metadata.name": "team-a"})


@pytest.mark.parametrize("old", ["", "queue", "managed", "both"])
@pytest.mark.parametrize("new", ["", "queue", "managed", "both"])
def test_every_update_of_a_queued_or_managed_pod_is_validated(old: str, new: str) -> None:
    """An apiserver calls an entry when its objectSelector matches the old object or the
    new one: a pod update is validated when either names a queue or carries the managed
    label the service gives every pod it gates (once, unless it changes those labels),
    and never otherwise."""
    sets = {
        "": {},
        "queue": {"kueue.x-k8s.io/queue-name": "lq"},
        "managed": {"kueue.x-k8s.io/managed": "true"},
        "both": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/managed": "true"},
    }
    hooks = _one(_base_objects(), "ValidatingWebhookConfiguration")["webhooks"]
    called = [
        h["name"]
        for h in hooks
        if h["rules"][0]["resources"] == ["pods"]
        and "UPDATE" in h["rules"][0]["operations"]
        and any(_selector_matches(h["objectSelector"], sets[s]) for s in (old, new))
    ]
    assert bool(called) == bool(old or new), called
    if old == new:  # an update that keeps the labels costs one call
        assert len(called) <= 1, called


def test_every_pod_resize_outside_the_system_namespaces_is_validated() -> None:
    """``pods/resize`` grows a running pod in place: the entry that sees it selects no
    labels (a Job's or a JobSet's pods name no queue, yet run on its quota)."""
    hooks = _one(_base_objects(), "ValidatingWebhookConfiguration")["webhooks"]
    (hook,) = [h for h in hooks if "pods/resize" in h["rules"][0]["resources"]]
    assert hook["clientConfig"]["service"]["path"] == "/validate--v1-pod"
    assert hook["rules"][0]["operations"] == ["UPDATE"]
    assert "objectSelector" not in hook
    assert _selector_matches(hook["namespaceSelector"], {"kubernetes.io/metadata.name": "team-a"})


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
    rbac.write_text(rbac.read_text().replace(
        "resources: [jobs]\n  verbs: [list, watch, get, patch]", "resources: [jobs]\n  verbs: [list]"
    ))
    out: list[str] = []
    assert gen.main(["--check", "--dir", str(tmp_path / "base")], out=out.append) == 1
    assert "rbac.yaml" in out[0]
    assert gen.main(["--dir", str(tmp_path / "base")], out=out.append) == 0
    assert rbac.read_text() == (BASE / "rbac.yaml").read_text()


def test_the_deployment_is_cluster_critical() -> None:
    dep = _one(_base_objects(), "Deployment")
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_webhook_service_reaches_the_webhook_port_of_the_deployment() -> None:
    objs = _base_objects()
    dep = _one(objs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    ports = {
        p["name"]: p["containerPort"]
        for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert ports == {"webhook": 9443, "metrics": 8080, "health": 8081, "visibility": 8082}
    webhook = _one(objs, "Service", "quartermaster-webhook-service")
    assert _selector_matches({"matchLabels": webhook["spec"]["selector"]}, pod_labels)
    port, _visibility = webhook["spec"]["ports"]
    assert port["port"] == 443 and ports[port["targetPort"]] == 9443
    metrics = _one(objs, "Service", "quartermaster-metrics-service")
    assert _selector_matches({"matchLabels": metrics["spec"]["selector"]}, pod_labels)
    (port,) = metrics["spec"]["ports"]
    assert ports[port["targetPort"]] == 8080


def _policy_rule(policy: dict[str, Any], port: str) -> dict[str, Any]:
    (rule,) = [r for r in policy["spec"]["ingress"] if port in [p["port"] for p in r["ports"]]]
    return rule


def test_network_policy_admits_only_the_api_server_and_monitoring_to_the_pods() -> None:
    """NetworkPolicy is not enforced without a network plugin (neither the double nor
    the real-server harness has one), so its structure is what is checked: it selects
    the Deployment's pods, names the container's ports, admits every address but the
    pod network (the ``except`` a cluster admin sets) to the webhook port, and only the
    monitoring namespace to the metrics port."""
    objs = _base_objects()
    policy = _one(objs, "NetworkPolicy")
    dep = _one(objs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert _selector_matches(policy["spec"]["podSelector"], pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    container_ports = {
        p["name"]: p for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    rules = policy["spec"]["ingress"]
    assert len(rules) == 2  # nothing else: every other connection is refused
    for rule in rules:
        for port in rule["ports"]:
            assert port["port"] in container_ports
            assert port["protocol"] == container_ports[port["port"]]["protocol"]
    # every port of the Service the API server calls (webhooks, the visibility API) is
    # opened to the API server's rule, and nothing else is
    webhook_svc = _one(objs, "Service", "quartermaster-webhook-service")
    api_server_rule = _policy_rule(policy, "webhook")
    assert sorted(p["port"] for p in api_server_rule["ports"]) == sorted(
        p["targetPort"] for p in webhook_svc["spec"]["ports"]
    )
    peers = api_server_rule["from"]
    assert [p["ipBlock"]["cidr"] for p in peers] == ["0.0.0.0/0", "::/0"]
    assert all(p["ipBlock"]["except"] == [] for p in peers)  # the one value to set
    metrics_svc = _one(objs, "Service", "quartermaster-metrics-service")
    assert [p["targetPort"] for p in metrics_svc["spec"]["ports"]] == ["metrics"]
    (peer,) = _policy_rule(policy, "metrics")["from"]
    assert set(peer) == {"namespaceSelector"}  # pods of that namespace, not of this one
    assert _selector_matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": "monitoring"})
    assert not _selector_matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": NAMESPACE})
    # the health port is not opened: the kubelet's probes come from the node
    assert "health" not in {p["port"] for r in rules for p in r["ports"]}


def test_prometheus_overlay_names_the_namespace_the_network_policy_admits() -> None:
    objs = _kustomize(MANIFESTS / "overlays" / "prometheus")
    policy = _one(objs, "NetworkPolicy")
    (patch,) = [
        op
        for op in _load_all(MANIFESTS / "overlays" / "prometheus" / "networkpolicy-metrics.yaml")[0]
        if op["op"] == "replace"
    ]
    (peer,) = _policy_rule(policy, "metrics")["from"]
    assert peer["namespaceSelector"]["matchLabels"] == patch["value"]
    assert policy == _one(_kustomize(MANIFESTS), "NetworkPolicy")  # as shipped: monitoring


def test_deployment_is_highly_available_and_hardened() -> None:
    objs = _base_objects()
    dep = _one(objs, "Deployment")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2
    args = container["args"]
    assert args[:5] == [
        "serve",
        "--config",
        "/etc/quartermaster/config.yaml",
        "--cert-dir",
        "/tmp/k8s-webhook-server/serving-certs",
    ]
    assert "--leader-elect" in args
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert set(container["resources"]) == {"requests", "limits"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    csc = container["securityContext"]
    assert csc["runAsNonRoot"] is True
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert csc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["serviceAccountName"] == _one(objs, "ServiceAccount")["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts["/tmp/k8s-webhook-server/serving-certs"]]
    assert volumes[mounts["/etc/quartermaster"]]["configMap"]["name"] == "quartermaster-config"
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in keys
    for c in pod["topologySpreadConstraints"]:
        assert _selector_matches(c["labelSelector"], spec["template"]["metadata"]["labels"])


def test_pod_disruption_budget_keeps_one_replica_of_the_deployment() -> None:
    objs = _base_objects()
    pdb = _one(objs, "PodDisruptionBudget")
    dep = _one(objs, "Deployment")
    assert pdb["spec"]["minAvailable"] == 1
    assert _selector_matches(pdb["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])


def test_configuration_names_the_service_and_secret_of_the_install() -> None:
    objs = _base_objects()
    config = _load_all(BASE / "config" / "config.yaml")[0]
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    certs = config["internalCertManagement"]
    assert certs["enable"] is True
    _one(objs, "Service", certs["webhookServiceName"])
    _one(objs, "Secret", certs["webhookSecretName"])
    assert config["webhook"] == {
        "port": 9443,
        "certDir": "/tmp/k8s-webhook-server/serving-certs",
    }
    selector = config["managedJobsNamespaceSelector"]
    for ns in ("kube-system", NAMESPACE):
        assert not _selector_matches(selector, {"kubernetes.io/metadata.name": ns})


def test_configuration_files_are_accepted_by_the_config_loader() -> None:
    if importlib.util.find_spec("admission.config.schema") is None:
        pytest.skip("admission.config.schema is not available")
    from admission.config.load import load_config

    load_config(str(BASE / "config" / "config.yaml"))
    load_config(str(MANIFESTS / "overlays" / "cert-manager" / "config.yaml"))


def test_rbac_draft_has_no_wildcards_and_names_its_secret_and_lease() -> None:
    objs = _base_objects()
    for kind, name in (
        ("ClusterRole", "quartermaster-manager"),
        ("Role", "quartermaster-manager"),
    ):
        for rule in _one(objs, kind, name)["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (kind, rule)
            if "secrets" in rule["resources"]:
                assert kind == "Role"  # the service's namespace only
                # the certificate by name; MultiKueue's kubeconfigs (any name) read only
                assert rule.get("resourceNames") == ["quartermaster-webhook-server-cert"] or (
                    rule["verbs"] == ["get"]
                )
            if "leases" in rule["resources"]:
                assert kind == "Role"
                assert rule.get("resourceNames") or rule["verbs"] == ["create"]
    config = _load_all(BASE / "config" / "config.yaml")[0]
    lease = config["leaderElection"]["resourceName"]
    role = _one(objs, "Role", "quartermaster-manager")
    assert any(lease in (r.get("resourceNames") or []) for r in role["rules"])
    assert role["metadata"]["namespace"] == NAMESPACE
    reader = _one(objs, "Role", "quartermaster-extension-apiserver-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["extension-apiserver-authentication"],
            "verbs": ["get"],
        }
    ]
    sa = _one(objs, "ServiceAccount")["metadata"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in _of_kind(objs, kind):
            (subject,) = binding["subjects"]
            assert (subject["name"], subject["namespace"]) == (sa["name"], sa["namespace"])


def test_visibility_apiservices_reach_the_visibility_port_of_the_deployment() -> None:
    objs = _base_objects()
    dep = _one(objs, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert "--visibility-port=8082" in container["args"]
    webhook = _one(objs, "Service", "quartermaster-webhook-service")
    by_port = {p["port"]: p for p in webhook["spec"]["ports"]}
    for version in ("v1beta1", "v1beta2"):
        api = _one(objs, "APIService", f"{version}.visibility.kueue.x-k8s.io")["spec"]
        assert (api["group"], api["version"]) == ("visibility.kueue.x-k8s.io", version)
        svc = api["service"]
        assert (svc["name"], svc["namespace"]) == ("quartermaster-webhook-service", NAMESPACE)
        assert ports[by_port[svc["port"]]["targetPort"]] == 8082
    viewers = {
        o["metadata"]["name"]: o["rules"]
        for o in _of_kind(objs, "ClusterRole")
        if "pending-workloads" in o["metadata"]["name"]
    }
    assert viewers == {
        "quartermaster-pending-workloads-cq-viewer": [
            {
                "apiGroups": ["visibility.kueue.x-k8s.io"],
                "resources": ["clusterqueues/pendingworkloads"],
                "verbs": ["get", "list", "watch"],
            }
        ],
        "quartermaster-pending-workloads-lq-viewer": [
            {
                "apiGroups": ["visibility.kueue.x-k8s.io"],
                "resources": ["localqueues/pendingworkloads"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    }


# ----------------------------------------------------------------------------- examples


def test_every_example_yaml_parses() -> None:
    paths = sorted(EXAMPLES.rglob("*.yaml")) + sorted(EXAMPLES.rglob("*.yml"))
    assert paths
    for path in paths:
        docs = _load_all(path)
        assert docs, path
        for doc in docs:
            assert isinstance(doc, dict) and doc.get("kind"), path
            if doc["kind"] == "Configuration":  # a service configuration has no metadata
                parse_config(doc, source=str(path))
                continue
            assert doc["metadata"]["name"], path


def test_examples_read_by_plan_use_only_kinds_plan_accepts() -> None:
    objs = _example_objects()
    kinds = {(o["apiVersion"], o["kind"]) for o in objs}
    assert kinds <= PLAN_KINDS, kinds - PLAN_KINDS
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), "duplicate objects"


def test_example_clusterqueues_keep_kueue_validation_rules() -> None:
    objs = _example_objects()
    flavors = {o["metadata"]["name"] for o in _of_kind(objs, "ResourceFlavor")}
    for node in list(_of_kind(objs, "ClusterQueue")) + list(_of_kind(objs, "Cohort")):
        name = f"{node['kind']} {node['metadata']['name']}"
        spec = node["spec"]
        has_parent = bool(spec.get("cohortName") or spec.get("parentName"))
        seen_resources: set[str] = set()
        seen_flavors: set[str] = set()
        for group in spec.get("resourceGroups", []):
            covered = group["coveredResources"]
            assert not seen_resources & set(covered), name
            seen_resources |= set(covered)
            for fq in group["flavors"]:
                assert fq["name"] in flavors, (name, fq["name"])
                assert fq["name"] not in seen_flavors, (name, fq["name"])
                seen_flavors.add(fq["name"])
                assert [r["name"] for r in fq["resources"]] == covered, (name, fq["name"])
                for r in fq["resources"]:
                    if not has_parent:
                        assert "borrowingLimit" not in r and "lendingLimit" not in r, name
                    if node["kind"] == "ClusterQueue" and "lendingLimit" in r:
                        assert r["lendingLimit"] <= r["nominalQuota"], (name, r["name"])
        if node["kind"] == "ClusterQueue":
            preemption = spec.get("preemption", {})
            if preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never":
                assert preemption.get("reclaimWithinCohort", "Never") != "Never", name


def test_example_references_resolve() -> None:
    objs = _example_objects()
    namespaces = {
        o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in _of_kind(objs, "Namespace")
    }
    cqs = {o["metadata"]["name"]: o for o in _of_kind(objs, "ClusterQueue")}
    cohorts = {o["metadata"]["name"]: o for o in _of_kind(objs, "Cohort")}
    wpcs = {o["metadata"]["name"] for o in _of_kind(objs, "WorkloadPriorityClass")}
    lqs = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in _of_kind(objs, "LocalQueue")
    }
    for cohort in cohorts.values():
        parent = cohort["spec"].get("parentName")
        assert parent is None or parent in cohorts
    for cq in cqs.values():
        assert cq["spec"]["cohortName"] in cohorts
    for (ns, name), lq in lqs.items():
        assert ns in namespaces, (ns, name)
        cq = cqs[lq["spec"]["clusterQueue"]]
        assert _selector_matches(cq["spec"].get("namespaceSelector"), namespaces[ns]), (ns, name)
    for ns in namespaces:
        assert any(key[0] == ns for key in lqs), f"namespace {ns} has no LocalQueue"
    assert any(name == "default" for _, name in lqs)
    for job in _job_objects(objs):
        meta = job["metadata"]
        labels = meta["labels"]
        assert (meta["namespace"], labels["kueue.x-k8s.io/queue-name"]) in lqs, meta["name"]
        assert labels["kueue.x-k8s.io/priority-class"] in wpcs, meta["name"]


def test_example_priorities_span_system_critical_to_development() -> None:
    values = {
        o["metadata"]["name"]: o["value"]
        for o in _of_kind(_example_objects(), "WorkloadPriorityClass")
    }
    assert values["system-critical"] == 1000000
    assert values["development"] == 100
    assert max(values.values()) == values["system-critical"]
    assert min(values.values()) == values["development"]
    assert values["production"] > values["research-high"] > values["research"]
    for o in _of_kind(_example_objects(), "WorkloadPriorityClass"):
        assert o["description"], o["metadata"]["name"]


def _job_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The examples' objects of every job kind plan reads (Jobs, JobSets, …)."""
    kinds = {(i.api_version, i.kind) for i in INTEGRATIONS if i.reconciler == "object"}
    return [o for o in objs if (o["apiVersion"], o["kind"]) in kinds]


def test_example_jobs_are_deterministic_for_plan() -> None:
    jobs = _job_objects(_example_objects())
    assert {j["kind"] for j in jobs} >= {"Job", "JobSet", "PyTorchJob"}
    uids = [j["metadata"]["uid"] for j in jobs]
    assert len(set(uids)) == len(uids)
    for job in jobs:
        assert job["metadata"]["creationTimestamp"], job["metadata"]["name"]
        assert "generateName" not in job["metadata"]


# name -> (namespace, expected): ClusterQueue + flavor of the main accelerator, or pending
# reason. Mirrors the table in manifests/examples/README.md.
EXPECTED_ADMITTED = {
    "dev-debug-1gpu": ("vision-research", "vision-research", {"nvidia.com/gpu": "h100"}),
    "llm-pretrain-gang": ("llm-research", "llm-research", {"nvidia.com/gpu": "h100"}),
    "llm-sft-2x8": ("llm-research", "llm-research", {"nvidia.com/gpu": "a100"}),
    "llm-data-prep": ("llm-research", "research-cpu", {"cpu": "cpu-nodes"}),
    "mig-embeddings": (
        "inference-prod",
        "inference-prod",
        {"nvidia.com/mig-1g.10gb": "mig-1g-10gb", "cpu": "h100"},
    ),
    "recsys-retrain": ("training-prod", "training-prod", {"nvidia.com/gpu": "h100"}),
}
# the job kinds of 70-training-kinds.yaml: name -> (namespace, kind, ClusterQueue, cycle,
# podSet -> GPU flavor or the cpu flavor of a podSet without GPUs)
EXPECTED_KINDS_ADMITTED = {
    "vision-eval": ("vision-research", "jobset", "vision-research", 3,
                    {"driver": {"cpu": "h100"}, "workers": {"nvidia.com/gpu": "a100"}}),
    "bert-finetune": ("training-prod", "pytorchjob", "training-prod", 2,
                      {"master": {"nvidia.com/gpu": "h100"}, "worker": {"nvidia.com/gpu": "a100"}}),
}  # fmt: skip
EXPECTED_PENDING = {
    "mig-batch-eval": ("inference-prod", "WaitingForQuota"),
    "vision-pretrain-too-big": ("vision-research", "ExceedsMaxQuota"),
}


def _by_job(
    entries: list[dict[str, Any]], namespace: str, job: str, kind: str = "job"
) -> dict[str, Any]:
    prefix = f"{namespace}/{kind}-{job}-"
    found = [e for e in entries if e["workload"].startswith(prefix)]
    assert len(found) == 1, f"{prefix}*: {[e['workload'] for e in entries]}"
    return found[0]


def test_plan_on_examples_matches_the_readme_table() -> None:
    if importlib.util.find_spec("admission.drivers.loader") is None:
        pytest.skip("quartermaster plan cannot load manifests yet (admission.drivers.loader missing)")
    proc = subprocess.run(
        [sys.executable, "-m", "admission", "plan", "-f", str(EXAMPLES), "-o", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["preempted"] == []
    assert len(doc["admitted"]) == len(EXPECTED_ADMITTED) + len(EXPECTED_KINDS_ADMITTED)
    for name, (ns, kind, cq, cycle, pod_sets) in EXPECTED_KINDS_ADMITTED.items():
        entry = _by_job(doc["admitted"], ns, name, kind)
        assert (entry["clusterQueue"], entry["cycle"]) == (cq, cycle), name
        got = {p["name"]: p["flavors"] for p in entry["podSetAssignments"]}
        assert set(got) == set(pod_sets), name
        for pod_set, flavors in pod_sets.items():
            for resource, flavor in flavors.items():
                assert got[pod_set][resource] == flavor, (name, pod_set, resource)
    for job, (ns, cq, flavors) in EXPECTED_ADMITTED.items():
        entry = _by_job(doc["admitted"], ns, job)
        assert entry["clusterQueue"] == cq, job
        (psa,) = entry["podSetAssignments"]
        for resource, flavor in flavors.items():
            assert psa["flavors"][resource] == flavor, (job, resource)
    assert len(doc["pending"]) == len(EXPECTED_PENDING)
    for job, (ns, reason) in EXPECTED_PENDING.items():
        assert _by_job(doc["pending"], ns, job)["reason"] == reason, job
    gpu = doc["usage"]["llm-research"]["h100"]["nvidia.com/gpu"]
    assert gpu == {"total": "32", "borrowed": "16"}
    assert doc["usage"]["training-prod"]["h100"]["nvidia.com/gpu"]["total"] == "20"
