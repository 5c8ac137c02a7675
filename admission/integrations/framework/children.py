"""Which children an owner's controller could have made (``Integration.may_own``).

An object whose controller owner is a managed job is left to that job: it is not
suspended, gated or charged on its own, because the owner's admission covers it. That
holds only for what the owner's controller itself creates — a JobSet's Jobs, a Job's
pods, a RayCluster's pods. Anyone can write an ``ownerReference``: a Job of parallelism
20 naming an admitted 2-pod JobSet, or pods naming a Deployment of 0 replicas, would
otherwise run on nobody's quota. So each kind says, structurally, which children its
controller makes: their kind, their names (a JobSet's Job ``<jobset>-<replicatedJob>-<i>``
with ``i`` below the replicas, so the API server's name uniqueness bounds the count),
their shape (requests and limits of the template they were made from), and whether the
owner runs at all (a suspended Job makes no pods). A child that fails is queued as its
own workload (suspended or gated) by the same webhooks and reconciler as any other.

Kinds admitted through their pods (StatefulSet, Deployment) cover no child: their pods
are gated and queued in pod groups already. The default is the same refusal, so a kind
added to the registry covers nothing until it says what its controller makes.

A pod may not ask for more accelerators (any resource beyond cpu, memory and
ephemeral storage) than the template it was made from; cpu and memory are not
compared, as the LimitRanger and sidecar injectors add them to pods, never to
templates. Counts that a name cannot bound (a Job's pods, a RayCluster's
pods) are bounded by the owner's own controller: a pod matching a Job's selector counts
as one of its active pods, and the Job controller deletes active pods beyond
``parallelism``; KubeRay does the same per worker group. Pods that do not match are
refused here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from admission.integrations.framework.fields import controller_ref, meta_of
from queues.pods import PodSpecError, pod_requests
from queues.quantity import QuantityError

Obj = Mapping[str, Any]

#: resources admission plugins and injectors add to pods (not compared with templates)
ADDED_TO_PODS = frozenset({"cpu", "memory", "ephemeral-storage"})
POD = ("v1", "Pod")
JOB = ("batch/v1", "Job")


def kind_of(obj: Obj) -> tuple[str, str]:
    return str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")


def describe(obj: Obj) -> str:
    return f"{obj.get('kind') or 'object'} {meta_of(obj).get('name') or ''}"


def not_made_by(owner: Obj, child: Obj, why: str = "") -> str:
    """The refusal: ``child`` is not one its owner's controller makes."""
    tail = f": {why}" if why else ""
    return f"{describe(child)} is not one that {describe(owner)} creates{tail}"


def refuse(owner: Obj, child: Obj) -> str:
    """The default: the kind covers no child."""
    return not_made_by(owner, child, f"a {owner.get('kind')} covers no {child.get('kind')}")


def _name(obj: Obj) -> str:
    return str(meta_of(obj).get("name") or "")


