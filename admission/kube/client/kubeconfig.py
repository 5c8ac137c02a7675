"""Checking a kubeconfig file before the ``kubernetes`` library reads it.

The library's loader assumes a well-formed file: a missing one prints a stray
"Config not found" line before failing, a YAML syntax error escapes as a
``yaml.YAMLError``, and a file whose ``clusters`` is a number fails deep inside its
merge with a ``TypeError``. Every caller (``serve`` and the kueuectl verbs) checks the
file here first, so that a bad kubeconfig is one line naming the file and what is wrong.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from kubernetes.aio import config as kube_config
from kubernetes.aio.client import Configuration

__all__ = ["KubeconfigError", "check_kubeconfig", "load_configuration"]

_LISTS = ("clusters", "contexts", "users")


class KubeconfigError(ValueError):
    """No usable client configuration: the message says which file and what is wrong."""


def check_kubeconfig(path: str, *, flag: str = "--kubeconfig") -> dict[str, Any]:
    """The parsed kubeconfig at ``path``, or :class:`KubeconfigError` naming the file
    (as ``flag``) and the problem: no such file, not YAML, or not shaped like a
    kubeconfig (a mapping whose ``clusters``, ``contexts`` and ``users`` are lists of
    mappings)."""
    where = f"{flag} {path}" if flag else path
    if not os.path.isfile(path):
        raise KubeconfigError(f"{where}: no such file")
    try:
        with open(path, "rb") as f:
            doc = yaml.safe_load(f)
    except OSError as err:
        raise KubeconfigError(f"{where}: cannot read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise KubeconfigError(
            f"{where}: not a usable kubeconfig: invalid YAML{at}: {problem}"
        ) from None
    if not isinstance(doc, dict):
        got = "an empty file" if doc is None else f"a {type(doc).__name__}"
        raise KubeconfigError(f"{where}: not a usable kubeconfig: expected a mapping, got {got}")
    for key in _LISTS:
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise KubeconfigError(
                f"{where}: not a usable kubeconfig: {key} must be a list of mappings "
                "(each with a name)"
            )
    return doc


async def load_configuration(
    configuration: Configuration, *, kubeconfig: str | None, context: str | None
) -> None:
    if kubeconfig is not None:
        check_kubeconfig(kubeconfig)
        await kube_config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
        return
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        present = [p for p in paths.split(os.pathsep) if p and os.path.isfile(p)]
        if not present:
            raise FileNotFoundError("no such file") from None
        for path in present:
            check_kubeconfig(path, flag="")
        await kube_config.load_kube_config(
            context=context, client_configuration=configuration, persist_config=False
        )
