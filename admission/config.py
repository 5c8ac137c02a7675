"""The service configuration file (Kueue's ``Configuration`` plus our extensions).

The same file is taken by ``plan --config``, ``simulate --config`` and
``serve --config``. Field names are Kueue's where Kueue has the feature
(``config.kueue.x-k8s.io/v1beta2``); unknown fields are an error naming the path,
never silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from admission.cache import Cache
    from admission.scheduler import Scheduler

KNOWN_TOP_LEVEL = {
    "apiVersion",
    "kind",
    "namespace",
    "fairSharing",
    "admissionFairSharing",
    "cohortCredits",
    "waitForPodsReady",
    "manageJobsWithoutQueueName",
    "managedJobsNamespaceSelector",
    "internalCertManagement",
    "webhook",
    "metrics",
    "health",
    "leaderElection",
    "integrations",
    "clientConnection",
}


class ConfigError(ValueError):
    """A configuration file that is not valid; the message names the field."""


@dataclass(slots=True)
class Config:
    """Parsed configuration; defaults are Kueue's."""

    raw: dict[str, Any] = field(default_factory=dict)
    now: float | None = None  # plan --now: evaluation time (epoch seconds)

    def make_scheduler(self, cache: Cache, *, clock: Callable[[], float]) -> Scheduler:
        """A scheduler wired with the features this configuration enables."""
        from admission.scheduler import Scheduler

        return Scheduler(cache, clock=clock)


def load_config(path: str | None) -> Config:
    if path is None:
        return Config()
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return parse_config(doc or {}, source=path)


def parse_config(doc: Any, *, source: str = "configuration") -> Config:
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping")
    api = doc.get("apiVersion")
    if api is not None and api not in (
        "config.kueue.x-k8s.io/v1beta2",
        "config.kueue.x-k8s.io/v1beta1",
    ):
        raise ConfigError(f"{source}: apiVersion: unsupported {api!r}")
    kind = doc.get("kind")
    if kind is not None and kind != "Configuration":
        raise ConfigError(f"{source}: kind: expected Configuration, got {kind!r}")
    for key in doc:
        if key not in KNOWN_TOP_LEVEL:
            raise ConfigError(f"{source}: {key}: unknown field")
    return Config(raw=dict(doc))
