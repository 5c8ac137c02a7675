"""Whose is an object: the managed ancestor Kueue looks for up the controller-owner chain.

A Pod of a Job of a JobSet, a Job of a JobSet of a TrainJob, a Pod of a ReplicaSet of a
Deployment: Kueue admits such a tree once, at its top-level *managed* ancestor, and
leaves the objects below it alone (their webhooks do not suspend them; the reconciler
builds no Workload for them, and only suspends a running child whose ancestor is not
admitted). Kueue's ``FindAncestorJobManagedByKueue`` walks the controller owner
references up from the object:

* the walk goes on through every *known* owner — a kind of any registered integration
  (enabled or not), an external framework, or ``apps/v1`` ReplicaSet (the interim owner
  between a Deployment and its pods) — and stops at an unknown kind or at an object
  without a controller owner;
* each owner is fetched; a reference whose UID is not the fetched object's stops the
  walk (a stale reference), an owner that cannot be fetched is an error;
* an owner of an *enabled* integration (or external framework) that names a queue
  (any one, with ``manageJobsWithoutQueueName``) is a managed ancestor; the highest
  one found is the answer;
* a cycle, or more than 10 owners, is an error (the reconciler's ``JobNestingTooDeep``).

Beyond Kueue, an owner covers a child only if its controller could have made it
(``Integration.may_own``, :mod:`admission.integrations.framework.children`): the walk stops at the first enabled
integration's owner that disowns its child, so a Job written to name an admitted
JobSet, or a pod naming a Deployment of 0 replicas, is queued on its own.

The walk is written without I/O (:func:`walk` is a generator that yields the owner
reference it needs and is sent the object, or None when there is none), so one
definition serves the webhooks (their owners read before the review is decided) and
the reconciler (informer stores, then a GET) alike. Source: Kueue
pkg/controller/jobframework/reconciler.go (``FindAncestorJobManagedByKueue``,
``managedOwnersChainLimit``), integrationmanager.go (``isKnownOwner``,
``getJobTypeForOwner``), utils.go (``WorkloadShouldBeSuspended``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from admission.integrations.framework.fields import controller_ref, meta_of
from admission.integrations.registry import BY_KIND, Frameworks
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL

MANAGED_OWNERS_CHAIN_LIMIT = 10
STAND_IN = "x-quartermaster-stand-in"  # marks an owner that was not read
REPLICA_SET = ("apps/v1", "ReplicaSet")


class OwnershipError(Exception):
    """The chain cannot be decided: a cycle, too deep, or an owner that is not there."""

    reason: str = "OwnerChainError"


class CyclicOwnership(OwnershipError):
    reason = "CyclicOwnership"


class ChainTooDeep(OwnershipError):
    reason = "JobNestingTooDeep"


class OwnerNotFound(OwnershipError):
    reason = "WorkloadOwnerNotFound"


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The owner reference to fetch: its kind, where, and the UID it must have."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


Lookup = Callable[[OwnerRef], Mapping[str, Any] | None]
AsyncLookup = Callable[[OwnerRef], Awaitable[Mapping[str, Any] | None]]
Walk = Generator[OwnerRef, Mapping[str, Any] | None, Mapping[str, Any] | None]


def is_known_owner(frameworks: Frameworks, api_version: str, kind: str) -> bool:
    """Kueue's ``isKnownOwner``: the walk goes on through this kind."""
    key = (api_version, kind)
    return key in BY_KIND or key in frameworks.external or key == REPLICA_SET


def is_managed_kind(frameworks: Frameworks, api_version: str, kind: str) -> bool:
    """Kueue's ``getJobTypeForOwner``: an enabled integration's kind or an external one."""
    return (api_version, kind) in frameworks.managed_owner_kinds()


