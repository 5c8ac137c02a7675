"""MPIJob (``kubeflow.org/v2beta1``, mpi-operator), as Kueue's ``kubeflow.org/mpijob``
integration: podSets ``launcher`` and ``worker`` from
``spec.mpiReplicaSpecs.{Launcher,Worker}`` (``replicas`` pods each, 1 when unset),
suspended at ``spec.runPolicy.suspend``, finished by a ``Succeeded``/``Failed``
condition, ready on ``Running`` (see :mod:`.kubeflow`). Source: Kueue
pkg/controller/jobs/mpijob/mpijob_controller.go; mpi-operator
pkg/apis/kubeflow/v2beta1/types.go.
"""

from __future__ import annotations

from .base import Resource
from .kubeflow import KubeflowIntegration


class MPIJobIntegration(KubeflowIntegration):
    framework = "kubeflow.org/mpijob"
    resource = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
    replica_specs_field = "mpiReplicaSpecs"
    replica_types = ("Launcher", "Worker")
    pod_index_label = "training.kubeflow.org/replica-index"


MPIJOB = MPIJobIntegration()
