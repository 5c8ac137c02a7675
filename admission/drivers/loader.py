"""Reading Kubernetes objects from YAML files into the engine's model.

``quartermaster plan``, ``serve --webhooks-only`` and the simulator take their queues,
flavors and workloads from YAML files (CLI.md). This module is the file side of that:
it expands paths (a file, or every ``*.yaml``/``*.yml`` in a directory, sorted by
name), splits multi-document YAML, hands each object to ``queues.api`` for validation,
turns job objects (batch/v1 Jobs and every other kind of
``admission.integrations.registry``) into Workloads the way Kueue's job controllers do,
and collects everything in an ``Inputs``.

Any bad input stops the load with a ``LoadError``: one paragraph naming the file, the
0-based document index, the object and the field. A loader that skipped bad documents
would plan against a cluster nobody wrote down.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from admission.integrations.base import Integration, IntegrationError, workload_model
from admission.integrations.registry import ALL, INTEGRATIONS, Frameworks
from queues import api
from queues.model import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    Topology,
    Workload,
)
from queues.topology import Node, PodUsage
from queues.topology_nodes import NodeInputError, node_from_object, pod_usage_from_object

__all__ = ["Inputs", "LoadError", "load_paths", "merge", "default_namespaces"]

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
YAML_SUFFIXES = (".yaml", ".yml")
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available
# the job kinds plan reads: every integration with one Workload per object
JOB_KINDS: dict[str, Integration] = {i.kind: i for i in INTEGRATIONS if i.reconciler == "object"}
CORE_KINDS = ("Node", "Pod")  # read for topology-aware scheduling, v1 only
SUPPORTED_KINDS = tuple(sorted({kind for _, kind in api.KINDS} | set(JOB_KINDS) | set(CORE_KINDS)))


class LoadError(Exception):
    """Input that cannot be loaded. The message is one paragraph naming where and what."""

    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        document: int | None = None,
        kind: str = "",
        name: str = "",
        path: str = "",
    ) -> None:
        self.file = file
        self.document = document
        self.kind = kind
        self.name = name
        self.path = path
        self.detail = message
        where = [part for part in (file, _doc(document)) if part]
        what = " ".join(part for part in (kind, name) if part)
        parts = [*where, what, path, message]
        super().__init__(": ".join(part for part in parts if part))


def _doc(index: int | None) -> str:
    return "" if index is None else f"document {index}"


@dataclass
class Inputs:
    """Everything read from the input files, as engine objects, keyed by name.

    ``local_queues`` and workload keys are ``namespace/name``. ``namespaces`` holds the
    Namespace documents given, or (``namespaces_given`` false) one per namespace used by
    a LocalQueue or Workload, labelled only ``kubernetes.io/metadata.name=<name>``.
    Finished workloads are left out (their keys are in ``finished_workloads``).
    """

    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    workload_priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    workloads: list[Workload] = field(default_factory=list)
    namespaces_given: bool = False
    finished_workloads: set[str] = field(default_factory=set)
    """Keys of the Finished workloads left out (an overlay's finish its base's ones)."""
    topologies: dict[str, Topology] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodUsage] = field(default_factory=dict)
    """Bound, running pods not placed by TAS (their requests use their nodes)."""


@dataclass(slots=True)
class _Origin:
    """Where a document came from: file, index in the file, index across all files."""

    file: str
    document: int
    position: int

    def __str__(self) -> str:
        return f"{self.file} document {self.document}"

    def error(self, message: str, *, kind: str = "", name: str = "", path: str = "") -> LoadError:
        return LoadError(
            message, file=self.file, document=self.document, kind=kind, name=name, path=path
        )


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_paths(paths: list[str], *, frameworks: Frameworks = ALL) -> Inputs:
    """Load YAML files and directories (non-recursive) into one ``Inputs``.

    Job objects are converted after every file is read, so they see all priority
    classes; objects of an integration ``frameworks`` does not enable are not managed
    and are left out.
    """
    inputs = Inputs()
    seen: dict[tuple[str, str], _Origin] = {}
    workloads: list[tuple[_Origin, Workload]] = []
    jobs: list[tuple[_Origin, Integration, dict[str, Any]]] = []
    documents = ((file, index, doc) for file in _expand(paths) for index, doc in _documents(file))
    for position, (file, index, doc) in enumerate(documents):
        origin = _Origin(file, index, position)
        kind, name = _identify(doc, origin)
        if kind in JOB_KINDS:
            _claim(seen, (kind, name), origin, kind=kind, name=name)
            if frameworks.is_enabled(JOB_KINDS[kind]) and not JOB_KINDS[kind].skip(doc):
                jobs.append((origin, JOB_KINDS[kind], doc))
            continue
        if kind in CORE_KINDS:
            _claim(seen, (kind, name), origin, kind=kind, name=name)
            _core_object(doc, kind, name, origin, inputs)
            continue
        obj = _parse(doc, origin)
        key = obj.key if isinstance(obj, LocalQueue | Workload) else obj.name
        _claim(seen, (kind, key), origin, kind=kind, name=key)
        if isinstance(obj, Workload):
            workloads.append((origin, obj))
        else:
            _store(inputs, obj)
    for origin, integration, job in jobs:
        wl = _job_workload(integration, job, origin, inputs)
        if not wl.queue_name:
            # Kueue's defaulting: the LocalQueue named "default" in the namespace, if any;
            # otherwise the Job is not queue-managed and the service leaves it alone.
            if f"{wl.namespace}/default" not in inputs.local_queues:
                continue
            wl.queue_name = "default"
        workloads.append((origin, wl))
    workloads.sort(key=lambda item: item[0].position)
    keys: dict[str, _Origin] = {}
    for origin, wl in workloads:
        if wl.key in keys:
            raise origin.error(
                f"duplicate Workload: already defined in {keys[wl.key]}",
                kind="Workload",
                name=wl.key,
                path="metadata.name",
            )
        keys[wl.key] = origin
        if wl.finished:
            inputs.finished_workloads.add(wl.key)
        else:
            inputs.workloads.append(wl)
    if not inputs.namespaces_given:
        inputs.namespaces = default_namespaces(inputs)
    return inputs


def _core_object(
    doc: dict[str, Any], kind: str, name: str, origin: _Origin, inputs: Inputs
) -> None:
    """A v1 Node (topology capacity) or a v1 Pod (capacity used on its node)."""
    try:
        if kind == "Node":
            inputs.nodes[name] = node_from_object(doc)
        else:
            pod = pod_usage_from_object(doc)
            if pod is not None:
                inputs.pods[pod.key] = pod
    except NodeInputError as exc:
        raise origin.error(exc.message, kind=kind, name=name, path=exc.path) from None


def _job_workload(
    integration: Integration, job: dict[str, Any], origin: _Origin, inputs: Inputs
) -> Workload:
    try:
        return workload_model(
            integration,
            job,
            workload_priority_classes=inputs.workload_priority_classes,
            priority_classes=inputs.priority_classes,
        )
    except IntegrationError as exc:
        raise origin.error(
            str(exc), kind=integration.kind, name=_namespaced(job.get("metadata"))
        ) from None


def _expand(paths: list[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(YAML_SUFFIXES))
            for name in names:
                full = os.path.join(path, name)
                if os.path.isfile(full):
                    yield full
        elif os.path.isfile(path):
            yield path
        elif os.path.exists(path):
            raise LoadError("not a regular file or directory", file=path)
        else:
            raise LoadError("no such file or directory", file=path)


class _NotPlain(Exception):
    """The stream uses a YAML feature the fast path leaves to the full loader."""


def _fast_documents(text: str) -> list[Any]:
    """Every document of a YAML stream, built straight from libyaml's events.

    The same values as ``yaml.safe_load_all`` for the plain YAML Kubernetes manifests
    are made of, without composing a node graph first: plain scalars are resolved
    once per distinct value (they repeat a lot: kinds, API versions, images), quoted
    ones are strings. Anything else (anchors, aliases, tags, merge keys) raises
    ``_NotPlain`` and the caller uses the full loader; so do syntax errors, so that
    their messages come from one place.
    """
    loader = _SafeLoader(text)
    cache: dict[str, Any] = {}
    constructors = loader.yaml_constructors
    str_tag = "tag:yaml.org,2002:str"

    def plain(value: str) -> Any:
        try:
            return cache[value]
        except KeyError:
            tag = loader.resolve(yaml.ScalarNode, value, (True, False))
            if tag == "tag:yaml.org,2002:merge":
                raise _NotPlain from None
            obj = (
                value if tag == str_tag else constructors[tag](loader, yaml.ScalarNode(tag, value))
            )
            cache[value] = obj
            return obj

    docs: list[Any] = []
    # Containers being built: [container, pending key] (key unused for lists).
    stack: list[list[Any]] = []
    root: Any = None
    try:
        while True:
            ev = loader.get_event()
            cls = type(ev)
            if cls is yaml.ScalarEvent:
                if ev.anchor is not None or ev.tag is not None:
                    raise _NotPlain
                value: Any = plain(ev.value) if ev.implicit[0] else ev.value
            elif cls is yaml.MappingStartEvent or cls is yaml.SequenceStartEvent:
                if ev.anchor is not None or (ev.tag is not None and ev.tag != "!"):
                    raise _NotPlain
                stack.append([{} if cls is yaml.MappingStartEvent else [], _NO_KEY])
                continue
            elif cls is yaml.MappingEndEvent or cls is yaml.SequenceEndEvent:
                value = stack.pop()[0]
            elif cls is yaml.DocumentEndEvent:
                docs.append(root)
                root = None
                continue
            elif cls is yaml.StreamEndEvent:
                return docs
            elif cls is yaml.AliasEvent:
                raise _NotPlain
            else:  # stream and document starts
                continue
            if not stack:
                root = value
                continue
            top = stack[-1]
            container = top[0]
            if type(container) is list:
                container.append(value)
            elif top[1] is _NO_KEY:
                try:
                    hash(value)
                except TypeError:
                    raise _NotPlain from None
                top[1] = value
            else:
                container[top[1]] = value
                top[1] = _NO_KEY
    except yaml.YAMLError:
        raise _NotPlain from None
    finally:
        loader.dispose()


_NO_KEY = object()


def _documents(file: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Non-empty documents of a YAML stream with their 0-based index in the file."""
    try:
        with open(file, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"cannot read: {exc}", file=file) from None
    try:
        fast = _fast_documents(text)
    except _NotPlain:
        pass
    else:
        for index, doc in enumerate(fast):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise LoadError(
                    f"is not a mapping (got {_json_type(doc)}); every document must be "
                    "a Kubernetes object",
                    file=file,
                    document=index,
                )
            yield index, doc
        return
    index = 0
    loader = _SafeLoader(text)
    try:
        while loader.check_data():
            doc = loader.get_data()
            if doc is not None:
                if not isinstance(doc, dict):
                    raise LoadError(
                        f"is not a mapping (got {_json_type(doc)}); every document must be "
                        "a Kubernetes object",
                        file=file,
                        document=index,
                    )
                yield index, doc
            index += 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = ""
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
            index = _document_at(text, mark.line)  # the scanner reads ahead of the index
        problem = getattr(exc, "problem", None) or str(exc)
        raise LoadError(f"invalid YAML{where}: {problem}", file=file, document=index) from None
    finally:
        loader.dispose()