def _labels(obj: Obj) -> Mapping[str, Any]:
    labels = meta_of(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _spec(obj: Any) -> Mapping[str, Any]:
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def indexed_name(owner_name: str, child_name: str, counts: Mapping[str, int]) -> str | None:
    """The role of ``child_name`` when it is ``<owner>-<role>-<i>`` with ``0 <= i <
    counts[role]`` (the names the JobSet and training operators give); None otherwise."""
    for role, count in counts.items():
        prefix = f"{owner_name}-{role}-"
        rest = child_name[len(prefix) :] if child_name.startswith(prefix) else ""
        if rest.isdigit() and (rest == "0" or not rest.startswith("0")) and int(rest) < count:
            return role
    return None


def pod_shape(template: Any) -> list[Any]:
    """What a pod made from ``template`` is charged for: each container's and init
    container's requests and limits, and the pod overhead."""
    spec = _spec(template)
    shape: list[Any] = [spec.get("overhead")]
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else ():
            shape.append((key, c.get("resources") if isinstance(c, Mapping) else None))
    return shape


def same_shape(child_template: Any, owner_template: Any) -> bool:
    return pod_shape(child_template) == pod_shape(owner_template)


def matches_selector(pod: Obj, match_labels: Any) -> bool:
    """Whether ``pod`` carries every label of a selector's ``matchLabels`` (none: no)."""
    if not isinstance(match_labels, Mapping) or not match_labels:
        return False
    labels = _labels(pod)
    return all(labels.get(k) == v for k, v in match_labels.items())


def job_may_own(job: Obj, child: Obj, *, suspended: bool) -> str | None:
    """batch/v1 Job: its pods, while it runs, matching its selector (the Job controller
    then counts them against ``parallelism``)."""
    if kind_of(child) != POD:
        return refuse(job, child)
    if suspended:
        return not_made_by(job, child, "a suspended Job runs no pods")
    selector = _spec(job).get("selector")
    match = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    if not matches_selector(child, match):
        return not_made_by(job, child, "its labels do not match the Job's selector")
    return more_than(job, child, _spec(job).get("template"))


def jobset_may_own(jobset: Obj, child: Obj, replicated_jobs: Iterable[Any]) -> str | None:
    """JobSet: the Job ``<jobset>-<replicatedJob>-<i>`` of one of its replicated Jobs,
    ``i`` below its replicas, no wider than that replicated Job and of its pods' shape."""
    if kind_of(child) != JOB:
        return refuse(jobset, child)
    rjobs = {str(rj.get("name")): rj for rj in replicated_jobs if isinstance(rj, Mapping)}
    counts = {name: _int(rj.get("replicas"), 1) for name, rj in rjobs.items()}
    role = indexed_name(_name(jobset), _name(child), counts)
    if role is None:
        return not_made_by(jobset, child, "no replicated Job's replica has that name")
    job_spec, want = _spec(child), _spec(rjobs[role].get("template"))
    parallelism = _int(want.get("parallelism"), 1)
    completions = _int(want.get("completions"), parallelism)
    if (
        _int(job_spec.get("parallelism"), 1) > parallelism
        or _int(job_spec.get("completions"), completions) > completions
    ):
        return not_made_by(jobset, child, f"it is wider than replicated Job {role}")
    if not same_shape(job_spec.get("template"), want.get("template")):
        return not_made_by(jobset, child, f"its pods' resources are not replicated Job {role}'s")
    return None


def controlled_by(owner: Obj, child: Obj) -> bool:
    """Whether ``child``'s controller reference is ``owner``'s: same kind and UID (a name
    is reused once its object is deleted; a UID never is)."""
    ref = controller_ref(child)
    uid = meta_of(owner).get("uid")
    return (
        ref is not None
        and bool(uid)
        and ref.get("uid") == uid
        and (ref.get("apiVersion"), ref.get("kind")) == kind_of(owner)
    )


def named_child_may_own(owner: Obj, child: Obj, kinds: Mapping[tuple[str, str], str]) -> str | None:
    """An owner whose controller makes one child of each kind, with a known name, and
    controls it: the child's controller reference carries the owner's UID. The name alone
    says nothing — anyone may create an object named like the owner (or like the child
    the owner's controller is about to make)."""
    want = kinds.get(kind_of(child))
    if want is None:
        return refuse(owner, child)
    if _name(child) != want:
        return not_made_by(owner, child, f"its {child.get('kind')} is named {want!r}")
    if not controlled_by(owner, child):
        return not_made_by(
            owner, child, f"its controller reference does not name {describe(owner)}'s UID"
        )
    return None


def pod_of_role_may_own(
    owner: Obj, child: Obj, *, suspended: bool, template: Any | None
) -> str | None:
    """A pod an operator makes for one of the owner's replicas from ``template`` (None:
    the pod's labels or name say it is none of them, within the owner's counts), while
    the owner runs."""
    if kind_of(child) != POD:
        return refuse(owner, child)
    if suspended:
        return not_made_by(owner, child, f"a suspended {owner.get('kind')} runs no pods")
    if template is None:
        return not_made_by(owner, child, f"it is none of the {owner.get('kind')}'s replicas")
    return more_than(owner, child, template)


def more_than(owner: Obj, pod: Obj, template: Any) -> str | None:
    """Why ``pod`` asks for more than ``template`` of a resource that only the pod's
    author sets — accelerators and other extended resources; None when it does not.
    cpu, memory and ephemeral storage are not compared: LimitRange defaults and
    injected sidecars add them to pods, never to templates."""
    try:
        have, allowed = pod_requests(_spec(pod)), pod_requests(_spec(template))
    except (QuantityError, PodSpecError) as err:
        return not_made_by(owner, pod, f"its resources cannot be read: {err}")
    for name, n in sorted(have.items()):
        if name not in ADDED_TO_PODS and n > allowed.get(name, 0):
            return not_made_by(owner, pod, f"it asks for more {name} than its template")
    return None
