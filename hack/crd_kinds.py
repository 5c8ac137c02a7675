"""What each served kind adds to its model's schema in the generated CRDs.

``hack/gen_crds.py`` builds each CRD from the pydantic model of its kind; what only a CRD
can say, or what Kueue says in its CRD schemas beyond the model, is declared here, one
``Kind`` per served kind: names, scope, printer columns, the status subresource, and the
schema additions (non-negative quota patterns, enums, list types, CEL rules such as
LocalQueue ``spec.clusterQueue`` immutability) keyed by schema path. Keeping the table
apart from the generator lets a reader see every kind's additions in one place.

Imported by ``hack/gen_crds.py``, which puts hack/ and the repository on ``sys.path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from queues.api import kinds as api
from queues.api import multikueue as mk_api
from queues.api import topology as topology_api
from queues.api.fields import QUANTITY_PATTERN, KubeModel

Schema = dict[str, Any]

NON_NEGATIVE_QUANTITY_PATTERN = "^\\+?" + QUANTITY_PATTERN.removeprefix("^(\\+|-)?")
"""QUANTITY_PATTERN without a minus sign (an exponent may still be negative)."""
NON_NEGATIVE_QUANTITY: Schema = {"pattern": NON_NEGATIVE_QUANTITY_PATTERN, "minimum": 0}
TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


def rule(expr: str, message: str) -> Schema:
    """One ``x-kubernetes-validations`` entry."""
    return {"rule": expr, "message": message}


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str
    description: str
    priority: int = 0

    def as_dict(self) -> Schema:
        out: Schema = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class Kind:
    """A served kind: its model, names, and the schema additions keyed by schema path.

    A schema path names a node of the schema: property names joined by ``.``, ``[]``
    for the items of an array and ``{}`` for the values of a map, e.g.
    ``spec.resourceGroups[].flavors[].resources[].nominalQuota``.
    """

    model: type[KubeModel]
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    description: str
    status: bool
    columns: tuple[Column, ...] = ()
    patches: dict[str, Schema] = field(default_factory=dict)
    rules: dict[str, tuple[Schema, ...]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.model.__name__


def _quota_patches(groups: str) -> dict[str, Schema]:
    """Quota lists: non-negative quantities, list types as in Kueue."""
    flavors = f"{groups}[].flavors"
    resources = f"{flavors}[].resources"
    patches: dict[str, Schema] = {
        groups: {"x-kubernetes-list-type": "atomic"},
        flavors: {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        resources: {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    }
    for quantity in ("nominalQuota", "borrowingLimit", "lendingLimit"):
        patches[f"{resources}[].{quantity}"] = NON_NEGATIVE_QUANTITY
    return patches


def _limits_need_parent(parent_field: str, parent_word: str) -> tuple[Schema, ...]:
    """borrowingLimit / lendingLimit only with a parent (ClusterQueueSpec, CohortSpec)."""
    return tuple(
        rule(
            f"has(self.{parent_field}) || !has(self.resourceGroups) || "
            f"self.resourceGroups.all(rg, rg.flavors.all(f, "
            f"f.resources.all(r, !has(r.{limit}))))",
            f"{limit} must be nil when {parent_word} is empty",
        )
        for limit in ("borrowingLimit", "lendingLimit")
    )


SAME_RESOURCE_COUNT = rule(
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
    "flavors must have the same number of resources as the coveredResources",
)

QUOTA_RESERVED = (
    "has({s}.status) && has({s}.status.conditions) && "
    "{s}.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')"
)

KINDS: tuple[Kind, ...] = (
    Kind(
        model=api.AdmissionCheck,
        plural="admissionchecks",
        singular="admissioncheck",
        namespaced=False,
        short_names=("ac",),
        description="AdmissionCheck is a check a Workload must pass, after it reserved quota "
        "and before it is admitted; the controller named by spec.controllerName decides it.",
        status=True,
        patches={
            "status.conditions": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "status.conditions[].type": {"maxLength": 316},
            "status.conditions[].reason": {"maxLength": 1024},
            "status.conditions[].message": {"maxLength": 32768},
        },
        rules={"spec.controllerName": (rule("self == oldSelf", "field is immutable"),)},
    ),
    Kind(
        model=api.ResourceFlavor,
        plural="resourceflavors",
        singular="resourceflavor",
        namespaced=False,
        short_names=("flavor", "flavors", "rf"),
        description="ResourceFlavor describes a set of nodes: their labels, taints and the "
        "tolerations added to workloads admitted to it.",
        status=False,
        patches={
            "spec.nodeLabels": {"x-kubernetes-map-type": "atomic"},
            "spec.nodeTaints": {"x-kubernetes-list-type": "atomic"},
            "spec.nodeTaints[].effect": {"enum": TAINT_EFFECTS},
            "spec.tolerations": {"x-kubernetes-list-type": "atomic"},
            "spec.tolerations[].key": {"maxLength": 317},
            "spec.tolerations[].operator": {"enum": ["Equal", "Exists"]},
            "spec.tolerations[].effect": {"enum": ["", *TAINT_EFFECTS]},
        },
        rules={
            "spec": (
                rule(
                    "!has(self.topologyName) || (has(self.nodeLabels) && size(self.nodeLabels) > 0)",
                    "at least one nodeLabel is required when topology is set",
                ),
                rule(
                    "!has(oldSelf.topologyName) || "
                    "(has(self.topologyName) && self.topologyName == oldSelf.topologyName)",
                    "topologyName is immutable when topologyName is set",
                ),
            ),
            "spec.tolerations[]": (
                rule(
                    "(has(self.key) && size(self.key) > 0) || "
                    "(has(self.operator) && self.operator == 'Exists')",
                    "operator must be Exists when 'key' is empty, which means "
                    "'match all values and all keys'",
                ),
                rule(
                    "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                    "effect must be 'NoExecute' when 'tolerationSeconds' is set",
                ),
                rule(
                    "!has(self.operator) || self.operator != 'Exists' || "
                    "!has(self.value) || size(self.value) == 0",
                    "a value must be empty when 'operator' is 'Exists'",
                ),
            ),
        },
    ),
    Kind(
        model=api.ClusterQueue,
        plural="clusterqueues",
        singular="clusterqueue",
        namespaced=False,
        short_names=("cq",),
        description="ClusterQueue holds quota (per flavor and resource) and admits the "
        "Workloads of the LocalQueues that point to it.",
        status=True,
        columns=(
            Column(
                "Cohort", ".spec.cohortName", "string", "Cohort that this ClusterQueue belongs to"
            ),
            Column(
                "Strategy",
                ".spec.queueingStrategy",
                "string",
                "The queueing strategy used to prioritize workloads",
                priority=1,
            ),
            Column(
                "Pending Workloads",
                ".status.pendingWorkloads",
                "integer",
                "Number of pending workloads",
            ),
            Column(
                "Admitted Workloads",
                ".status.admittedWorkloads",
                "integer",
                "Number of admitted workloads that haven't finished yet.",
                priority=1,
            ),
        ),
        patches={
            **_quota_patches("spec.resourceGroups"),
            "spec.namespaceSelector": {"x-kubernetes-map-type": "atomic"},
            "spec.fairSharing.weight": NON_NEGATIVE_QUANTITY,
            "spec.admissionChecksStrategy.admissionChecks": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        },
        rules={
            "spec": _limits_need_parent("cohortName", "cohort"),
            "spec.resourceGroups[]": (SAME_RESOURCE_COUNT,),
            "spec.preemption": (
                rule(
                    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && "
                    "self.borrowWithinCohort.policy != 'Never')",
                    "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
                ),
            ),
            "spec.flavorFungibility": (
                rule(
                    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && "
                    "self.whenCanPreempt == 'TryNextFlavor')",
                    "preference can only be set when both whenCanBorrow and whenCanPreempt "
                    "are TryNextFlavor",
                ),
            ),
        },
    ),
    Kind(
        model=api.Cohort,
        plural="cohorts",
        singular="cohort",
        namespaced=False,
        short_names=("co",),
        description="Cohort groups ClusterQueues and Cohorts that lend and borrow unused "
        "quota; its own quota is shared by its subtree.",
        status=True,
        patches={
            **_quota_patches("spec.resourceGroups"),
            "spec.fairSharing.weight": NON_NEGATIVE_QUANTITY,
        },
        rules={
            "spec": _limits_need_parent("parentName", "parent"),
            "spec.resourceGroups[]": (SAME_RESOURCE_COUNT,),
        },
    ),
    Kind(
        model=api.LocalQueue,
        plural="localqueues",
        singular="localqueue",
        namespaced=True,
        short_names=("queue", "queues", "lq"),
        description="LocalQueue is the namespaced queue users submit jobs to; it feeds one "
        "ClusterQueue.",
        status=True,
        columns=(
            Column("ClusterQueue", ".spec.clusterQueue", "string", "Backing ClusterQueue"),
            Column(
                "Pending Workloads",
                ".status.pendingWorkloads",
                "integer",
                "Number of pending workloads",
            ),
            Column(
                "Admitted Workloads",
                ".status.admittedWorkloads",
                "integer",
                "Number of admitted workloads that haven't finished yet.",
            ),
        ),
        patches={"spec.fairSharing.weight": NON_NEGATIVE_QUANTITY},
        rules={"spec.clusterQueue": (rule("self == oldSelf", "field is immutable"),)},
    ),
    Kind(
        model=api.Workload,
        plural="workloads",
        singular="workload",
        namespaced=True,
        short_names=("kwl", "kueueworkload", "kueueworkloads"),
        description="Workload is a unit of admission: the pod sets of a job, their counts "
        "and requests, and (in status) the quota reserved for them.",
        status=True,
        columns=(
            Column(
                "Queue",
                ".spec.queueName",
                "string",
                "Name of the queue this workload was submitted to",
            ),
            Column(
                "Reserved in",
                ".status.admission.clusterQueue",
                "string",
                "Name of the ClusterQueue where the workload is reserving quota",
            ),
            Column(
                "Admitted",
                ".status.conditions[?(@.type=='Admitted')].status",
                "string",
                "Admission status",
            ),
            Column(
                "Finished",
                ".status.conditions[?(@.type=='Finished')].status",
                "string",
                "Workload finished",
            ),
            Column("Age", ".metadata.creationTimestamp", "date", "Time this workload was created"),
        ),
        patches={
            "spec.podSets": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "spec.preemptionGates": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "status.conditions": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            # metav1.Condition's limits; they also bound the cost of the CEL rules below.
            "status.conditions[].type": {"maxLength": 316},
            "status.conditions[].reason": {"maxLength": 1024},
            "status.conditions[].message": {"maxLength": 32768},
            "status.admission.podSetAssignments": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "status.admissionChecks": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "status.admissionChecks[].podSetUpdates": {"x-kubernetes-list-type": "atomic"},
        },
        rules={
            "": (
                rule(
                    "!(" + QUOTA_RESERVED.format(s="self") + ") || !has(self.status.admission) || "
                    "(has(self.status.admission.podSetAssignments) ? "
                    "size(self.status.admission.podSetAssignments) : 0) == size(self.spec.podSets)",
                    "podSetAssignments must have the same number of podSets as the spec",
                ),
                rule(
                    "!(" + QUOTA_RESERVED.format(s="oldSelf") + ") || "
                    "(has(self.spec.queueName) == has(oldSelf.spec.queueName) && "
                    "(!has(self.spec.queueName) || self.spec.queueName == oldSelf.spec.queueName))",
                    "queueName is immutable while the workload has quota reserved",
                ),
            ),
            "spec": (
                rule(
                    "!has(self.priorityClassRef) || has(self.priority)",
                    "priority should not be nil when priorityClassRef is set",
                ),
            ),
            "spec.priorityClassRef": (
                rule(
                    "self.group != 'scheduling.k8s.io' || self.kind == 'PriorityClass'",
                    "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
                ),
                rule(
                    "self.group != 'kueue.x-k8s.io' || self.kind == 'WorkloadPriorityClass'",
                    "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
                ),
            ),
            "spec.podSets": (
                rule(
                    "self.filter(ps, has(ps.minCount)).size() <= 1",
                    "at most one podSet can use minCount",
                ),
            ),
            "spec.podSets[]": (
                rule(
                    "!has(self.minCount) || self.minCount <= self.count",
                    "minCount should be positive and less or equal to count",
                ),
            ),
        },
    ),
    Kind(
        model=api.Topology,
        plural="topologies",
        singular="topology",
        namespaced=False,
        short_names=("topo",),
        description="Topology is the network hierarchy of a cluster's nodes: node labels from "
        "the widest domain (a block) to the narrowest (a host), named by ResourceFlavors' "
        "spec.topologyName.",
        status=False,
        patches={"spec.levels": {"x-kubernetes-list-type": "atomic"}},
        rules={
            "spec.levels": (
                rule(
                    "self == oldSelf || (self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'"
                    " && oldSelf[size(oldSelf) - 1].nodeLabel == 'kubernetes.io/hostname')",
                    topology_api.MUTABLE_MSG,
                ),
                rule(
                    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0",
                    topology_api.UNIQUE_MSG,
                ),
                rule(
                    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
                    "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
                    topology_api.HOSTNAME_LOWEST_MSG,
                ),
            ),
        },
    ),
    Kind(
        model=mk_api.MultiKueueCluster,
        plural="multikueueclusters",
        singular="multikueuecluster",
        namespaced=False,
        short_names=("mkc",),
        description="MultiKueueCluster is one worker cluster of MultiKueue: how the manager "
        "connects to it (a kubeconfig in a Secret of the service's namespace).",
        status=True,
        columns=(
            Column(
                "Connected",
                ".status.conditions[?(@.type=='Active')].status",
                "string",
                "MultiKueueCluster is connected",
            ),
            Column("Age", ".metadata.creationTimestamp", "date", "Time this workload was created"),
        ),
        patches={
            "status.conditions": {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "status.conditions[].type": {"maxLength": 316},
            "status.conditions[].reason": {"maxLength": 1024},
            "status.conditions[].message": {"maxLength": 32768},
        },
        rules={
            "spec.clusterSource": (
                rule(
                    "[has(self.kubeConfig),has(self.clusterProfileRef)]"
                    ".filter(x,x==true).size() == 1",
                    mk_api.EXACTLY_ONE_SOURCE,
                ),
            ),
        },
    ),
    Kind(
        model=mk_api.MultiKueueConfig,
        plural="multikueueconfigs",
        singular="multikueueconfig",
        namespaced=False,
        short_names=("mkconf",),
        description="MultiKueueConfig lists the worker clusters (MultiKueueClusters) a "
        "MultiKueue AdmissionCheck dispatches to, the preferred first.",
        status=False,
        patches={"spec.clusters": {"x-kubernetes-list-type": "atomic"}},
        rules={
            "spec.clusters": (
                rule(
                    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0",
                    mk_api.UNIQUE_CLUSTERS,
                ),
            ),
        },
    ),
    Kind(
        model=api.WorkloadPriorityClass,
        plural="workloadpriorityclasses",
        singular="workloadpriorityclass",
        namespaced=False,
        short_names=("wpc",),
        description="WorkloadPriorityClass gives Workloads a priority, by the label "
        "kueue.x-k8s.io/priority-class on their jobs.",
        status=False,
        columns=(
            Column("Value", ".value", "integer", "Value of workloadPriorityClass's Priority"),
        ),
    ),
)