_DOCUMENT_START = re.compile(r"^---(\s|$)")


def _document_at(text: str, line: int) -> int:
    """The 0-based index of the document that contains ``line`` (0-based) of ``text``."""
    index = 0
    content_seen = False
    for current in text.splitlines()[: line + 1]:
        if _DOCUMENT_START.match(current):
            if content_seen:
                index += 1
            content_seen = True  # an explicit start opens a document, even if it stays empty
        elif current.strip() and not current.lstrip().startswith(("#", "%")):
            content_seen = True
    return index


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _identify(doc: dict[str, Any], origin: _Origin) -> tuple[str, str]:
    """Kind and display name of a document that has a supported apiVersion, kind and name."""
    kind = doc.get("kind")
    kind_text = kind if isinstance(kind, str) else ""
    meta = doc.get("metadata")
    namespaced = (*api.NAMESPACED_KINDS, *JOB_KINDS, "Pod")
    name = _namespaced(meta) if kind in namespaced else _plain(meta)

    def fail(path: str, message: str = "Required value") -> LoadError:
        return origin.error(message, kind=kind_text, name=name, path=path)

    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise fail("apiVersion")
    if not kind_text:
        raise fail("kind")
    if kind_text not in SUPPORTED_KINDS:
        supported = ", ".join(SUPPORTED_KINDS)
        raise fail("kind", f'unsupported kind "{kind_text}" (supported kinds: {supported})')
    if kind_text in CORE_KINDS and api_version != "v1":
        raise fail(
            "apiVersion",
            f'Unsupported value: "{api_version}": supported values for {kind_text}: "v1"',
        )
    job_kind = JOB_KINDS.get(kind_text)
    if job_kind is not None and api_version != job_kind.api_version:
        raise fail(
            "apiVersion",
            f'Unsupported value: "{api_version}": supported values for {kind_text}: '
            f'"{job_kind.api_version}"',
        )
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        if isinstance(meta, dict) and meta.get("generateName"):
            raise fail(
                "metadata.name",
                "Required value: generateName is not enough, the object needs a fixed name",
            )
        raise fail("metadata.name")
    return kind_text, name


