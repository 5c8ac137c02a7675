"""The real control plane as the e2e tests use it: installed once, wiped per test.

:class:`RealCluster` wraps a :class:`~tests.support.realserver.controlplane.ControlPlane` for a
whole test session. On start it installs what a cluster admin installs from
``manifests/`` before the service runs (the CRDs, the namespace, the service account and
the shipped RBAC) with the real ``kubectl``. :meth:`RealCluster.reset` gives each test
clean state: every object of the kinds the service touches is deleted (finalizers
lifted), so no test sees another's Workloads, queues or Leases.

:class:`RealServerView` answers the few synchronous reads the tests make of the
backend (``get_object``, ``list_objects``) with plain HTTPS requests, so a test reads
the real server exactly where it read the double's store.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import retry
from .controlplane import ADMIN_TOKEN, ControlPlane, start_control_plane

ROOT = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]

# plural (and kubectl short names the tests use) -> (group/version path, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "namespaces": ("api/v1", False),
    "pods": ("api/v1", True),
    "events": ("api/v1", True),
    "secrets": ("api/v1", True),
    "jobs": ("apis/batch/v1", True),
    "statefulsets": ("apis/apps/v1", True),
    "deployments": ("apis/apps/v1", True),
    "replicasets": ("apis/apps/v1", True),
    "leases": ("apis/coordination.k8s.io/v1", True),
    "priorityclasses": ("apis/scheduling.k8s.io/v1", False),
    "mutatingwebhookconfigurations": ("apis/admissionregistration.k8s.io/v1", False),
    "validatingwebhookconfigurations": ("apis/admissionregistration.k8s.io/v1", False),
    "customresourcedefinitions": ("apis/apiextensions.k8s.io/v1", False),
    "apiservices": ("apis/apiregistration.k8s.io/v1", False),
    "services": ("api/v1", True),
    "endpointslices": ("apis/discovery.k8s.io/v1", True),
    "configmaps": ("api/v1", True),
    "rolebindings": ("apis/rbac.authorization.k8s.io/v1", True),
    "workloads": ("apis/kueue.x-k8s.io/v1beta2", True),
    "localqueues": ("apis/kueue.x-k8s.io/v1beta2", True),
    "clusterqueues": ("apis/kueue.x-k8s.io/v1beta2", False),
    "cohorts": ("apis/kueue.x-k8s.io/v1beta2", False),
    "resourceflavors": ("apis/kueue.x-k8s.io/v1beta2", False),
    "workloadpriorityclasses": ("apis/kueue.x-k8s.io/v1beta2", False),
    "topologies": ("apis/kueue.x-k8s.io/v1beta2", False),
    "admissionchecks": ("apis/kueue.x-k8s.io/v1beta2", False),
    "multikueueclusters": ("apis/kueue.x-k8s.io/v1beta2", False),
    "multikueueconfigs": ("apis/kueue.x-k8s.io/v1beta2", False),
    "nodes": ("api/v1", False),
    "deviceclasses": ("apis/resource.k8s.io/v1", False),
    "resourceclaimtemplates": ("apis/resource.k8s.io/v1", True),
    "resourceclaims": ("apis/resource.k8s.io/v1", True),
    "resourceslices": ("apis/resource.k8s.io/v1", False),
}
KIND_PLURAL = {
    "DeviceClass": "deviceclasses",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims",
    "ResourceSlice": "resourceslices",
    "Namespace": "namespaces",
    "Pod": "pods",
    "Secret": "secrets",
    "Job": "jobs",
    "StatefulSet": "statefulsets",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "Lease": "leases",
    "PriorityClass": "priorityclasses",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "APIService": "apiservices",
    "Service": "services",
    "EndpointSlice": "endpointslices",
    "RoleBinding": "rolebindings",
    "Workload": "workloads",
    "LocalQueue": "localqueues",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Topology": "topologies",
    "AdmissionCheck": "admissionchecks",
    "MultiKueueCluster": "multikueueclusters",
    "MultiKueueConfig": "multikueueconfigs",
    "Node": "nodes",
}
# what reset() empties, in this order (dependents first)
WIPED = (
    "apiservices",  # ours only (OURS_ONLY): the server's own are never touched
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "workloads",
    "statefulsets",
    "deployments",
    "replicasets",
    "jobs",
    "pods",
    "localqueues",
    "clusterqueues",
    "cohorts",
    "resourceflavors",
    "workloadpriorityclasses",
    "topologies",
    "admissionchecks",
    "multikueueclusters",
    "multikueueconfigs",
    "nodes",  # no kubelet runs: a test's Nodes are plain objects, made Ready by the test
    "priorityclasses",
    "leases",
    "secrets",
    "resourceclaims",
    "resourceclaimtemplates",
    "resourceslices",
    "deviceclasses",
)
SERVICE_NS = "quartermaster-system"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


def _ours(plural: str, obj: Obj) -> bool:
    """Whether reset() may delete ``obj``: of the APIServices, only the visibility API's
    (the server registers one per built-in group version itself)."""
    if plural == "apiservices":
        return bool((obj.get("spec") or {}).get("group") == VISIBILITY_GROUP)
    return True


KEPT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", SERVICE_NS)


def _canonical(resource: str) -> str:
    name = resource.split(".", 1)[0]
    return {"wl": "workloads", "cq": "clusterqueues", "lq": "localqueues"}.get(name, name)


class ApiRequestError(Exception):
    def __init__(self, status: int, body: Obj | str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{status}: {body}")


class RealServerView:
    """Synchronous admin access to the real API server (test-side reads and setup)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.url = cp.url
        self._ssl = cp.ssl_context()

    # -- raw ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with retry.urlopen(req, context=self._ssl, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                parsed: Obj | str = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            raise ApiRequestError(err.code, parsed) from None
        return json.loads(raw) if raw else None

    def path(self, resource: str, name: str | None = None, namespace: str | None = None) -> str:
        plural = _canonical(resource)
        gv, namespaced = RESOURCES[plural]
        out = f"/{gv}"
        if namespaced and namespace:
            out += f"/namespaces/{namespace}"
        out += f"/{plural}"
        if name is not None:
            out += f"/{urllib.parse.quote(name, safe='')}"
        return out

    # -- what tests read ---------------------------------------------------------------------

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.request("GET", self.path(resource, name, namespace))  # type: ignore[no-any-return]
        except ApiRequestError as err:
            if err.status == 404:
                return None
            raise

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        plural = _canonical(resource)
        listed = self.request("GET", self.path(plural, None, namespace))
        kind = KIND_PLURAL_INV.get(plural, "")
        items = listed.get("items") or []
        for item in items:  # lists omit them per item, as the real server does
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", listed.get("apiVersion", ""))
        return items  # type: ignore[no-any-return]

    def watch(self, resource: str, on_event: Any, stop: Any) -> None:
        """Feed ``on_event(type, new, old, everything)`` from a real watch until
        ``stop.is_set()`` (run it in a thread): what the double's store hooks give the
        invariant checker, from the API server's own event stream."""
        plural = _canonical(resource)
        store: dict[str, Obj] = {}
        listed = self.request("GET", self.path(plural))
        for item in listed.get("items") or []:
            store[item["metadata"]["uid"]] = item
        rv = listed["metadata"]["resourceVersion"]
        while not stop.is_set():
            query = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "5",
                     "allowWatchBookmarks": "true"}  # fmt: skip
            url = self.url + self.path(plural) + "?" + urllib.parse.urlencode(query)
            req = urllib.request.Request(url)
            req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
            with retry.urlopen(req, context=self._ssl, timeout=30) as resp:
                for line in resp:
                    if stop.is_set():
                        return
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "ERROR":
                        raise AssertionError(f"watch of {plural} failed: {obj}")
                    uid = obj["metadata"]["uid"]
                    old = store.get(uid)
                    if event["type"] == "DELETED":
                        store.pop(uid, None)
                    else:
                        store[uid] = obj
                    on_event(event["type"], obj, old, list(store.values()))

    # -- setup ---------------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        """POST as admin; a ``status`` in ``obj`` is then written through ``/status``."""
        plural = KIND_PLURAL[obj["kind"]]
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ("default" if RESOURCES[plural][1] else None)
        body = copy.deepcopy(obj)
        status = body.pop("status", None)
        created = self.request("POST", self.path(plural, None, ns), body)
        if status:
            created["status"] = status
            created = self.request("PUT", self.path(plural, meta["name"], ns) + "/status", created)
        return created  # type: ignore[no-any-return]

    def ensure_namespace(self, obj: Obj) -> None:
        """Create the namespace, or make its labels exactly ``obj``'s."""
        name = obj["metadata"]["name"]
        want = dict(obj["metadata"].get("labels") or {})
        have = self.get_object("namespaces", name)
        if have is None:
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": want},
                }
            )
            return
        labels = {
            k: None
            for k in (have["metadata"].get("labels") or {})
            if k not in want and k != "kubernetes.io/metadata.name"
        }
        labels.update(want)
        self.request(
            "PATCH",
            self.path("namespaces", name),
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def delete_all(self, plural: str) -> None:
        namespaced = RESOURCES[plural][1]
        for obj in self.list_objects(plural):
            if not _ours(plural, obj):
                continue
            meta = obj["metadata"]
            name, ns = meta["name"], meta.get("namespace")
            if plural == "priorityclasses" and name.startswith("system-"):
                continue
            if plural == "secrets" and ns != SERVICE_NS:
                continue
            if plural == "leases" and ns != SERVICE_NS:
                continue
            path = self.path(plural, name, ns if namespaced else None)
            try:
                if meta.get("finalizers"):
                    self.request(
                        "PATCH",
                        path,
                        {"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
                self.request(
                    "DELETE",
                    path,
                    {
                        "kind": "DeleteOptions",
                        "apiVersion": "v1",
                        "propagationPolicy": "Background",
                        "gracePeriodSeconds": 0,
                    },
                )
            except ApiRequestError as err:
                if err.status not in (404, 409):
                    raise

    def remaining(self, plural: str) -> int:
        items = [i for i in self.list_objects(plural) if _ours(plural, i)]
        if plural == "priorityclasses":
            items = [i for i in items if not i["metadata"]["name"].startswith("system-")]
        if plural in ("secrets", "leases"):
            items = [i for i in items if i["metadata"].get("namespace") == SERVICE_NS]
        return len(items)


def _test_crd_resources() -> list[tuple[str, str, str, bool]]:
    """(plural, "apis/group/version", kind, namespaced) of the CRDs in ``tests/support/crds/``."""
    import yaml

    out = []
    for path in sorted((ROOT / "tests" / "support" / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            out.append((spec["names"]["plural"], f"apis/{spec['group']}/{version}",
                        spec["names"]["kind"], spec["scope"] == "Namespaced"))  # fmt: skip
    return out


TEST_CRDS = _test_crd_resources()
for _plural, _gv, _kind, _namespaced in TEST_CRDS:
    RESOURCES[_plural] = (_gv, _namespaced)
    KIND_PLURAL[_kind] = _plural
KIND_PLURAL_INV = {v: k for k, v in KIND_PLURAL.items()}


def operator_crd_files(plurals: set[str]) -> list[Path]:
    """The files of ``tests/support/crds/`` defining the resources ``plurals``."""
    import yaml

    by_plural: dict[str, Path] = {}
    for path in sorted((ROOT / "tests" / "support" / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if isinstance(crd, dict) and crd.get("kind") == "CustomResourceDefinition":
                by_plural[crd["spec"]["names"]["plural"]] = path
    missing = sorted(plurals - set(by_plural))
    if missing:
        raise ValueError(f"no CRD in tests/support/crds/ for {', '.join(missing)}")
    return sorted({by_plural[p] for p in plurals})


class RealCluster:
    """One control plane per test session, installed as ``manifests/README.md`` says:
    the project's CRDs only. A test that needs an operator's CRD (``tests/support/crds/``) has
    it installed by :meth:`install_crds`; it stays for the rest of the session."""

    def __init__(
        self, assets: Path, *, kustomize: bool = False, priority_and_fairness: bool = False
    ) -> None:
        """``kustomize``: install with ``kubectl apply -k manifests/``, the README's one
        step (the in-process service then stands in for the Deployment, which is
        removed with the webhook configurations that name its Service).
        ``priority_and_fairness``: the API server runs API Priority and Fairness."""
        self.cp = start_control_plane(assets, priority_and_fairness=priority_and_fairness)
        self.view = RealServerView(self.cp)
        self.operator_crds: set[str] = set()  # plurals of the tests/support/crds/ CRDs installed
        try:
            if kustomize:
                self._install_as_the_readme_says()
            else:
                self._install()
        except BaseException:
            self.cp.stop()
            raise

    @property
    def controller_manager(self) -> bool:
        return self.cp.controller_manager

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = ["kubectl", "--kubeconfig", str(self.cp.kubeconfig()), *args]
        res = retry.run_kubectl(cmd, input=input, timeout=120)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
        return res

    def _install(self) -> None:
        crds = sorted(str(p) for p in (ROOT / "manifests" / "crd").glob("kueue.x-k8s.io_*.yaml"))
        self.kubectl("apply", "--server-side", *sum((["-f", c] for c in crds), []))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        base = ROOT / "manifests" / "base"
        for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "admission-policy.yaml",
                     "visibility-rbac.yaml"):  # fmt: skip
            self.kubectl("apply", "-f", str(base / name))

    def _install_as_the_readme_says(self) -> None:
        self.kubectl("apply", "-k", str(ROOT / "manifests"))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            self.kubectl("delete", kind, "-l", "app.kubernetes.io/name=quartermaster")
        self.kubectl("-n", SERVICE_NS, "delete", "deployment", "-l",
                     "app.kubernetes.io/name=quartermaster")  # fmt: skip
        # the visibility API's APIServices name the same Service: while unavailable
        # they would stall namespace deletion (discovery fails) between tests
        self.kubectl("delete", "apiservice", "v1beta1.visibility.kueue.x-k8s.io",
                     "v1beta2.visibility.kueue.x-k8s.io")  # fmt: skip

    def install_crds(self, plurals: Iterable[str]) -> None:
        """Install the operator CRDs of ``tests/support/crds/`` for ``plurals`` (those not yet
        installed) and wait until the API server serves them."""
        wanted = set(plurals) - self.operator_crds
        if not wanted:
            return
        files = operator_crd_files(wanted)
        self.kubectl("apply", "--server-side", *sum((["-f", str(f)] for f in files), []))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     *(f"crd/{p}.{RESOURCES[p][0].split('/')[1]}" for p in sorted(wanted)))  # fmt: skip
        deadline = time.monotonic() + 60
        for plural in sorted(wanted):
            while True:  # established is not yet served: 404 or 429 for a moment
                try:
                    self.view.list_objects(plural)
                    break
                except ApiRequestError as err:
                    if err.status not in (404, 429, 503) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        self.operator_crds |= wanted

    def wiped(self) -> tuple[str, ...]:
        """What :meth:`reset` deletes: the job kinds' objects of the installed operator
        CRDs first (the garbage collector then removes their children), then ours."""
        operators = tuple(p for p, *_ in TEST_CRDS if p in self.operator_crds)
        return (*WIPED[:2], *operators, *WIPED[2:])

    def reset(self) -> None:
        wiped = self.wiped()
        for plural in wiped:
            self.view.delete_all(plural)
        deadline = time.monotonic() + 60
        for plural in wiped:
            while self.view.remaining(plural):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{plural} not deleted within 60 s")
                self.view.delete_all(plural)
                time.sleep(0.05)

    def stop(self) -> None:
        self.cp.stop()
