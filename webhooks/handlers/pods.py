"""Plain Pod admission and pod gangs, as Kueue's PodWebhook (docs/semantics.md §3.4).

Any framework that creates pods (Ray, MPI, Spark, Argo, …) gets gang admission by
labelling its pods with ``kueue.x-k8s.io/pod-group-name`` and annotating them with
``kueue.x-k8s.io/pod-group-total-count``: the mutating webhook holds every managed pod
behind the scheduling gate ``kueue.x-k8s.io/admission`` (plus the managed label, the
finalizer and a role hash), and the controller lifts the gate once the whole group's
Workload is admitted. Validation keeps the group metadata consistent.

Unlike Kueue, a pod gated because its parent holds it (``pod-suspending-parent``) gets
the managed label too: the pod validation's webhook registration selects pods that have
no queue-name label by it, so every gated pod's updates reach :func:`validate_pod`.

A resize (``pods/resize``) of a pod the service holds quota for may lower its requests
and limits, not raise them (:mod:`.resize`).

Gaps against Kueue: the legacy ``podOptions`` selectors and the TAS gate/annotations
are not handled. A pod with a managed ancestor up its owner chain (a Job's, a JobSet's)
is left alone (:mod:`.owners`).
"""

from __future__ import annotations

import hashlib
import json

from admission.engine.tas.nodes import is_tas_pod
from admission.integrations.ownership import OwnershipError
from admission.integrations.registry import BY_FRAMEWORK
from queues.api.labels import ADMISSION_GATE, TOPOLOGY_GATE
from queues.api.labels import MANAGED as MANAGED_LABEL
from queues.api.labels import MANAGED as POD_FINALIZER
from queues.api.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.api.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.api.labels import POD_SUSPENDING_PARENT as SUSPENDED_BY_PARENT_ANNOTATION
from queues.api.labels import PREBUILT_WORKLOAD as PREBUILT_WORKLOAD_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_LABEL
from queues.api.labels import RETRIABLE_IN_GROUP as RETRIABLE_IN_GROUP_ANNOTATION
from queues.api.labels import ROLE_HASH as ROLE_HASH_ANNOTATION
from webhooks.handlers.common import (
    PREBUILT_PATH,
    apply_queue_defaults,
    request_namespace,
    validate_label_as_name,
    validate_on_create,
    validate_on_update,
)
from webhooks.handlers.owners import has_managed_ancestor
from webhooks.handlers.resize import RESIZE, validate_pod_resize
from webhooks.review import (
    MANAGED_LABEL_VALUE,
    AdmissionRequest,
    FieldErrors,
    HandlerContext,
    JsonObj,
    Mutation,
    Verdict,
    allow,
    atoi,
    deny,
    get_list,
    get_map,
    go_value,
    key_path,
    owner_is_managed,
    string_map,
)

MANAGED_PATH = key_path("metadata.labels", MANAGED_LABEL)
GROUP_NAME_PATH = key_path("metadata.labels", GROUP_NAME_LABEL)
TOTAL_COUNT_PATH = key_path("metadata.annotations", GROUP_TOTAL_COUNT_ANNOTATION)
RETRIABLE_PATH = key_path("metadata.annotations", RETRIABLE_IN_GROUP_ANNOTATION)
BOTH_REQUIRED = f"both the '{GROUP_TOTAL_COUNT_ANNOTATION}' annotation and the '{GROUP_NAME_LABEL}' label should be set"
MANAGED_OWNER_WARNING = f"pod owner is managed by kueue, label '{MANAGED_LABEL}={MANAGED_LABEL_VALUE}' might lead to unexpected behaviour"

# The pod spec fields that decide how a pod is admitted (Kueue's SpecShape).
_SHAPE_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "runtimeClassName",
    "priority",
    "topologySpreadConstraints",
    "overhead",
    "resourceClaims",
)
_CONTAINER_FIELDS = ("image", "resources", "ports")


