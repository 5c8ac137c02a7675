"""The inputs of ``plan`` across clusters: the manager's files, which hold its queues
and jobs plus the MultiKueueConfigs and MultiKueueClusters, and one set of files per
worker cluster (``--worker NAME=PATH``), which hold that worker's own queues, flavors
and running workloads.

The manager's files are read as ``plan`` reads any files (:mod:`.loader`); the two
MultiKueue kinds, which a single-cluster plan skips, are taken out on the way and
checked as strictly as the API server checks them (Kueue's
``apis/kueue/v1beta2/multikueue_types.go``, :mod:`queues.api.multikueue`). A worker
name must be a MultiKueueCluster of the manager's files: a name that is not is an
input error, as is a worker given twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from pydantic import ValidationError

from admission.drivers.documents import STDIN, STDIN_LABEL, LoadError, documents_of, sources
from admission.drivers.inputs import Inputs, merge
from admission.drivers.loader import load_documents, load_paths
from admission.integrations.registry import ALL, Frameworks
from queues.api.fields import KubeModel, loc_path, pydantic_message
from queues.api.kinds import KUEUE_GROUP, KUEUE_V1BETA2
from queues.api.multikueue import EXACTLY_ONE_SOURCE, MultiKueueCluster, MultiKueueConfig

MULTIKUEUE_KINDS: dict[str, type[KubeModel]] = {
    "MultiKueueConfig": MultiKueueConfig,
    "MultiKueueCluster": MultiKueueCluster,
}


@dataclass(slots=True)
class ManagerInputs:
    """The manager's objects, and its MultiKueue objects by name: each
    MultiKueueConfig's workers in order of preference, and where each
    MultiKueueCluster was read."""

    inputs: Inputs
    configs: dict[str, list[str]] = field(default_factory=dict)
    clusters: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class WorkerInputs:
    name: str
    paths: list[str]
    inputs: Inputs


def parse_worker_flag(value: str, flag: str = "--worker") -> tuple[str, str]:
    """``NAME=PATH`` of ``--worker`` (or ``flag``); a value without both is a ``ValueError``."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"{flag} {value!r}: expected NAME=PATH (a MultiKueueCluster name)")
    return name, path


def load_manager(
    paths: list[str],
    *,
    recursive: bool = False,
    namespace: str | None = None,
    stdin: TextIO | None = None,
    frameworks: Frameworks = ALL,
) -> ManagerInputs:
    """The manager's files: ``load_paths``'s ``Inputs``, with the MultiKueue objects
    taken out and checked (``LoadError`` naming file, document and field)."""
    for path in paths:
        if path != STDIN and not os.path.exists(path):
            raise LoadError("no such file or directory", file=path)
    out = ManagerInputs(Inputs())
    seen: dict[tuple[str, str], str] = {}
    documents = _documents(paths, recursive=recursive, stdin=stdin, out=out, seen=seen)
    out.inputs = load_documents(documents, namespace=namespace, frameworks=frameworks)
    return out


def load_workers(
    flags: list[tuple[str, str]],
    manager: ManagerInputs,
    *,
    recursive: bool = False,
    namespace: str | None = None,
    frameworks: Frameworks = ALL,
) -> list[WorkerInputs]:
    """Each worker's files, in the order given; ``flags`` are (name, path) pairs, and a
    name given more than once reads all its paths. A name that is no MultiKueueCluster
    of the manager's files is a ``LoadError``."""
    by_name: dict[str, list[str]] = {}
    for name, path in flags:
        if path == STDIN:
            raise LoadError(
                f"--worker {name}: standard input is the manager's (-f -); give a file "
                "or directory",
                file=STDIN_LABEL,
            )
        if name not in manager.clusters:
            known = ", ".join(sorted(manager.clusters)) or "none"
            raise LoadError(
                f"--worker {name}: no MultiKueueCluster {name!r} in the manager's files "
                f"(MultiKueueClusters: {known})",
                kind="MultiKueueCluster",
                name=name,
                path="metadata.name",
            )
        by_name.setdefault(name, []).append(path)
    workers = []
    for name, wpaths in by_name.items():
        try:
            inputs = load_paths(
                wpaths, recursive=recursive, namespace=namespace, frameworks=frameworks
            )
        except LoadError as e:
            raise LoadError(f"--worker {name}: {e}") from None
        workers.append(WorkerInputs(name, wpaths, inputs))
    return workers


