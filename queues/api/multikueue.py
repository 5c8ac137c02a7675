"""Kueue's MultiKueue kinds (kueue.x-k8s.io/v1beta2, cluster-scoped) as pydantic models.

A MultiKueueCluster says how to reach one worker cluster (a kubeconfig in a Secret of
the service's namespace); a MultiKueueConfig lists the workers an AdmissionCheck with
controllerName ``kueue.x-k8s.io/multikueue`` dispatches to, in order of preference.
The schema follows Kueue's apis/kueue/v1beta2/multikueue_types.go; the labels and
names below are Kueue's constants of that file.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from queues.api import labels
from queues.api.fields import Condition, KubeModel, ObjectMeta, StatusModel

CONTROLLER_NAME = labels.MULTIKUEUE_CONTROLLER
"""The AdmissionCheck controllerName of MultiKueue, and the jobs' ``spec.managedBy``."""
ORIGIN_LABEL = labels.MULTIKUEUE_ORIGIN
ORIGIN_UID_ANNOTATION = labels.MULTIKUEUE_ORIGIN_UID
SECRET_KEY = "kubeconfig"
"""The key of a worker's kubeconfig in its Secret."""
ACTIVE = "Active"
MAX_CLUSTERS = 20
EXACTLY_ONE_SOURCE = "exactly one of the fields in [kubeConfig clusterProfileRef] must be set"
UNIQUE_CLUSTERS = "must be unique"

_Name256 = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class KubeConfig(KubeModel):
    location: _Name256
    location_type: Literal["Secret", "Path"] = "Secret"


class ClusterProfileReference(KubeModel):
    name: _Name256


class ClusterSource(KubeModel):
    kube_config: KubeConfig | None = None
    cluster_profile_ref: ClusterProfileReference | None = None


class MultiKueueClusterSpec(KubeModel):
    cluster_source: ClusterSource


class MultiKueueClusterStatus(StatusModel):
    conditions: Annotated[list[Condition], Field(max_length=16)] = Field(default_factory=list)


class MultiKueueCluster(KubeModel):
    """kueue.x-k8s.io MultiKueueCluster (cluster-scoped): one worker cluster."""

    api_version: str
    kind: Literal["MultiKueueCluster"]
    metadata: ObjectMeta
    spec: MultiKueueClusterSpec
    status: MultiKueueClusterStatus | None = None


class MultiKueueConfigSpec(KubeModel):
    clusters: Annotated[
        list[Annotated[str, StringConstraints(max_length=256)]],
        Field(min_length=1, max_length=MAX_CLUSTERS),
    ]
    quota_management: Literal["Manual", "Automated"] | None = None


class MultiKueueConfig(KubeModel):
    """kueue.x-k8s.io MultiKueueConfig (cluster-scoped): the workers of a check."""

    api_version: str
    kind: Literal["MultiKueueConfig"]
    metadata: ObjectMeta
    spec: MultiKueueConfigSpec
