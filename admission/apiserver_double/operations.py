"""The write path of the double: create, update, patch and delete with admission.

Each write follows kube-apiserver's order: compute the new object from the stored one,
apply the type strategy, run mutating webhooks, re-apply the strategy, validate, run
validating webhooks, then compare-and-swap into the store.  An unconditional write
that loses a race during admission is recomputed (like ``GuaranteedUpdate``); a write
that pinned ``metadata.resourceVersion`` gets 409 instead.  Deletion honours
finalizers (``deletionTimestamp`` first, removal once they are gone); propagation
policies, Terminating namespaces and graceful pod deletion are finished
asynchronously by :mod:`.controllers`, as on a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from admission.apiserver_double import builtin, schema

from .admission import AdmissionAttributes, UserInfo, WebhookDispatcher
from .controllers import FOREGROUND, ORPHAN, Controllers, deletable, mark_namespace_terminating
from .errors import ApiError, bad_request, conflict, not_found
from .patches import APPLY_PATCH, STRATEGIC_MERGE_PATCH, apply_patch
from .resources import Registry, ResourceType
from .store import StaleWrite, Store
from .strategy import (
    check_identity,
    check_preconditions,
    mark_deleting,
    prepare_for_create,
    prepare_for_update,
    same_content,
    validate,
)

Obj = dict[str, Any]
MAX_ATTEMPTS = 10
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")


@dataclass(frozen=True, slots=True)
class WriteContext:
    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None
    user: UserInfo
    dry_run: bool = False
    field_validation: str = "Warn"

    def attributes(self, operation: str, name: str) -> AdmissionAttributes:
        return AdmissionAttributes(
            rt=self.rt,
            version=self.version,
            subresource=self.subresource,
            operation=operation,
            name=name,
            namespace=self.namespace if self.rt.namespaced else None,
            user=self.user,
            dry_run=self.dry_run,
        )


@dataclass(slots=True)
class WriteResult:
    obj: Obj
    status: int = 200
    warnings: list[str] = field(default_factory=list)
    removed: bool = False  # the object is gone (DELETE answered with a Status for CRs)


class Operations:
    def __init__(self, *, store: Store, registry: Registry, dispatcher: WebhookDispatcher) -> None:
        self.store = store
        self.registry = registry
        self.dispatcher = dispatcher
        self._namespaces = registry.resolve("namespaces")
        self.controllers = Controllers(store, registry, self.remove_or_mark, api=self)

    # -- create -------------------------------------------------------------------------

    async def create(self, ctx: WriteContext, body: Any, *, patched: bool = False) -> WriteResult:
        if ctx.subresource:
            raise ApiError(405, f"create is not supported on {ctx.rt.plural}/{ctx.subresource}")
        obj = prepare_for_create(ctx.rt, body, namespace=ctx.namespace)
        decoded = schema.decode(
            ctx.rt, obj, directive=ctx.field_validation, version=ctx.version, patch=patched
        )
        schema.settle(ctx.rt, obj)
        if ctx.rt.namespaced:
            namespace = self.store.get(self._namespaces, "", ctx.namespace or "")
            if namespace is None:
                raise not_found("namespaces", ctx.namespace or "")
            if namespace["metadata"].get("deletionTimestamp"):
                raise _terminating(ctx, obj["metadata"].get("name", ""))
        attrs = ctx.attributes("CREATE", obj["metadata"].get("name", ""))
        mutated, warnings = await self.dispatcher.mutate(attrs, obj, None)
        obj = _restore_create_fields(ctx.rt, obj, mutated or obj)
        builtin.apply_defaults(ctx.rt, schema.settle(ctx.rt, obj))
        builtin.prepare_create(ctx.rt, obj)
        validate(ctx.rt, obj)
        builtin.validate_create(ctx.rt, obj)
        schema.validate(ctx.rt, obj, None)
        warnings = decoded + warnings
        warnings += await self.dispatcher.validate(attrs, obj, None)
        if not ctx.dry_run:
            obj = self.store.insert(ctx.rt, obj)
        return WriteResult(obj, 201, warnings)

    # -- update and patch ---------------------------------------------------------------

    async def update(self, ctx: WriteContext, body: Any) -> WriteResult:
        assert ctx.name is not None
        check_identity(body, name=ctx.name, namespace=ctx.namespace if ctx.rt.namespaced else None)

        def compute(old: Obj) -> Obj:
            return copy.deepcopy(body)

        return await self._guaranteed_update(ctx, compute, patch=False)

    async def patch(
        self, ctx: WriteContext, content_type: str, patch: Any, *, field_manager: str | None
    ) -> WriteResult:
        assert ctx.name is not None
        if content_type == STRATEGIC_MERGE_PATCH and not ctx.rt.builtin:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        if content_type == APPLY_PATCH:
            if not field_manager:
                raise ApiError(
                    422, "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: "
                    "is required for apply patch",
                )  # fmt: skip
            if not isinstance(patch, dict):
                raise bad_request("apply patch must be a YAML/JSON object")
            existing = self.store.get(ctx.rt, ctx.namespace or "", ctx.name)
            if existing is None and not ctx.subresource:
                body = copy.deepcopy(patch)
                body.setdefault("metadata", {})["name"] = ctx.name
                return await self.create(ctx, body, patched=True)

        def compute(old: Obj) -> Obj:
            return apply_patch(content_type, old, patch)

        return await self._guaranteed_update(ctx, compute, patch=True)

    # -- a controller's writes (the garbage collector's) ---------------------------------

    def _as(self, user: UserInfo, rt: ResourceType, obj: Obj) -> WriteContext:
        meta = obj["metadata"]
        return WriteContext(rt=rt, version=rt.storage_version,
                            namespace=meta.get("namespace") if rt.namespaced else None,
                            name=meta["name"], subresource=None, user=user)  # fmt: skip

    async def update_as(
        self, user: UserInfo, rt: ResourceType, obj: Obj, compute: Callable[[Obj], Obj]
    ) -> WriteResult:
        """A controller's patch of ``obj``: ``compute`` of the stored object, with
        admission (recomputed on the current object when it loses a race)."""
        return await self._guaranteed_update(self._as(user, rt, obj), compute, patch=True)

    async def delete_as(self, user: UserInfo, rt: ResourceType, obj: Obj) -> WriteResult:
        """A controller's background delete of ``obj`` (that object: its UID), with
        admission."""
        options = {"propagationPolicy": "Background",
                   "preconditions": {"uid": obj["metadata"].get("uid")}}  # fmt: skip
        return await self.delete(self._as(user, rt, obj), options)

    async def _guaranteed_update(
        self, ctx: WriteContext, compute: Callable[[Obj], Obj], *, patch: bool
    ) -> WriteResult:
        assert ctx.name is not None
        for _ in range(MAX_ATTEMPTS):
            old = self.store.require(ctx.rt, ctx.namespace or "", ctx.name)
            old_rv = old["metadata"]["resourceVersion"]
            candidate = compute(old)
            if not isinstance(candidate, dict) or not isinstance(
                candidate.get("metadata", {}), dict
            ):
                raise bad_request("the request body must be a JSON object with object metadata")
            wanted_rv = (candidate.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != old_rv:
                raise conflict(ctx.rt.qualified(), ctx.name)
            decoded = schema.decode(
                ctx.rt, candidate, directive=ctx.field_validation, version=ctx.version,
                patch=patch,
            )  # fmt: skip
            new = prepare_for_update(ctx.rt, old, candidate, subresource=ctx.subresource)
            schema.settle(ctx.rt, new)
            attrs = ctx.attributes("UPDATE", ctx.name)
            mutated, warnings = await self.dispatcher.mutate(attrs, new, old)
            new = prepare_for_update(
                ctx.rt, old, schema.settle(ctx.rt, mutated or new), subresource=ctx.subresource
            )
            validate(ctx.rt, new)
            builtin.validate_update(ctx.rt, old, new, subresource=ctx.subresource)
            schema.validate(ctx.rt, new, old)
            warnings = decoded + warnings
            warnings += await self.dispatcher.validate(attrs, new, old)
            if ctx.dry_run:
                return WriteResult(new, 200, warnings)
            current = self.store.get(ctx.rt, ctx.namespace or "", ctx.name)
            if current is None:
                raise not_found(ctx.rt.qualified(), ctx.name)
            if current["metadata"]["resourceVersion"] != old_rv:
                continue  # lost a race during admission: recompute on the new state
            if same_content(old, new):
                return WriteResult(old, 200, warnings)
            try:
                if deletable(ctx.rt, new):
                    final = self.store.remove(ctx.rt, new, expected_rv=old_rv)
                    return WriteResult(final, 200, warnings)
                return WriteResult(
                    self.store.replace(ctx.rt, new, expected_rv=old_rv), 200, warnings
                )
            except StaleWrite:
                continue
        raise conflict(ctx.rt.qualified(), ctx.name, "too many concurrent writes, giving up")

    # -- delete ---------------------------------------------------------------------------

    async def delete(self, ctx: WriteContext, options: Obj) -> WriteResult:
        assert ctx.name is not None
        if ctx.subresource:
            raise ApiError(405, f"delete is not supported on {ctx.rt.plural}/{ctx.subresource}")
        policy = _propagation_policy(ctx.rt, options)
        old = self.store.require(ctx.rt, ctx.namespace or "", ctx.name)
        check_preconditions(ctx.rt, old, options.get("preconditions"))
        attrs = ctx.attributes("DELETE", ctx.name)
        _, warnings = await self.dispatcher.mutate(attrs, None, old)
        warnings += await self.dispatcher.validate(attrs, None, old)
        if ctx.dry_run:
            return WriteResult(old, 200, warnings)
        # the object may have changed while the webhooks ran: delete what is there now
        current = self.store.require(ctx.rt, ctx.namespace or "", ctx.name)
        check_preconditions(ctx.rt, current, options.get("preconditions"))
        grace = options.get("gracePeriodSeconds")
        result = self.remove_or_mark(
            ctx.rt, current, policy=policy, grace=int(grace) if grace is not None else None
        )
        if policy_defaulted(ctx.rt, options):
            warnings.append(JOB_DELETE_WARNING)
        result.warnings = warnings
        return result

    def remove_or_mark(
        self, rt: ResourceType, old: Obj, *, policy: str, grace: int | None = None
    ) -> WriteResult:
        """Start a deletion as kube-apiserver does (no admission): remove the object, or
        mark it deleting -- for its finalizers, for the garbage collector (``orphan`` /
        ``foregroundDeletion``), the namespace controller or the kubelet -- and leave
        the rest to :class:`~.controllers.Controllers`."""
        meta = old["metadata"]
        if meta.get("deletionTimestamp"):
            if grace == 0 and rt.plural == "pods" and not rt.group:  # a force delete
                forced = copy.deepcopy(old)
                forced["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._store_marked(rt, old, forced)
            return WriteResult(old, 200)
        if rt.plural == "namespaces" and not rt.group:
            return self._store_marked(rt, old, mark_namespace_terminating(old))
        marked = mark_deleting(old)
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        elif policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if finalizers:
            marked["metadata"]["finalizers"] = finalizers
        if rt.plural == "pods" and not rt.group and (old.get("spec") or {}).get("nodeName"):
            if grace is None:
                grace = int((old.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            marked["metadata"]["deletionGracePeriodSeconds"] = max(0, grace)
        if deletable(rt, marked):
            final = self.store.remove(rt, copy.deepcopy(old), expected_rv=meta["resourceVersion"])
            return WriteResult(final, 200, removed=True)
        return self._store_marked(rt, old, marked)

    def _store_marked(self, rt: ResourceType, old: Obj, marked: Obj) -> WriteResult:
        expected = old["metadata"]["resourceVersion"]
        if deletable(rt, marked):
            final = self.store.remove(rt, marked, expected_rv=expected)
            return WriteResult(final, 200, removed=True)
        stored = self.store.replace(rt, marked, expected_rv=expected)
        self.controllers.track(rt, stored)
        return WriteResult(stored, 200)


def _terminating(ctx: WriteContext, name: str) -> ApiError:
    """The NamespaceLifecycle admission plugin's answer."""
    why = (
        f"unable to create new content in namespace {ctx.namespace} because it is being terminated"
    )
    details: Obj = {"name": name, "kind": ctx.rt.plural, "causes": [
        {"reason": "NamespaceTerminating", "message": why, "field": "metadata.namespace"}
    ]}  # fmt: skip
    if ctx.rt.group:
        details["group"] = ctx.rt.group
    return ApiError(403, f'{ctx.rt.qualified()} "{name}" is forbidden: {why}', details=details)


