"""What the webhooks need to know about the deployment they run in.

Kept separate from the configuration-file parser (``admission.config.schema``) so the
handlers depend on a small typed object, not on the file format: the lead wires the
file's ``managedJobsNamespaceSelector`` / ``manageJobsWithoutQueueName`` / namespace
into :class:`WebhookConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission.integrations.registry import ALL, Frameworks
from queues.model import LabelSelector, SelectorRequirement

DEFAULT_SERVICE_NAMESPACE = "quartermaster-system"
DEFAULT_SERVICE_ACCOUNT = "quartermaster"  # manifests/base/serviceaccount.yaml
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: Who removes the reference to a deleted owner from its dependents (orphaning): the
#: garbage collector of kube-controller-manager, under its own service account when the
#: controller manager runs with ``--use-service-account-credentials`` (kubeadm, kind and
#: most distributions), else as the controller manager itself.
DEFAULT_GARBAGE_COLLECTORS: tuple[str, ...] = (
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
)


def default_namespace_selector(service_namespace: str) -> LabelSelector:
    """Kueue's default: ``kubernetes.io/metadata.name NotIn [kube-system, <service ns>]``."""
    return LabelSelector(
        match_expressions=(
            SelectorRequirement(NAMESPACE_NAME_LABEL, "NotIn", ("kube-system", service_namespace)),
        )
    )


DEFAULT_IMPACT_DEADLINE = 2.0  # seconds; the manifests' webhook timeoutSeconds is 10


def garbage_collectors_of(config: Any) -> tuple[str, ...]:
    """``webhook.garbageCollectorUsernames`` of a Configuration, else the default."""
    section = getattr(getattr(config, "doc", None), "webhook", None) or {}
    raw = section.get("garbageCollectorUsernames")
    if raw is None:
        return DEFAULT_GARBAGE_COLLECTORS
    return tuple(raw)


def impact_deadline_of(config: Any) -> float:
    """``webhook.impactDeadline`` of a Configuration (a duration), else the default."""
    section = getattr(getattr(config, "doc", None), "webhook", None) or {}
    raw = section.get("impactDeadline")
    if raw is None:
        return DEFAULT_IMPACT_DEADLINE
    from admission.config.durations import parse_duration
    from admission.config.schema import ConfigError

    try:
        seconds = parse_duration(raw)
    except ValueError as e:
        raise ConfigError(f"webhook.impactDeadline: {e}") from e
    if seconds <= 0:
        raise ConfigError("webhook.impactDeadline: must be > 0")
    return seconds


@dataclass(slots=True)
class WebhookConfig:
    """Settings of the job/pod integration webhooks and of the Workload status guard.

    ``managed_jobs_namespace_selector=None`` means Kueue's default selector (not
    ``kube-system``, not the service's namespace); pass ``LabelSelector()`` to manage
    every namespace.
    """

    service_namespace: str = DEFAULT_SERVICE_NAMESPACE
    managed_jobs_namespace_selector: LabelSelector | None = None
    manage_jobs_without_queue_name: bool = False
    # The identity the API server reports for our controller: only it may set a
    # Workload's status.admission (a user must not admit their own workload).
    service_account_username: str = ""
    # The job integrations the Configuration enables (``integrations.frameworks``): which
    # kinds are served (the others' webhooks are no-ops) and whose children are left to
    # their parent's integration.
    frameworks: Frameworks = ALL
    # The service configuration (``admission.config.schema.Config``): the quota webhook's impact
    # what-if builds its scheduler from it, exactly as ``plan --what-if --config`` does
    # (fair sharing, admission fair sharing, cohort credits). None: Kueue's defaults.
    what_if_config: Any = None
    # How long a quota edit's answer may wait for its impact warnings (seconds); past
    # it the edit is answered with a warning that the impact was not computed. None:
    # the Configuration's ``webhook.impactDeadline`` (a duration), else 2 s.
    impact_deadline: float | None = None
    # The identities that may drop a Workload's controller reference (the garbage
    # collector orphaning it). None: the Configuration's
    # ``webhook.garbageCollectorUsernames``, else :data:`DEFAULT_GARBAGE_COLLECTORS`.
    garbage_collector_usernames: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.service_namespace:
            raise ValueError("WebhookConfig.service_namespace must not be empty")
        if self.managed_jobs_namespace_selector is None:
            self.managed_jobs_namespace_selector = default_namespace_selector(
                self.service_namespace
            )
        if self.impact_deadline is None:
            self.impact_deadline = impact_deadline_of(self.what_if_config)
        if self.impact_deadline <= 0:
            raise ValueError("WebhookConfig.impact_deadline must be > 0")
        if self.garbage_collector_usernames is None:
            self.garbage_collector_usernames = garbage_collectors_of(self.what_if_config)
        if not self.service_account_username:
            self.service_account_username = (
                f"system:serviceaccount:{self.service_namespace}:{DEFAULT_SERVICE_ACCOUNT}"
            )

    @classmethod
    def from_config(cls, config: Any, *, namespace: str | None = None) -> WebhookConfig:
        """From the service configuration file (``admission.config.schema.Config``)."""
        from queues.api.parse import parse_label_selector

        doc = config.doc
        ns = namespace or doc.namespace or DEFAULT_SERVICE_NAMESPACE
        selector = None
        if doc.managedJobsNamespaceSelector is not None:
            selector = parse_label_selector(
                doc.managedJobsNamespaceSelector, path="managedJobsNamespaceSelector"
            )
        return cls(
            service_namespace=ns,
            managed_jobs_namespace_selector=selector,
            manage_jobs_without_queue_name=doc.manageJobsWithoutQueueName,
            what_if_config=config,
            frameworks=config.frameworks,
        )

    @property
    def managed_owner_kinds(self) -> frozenset[tuple[str, str]]:
        """(apiVersion, kind) of owners an enabled integration manages: a job or pod
        whose controller owner is one of these is left to it
        (IsOwnerManagedByKueueForObject)."""
        return self.frameworks.managed_owner_kinds()

    def namespace_is_managed(self, labels: dict[str, str]) -> bool:
        selector = self.managed_jobs_namespace_selector
        return selector is None or selector.matches(labels)