def _plain(meta: Any) -> str:
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return meta["name"]
    return ""


def _namespaced(meta: Any) -> str:
    name = _plain(meta)
    if not name:
        return ""
    ns = meta.get("namespace")
    return f"{ns if isinstance(ns, str) and ns else api.DEFAULT_NAMESPACE}/{name}"


def _claim(
    seen: dict[tuple[str, str], _Origin],
    key: tuple[str, str],
    origin: _Origin,
    *,
    kind: str,
    name: str,
) -> None:
    first = seen.get(key)
    if first is not None:
        raise origin.error(
            f"duplicate {kind}: already defined in {first}",
            kind=kind,
            name=name,
            path="metadata.name",
        )
    seen[key] = origin


def _parse(doc: dict[str, Any], origin: _Origin) -> api.ModelObject:
    try:
        return api.to_model(api.parse_object(doc))
    except api.InputError as exc:
        raise origin.error(exc.message, kind=exc.kind, name=exc.name, path=exc.path) from None


def _store(inputs: Inputs, obj: api.ModelObject) -> None:
    if isinstance(obj, ResourceFlavor):
        inputs.flavors[obj.name] = obj
    elif isinstance(obj, ClusterQueue):
        inputs.cluster_queues[obj.name] = obj
    elif isinstance(obj, Cohort):
        inputs.cohorts[obj.name] = obj
    elif isinstance(obj, LocalQueue):
        inputs.local_queues[obj.key] = obj
    elif isinstance(obj, PriorityClass):
        if obj.kind == "PriorityClass":
            inputs.priority_classes[obj.name] = obj
        else:
            inputs.workload_priority_classes[obj.name] = obj
    elif isinstance(obj, Namespace):
        inputs.namespaces[obj.name] = obj
        inputs.namespaces_given = True
    elif isinstance(obj, Topology):
        inputs.topologies[obj.name] = obj
    else:  # pragma: no cover - workloads are collected by the caller
        raise TypeError(f"unexpected object {obj!r}")


