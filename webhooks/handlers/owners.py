"""Is an object under review managed through an ancestor (Kueue's owner-chain walk)?

The mutating webhooks of the job kinds and of pods leave an object alone when a
managed ancestor up its controller-owner chain admits it
(:mod:`admission.integrations.ownership`). Deciding that needs the owners, and the
handlers are synchronous, so the server reads them first: :func:`read_owners` runs
the walk with the service's :class:`OwnerSource` (its informer caches, then a GET) and
keeps what it read; the handler then runs the same walk over those objects
(:func:`has_managed_ancestor`). Where no owner can be read (``serve
--webhooks-only``, in-process tests without a source), the controller owner's kind
decides, as before the walk (``ownership.owner_kind_only``).

An owner chain that cannot be decided (an owner not found, a cycle, more than 10
owners) refuses the object, as Kueue's webhook returns the walk's error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from admission.integrations.ownership import (
    OwnerRef,
    OwnershipError,
    controller_ref,
    is_known_owner,
    managed_ancestor,
    managed_ancestor_async,
    owner_kind_only,
)
from webhooks.review import HandlerContext, JsonObj

OwnerSource = Callable[[OwnerRef], Awaitable[Mapping[str, Any] | None]]
"""Reads one owner for the webhooks (None: it does not exist)."""


@dataclass(slots=True)
class ReadOwners:
    """The owners read for one review (``HandlerContext.owners``)."""

    objects: dict[OwnerRef, JsonObj | None] = field(default_factory=dict)
    failed: dict[OwnerRef, str] = field(default_factory=dict)  # reads that failed, why

    def get(self, ref: Any) -> JsonObj | None:
        why = self.failed.get(ref)
        if why is not None:
            raise OwnershipError(
                f"cannot read the owner {ref.kind} {ref.namespace}/{ref.name}: {why}"
            )
        return self.objects.get(ref)


def needs_owners(obj: JsonObj | None, ctx: HandlerContext) -> bool:
    """Whether deciding ``obj`` walks an owner chain (a controller owner of a known kind)."""
    if not isinstance(obj, Mapping):
        return False
    try:
        ref = controller_ref(obj)
    except Exception:  # noqa: BLE001 - a malformed object is the handler's to refuse
        return False
    return ref is not None and is_known_owner(
        ctx.config.frameworks, str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
    )


async def read_owners(obj: JsonObj, ctx: HandlerContext, source: OwnerSource) -> HandlerContext:
    """``ctx`` with the owners of ``obj`` that the walk reads (errors are the handler's)."""
    read = ReadOwners()

    async def lookup(ref: OwnerRef) -> Mapping[str, Any] | None:
        try:
            found = await source(ref)
        except Exception as err:  # noqa: BLE001 - a failed read refuses the object, clearly
            read.failed[ref] = f"{type(err).__name__}: {err}"
            raise OwnershipError(read.failed[ref]) from err
        read.objects[ref] = dict(found) if found is not None else None
        return found

    disowned: list[OwnerRef] = []
    try:
        await managed_ancestor_async(
            obj,
            lookup,
            frameworks=ctx.config.frameworks,
            manage_without_queue_name=ctx.config.manage_jobs_without_queue_name,
            disowned_by=disowned,
        )
    except OwnershipError:
        pass  # decided again, and refused, by the handler
    fresh = getattr(source, "fresh", None)
    if disowned and fresh is not None:  # decided on a cached owner that may lag a write
        return await read_owners(obj, ctx, fresh)
    return replace(ctx, owners=read)


def has_managed_ancestor(obj: JsonObj, ctx: HandlerContext) -> bool:
    """Whether a managed ancestor admits ``obj`` (raises OwnershipError)."""
    owners = ctx.owners
    lookup = owners.get if owners is not None else owner_kind_only(ctx.config.frameworks)
    return (
        managed_ancestor(
            obj,
            lookup,
            frameworks=ctx.config.frameworks,
            manage_without_queue_name=ctx.config.manage_jobs_without_queue_name,
        )
        is not None
    )
