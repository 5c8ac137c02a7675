"""The Kubeflow job kinds' common shape (Kueue's ``kubeflowjob`` package).

training-operator's PyTorchJob (and its TF/XGBoost/Paddle/JAX siblings) and
mpi-operator's MPIJob describe a job as a map of replica types to replica specs
(``spec.<kind>ReplicaSpecs.<Type>: {replicas, template}``) with a ``runPolicy``:
suspension is ``spec.runPolicy.suspend``, completion a ``Succeeded`` or ``Failed``
condition, readiness a ``Running`` condition, running pods
``status.replicaStatuses.<Type>.active``. Kueue builds one podSet per replica type
present, in the kind's order, named after the type in lower case, with
``replicas`` pods (1 when unset); the pod priority class comes from
``runPolicy.schedulingPolicy.priorityClass`` first, then the replica templates in
order. No partial admission. Source: Kueue
pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from admission.integrations.framework.children import indexed_name, pod_of_role_may_own
from admission.integrations.framework.fields import (
    IntegrationError,
    count_field,
    ref_of,
    template_at,
)
from admission.integrations.framework.interface import (
    Finished,
    Integration,
    Role,
    finished_by_conditions,
)
from queues.api.conditions import conditions


class KubeflowIntegration(Integration):
    """A job kind with a map of replica specs and a ``runPolicy``."""

    suspend_path = ("spec", "runPolicy", "suspend")
    #: the field of the replica-spec map (``pytorchReplicaSpecs``, ``mpiReplicaSpecs``)
    replica_specs_field: ClassVar[str]
    #: the replica types in podSet order
    replica_types: ClassVar[tuple[str, ...]]

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        kind_noun, ref = self.lower_kind, ref_of(obj)
        spec = obj.get("spec")
        specs = spec.get(self.replica_specs_field) if isinstance(spec, Mapping) else None
        where = f"spec.{self.replica_specs_field}"
        if not isinstance(specs, Mapping) or not specs:
            raise IntegrationError(
                f"{kind_noun} {ref}: {where}: at least one replica type is required"
            )
        unknown = sorted(set(specs) - set(self.replica_types))
        if unknown:
            raise IntegrationError(
                f"{kind_noun} {ref}: {where}: unknown replica type(s) {unknown} "
                f"(known: {', '.join(self.replica_types)})"
            )
        roles = []
        for rtype in self.replica_types:
            rspec = specs.get(rtype)
            if rspec is None:
                continue
            if not isinstance(rspec, Mapping):
                raise IntegrationError(f"{kind_noun} {ref}: {where}.{rtype}: expected an object")
            replicas = count_field(
                rspec.get("replicas"), kind_noun, ref, f"{where}.{rtype}.replicas", default=1
            )
            path = ("spec", self.replica_specs_field, rtype, "template")
            roles.append(
                Role(
                    name=rtype.lower(),
                    count=replicas,
                    template=template_at(obj, path, kind_noun),
                    path=path,
                )
            )
        return roles

    def validate(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        """A replica type the kind does not know (an ``Evaluator`` added to a
        PyTorchJob) is refused: its pods would run on no podSet's quota."""
        specs = (new.get("spec") or {}).get(self.replica_specs_field)
        errors = [
            f"spec.{self.replica_specs_field}.{rtype}: Unsupported value: {rtype!r}: "
            f"supported values: {', '.join(repr(t) for t in self.replica_types)}"
            for rtype in sorted(specs if isinstance(specs, Mapping) else ())
            if rtype not in self.replica_types
        ]
        return errors + super().validate(new, old)

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """The operator's pods ``<job>-<replica type>-<index>``, index below the replicas
        (unique names: at most the replicas), while the job runs."""
        specs = (obj.get("spec") or {}).get(self.replica_specs_field) or {}
        counts = {
            str(rtype).lower(): rs.get("replicas", 1) if isinstance(rs, Mapping) else 0
            for rtype, rs in (specs.items() if isinstance(specs, Mapping) else ())
        }
        name = str((obj.get("metadata") or {}).get("name") or "")
        child_name = str((child.get("metadata") or {}).get("name") or "")
        role = indexed_name(name, child_name, counts)
        rspec = (
            next((v for t, v in specs.items() if str(t).lower() == role), None) if role else None
        )
        template = rspec.get("template") if isinstance(rspec, Mapping) else None
        return pod_of_role_may_own(obj, child, suspended=self.is_suspended(obj), template=template)

    def priority_class_name(self, obj: Mapping[str, Any], roles: Sequence[Role]) -> tuple[str, str]:
        policy = ((obj.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy") or {}
        name = policy.get("priorityClass") if isinstance(policy, Mapping) else None
        if name:
            where = "spec.runPolicy.schedulingPolicy.priorityClass"
            if not isinstance(name, str):
                raise IntegrationError(
                    f"{self.lower_kind} {ref_of(obj)}: {where}: expected a string, got {name!r}"
                )
            return name, where
        return super().priority_class_name(obj, roles)

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return finished_by_conditions(obj, succeeded=("Succeeded",), failed=("Failed",))

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
        if not isinstance(statuses, Mapping):
            return False
        return any(
            isinstance(s, Mapping) and isinstance(s.get("active"), int) and s["active"] > 0
            for s in statuses.values()
        )

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        """Kueue: the ``Running`` condition."""
        return any(
            c.get("type") == "Running" and c.get("status") == "True" for c in conditions(obj)
        )