def role_hash(pod: JsonObj) -> str:
    """8 hex digits identifying the pod's role in its group (admission-relevant shape).

    Pods of one group with the same hash form one podSet of the group's Workload.
    Kueue's own labels are left out so adding them does not change the role.
    """
    labels = {
        k: v for k, v in string_map(pod, "labels").items() if not k.startswith("kueue.x-k8s.io/")
    }
    spec = get_map(pod, "", "spec")
    shape: JsonObj = {k: spec[k] for k in _SHAPE_FIELDS if spec.get(k) is not None}
    for key in ("initContainers", "containers"):
        shape[key] = [
            {f: c.get(f) for f in _CONTAINER_FIELDS if isinstance(c, dict) and c.get(f) is not None}
            for c in get_list(spec, "spec", key)
        ]
    raw = json.dumps(
        {"metadata": {"labels": labels}, "spec": shape}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:8]


def is_gated(pod: JsonObj) -> bool:
    """Pod.IsSuspended: the pod still carries Kueue's admission gate."""
    gates = get_list(get_map(pod, "", "spec"), "spec", "schedulingGates")
    return any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates)


def _service_gates_removed(new: JsonObj, old: JsonObj) -> list[str]:
    """The service's scheduling gates that ``old`` carries and ``new`` no longer does."""
    names = [get_list(get_map(pod, "", "spec"), "spec", "schedulingGates") for pod in (new, old)]
    kept, had = ({g.get("name") for g in gates if isinstance(g, dict)} for gates in names)
    return [gate for gate in (ADMISSION_GATE, TOPOLOGY_GATE) if gate in had - kept]


def _only_the_service_ungates(
    req: AdmissionRequest, ctx: HandlerContext, errs: FieldErrors
) -> None:
    """A gated pod runs once its gates are gone: only the service, which lifts them when
    the pod's Workload is admitted (and placed), may remove its own gates. Nor may
    anyone else take the managed label off a pod that still carries one of them: a pod
    without a queue-name label reaches this webhook on update only through that label."""
    new, old = req.object, req.old_object
    assert new is not None and old is not None
    service = ctx.config.service_account_username
    if req.username == service:
        return
    by = f"the admission service ({service}), not by {go_value(req.username)}"
    for gate in _service_gates_removed(new, old):
        errs.forbidden("spec.schedulingGates", f"the {gate} gate can only be removed by {by}")
    held = _service_gates_removed({}, old)  # the service's gates the pod carried
    if (
        held
        and string_map(old, "labels").get(MANAGED_LABEL) is not None
        and MANAGED_LABEL not in string_map(new, "labels")
    ):
        errs.forbidden(
            MANAGED_PATH,
            f"the label can only be removed from a pod behind the {held[0]} gate by {by}",
        )


