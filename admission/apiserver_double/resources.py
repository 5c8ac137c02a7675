"""The resource types the API-server test double serves, and their discovery documents.

kube-apiserver learns its resources from compiled-in types and CRDs; the double has a
fixed table of the built-in kinds (:data:`BUILTIN_RESOURCES`: everything the
Quartermaster controller, the webhooks, ``kubectl`` and the tests touch) and takes the
custom resources from the CRDs in ``manifests/crd/`` (:mod:`.crds`).  Discovery (``/api``,
``/apis``, ``/apis/<group>/<version>``) is generated from the same table, so the
official client and ``kubectl`` resolve kinds, short names and scopes exactly as they
do against a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
SUBRESOURCE_VERBS: tuple[str, ...] = ("get", "patch", "update")
KUEUE_GROUP = "kueue.x-k8s.io"


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource: a plural name in a group, served at one or more versions.

    ``versions[0]`` is the storage version: stored objects carry it in ``apiVersion``
    and are relabelled to the version a request asked for (the double does no schema
    conversion between versions).
    """

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    #: subresources beyond ``status`` (a pod's ``resize``)
    other_subresources: tuple[str, ...] = ()
    builtin: bool = True
    categories: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = ()
    #: version -> openAPIV3Schema, for custom resources (from their CRD)
    schemas: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: version -> additionalPrinterColumns, for custom resources (from their CRD)
    printer_columns: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def schema(self, version: str | None = None) -> dict[str, Any] | None:
        return self.schemas.get(version or self.storage_version)

    @property
    def key(self) -> str:
        """``plural.group`` (``plural`` for the core group): kubectl's qualified name."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    def qualified(self) -> str:
        return self.key

    def subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status_subresource else ()) + self.other_subresources


def _core(plural: str, kind: str, **kw: Any) -> ResourceType:
    return ResourceType(group="", versions=("v1",), plural=plural, kind=kind, **kw)


BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    _core("namespaces", "Namespace", namespaced=False, short_names=("ns",), status_subresource=True,
          field_labels=("status.phase",)),
    _core("nodes", "Node", namespaced=False, short_names=("no",), status_subresource=True,
          field_labels=("spec.unschedulable",)),
    _core("pods", "Pod", namespaced=True, short_names=("po",), status_subresource=True,
          other_subresources=("resize",), categories=("all",), field_labels=("spec.nodeName", "spec.schedulerName", "status.phase")),
    _core("events", "Event", namespaced=True, short_names=("ev",),
          field_labels=("involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
                        "involvedObject.uid", "reason", "type")),
    _core("secrets", "Secret", namespaced=True, field_labels=("type",)),
    _core("configmaps", "ConfigMap", namespaced=True, short_names=("cm",)),
    ResourceType("batch", ("v1",), "jobs", "Job", namespaced=True, status_subresource=True,
                 categories=("all",), field_labels=("status.successful",)),
    ResourceType("coordination.k8s.io", ("v1",), "leases", "Lease", namespaced=True),
    ResourceType("apps", ("v1",), "statefulsets", "StatefulSet", namespaced=True,
                 status_subresource=True, short_names=("sts",), categories=("all",)),
    ResourceType("apps", ("v1",), "deployments", "Deployment", namespaced=True,
                 status_subresource=True, short_names=("deploy",), categories=("all",)),
    ResourceType("apps", ("v1",), "replicasets", "ReplicaSet", namespaced=True,
                 status_subresource=True, short_names=("rs",), categories=("all",)),
    ResourceType("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass",
                 namespaced=False, short_names=("pc",)),
    ResourceType("events.k8s.io", ("v1",), "events", "Event", namespaced=True, short_names=("ev",),
                 field_labels=("reason", "type", "regarding.kind", "regarding.name",
                               "regarding.namespace")),
    # stored for SubjectAccessReviews (delegation.py); the double authorizes nothing else
    ResourceType("rbac.authorization.k8s.io", ("v1",), "clusterroles", "ClusterRole",
                 namespaced=False),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "clusterrolebindings",
                 "ClusterRoleBinding", namespaced=False),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "roles", "Role", namespaced=True),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "rolebindings", "RoleBinding",
                 namespaced=True),
    ResourceType("admissionregistration.k8s.io", ("v1",), "mutatingwebhookconfigurations",
                 "MutatingWebhookConfiguration", namespaced=False),
    ResourceType("admissionregistration.k8s.io", ("v1",), "validatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration", namespaced=False),
    # stored only (the aggregator routes by Aggregator.register, delegation.py); the
    # service keeps their caBundle (admission/kube/reconcilers/cabundle.py)
    ResourceType("apiregistration.k8s.io", ("v1",), "apiservices", "APIService",
                 namespaced=False),
    # installing one serves its custom resource, deleting it stops serving it (.crdstate)
    ResourceType("apiextensions.k8s.io", ("v1",), "customresourcedefinitions",
                 "CustomResourceDefinition", namespaced=False, status_subresource=True,
                 short_names=("crd", "crds"), categories=("api-extensions",)),
    # dynamic resource allocation (GA in 1.34): what quota reads of a pod's claims (.dra)
    ResourceType("resource.k8s.io", ("v1",), "deviceclasses", "DeviceClass", namespaced=False),
    ResourceType("resource.k8s.io", ("v1",), "resourceclaimtemplates", "ResourceClaimTemplate",
                 namespaced=True),
    ResourceType("resource.k8s.io", ("v1",), "resourceclaims", "ResourceClaim", namespaced=True,
                 status_subresource=True),
    ResourceType("resource.k8s.io", ("v1",), "resourceslices", "ResourceSlice", namespaced=False,
                 field_labels=("spec.driver", "spec.nodeName")),
)  # fmt: skip


@dataclass(slots=True)
class Registry:
    """Lookup of :class:`ResourceType` by URL coordinates or by a kubectl-style name."""

    types: tuple[ResourceType, ...] = BUILTIN_RESOURCES
    _by_url: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rt in self.types:
            for version in rt.versions:
                coordinates = (rt.group, version, rt.plural)
                if coordinates in self._by_url:
                    raise ValueError(f"resource {rt.key} version {version} is declared twice")
                self._by_url[coordinates] = rt

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(self.types)

    def install(self, rt: ResourceType) -> None:
        """Serve ``rt`` (a CRD was established), replacing a type of the same key."""
        self.uninstall(rt.key)
        for version in rt.versions:
            coordinates = (rt.group, version, rt.plural)
            if coordinates in self._by_url:
                raise ValueError(f"resource {rt.key} version {version} is already served")
        self.types = (*self.types, rt)
        for version in rt.versions:
            self._by_url[(rt.group, version, rt.plural)] = rt

    def uninstall(self, key: str) -> ResourceType | None:
        """Stop serving the type of ``key`` (``plural.group``); the type, if it was served."""
        rt = next((t for t in self.types if t.key == key), None)
        if rt is not None:
            self.types = tuple(t for t in self.types if t.key != key)
            for version in rt.versions:
                self._by_url.pop((rt.group, version, rt.plural), None)
        return rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_url.get((group, version, plural))

    def resolve(self, name: str) -> ResourceType:
        """Find a type by ``plural``, ``plural.group``, kind or short name (core group first)."""
        for rt in self.types:
            if name in (rt.key, rt.plural, rt.kind, rt.singular, *rt.short_names):
                return rt
        raise KeyError(f"the API-server double serves no resource named {name!r}")

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, in declaration order (preferred version first)."""
        groups: dict[str, list[str]] = {}
        for rt in self.types:
            versions = groups.setdefault(rt.group, [])
            versions.extend(v for v in rt.versions if v not in versions)
        return groups

    # -- discovery documents -------------------------------------------------------

    def api_versions(self, server_address: str) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.group_versions().get(group)
        if not group or versions is None:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": gvs,
            "preferredVersion": gvs[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        groups = [self.api_group(g) for g in self.group_versions() if g]
        for g in groups:
            assert g is not None
            del g["kind"], g["apiVersion"]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        served = [rt for rt in self.types if rt.group == group and version in rt.versions]
        if not served:
            return None
        resources: list[dict[str, Any]] = []
        for rt in served:
            entry: dict[str, Any] = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(ALL_VERBS),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in rt.subresources():
                resources.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": list(SUBRESOURCE_VERBS),
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def registry_with(extra: Iterable[ResourceType] = ()) -> Registry:
    """The built-in kinds plus ``extra`` types (for tests that need another kind served
    without a CRD object); custom resources come from installed CRDs (.crdstate)."""
    return Registry(types=BUILTIN_RESOURCES + tuple(extra))
