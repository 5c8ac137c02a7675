"""Every job kind Quartermaster admits, and which of them a Configuration enables.

The one list the rest of the service is driven by: the informers and their label
selectors, the API calls (and so the RBAC manifest), the webhook paths and the
webhook configurations in ``manifests/``, the ``plan`` loader, the kinds whose
children are left to their parent's integration. Adding a kind is one module under
``admission/integrations/`` and one line in :data:`INTEGRATIONS`.

``integrations.frameworks`` of the Configuration (Kueue's framework names) says which
integrations run; a kind that is registered but not enabled is not watched, its
webhooks answer "allowed" unchanged (Kueue's NoopWebhook), and its children are
treated like any other object (a child Job of a disabled JobSet integration is a
plain Job). Without the list every registered integration is enabled
(:data:`DEFAULT_FRAMEWORKS`), as in the configuration Kueue ships
(``config/components/manager/controller_manager_config.yaml`` enables batch/job, pod,
deployment, statefulset, jobset, mpijob, rayjob, raycluster, trainjob and
leaderworkerset; Kueue's built-in default, for a Configuration without the list, is
``batch/job`` alone). The departure is deliberate: ``plan`` and ``simulate`` read any
manifest without a configuration, and an enabled kind whose CRD is not installed costs
nothing (it waits for its CRD: :mod:`admission.kube.control.integrationgate`). The shipped
``manifests/base/config/config.yaml`` lists the same frameworks explicitly and
manifests/README.md names them (a test keeps the three equal).
``integrations.externalFrameworks`` (``Kind.version.group``) names kinds managed by
another controller through the Workload API: their children are left alone too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from admission.integrations.framework.fields import meta_of
from admission.integrations.framework.interface import Integration
from admission.integrations.kinds.deployment import DEPLOYMENT
from admission.integrations.kinds.job import JOB
from admission.integrations.kinds.jobset import JOBSET
from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
from admission.integrations.kinds.mpijob import MPIJOB
from admission.integrations.kinds.pod import POD
from admission.integrations.kinds.pytorchjob import PYTORCHJOB
from admission.integrations.kinds.raycluster import RAYCLUSTER
from admission.integrations.kinds.rayjob import RAYJOB
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.integrations.kinds.trainjob import TRAINJOB
from queues.api.labels import IS_GROUP_WORKLOAD

INTEGRATIONS: tuple[Integration, ...] = (
    JOB,
    POD,
    JOBSET,
    PYTORCHJOB,
    MPIJOB,
    RAYCLUSTER,
    RAYJOB,
    TRAINJOB,
    STATEFULSET,
    DEPLOYMENT,
    LEADERWORKERSET,
)
"""Registration order: the order of informers, webhooks and generated manifests."""

BY_FRAMEWORK: dict[str, Integration] = {i.framework: i for i in INTEGRATIONS}
BY_KIND: dict[tuple[str, str], Integration] = {(i.api_version, i.kind): i for i in INTEGRATIONS}
assert len(BY_FRAMEWORK) == len(INTEGRATIONS), "duplicate framework name"
assert len({i.resource.plural for i in INTEGRATIONS}) == len(INTEGRATIONS), "duplicate plural"


class FrameworksError(ValueError):
    """A bad ``integrations`` section; the message names the field."""


@dataclass(frozen=True, slots=True)
class Frameworks:
    """The integrations a Configuration enables."""

    enabled: frozenset[str]
    external: frozenset[tuple[str, str]] = frozenset()  # (apiVersion, kind)

    def integrations(self) -> tuple[Integration, ...]:
        """The enabled integrations, in registration order."""
        return tuple(i for i in INTEGRATIONS if i.framework in self.enabled)

    def is_enabled(self, integration: Integration) -> bool:
        return integration.framework in self.enabled

    def managed_owner_kinds(self) -> frozenset[tuple[str, str]]:
        """(apiVersion, kind) of owners whose children their integration manages
        (Kueue's ``IsOwnerManagedByKueueForObject``: enabled integrations only)."""
        kinds = {(i.api_version, i.kind) for i in self.integrations() if i.reconciler != "pods"}
        return frozenset(kinds | set(self.external))

    def integration_for(self, api_version: str, kind: str) -> Integration | None:
        """The enabled integration of objects of (apiVersion, kind), if any."""
        integ = BY_KIND.get((api_version, kind))
        return integ if integ is not None and self.is_enabled(integ) else None


ALL = Frameworks(frozenset(BY_FRAMEWORK))
DEFAULT_FRAMEWORKS: tuple[str, ...] = tuple(i.framework for i in INTEGRATIONS)
"""What ``integrations.frameworks`` is when not given: every registered integration."""


def workload_status_is_the_services(workload: Mapping[str, Any], frameworks: Frameworks) -> bool:
    """Whether only the service may write ``workload``'s status (its conditions,
    ``reclaimablePods``, ``requeueState`` …): a pod group's Workload, and one controlled
    by an object of any registered kind (enabled or not) — pods run on its admission.
    An external framework's Workload is its own controller's to report on (as Kueue's
    job framework does), and a standalone Workload (no controller) runs nothing. A kind
    added to :data:`INTEGRATIONS` is covered without naming it anywhere else."""
    meta = meta_of(workload)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and annotations.get(IS_GROUP_WORKLOAD) == "true":
        return True
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            key = (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
            return key in BY_KIND and key not in frameworks.external
    return False


def frameworks(section: Mapping[str, Any] | None) -> Frameworks:
    """The Configuration's ``integrations`` section parsed (None, or no ``frameworks``
    list: :data:`DEFAULT_FRAMEWORKS`).

    Unknown framework names are refused (Kueue: ``integration not found``), as is a
    malformed external framework; the integrations an enabled one needs are added.
    """
    if section is None:
        return ALL
    if not isinstance(section, Mapping):
        raise FrameworksError("integrations: must be a mapping")
    unknown_keys = sorted(set(section) - {"frameworks", "externalFrameworks", "podOptions",
                                          "labelKeysToCopy"})  # fmt: skip
    if unknown_keys:
        raise FrameworksError(f"integrations.{unknown_keys[0]}: unknown field")
    listed = section.get("frameworks")
    names = (
        list(DEFAULT_FRAMEWORKS) if listed is None else _strings(listed, "integrations.frameworks")
    )
    enabled: set[str] = set()
    for i, name in enumerate(names):
        if name not in BY_FRAMEWORK:
            known = ", ".join(sorted(BY_FRAMEWORK))
            raise FrameworksError(
                f"integrations.frameworks[{i}]: {name!r}: integration not found (known: {known})"
            )
        enabled.add(name)
    for name in list(enabled):
        enabled.update(BY_FRAMEWORK[name].implies)
    external: set[tuple[str, str]] = set()
    for i, arg in enumerate(
        _strings(section.get("externalFrameworks"), "integrations.externalFrameworks")
    ):
        kind, sep, rest = arg.partition(".")
        version, sep2, group = rest.partition(".")
        if not (kind and sep and version and sep2 and group):
            raise FrameworksError(
                f"integrations.externalFrameworks[{i}]: {arg!r}: expected Kind.version.group"
            )
        external.add((f"{group}/{version}", kind))
    return Frameworks(frozenset(enabled), frozenset(external))


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FrameworksError(f"{where}: must be a list of strings")
    return list(value)


def framework_names(integrations: Iterable[Integration]) -> list[str]:
    return [i.framework for i in integrations]