def mutate_pod(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    if req.operation != "CREATE" or req.object is None:
        return allow()
    obj = req.object
    m = Mutation(obj)
    parent = string_map(obj, "annotations").get(SUSPENDED_BY_PARENT_ANNOTATION)
    suspend = parent is not None
    if parent and not m.labels().get(GROUP_NAME_LABEL):
        integ = BY_FRAMEWORK.get(parent)  # a parent with a group per set of its pods
        group = integ.pod_group_of(obj) if integ is not None else None
        if group:
            m.set_label(GROUP_NAME_LABEL, group)
    if not suspend:
        namespace = request_namespace(req, obj)
        if not ctx.config.namespace_is_managed(ctx.view.namespace_labels(namespace)):
            return allow()
        try:
            if has_managed_ancestor(obj, ctx):
                return allow()  # Kueue: "Do not suspend a Pod whose owner is already managed"
        except OwnershipError as err:
            return deny(str(err), code=500, reason="InternalError")
        apply_queue_defaults(m, namespace=namespace, ctx=ctx, default_queue=True)
        suspend = bool(m.labels().get(QUEUE_LABEL)) or ctx.config.manage_jobs_without_queue_name
    if suspend:
        # every pod the service gates carries the label: the validating webhook's
        # registration selects pod updates by it when there is no queue-name label
        m.set_label(MANAGED_LABEL, MANAGED_LABEL_VALUE)
        m.append_unique(("metadata",), "finalizers", POD_FINALIZER)
        m.append_unique(("spec",), "schedulingGates", {"name": ADMISSION_GATE})
        if is_tas_pod(string_map(obj, "annotations")):
            # Kueue's pod webhook: a TAS pod also waits for its topology domain.
            m.append_unique(("spec",), "schedulingGates", {"name": TOPOLOGY_GATE})
        m.set_annotation(ROLE_HASH_ANNOTATION, role_hash(m.obj))
    return allow(m.patch())


def _validate_common(
    obj: JsonObj, labels: dict[str, str], annotations: dict[str, str], errs: FieldErrors
) -> None:
    managed = labels.get(MANAGED_LABEL)
    if managed is not None and managed != MANAGED_LABEL_VALUE:
        errs.forbidden(MANAGED_PATH, f"managed label value can only be '{MANAGED_LABEL_VALUE}'")

    group = labels.get(GROUP_NAME_LABEL, "")
    total = annotations.get(GROUP_TOTAL_COUNT_ANNOTATION)
    if not group:
        if total is not None:
            errs.required(GROUP_NAME_PATH, BOTH_REQUIRED)
    else:
        validate_label_as_name(labels, GROUP_NAME_LABEL, errs)
        if total is None:
            errs.required(TOTAL_COUNT_PATH, BOTH_REQUIRED)
        else:
            count, err = atoi(total)
            if count is None:
                errs.invalid(TOTAL_COUNT_PATH, total, err)
            elif count < 1:
                errs.invalid(
                    TOTAL_COUNT_PATH,
                    total,
                    f"incorrect annotation value '{GROUP_TOTAL_COUNT_ANNOTATION}={total}': "
                    "group total count should be greater than zero",
                )

    prebuilt = labels.get(PREBUILT_WORKLOAD_LABEL)
    if prebuilt is not None and group and prebuilt != group:
        errs.invalid(PREBUILT_PATH, prebuilt, "prebuilt workload and pod group should be equal")


def validate_pod(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    if req.sub_resource == RESIZE:
        return validate_pod_resize(req, ctx)
    assert req.object is not None
    obj = req.object
    labels = string_map(obj, "labels")
    annotations = string_map(obj, "annotations")
    errs = FieldErrors()
    warnings: list[str] = []
    if req.operation == "UPDATE":
        assert req.old_object is not None
        old = req.old_object
        old_labels = string_map(old, "labels")
        old_annotations = string_map(old, "annotations")
        validate_on_update(
            old_labels=old_labels,
            new_labels=labels,
            old_suspended=is_gated(old),
            new_suspended=is_gated(obj),
            namespace=request_namespace(req, obj),
            ctx=ctx,
            errs=errs,
        )
    else:
        validate_on_create(labels, errs)
    _validate_common(obj, labels, annotations, errs)
    if req.operation == "UPDATE":
        if (
            labels.get(GROUP_NAME_LABEL)
            and old_annotations.get(RETRIABLE_IN_GROUP_ANNOTATION) == "false"
            and annotations.get(RETRIABLE_IN_GROUP_ANNOTATION) != "false"
        ):
            errs.forbidden(RETRIABLE_PATH, "unretriable pod group can't be converted to retriable")
        old_group = old_labels.get(GROUP_NAME_LABEL, "")
        if old_group and labels.get(GROUP_NAME_LABEL, "") != old_group:
            errs.immutable(GROUP_NAME_PATH, labels.get(GROUP_NAME_LABEL, ""))
        _only_the_service_ungates(req, ctx, errs)
    if (
        labels.get(MANAGED_LABEL) == MANAGED_LABEL_VALUE
        and (req.operation == "CREATE" or SUSPENDED_BY_PARENT_ANNOTATION not in annotations)
        and owner_is_managed(obj, ctx.config)
    ):
        warnings.append(MANAGED_OWNER_WARNING)
    return errs.verdict(warnings)
