"""Kubeflow TrainJob (``trainer.kubeflow.org/v1alpha1``, trainer v2), as Kueue's
``trainer.kubeflow.org/trainjob`` integration.

A TrainJob holds little of its own shape: it names a runtime (``spec.runtimeRef``: a
ClusterTrainingRuntime, the default kind, or a TrainingRuntime of its namespace) whose
``spec.template`` is a JobSet template, and the trainer controller builds the JobSet
from it. Kueue builds the same JobSet to get the podSets, one per replicated Job
(count = replicas × min(parallelism, completions)), so this integration does what the
trainer does with the runtime before that (Kubeflow trainer
pkg/runtime/core/trainingruntime.go ``newRuntimeInfo``, ``mergeRuntimePatches``;
plugins/jobset/builder.go ``Trainer``):

* ``spec.runtimePatches[]`` are applied in order to the replicated Jobs, by name
  (their pod template labels, annotations, node selector, tolerations, affinity,
  scheduling gates, containers by name …);
* each replicated Job runs its parallelism (completions the same, as Kueue builds the
  child JobSet); the one labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
  trainer`` runs as one replica the runtime's ``mlPolicy.numNodes`` (1 when unset),
  then ``spec.trainer.numNodes`` when given (the plugins' ``EnforceMLPolicy``: torch,
  JAX, XGBoost, plain) — except under an MPI policy, where ``numNodes`` sets the ``node``
  Job, one fewer (at least 1) with ``runLauncherAsNode`` (the launcher is a node then);
* ``spec.trainer.resourcesPerNode`` is merged into the ``node`` container of the
  trainer Job (with an mlPolicy), and with ``runLauncherAsNode`` of the ``node`` Job too.
  ``numProcPerNode`` (torch, MPI) only sets the processes' environment
  (``PET_NPROC_PER_NODE``, the MPI slots): no count or request changes, nothing to admit.

The runtime is the second informer of this kind (``references``): the reconciler and
the ``plan`` loader put it at hand (:meth:`TrainJobIntegration.resolve`); a TrainJob
whose runtime is missing gets no Workload and an event naming the runtime.

Suspended at ``spec.suspend``. Started as Kueue starts it: the flavors' node selector,
tolerations and podset label go into the TrainJob's own runtime patch (manager
``kueue.x-k8s.io/manager``), written with ``suspend: false`` in one patch (the trainer
lets runtime patches change when the TrainJob is suspended before or after the
update); stopped in two steps — suspended first, then, once no Job of it is active,
that patch's replicated Jobs cleared. Finished by a ``Complete`` or ``Failed``
condition; active while a ``status.jobsStatus[]`` entry has active pods; ready when
every replica is ready or succeeded; succeeded replicas are reclaimable like a
JobSet's. Sources: Kueue pkg/controller/jobs/trainjob/trainjob_controller.go,
trainjob_webhook.go; trainer pkg/apis/trainer/v1alpha1/trainjob_types.go,
trainingruntime_types.go.

Sources for the counts: trainer pkg/runtime/core/trainingruntime.go ``newRuntimeInfo``,
plugins/{mpi,torch,plainml}/*.go ``EnforceMLPolicy``, plugins/jobset/builder.go ``Trainer``;
Kueue trainjob_controller.go ``getChildJobSet``. Gaps against Kueue: the webhook does
not check the podSets (it has no runtime at hand); no partial admission (as Kueue).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.children import named_child_may_own
from admission.integrations.framework.fields import IntegrationError, Obj, count_field, ref_of
from admission.integrations.framework.interface import (
    Finished,
    Integration,
    ReferenceLookup,
    Role,
    Step,
    finished_by_conditions,
)
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.kinds.replicated_jobs import JOBSET_RESOURCE, succeeded_replicas
from queues.api import labels

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TRAINING_RUNTIMES = Resource(GROUP, VERSION, "trainingruntimes", "TrainingRuntime")
CLUSTER_TRAINING_RUNTIMES = Resource(
    GROUP, VERSION, "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False
)
KUEUE_MANAGER = labels.RUNTIME_PATCH_MANAGER  # Kueue's runtimePatchManagerName
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
NODE_CONTAINER = "node"
MPI_NODE = "node"  # the MPI policy's worker Job (trainer constants.Node)
RUNTIME = "x-quartermaster-runtime"
"""Where :meth:`TrainJobIntegration.resolve` puts the runtime (never written back)."""


class TrainJobIntegration(Integration):
    framework = "trainer.kubeflow.org/trainjob"
    resource = Resource(GROUP, VERSION, "trainjobs", "TrainJob")
    references = (TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES)
    pod_index_label = "batch.kubernetes.io/job-completion-index"  # its JobSet's Jobs'
    sub_group_index_label = "jobset.sigs.k8s.io/job-index"  # ranks run across the Jobs

    # -- the runtime ---------------------------------------------------------------------

    def resolve(self, obj: Mapping[str, Any], lookup: ReferenceLookup) -> Mapping[str, Any]:
        kind_noun, ref = self.lower_kind, ref_of(obj)
        rref = (obj.get("spec") or {}).get("runtimeRef")
        if not isinstance(rref, Mapping) or not isinstance(rref.get("name"), str):
            raise IntegrationError(f"{kind_noun} {ref}: spec.runtimeRef.name: required")
        kind = rref.get("kind") or CLUSTER_TRAINING_RUNTIMES.kind
        group = rref.get("apiGroup") or GROUP
        res = {r.kind: r for r in self.references}.get(kind)
        if res is None or group != GROUP:
            raise IntegrationError(
                f"{kind_noun} {ref}: spec.runtimeRef: {group}/{kind} is not a training runtime"
            )
        ns = str((obj.get("metadata") or {}).get("namespace") or "default")
        runtime = lookup(res, ns if res.namespaced else None, rref["name"])
        if runtime is None:
            where = f" in namespace {ns}" if res.namespaced else ""
            raise IntegrationError(
                f"{kind_noun} {ref}: spec.runtimeRef: {kind} {rref['name']!r} not found{where}"
            )
        return {**obj, RUNTIME: {"kind": kind, "name": rref["name"],
                                 "spec": copy.deepcopy(runtime.get("spec") or {})}}  # fmt: skip

    def jobset_spec(self, obj: Mapping[str, Any]) -> Obj:
        """The spec of the JobSet the trainer builds for ``obj`` (resolved)."""
        kind_noun, ref = self.lower_kind, ref_of(obj)
        runtime = obj.get(RUNTIME)
        if not isinstance(runtime, Mapping):
            raise IntegrationError(f"{kind_noun} {ref}: spec.runtimeRef: the runtime is not known")
        rspec = runtime.get("spec") or {}
        spec = copy.deepcopy(((rspec.get("template") or {}).get("spec")) or {})
        rjobs = spec.get("replicatedJobs")
        where = f"{runtime['kind']} {runtime['name']}: spec.template.spec.replicatedJobs"
        if not isinstance(rjobs, list) or not rjobs:
            raise IntegrationError(f"{kind_noun} {ref}: {where}: at least one is required")
        by_name = {rj.get("name"): rj for rj in rjobs if isinstance(rj, dict)}
        for i, patch in enumerate((obj.get("spec") or {}).get("runtimePatches") or []):
            pjobs = ((((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {})
                     .get("spec") or {}).get("replicatedJobs") or []  # fmt: skip
            for pj in pjobs:
                target = by_name.get(pj.get("name")) if isinstance(pj, Mapping) else None
                if target is None:
                    raise IntegrationError(
                        f"{kind_noun} {ref}: spec.runtimePatches[{i}]: replicated Job "
                        f"{(pj or {}).get('name')!r} is not in the runtime's template"
                    )
                _strategic_merge(target.setdefault("template", {}), pj.get("template") or {})
        trainer = (obj.get("spec") or {}).get("trainer") or {}
        ml_policy = rspec.get("mlPolicy")
        ml = ml_policy if isinstance(ml_policy, Mapping) else None
        mpi = ml.get("mpi") if ml is not None else None
        launcher_as_node = isinstance(mpi, Mapping) and mpi.get("runLauncherAsNode") is True
        nodes = trainer.get("numNodes")
        if nodes is not None:
            nodes = count_field(nodes, kind_noun, ref, "spec.trainer.numNodes", default=1)
        for i, rj in enumerate(rjobs):
            if not isinstance(rj, dict):
                continue
            rj_where = f"{where}[{i}]"
            labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
            is_trainer = labels.get(ANCESTOR_LABEL) == TRAINER_ANCESTOR
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            # newRuntimeInfo: a Job's pods are its parallelism; the trainer's, the policy's nodes
            count = count_field(job_spec.get("parallelism"), kind_noun, ref,
                                f"{rj_where}.template.spec.parallelism", default=1)  # fmt: skip
            if is_trainer and ml is not None:
                count = count_field(ml.get("numNodes", 1), kind_noun, ref,
                                    f"{runtime['kind']} {runtime['name']}: spec.mlPolicy.numNodes",
                                    default=1)  # fmt: skip
            if nodes is not None:  # the plugins' EnforceMLPolicy
                if isinstance(mpi, Mapping):  # MPI: the node Job (one node runs the launcher)
                    if rj.get("name") == MPI_NODE:
                        count = max(nodes - 1, 1) if launcher_as_node else nodes
                elif is_trainer:  # torch, JAX, XGBoost, plain: the trainer Job
                    count = nodes
            if is_trainer:
                rj["replicas"] = 1
            # Kueue's getChildJobSet: parallelism and completions are the pods counted
            job_spec["parallelism"] = job_spec["completions"] = count
            per_node = trainer.get("resourcesPerNode")
            gets_resources = (is_trainer and ml is not None) or (
                launcher_as_node and rj.get("name") == MPI_NODE
            )
            if isinstance(per_node, Mapping) and gets_resources:
                pod = (job_spec.get("template") or {}).get("spec") or {}
                for c in pod.get("containers") or [] if isinstance(pod, Mapping) else []:
                    if isinstance(c, dict) and c.get("name") == NODE_CONTAINER:
                        res = c.setdefault("resources", {})
                        for part in ("requests", "limits"):
                            if isinstance(per_node.get(part), Mapping):
                                res[part] = {**(res.get(part) or {}), **per_node[part]}
        return spec

    # -- podSets -------------------------------------------------------------------------

    def roles(self, obj: Mapping[str, Any]) -> list[Role]:
        kind_noun, ref = self.lower_kind, ref_of(obj)
        spec = self.jobset_spec(obj)
        runtime = obj[RUNTIME]
        root = f"{runtime['kind']} {runtime['name']}"
        roles = []
        for i, rj in enumerate(spec["replicatedJobs"]):
            where = f"{root}: spec.template.spec.replicatedJobs[{i}]"
            if not isinstance(rj, Mapping) or not isinstance(rj.get("name"), str):
                raise IntegrationError(f"{kind_noun} {ref}: {where}.name: required")
            replicas = count_field(
                rj.get("replicas"), kind_noun, ref, f"{where}.replicas", default=1
            )
            job_spec = ((rj.get("template") or {}).get("spec")) or {}
            parallelism = count_field(job_spec.get("parallelism"), kind_noun, ref,
                                      f"{where}.template.spec.parallelism", default=1)  # fmt: skip
            completions = count_field(job_spec.get("completions"), kind_noun, ref,
                                      f"{where}.template.spec.completions",
                                      default=parallelism)  # fmt: skip
            template = job_spec.get("template")
            if not isinstance(template, Mapping):
                raise IntegrationError(
                    f"{kind_noun} {ref}: {where}.template.spec.template: required"
                )
            roles.append(Role(
                name=rj["name"], count=replicas * min(parallelism, completions),
                template=template,
                path=(root, "spec", "template", "spec", "replicatedJobs", i, "template", "spec",
                      "template"),
                sub_group_count=replicas,
            ))  # fmt: skip
        return roles

    # -- start and stop ------------------------------------------------------------------

    def run_patch(self, obj: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> Obj:
        """Kueue's ``RunWithPodSetsInfo``: each podSet's info as a replicated Job patch of
        Kueue's runtime patch, and unsuspended, in one patch."""
        names = [r.name for r in self.roles(obj)]
        if [i.name for i in infos] != names:
            raise IntegrationError(
                f"{self.lower_kind} {ref_of(obj)}: podSets {[i.name for i in infos]} != {names}"
            )
        patches = [_replicated_job_patch(info) for info in infos]
        return {"spec": {"suspend": False, "runtimePatches": _with_kueue_patch(obj, patches)}}

    def stop_step(
        self, obj: Mapping[str, Any], originals: Sequence[PodSetInfo] | None
    ) -> Step | None:
        """Kueue's ``Stop``: suspend; once no Job is active, clear Kueue's patch."""
        if not self.is_suspended(obj):
            return Step({"spec": {"suspend": True}})
        if self.is_active(obj):
            return None  # the patch may change only once its pods are gone
        if not _kueue_replicated_jobs(obj):
            return None
        return Step({"spec": {"runtimePatches": _with_kueue_patch(obj, [])}})

    # -- status --------------------------------------------------------------------------

    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        return finished_by_conditions(obj, succeeded=("Complete",), failed=("Failed",))

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        return any(_int(s.get("active")) > 0 for s in _jobs_status(obj))

    def pods_ready(self, obj: Mapping[str, Any], count: int) -> bool | None:
        try:
            replicas = sum(
                _int(rj.get("replicas"), 1) for rj in self.jobset_spec(obj)["replicatedJobs"]
            )
        except IntegrationError:
            return None
        done = sum(_int(s.get("ready")) + _int(s.get("succeeded")) for s in _jobs_status(obj))
        return done == replicas

    def may_own(self, obj: Mapping[str, Any], child: Mapping[str, Any]) -> str | None:
        """The trainer's JobSet: named as the TrainJob and controlled by it (its
        controller reference carries the TrainJob's UID), so a JobSet merely named like
        an admitted TrainJob is queued on its own."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        return named_child_may_own(
            obj, child, {(JOBSET_RESOURCE.api_version, JOBSET_RESOURCE.kind): name}
        )

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """Kueue's ``TrainJob.ReclaimablePods``: succeeded replicas × pods per replica."""
        if not _jobs_status(obj):
            return {}
        try:
            spec, roles = self.jobset_spec(obj), self.roles(obj)
        except IntegrationError:
            return {}
        return succeeded_replicas(spec["replicatedJobs"], _jobs_status(obj), roles)


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _jobs_status(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = (obj.get("status") or {}).get("jobsStatus")
    return [s for s in items or [] if isinstance(s, Mapping)]


def _replicated_job_patch(info: PodSetInfo) -> Obj:
    pod_spec: Obj = {}
    if info.node_selector:
        pod_spec["nodeSelector"] = dict(info.node_selector)
    if info.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in info.tolerations]
    if info.scheduling_gates:  # a TAS podSet's pods wait for their topology domain
        pod_spec["schedulingGates"] = [{"name": g} for g in info.scheduling_gates]
    template: Obj = {}
    if info.labels:
        template["metadata"] = {"labels": dict(info.labels)}
    if info.annotations:
        template.setdefault("metadata", {})["annotations"] = dict(info.annotations)
    if pod_spec:
        template["spec"] = pod_spec
    return {"name": info.name, "template": {"spec": {"template": template}}}


