"""MPIJob (``kubeflow.org/v2beta1``, mpi-operator), as Kueue's ``kubeflow.org/mpijob``
integration: podSets ``launcher`` and ``worker`` from
``spec.mpiReplicaSpecs.{Launcher,Worker}`` (``replicas`` pods each, 1 when unset),
suspended at ``spec.runPolicy.suspend``, finished by a ``Succeeded``/``Failed``
condition, ready on ``Running`` (see :mod:`.kubeflow`). Source: Kueue
pkg/controller/jobs/mpijob/mpijob_controller.go; mpi-operator
pkg/apis/kubeflow/v2beta1/types.go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import JOB, kind_of, not_made_by, same_shape
from admission.integrations.kinds.kubeflow import KubeflowIntegration


class MPIJobIntegration(KubeflowIntegration):
    framework = "kubeflow.org/mpijob"
    resource = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
    replica_specs_field = "mpiReplicaSpecs"
    replica_types = ("Launcher", "Worker")
    pod_index_label = "training.kubeflow.org/replica-index"

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """Besides the worker pods, the launcher Job ``<mpijob>-launcher``: one pod of
        the launcher template's shape."""
        if kind_of(child) != JOB:
            return super().may_own(obj, child)
        name = f"{(obj.get('metadata') or {}).get('name')}-launcher"
        spec = child.get("spec") or {}
        launcher = ((obj.get("spec") or {}).get("mpiReplicaSpecs") or {}).get("Launcher") or {}
        if (child.get("metadata") or {}).get("name") != name:
            return not_made_by(obj, child, f"its launcher Job is named {name!r}")
        if spec.get("parallelism", 1) != 1 or not same_shape(
            spec.get("template"), launcher.get("template")
        ):
            return not_made_by(obj, child, "it is not one pod of the launcher template")
        return None


MPIJOB = MPIJobIntegration()
