"""PyTorchJob (``kubeflow.org/v1``, training-operator), as Kueue's
``kubeflow.org/pytorchjob`` integration: podSets ``master`` and ``worker`` from
``spec.pytorchReplicaSpecs.{Master,Worker}``, suspended at ``spec.runPolicy.suspend``
(see :mod:`.kubeflow`). Source: Kueue
pkg/controller/jobs/kubeflow/jobs/pytorchjob/pytorchjob_controller.go; training-operator
pkg/apis/kubeflow.org/v1/pytorch_types.go.
"""

from __future__ import annotations

from admission.integrations.framework.addressing import Resource
from admission.integrations.kinds.kubeflow import KubeflowIntegration


class PyTorchJobIntegration(KubeflowIntegration):
    framework = "kubeflow.org/pytorchjob"
    resource = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    replica_specs_field = "pytorchReplicaSpecs"
    replica_types = ("Master", "Worker")
    pod_index_label = "training.kubeflow.org/replica-index"


PYTORCHJOB = PyTorchJobIntegration()
