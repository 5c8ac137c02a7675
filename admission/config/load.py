"""Reading the configuration file: YAML to a checked ``Config``, every error a
``ConfigError`` naming the file and the field, every no-effect field a warning."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from admission.config.schema import Config, ConfigError, ConfigurationDoc
from admission.config.warnings import unimplemented
from admission.integrations.registry import FrameworksError, frameworks
from queues.transformations import ResourceTransformer


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
    try:
        parsed = ConfigurationDoc.model_validate(doc)
        try:
            if parsed.integrations is not None:
                frameworks(parsed.integrations.registry_section())
        except FrameworksError as e:
            raise ConfigError(f"{source}: {e}") from e
        for name in ("admissionFairSharing", "cohortCredits"):
            section = getattr(parsed, name)
            if section is not None:
                try:
                    section.sampling()
                except ValueError as e:
                    raise ConfigError(f"{source}: {name}.usageSamplingInterval: {e}") from e
    except ValidationError as e:
        err = e.errors()[0]
        path = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "bool_type":  # a quoted "yes" or "true" is not read as true
            msg = f"must be a boolean (true or false, unquoted), got {err['input']!r}"
        msg = msg.removeprefix("Value error, ")
        raise ConfigError(f"{source}: {path}: {msg}") from e
    resources = parsed.resources.transformer() if parsed.resources else ResourceTransformer()
    mappings = tuple(
        d.mapping() for d in ((parsed.resources and parsed.resources.deviceClassMappings) or [])
    )
    warnings = [f"{source}: {w}" for w in unimplemented(parsed)]
    return Config(
        doc=parsed, warnings=warnings, resources=resources, device_class_mappings=mappings
    )