# --------------------------------------------------------------------------------------
# Namespaces and merging
# --------------------------------------------------------------------------------------


def default_namespaces(inputs: Inputs) -> dict[str, Namespace]:
    """One Namespace per namespace a LocalQueue or Workload uses, as the API server makes it."""
    names = {lq.namespace for lq in inputs.local_queues.values()}
    names.update(wl.namespace for wl in inputs.workloads)
    return {n: Namespace(name=n, labels={NAMESPACE_NAME_LABEL: n}) for n in sorted(names)}


def merge(base: Inputs, overlay: Inputs) -> Inputs:
    """``base`` with ``overlay``'s objects added, replacing those of the same kind and name.

    The result is what loading both sets of files would give if the overlay's objects
    replaced the base's: a Workload the overlay gives as Finished is removed; explicit
    Namespaces of either side are kept (the overlay's winning); when neither side gives
    any, namespaces are derived from the merged LocalQueues and Workloads. Neither
    argument is modified.
    """
    workloads = {wl.key: wl for wl in base.workloads}
    workloads.update((wl.key, wl) for wl in overlay.workloads)
    for key in overlay.finished_workloads:
        workloads.pop(key, None)
    merged = Inputs(
        flavors={**base.flavors, **overlay.flavors},
        cluster_queues={**base.cluster_queues, **overlay.cluster_queues},
        cohorts={**base.cohorts, **overlay.cohorts},
        local_queues={**base.local_queues, **overlay.local_queues},
        workload_priority_classes={
            **base.workload_priority_classes,
            **overlay.workload_priority_classes,
        },
        priority_classes={**base.priority_classes, **overlay.priority_classes},
        workloads=list(workloads.values()),
        namespaces_given=base.namespaces_given or overlay.namespaces_given,
        finished_workloads=(base.finished_workloads - workloads.keys())
        | overlay.finished_workloads,
        topologies={**base.topologies, **overlay.topologies},
        nodes={**base.nodes, **overlay.nodes},
        pods={**base.pods, **overlay.pods},
    )
    if merged.namespaces_given:
        for side in (base, overlay):
            if side.namespaces_given:
                merged.namespaces.update(side.namespaces)
    else:
        merged.namespaces = default_namespaces(merged)
    return merged