def _documents(
    paths: list[str],
    *,
    recursive: bool,
    stdin: TextIO | None,
    out: ManagerInputs,
    seen: dict[tuple[str, str], str],
) -> Iterator[tuple[str, int, Any]]:
    """The documents of ``paths`` (as the loader reads them) but the MultiKueue objects,
    which go to ``out`` (also when they are items of a List)."""
    for path in paths:
        found = 0
        for file, text in sources(path, recursive=recursive, stdin=stdin):
            for index, doc in documents_of(file, text):
                found += 1
                if _is_list(doc):
                    items = doc.get("items")
                    if isinstance(items, list):
                        keep = []
                        for i, item in enumerate(items):
                            if not _take(item, file, index, i, out, seen):
                                keep.append(item)
                        if not keep and items:
                            continue
                        doc = {**doc, "items": keep}
                elif _take(doc, file, index, None, out, seen):
                    continue
                yield file, index, doc
        if not found:
            where = STDIN_LABEL if path == STDIN else path
            raise LoadError("no objects found", file=where)


def _is_list(doc: Any) -> bool:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return isinstance(kind, str) and kind.endswith("List") and (kind == "List" or "items" in doc)


def _take(
    doc: Any,
    file: str,
    index: int,
    item: int | None,
    out: ManagerInputs,
    seen: dict[tuple[str, str], str],
) -> bool:
    """File a MultiKueue object in ``out`` (True), or leave the document (False)."""
    if not isinstance(doc, dict):
        return False
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if kind not in MULTIKUEUE_KINDS or not isinstance(api_version, str):
        return False
    if api_version.rpartition("/")[0] != KUEUE_GROUP:
        return False
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    display = name if isinstance(name, str) else ""

    def fail(path: str, message: str) -> LoadError:
        return LoadError(
            message, file=file, document=index, item=item, kind=str(kind), name=display,
            path=path,
        )  # fmt: skip

    if api_version != KUEUE_V1BETA2:
        raise fail(
            "apiVersion",
            f'Unsupported value: "{api_version}": supported values for {kind}: "{KUEUE_V1BETA2}"',
        )
    if not display:
        raise fail("metadata.name", "Required value")
    try:
        parsed = MULTIKUEUE_KINDS[str(kind)].model_validate(doc)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise fail(loc_path(errors[0]["loc"]), pydantic_message(errors[0])) from None
    where = f"{file} document {index}" + ("" if item is None else f" items[{item}]")
    if (kind, display) in seen:
        raise fail("metadata.name", f"duplicate {kind}: already defined in {seen[kind, display]}")
    seen[(str(kind), display)] = where
    if isinstance(parsed, MultiKueueConfig):
        clusters = list(parsed.spec.clusters)
        for i, c in enumerate(clusters):
            if c in clusters[:i]:
                raise fail(f"spec.clusters[{i}]", f'Duplicate value: "{c}"')
        out.configs[display] = clusters
    elif isinstance(parsed, MultiKueueCluster):
        source = parsed.spec.cluster_source
        if (source.kube_config is None) == (source.cluster_profile_ref is None):
            raise fail("spec.clusterSource", f"Invalid value: {EXACTLY_ONE_SOURCE}")
        out.clusters[display] = where
    return True


def merge_manager(base: ManagerInputs, overlay: ManagerInputs) -> ManagerInputs:
    """``base`` with ``overlay``'s objects replacing or adding to its own (the what-if)."""
    return ManagerInputs(
        merge(base.inputs, overlay.inputs),
        configs={**base.configs, **overlay.configs},
        clusters={**base.clusters, **overlay.clusters},
    )


def overlay_workers(
    workers: list[WorkerInputs],
    flags: list[tuple[str, str]],
    *,
    recursive: bool = False,
    namespace: str | None = None,
    frameworks: Frameworks = ALL,
) -> list[WorkerInputs]:
    """``workers`` with the objects of each ``(name, path)`` replacing or adding to that
    worker's own; a name not among ``workers`` is a ``LoadError``."""
    by_name: dict[str, list[str]] = {}
    for name, path in flags:
        if name not in {w.name for w in workers}:
            given = ", ".join(w.name for w in workers)
            raise LoadError(
                f"--what-if-worker {name}: no --worker {name}=PATH given (workers: {given})"
            )
        if path == STDIN:
            raise LoadError(f"--what-if-worker {name}: give a file or directory", file=STDIN_LABEL)
        by_name.setdefault(name, []).append(path)
    out = []
    for w in workers:
        if w.name not in by_name:
            out.append(w)
            continue
        try:
            extra = load_paths(
                by_name[w.name], recursive=recursive, namespace=namespace, frameworks=frameworks
            )
        except LoadError as e:
            raise LoadError(f"--what-if-worker {w.name}: {e}") from None
        out.append(WorkerInputs(w.name, [*w.paths, *by_name[w.name]], merge(w.inputs, extra)))
    return out
