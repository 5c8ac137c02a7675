"""Kueue's label, annotation, finalizer and scheduling-gate names (docs/semantics.md §2).

One place for the strings that jobs, pods and Workloads carry, so the webhooks, the
Job and pod-group reconcilers and the loader cannot drift apart.
"""

from __future__ import annotations

# Set by users on jobs and pods.
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME = "kueue.x-k8s.io/max-exec-time-seconds"
PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
JOB_COMPLETIONS_EQUAL_PARALLELISM = "kueue.x-k8s.io/job-completions-equal-parallelism"
ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
POD_GROUP_POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"  # Kueue's PodGroupPodIndexLabel
RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
POD_SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
POD_GROUP_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
POD_GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
POD_GROUP_POD_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"  # its annotation
PRIORITY_BOOST = "kueue.x-k8s.io/priority-boost"

# Written by the service.
MANAGED = "kueue.x-k8s.io/managed"  # pod label and pod finalizer
ROLE_HASH = "kueue.x-k8s.io/role-hash"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
# Held by the pods of a topology-aware podSet until they get their domain's nodeSelector.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
IS_GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
JOB_UID = "kueue.x-k8s.io/job-uid"
JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"  # Workload annotations for Kueue's tools
JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
# Kueue's runtimePatchManagerName: the manager of its patches to a TrainJob's runtime.
RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"
PODSET = "kueue.x-k8s.io/podset"
WORKLOAD = "kueue.x-k8s.io/workload"  # pod annotation: the TAS Workload a pod belongs to
POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"  # pod annotation: first rank of its podSet
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
# Kueue's FailureRecoveryPolicy opt-in (pod annotation, value "true")
SAFE_TO_FORCEFULLY_DELETE = "kueue.x-k8s.io/safe-to-forcefully-delete"

# Topology requests on a job's pod template (Kueue's jobframework turns them into the
# Workload podSet's topologyRequest).
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
PODSET_SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
PODSET_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# JSON list of {"topology": level, "size": n}, outermost first (TASMultiLayerTopology)
PODSET_SLICE_REQUIRED_TOPOLOGY_CONSTRAINTS = (
    "kueue.x-k8s.io/podset-slice-required-topology-constraints"
)

# MultiKueue (apis/kueue/v1beta2/multikueue_types.go, apis/config/v1beta2).
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"  # AdmissionCheck controllerName, managedBy
MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"  # label of the remote objects
MULTIKUEUE_ORIGIN_UID = "kueue.x-k8s.io/multikueue-origin-uid"  # their annotation
MULTIKUEUE_ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
MULTIKUEUE_INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
