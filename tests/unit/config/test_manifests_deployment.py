"""The install's Deployment and its neighbours: availability, hardening, network, RBAC, configuration.

The Deployment must be cluster-critical, highly available and hardened, kept up by its
PodDisruptionBudget and reached through its Service, NetworkPolicy and APIServices on the
right ports; its configuration must name the install's own Service and Secret and load
in the config loader; and its RBAC must grant no wildcards, as a cluster admin reviewing
the install would require.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.install_manifests import (
    BASE,
    MANIFESTS,
    NAMESPACE,
    _base_objects,
    _kustomize,
    _load_all,
    _of_kind,
    _one,
    _policy_rule,
    _selector_matches,
)


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
    assert _selector_matches(
        peer["namespaceSelector"], {"kubernetes.io/metadata.name": "monitoring"}
    )
    assert not _selector_matches(
        peer["namespaceSelector"], {"kubernetes.io/metadata.name": NAMESPACE}
    )
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