JOB_DELETE_WARNING = (
    "child pods are preserved by default when jobs are deleted; set "
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
    "suppress this warning"
)


def policy_defaulted(rt: ResourceType, options: Obj) -> bool:
    """batch/v1 Job DELETE without a policy: the API server warns that pods stay."""
    return (
        rt.key == "jobs.batch"
        and options.get("propagationPolicy") is None
        and options.get("orphanDependents") is None
    )


def _propagation_policy(rt: ResourceType, options: Obj) -> str:
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    if policy is None:
        # batch/v1 Jobs default to orphaning their pods when deleted through the API.
        return "Orphan" if rt.key == "jobs.batch" else "Background"
    if policy not in PROPAGATION_POLICIES:
        raise bad_request(
            f"propagationPolicy: Unsupported value: {policy!r}: supported values: {PROPAGATION_POLICIES}"
        )
    return policy


def _restore_create_fields(rt: ResourceType, original: Obj, mutated: Obj) -> Obj:
    """Mutating webhooks may not change identity or server-owned fields on create."""
    obj = copy.deepcopy(mutated)
    meta = obj.setdefault("metadata", {})
    for key in ("name", "namespace", "uid", "creationTimestamp", "generation"):
        if key in original["metadata"]:
            meta[key] = original["metadata"][key]
        else:
            meta.pop(key, None)
    obj["apiVersion"], obj["kind"] = original["apiVersion"], original["kind"]
    if rt.status_subresource:
        if "status" in original:
            obj["status"] = copy.deepcopy(original["status"])
        else:
            obj.pop("status", None)
    return obj
