"""The API resources the service addresses, and every call it makes on them.

:data:`API_CALLS` declares each (verb, group, resource, subresource) the adapter uses,
the job kinds' part taken from the integrations registry. :class:`KubeClient` refuses an
undeclared call, so the table is complete by construction, and the RBAC manifest
(``manifests/base/rbac.yaml``) is checked against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.interface import Integration
from admission.integrations.kinds.replicated_jobs import JOBSET_RESOURCE
from admission.integrations.registry import ALL, INTEGRATIONS, Frameworks

KUEUE = "kueue.x-k8s.io"
JOBS = Resource("batch", "v1", "jobs", "Job", True)
PODS = Resource("", "v1", "pods", "Pod", True)
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads", "Workload", True)
RESOURCE_FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", "ResourceFlavor", False)
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", "ClusterQueue", False)
COHORTS = Resource(KUEUE, "v1beta2", "cohorts", "Cohort", False)
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues", "LocalQueue", True)
WORKLOAD_PRIORITY_CLASSES = Resource(
    KUEUE, "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", False
)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
TOPOLOGIES = Resource(KUEUE, "v1beta2", "topologies", "Topology", False)
ADMISSION_CHECKS = Resource(KUEUE, "v1beta2", "admissionchecks", "AdmissionCheck", False)
NODES = Resource("", "v1", "nodes", "Node", False)
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
EVENTS = Resource("", "v1", "events", "Event", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
# dynamic resource allocation: what quota reads of pods' claims (control/dra_apis.py)
DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_SLICES = DRA_WATCHED = tuple(
    Resource("resource.k8s.io", "v1", plural, kind, namespaced)
    for plural, kind, namespaced in (("deviceclasses", "DeviceClass", False),
        ("resourceclaimtemplates", "ResourceClaimTemplate", True),
        ("resourceslices", "ResourceSlice", False))
)  # fmt: skip
API_SERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)
MULTIKUEUE_CLUSTERS = Resource(KUEUE, "v1beta2", "multikueueclusters", "MultiKueueCluster", False)
MULTIKUEUE_CONFIGS = Resource(KUEUE, "v1beta2", "multikueueconfigs", "MultiKueueConfig", False)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)

QUEUE_WATCHED: tuple[Resource, ...] = (
    WORKLOADS,
    RESOURCE_FLAVORS,
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    WORKLOAD_PRIORITY_CLASSES,
    PRIORITY_CLASSES,
    NAMESPACES,
    TOPOLOGIES,
    ADMISSION_CHECKS,
    NODES,
)
"""What every replica watches whatever the integrations: Workloads and the queue objects."""


def resource_of(integration: Integration) -> Resource:
    """The adapter's address of an integration's kind."""
    return integration.resource


def watched(frameworks: Frameworks = ALL) -> tuple[Resource, ...]:
    """The informers of a service: the enabled integrations' kinds, then the queues'."""
    kinds = (resource_of(i) for i in frameworks.integrations() if i.reconciler != "parent")
    return (*kinds, *QUEUE_WATCHED)


WATCHED: tuple[Resource, ...] = watched(ALL)


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One (verb, group, resource, subresource) the service uses — one RBAC rule line."""

    verb: str
    group: str
    resource: str
    subresource: str = ""

    def __str__(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {self.group or 'core'}/{res}"


def _calls(verbs: Iterable[str], res: Resource, sub: str = "") -> list[ApiCall]:
    return [ApiCall(v, res.group, res.plural, sub) for v in verbs]


def integration_calls(integrations: Iterable[Integration] = INTEGRATIONS) -> frozenset[ApiCall]:
    """What the integrations need: list/watch of their kind and the writes they make
    (start, stop, ungate …), as each integration declares (``Integration.api_uses``)."""
    return frozenset(
        ApiCall(v, use.resource.group, use.resource.plural, use.subresource)
        for i in integrations
        for use in i.api_uses()
        for v in use.verbs
    )


MULTIKUEUE_STATUS_COPIED: tuple[Resource, ...] = (
    JOBSET_RESOURCE,
    *(i.resource for i in INTEGRATIONS
      if i.resource.plural in ("trainjobs", "pytorchjobs", "mpijobs", "rayjobs", "rayclusters")),
)  # fmt: skip
"""The kinds whose status MultiKueue copies from the worker to the manager's job
(batch/v1 Job's status patch comes with its integration)."""


API_CALLS: frozenset[ApiCall] = frozenset(
    [
        # informers
        *(c for r in QUEUE_WATCHED for c in _calls(("list", "watch"), r)),
        # topology-aware scheduling: every bound pod (whatever its kind) uses its node
        *_calls(("list", "watch"), PODS),
        # node failures: a pod left on a failed node, or stuck terminating on an unreachable
        # one (opted in), is marked Failed and deleted so its job replaces it
        *_calls(("patch",), PODS, "status"),
        *_calls(("delete",), PODS),
        # every registered integration (enabled or not: the RBAC is static) ...
        *integration_calls(),
        # ... started when its CRD is installed (.integrationgate)
        *_calls(("list", "watch"), CUSTOM_RESOURCE_DEFINITIONS),
        # DRA: DeviceClasses, ResourceClaimTemplates, ResourceSlices, when served
        *(c for r in DRA_WATCHED for c in _calls(("list", "watch"), r)),
        # the owner chain of a Pod runs through its Deployment's ReplicaSet (.owners)
        *_calls(("get",), REPLICA_SETS),
        # job -> Workload: create, keep in sync, delete with the job, admit via status
        *_calls(("get", "create", "patch", "delete"), WORKLOADS),
        *_calls(("get", "patch"), WORKLOADS, "status"),
        # queue status; the resource-in-use finalizer of deleted queues and flavors
        *_calls(("patch",), CLUSTER_QUEUES),
        *_calls(("patch",), RESOURCE_FLAVORS),
        *_calls(("patch",), CLUSTER_QUEUES, "status"),
        *_calls(("patch",), LOCAL_QUEUES, "status"),
        # leader election
        *_calls(("get", "create", "update"), LEASES),
        # Kubernetes Events (best effort)
        *_calls(("create",), EVENTS),
        # the webhook certificate shared by the replicas (one Secret, by name)
        *_calls(("get", "update"), SECRETS),
        # caBundle kept equal to our CA (our two configurations only, by name)
        *_calls(("list", "watch", "patch"), MUTATING_WEBHOOKS),
        *_calls(("list", "watch", "patch"), VALIDATING_WEBHOOKS),
        # ... and in the visibility API's APIServices (spec.caBundle, by name)
        *_calls(("list", "watch", "patch"), API_SERVICES),
        # the visibility API (an aggregated API server): the front-proxy trust anchors
        # (kube-system/extension-apiserver-authentication, by name) and delegated
        # authentication and authorization of its callers (admission.kube.client.delegated_auth)
        *_calls(("get",), CONFIG_MAPS),
        *_calls(("create",), TOKEN_REVIEWS),
        *_calls(("create",), SUBJECT_ACCESS_REVIEWS),
        # MultiKueue: the workers (their Active condition) and the checks' configs; a
        # worker's kubeconfig is a Secret of the service's namespace; the manager's
        # job gets its worker's status
        *_calls(("list", "watch"), MULTIKUEUE_CLUSTERS),
        *_calls(("patch",), MULTIKUEUE_CLUSTERS, "status"),
        *_calls(("list", "watch"), MULTIKUEUE_CONFIGS),
        *(c for r in MULTIKUEUE_STATUS_COPIED for c in _calls(("patch",), r, "status")),
        *_calls(("patch",), ADMISSION_CHECKS, "status"),
    ]
)
"""Every API call the adapter makes. ``manifests/base/rbac.yaml`` must grant each."""