def queue_name(obj: Mapping[str, Any] | None) -> str:
    labels = meta_of(obj).get("labels")
    value = labels.get(QUEUE_NAME_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def walk(
    obj: Mapping[str, Any],
    *,
    frameworks: Frameworks,
    manage_without_queue_name: bool,
    disowned_by: list[OwnerRef] | None = None,
) -> Walk:
    """``FindAncestorJobManagedByKueue`` without I/O: yields each owner to fetch, is sent
    the object (None: not found) and returns the top-level managed ancestor (None:
    ``obj`` is top-level). Raises :class:`OwnershipError`. An owner that disowns its
    child ends the walk and is appended to ``disowned_by``."""
    namespace = str(meta_of(obj).get("namespace") or "default")
    seen: set[str] = set()
    current: Mapping[str, Any] = obj
    top: Mapping[str, Any] | None = None
    while True:
        uid = str(meta_of(current).get("uid") or "")
        if uid and uid in seen:
            raise CyclicOwnership(
                f"the controller owners of {namespace}/{meta_of(obj).get('name')} form a cycle"
            )
        seen.add(uid or f"<no uid {len(seen)}>")
        ref = controller_ref(current)
        if ref is None:
            return top
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        if not is_known_owner(frameworks, api_version, kind):
            return top
        want = OwnerRef(api_version, kind, namespace, str(ref.get("name") or ""),
                        str(ref.get("uid") or ""))  # fmt: skip
        parent = yield want
        if parent is None:
            raise OwnerNotFound(
                f"workload owner not found: {kind} {namespace}/{want.name} "
                f"(controller owner of {kind_name(current)})"
            )
        if str(meta_of(parent).get("uid") or "") != want.uid:
            return top  # a stale reference: not this object's owner
        if disowned(frameworks, parent, current):
            if disowned_by is not None:
                disowned_by.append(want)
            return top  # not one its controller makes: not covered by it
        if is_managed_kind(frameworks, api_version, kind) and (
            manage_without_queue_name or queue_name(parent)
        ):
            top = parent
        current = parent
        if len(seen) > MANAGED_OWNERS_CHAIN_LIMIT:
            raise ChainTooDeep(
                "Terminated search for Kueue-managed Job because ancestor depth exceeded "
                f"limit of {MANAGED_OWNERS_CHAIN_LIMIT}"
            )


def disowned(frameworks: Frameworks, parent: Mapping[str, Any], child: Mapping[str, Any]) -> str:
    """Why ``parent`` (of an enabled integration's kind) does not cover ``child``
    (``Integration.may_own``); "" when it does, or when it is not ours to say: an
    owner of another controller (external, disabled, a ReplicaSet), a pod (never an
    ancestor that admits), or one not read (:func:`stand_in`)."""
    integ = frameworks.integration_for(str(parent.get("apiVersion") or ""),
                                       str(parent.get("kind") or ""))  # fmt: skip
    if integ is None or integ.reconciler == "pods" or parent.get(STAND_IN):
        return ""
    return integ.may_own(parent, child) or ""


def kind_name(obj: Mapping[str, Any]) -> str:
    m = meta_of(obj)
    return f"{obj.get('kind') or 'object'} {m.get('namespace') or 'default'}/{m.get('name')}"


def managed_ancestor(
    obj: Mapping[str, Any],
    lookup: Lookup,
    *,
    frameworks: Frameworks,
    manage_without_queue_name: bool,
) -> Mapping[str, Any] | None:
    """The walk with a synchronous lookup."""
    gen = walk(obj, frameworks=frameworks, manage_without_queue_name=manage_without_queue_name)
    try:
        ref = next(gen)
        while True:
            ref = gen.send(lookup(ref))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def managed_ancestor_async(
    obj: Mapping[str, Any],
    lookup: AsyncLookup,
    *,
    frameworks: Frameworks,
    manage_without_queue_name: bool,
    disowned_by: list[OwnerRef] | None = None,
) -> Mapping[str, Any] | None:
    """The walk with an asynchronous lookup (informer stores, then the API)."""
    gen = walk(obj, frameworks=frameworks, manage_without_queue_name=manage_without_queue_name,
               disowned_by=disowned_by)  # fmt: skip
    try:
        ref = next(gen)
        while True:
            ref = gen.send(await lookup(ref))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def owner_kind_only(frameworks: Frameworks) -> Lookup:
    """A lookup for where no owner can be read (``serve --webhooks-only``, offline):
    an owner of a managed kind stands for itself with its reference's UID and is taken
    as naming a queue, so the answer is the controller owner's kind (the rule before
    the walk); other owners are unknown and end the walk."""

    def lookup(ref: OwnerRef) -> Mapping[str, Any] | None:
        if not is_managed_kind(frameworks, ref.api_version, ref.kind):
            return {"metadata": {"uid": "", "name": ref.name}}  # uid mismatch: stop
        return stand_in(ref)

    return lookup


def stand_in(ref: OwnerRef) -> dict[str, Any]:
    """An owner that is not read, taken as what its reference says and as naming a queue
    (and as making its child: there is nothing to check that on)."""
    return {
        STAND_IN: True,
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
            "labels": {QUEUE_NAME_LABEL: "<not read>"},
        },
    }