def _kueue_replicated_jobs(obj: Mapping[str, Any]) -> list[Any]:
    for patch in (obj.get("spec") or {}).get("runtimePatches") or []:
        if isinstance(patch, Mapping) and patch.get("manager") == KUEUE_MANAGER:
            spec = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {})
                    .get("spec") or {})  # fmt: skip
            return list(spec.get("replicatedJobs") or [])
    return []


def _with_kueue_patch(obj: Mapping[str, Any], replicated_jobs: list[Obj]) -> list[Obj]:
    """``spec.runtimePatches`` with Kueue's own (added when missing, as Kueue's
    webhook adds it) holding ``replicated_jobs``; the others unchanged, in order."""
    spec: Obj = {"replicatedJobs": replicated_jobs} if replicated_jobs else {}
    ours = {"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": spec}}}
    out, found = [], False
    for patch in (obj.get("spec") or {}).get("runtimePatches") or []:
        if isinstance(patch, Mapping) and patch.get("manager") == KUEUE_MANAGER and not found:
            out.append(
                {**copy.deepcopy(dict(patch)), "trainingRuntimeSpec": ours["trainingRuntimeSpec"]}
            )
            found = True
        else:
            out.append(copy.deepcopy(patch))
    return out if found else [*out, ours]


# Lists of a pod template merged by key in a strategic merge patch (the rest replaced).
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name",
               "schedulingGates": "name", "env": "name", "volumeMounts": "mountPath",
               "imagePullSecrets": "name"}  # fmt: skip


def _strategic_merge(target: Obj, patch: Mapping[str, Any]) -> None:
    """The strategic merge patch of a Job template (``JobTemplatePatch``), in place: maps
    merged, the keyed lists above merged by key, other lists and scalars replaced."""
    for key, value in patch.items():
        have = target.get(key)
        if isinstance(value, Mapping) and isinstance(have, dict):
            _strategic_merge(have, value)
        elif key in _MERGE_KEYS and isinstance(value, list) and isinstance(have, list):
            mk = _MERGE_KEYS[key]
            for item in value:
                match = next((h for h in have if isinstance(h, dict) and isinstance(item, Mapping)
                              and h.get(mk) == item.get(mk)), None)  # fmt: skip
                if match is None:
                    have.append(copy.deepcopy(item))
                else:
                    _strategic_merge(match, item)
        else:
            target[key] = copy.deepcopy(value)


TRAINJOB = TrainJobIntegration()
