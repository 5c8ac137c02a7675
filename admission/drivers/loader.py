"""Reading Kubernetes objects from files into the engine's model, as kubectl reads them.

``quartermaster plan``, ``serve --webhooks-only`` and the simulator take their queues,
flavors and workloads from the files a user would ``kubectl apply`` (CLI.md). This
module is the file side of that, with kubectl's habits:

* a path is a file, ``-`` (standard input) or a directory: every ``*.yaml``, ``*.yml``
  and ``*.json`` in it, sorted by name, and with ``recursive`` its subdirectories too;
* a file is a YAML stream (``---`` separated) or a JSON stream; ``kind: List`` documents
  (what ``kubectl get -o yaml`` prints) are unwrapped into their ``items``;
* ``metadata.generateName`` gets a name as the API server gives one (the prefix and
  five random characters), drawn from the document itself so the same input always
  gets the same names; namespaced objects without a namespace get the default one;
* kinds Quartermaster does not read (CronJob, ConfigMap, …) are
  skipped with one warning each, never an abort; an input without a single object is
  an error, as ``kubectl apply`` says "no objects passed to apply";
* the kinds it reads are checked as strictly as the API server checks them: Kueue's
  kinds by ``queues.api.parse`` (CRD schema, CEL rules, webhooks), built-in kinds by their
  OpenAPI fields (``admission.drivers.strict``), so a misspelt field is refused.

Job objects (batch/v1 Jobs and every other kind of ``admission.integrations.registry``
with one Workload per object) become Workloads the way Kueue's job controllers build
them; objects of an integration the Configuration does not enable are not managed and
are left out, with a warning. Everything ends in an ``Inputs`` (:mod:`.inputs`); the
files and streams are read into documents by :mod:`.documents`.

Any bad input stops the load with a ``LoadError``: one paragraph naming the file, the
0-based document index (and the item of a List), the object and the field. A loader
that skipped bad documents would plan against a cluster nobody wrote down.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from admission.drivers import strict
from admission.drivers.checks import as_written
from admission.drivers.documents import (
    STDIN,
    STDIN_LABEL,
    LoadError,
    document_label,
    documents_of,
    json_type,
    sources,
)
from admission.drivers.dra_inputs import DRA_API, DRA_KINDS, NAMESPACED_DRA_KINDS
from admission.drivers.inputs import GeneratedName, Inputs, default_namespaces, store
from admission.drivers.pod_resources import quantity_problems
from admission.drivers.unqueued import NotQueued
from admission.engine.tas.nodes import NodeInputError, node_from_object, pod_usage_from_object
from admission.integrations.framework.addressing import Resource
from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import IntegrationError
from admission.integrations.framework.interface import Integration, ReferenceLookup
from admission.integrations.registry import ALL, INTEGRATIONS, Frameworks
from queues.api import kinds as api
from queues.api import parse as api_parse
from queues.api.convert import DEFAULT_NAMESPACE
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.memo import ContentMemo, content_key
from queues.model import (
    LocalQueue,
    Workload,
)

CONFIG_GROUP = "config.kueue.x-k8s.io"

# The API server's name generator (k8s.io/apiserver/pkg/storage/names): the prefix cut to
# 58 characters, then five characters of an alphabet without vowels and look-alikes.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GENERATED_SUFFIX = 5
_MAX_GENERATED_PREFIX = 63 - _GENERATED_SUFFIX

# The job kinds read besides Kueue's own (queues.api.kinds.KINDS): every integration with one
# Workload per object, by (apiVersion, kind). Pod groups are a gang of pods, not read.
_JOB_KINDS: dict[tuple[str, str], Integration] = {
    (i.api_version, i.kind): i
    for i in INTEGRATIONS
    if i.reconciler in ("object", "parent") and i.planned
}
JOB_KINDS: dict[str, Integration] = {i.kind: i for i in _JOB_KINDS.values()}
# Kinds job objects take podSets from (a TrainJob's TrainingRuntime), kept whole for them
_REFERENCED: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r for i in _JOB_KINDS.values() for r in i.references
}
# v1 kinds read for topology-aware scheduling: Nodes (capacity) and bound Pods (its use)
CORE_KINDS = ("Node", "Pod")
_CORE_KINDS = {("v1", k) for k in CORE_KINDS} | {(DRA_API, k) for k in DRA_KINDS}  # + DRA
SUPPORTED_KINDS = tuple(
    sorted(
        {kind for _, kind in api.KINDS}
        | set(JOB_KINDS)
        | set(CORE_KINDS)
        | set(DRA_KINDS)
        | {k for _, k in _REFERENCED}
    )
)
NAMESPACED = frozenset(
    {
        *api.NAMESPACED_KINDS,
        *(i.kind for i in _JOB_KINDS.values() if i.resource.namespaced),
        *(r.kind for r in _REFERENCED.values() if r.namespaced),
        "Pod",
        *NAMESPACED_DRA_KINDS,
    }
)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# (group, kind) of every kind read, whatever the version: another version of one of
# them is an error (a typo, or an API this release does not speak), not a skip.
_READ_GROUP_KINDS = frozenset(
    {(_group(v), k) for v, k in (*api.KINDS, *_JOB_KINDS, *_CORE_KINDS, *_REFERENCED)}
)


@dataclass(slots=True)
class _Origin:
    """Where a document came from: file, index in the file (and in a List), position."""

    file: str
    document: int
    position: int
    item: int | None = None

    def __str__(self) -> str:
        return f"{self.file} {document_label(self.document, self.item)}"

    def error(self, message: str, *, kind: str = "", name: str = "", path: str = "") -> LoadError:
        return LoadError(
            message,
            file=self.file,
            document=self.document,
            item=self.item,
            kind=kind,
            name=name,
            path=path,
        )


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_paths(
    paths: list[str],
    *,
    recursive: bool = False,
    namespace: str | None = None,
    stdin: TextIO | None = None,
    frameworks: Frameworks = ALL,
) -> Inputs:
    """Load files, directories and standard input (``-``) into one ``Inputs``.

    ``recursive`` descends into subdirectories (kubectl's ``-R``); ``namespace`` is the
    namespace of namespaced objects that name none (kubectl's ``-n``; ``default``
    otherwise); ``stdin`` is read for ``-`` (``sys.stdin`` when not given). Job objects
    are converted after every file is read, so they see all priority classes; objects
    of an integration ``frameworks`` does not enable are not managed and left out.
    """
    for path in paths:  # a path that is not there is the first error, as kubectl's
        if path != STDIN and not os.path.exists(path):
            raise LoadError("no such file or directory", file=path)
    documents = _read_paths(paths, recursive=recursive, stdin=stdin)
    return load_documents(documents, namespace=namespace, frameworks=frameworks)


def _read_paths(
    paths: list[str], *, recursive: bool, stdin: TextIO | None
) -> Iterator[tuple[str, int, Any]]:
    """(file label, index in the file, object) of every document, one at a time: a
    document is converted before the next is parsed, so the raw documents of a large
    input are never all held at once."""
    for path in paths:
        found = 0
        for file, text in sources(path, recursive=recursive, stdin=stdin):
            for index, doc in documents_of(file, text):
                yield file, index, doc
                found += 1
        if not found:
            where = STDIN_LABEL if path == STDIN else path
            raise LoadError(
                "no objects found (a YAML or JSON file, or a directory of *.yaml, *.yml "
                "and *.json files" + ("" if recursive else "; -R reads subdirectories") + ")",
                file=where,
            )


def load_documents(
    documents: Iterable[tuple[str, int, Any]],
    *,
    namespace: str | None = None,
    frameworks: Frameworks = ALL,
) -> Inputs:
    """``Inputs`` from documents already read: (file label, index in the file, object)."""
    inputs = Inputs()
    seen: dict[tuple[str, str], _Origin] = {}
    workloads: list[tuple[_Origin, Workload]] = []
    jobs: list[tuple[_Origin, Integration, dict[str, Any]]] = []
    referenced = inputs.references
    names = _NameGenerator()
    default_ns = namespace or DEFAULT_NAMESPACE
    position = 0
    for file, index, top in documents:
        for origin, doc in _unwrap(file, index, top, position):
            position = origin.position + 1
            if not _reads(doc, origin, inputs):
                continue
            doc = _with_name(doc, origin, names, seen, inputs, default_ns)
            kind, name = _identify(doc, origin)
            integration = _JOB_KINDS.get((doc["apiVersion"], kind))
            if integration is not None:
                root = f"{integration.api_version} {kind}"
                if root in strict.known_roots():
                    _strict(doc, root, origin, kind=kind, name=name)
                _claim(seen, (kind, name), origin, kind=kind, name=name)
                if frameworks.is_enabled(integration):
                    if not integration.skip(doc):
                        jobs.append((origin, integration, doc))
                else:
                    inputs.warnings.append(
                        f"{origin}: {kind} {name} is not managed: the {integration.framework} "
                        "integration is not enabled (integrations.frameworks)"
                    )
                continue
            ref_res = _REFERENCED.get((doc["apiVersion"], kind))
            if ref_res is not None:
                _claim(seen, (kind, name), origin, kind=kind, name=name)
                meta = doc.get("metadata") or {}
                ns = (meta.get("namespace") or default_ns) if ref_res.namespaced else None
                referenced[(ref_res.plural, ns, str(meta.get("name") or ""))] = doc
                continue
            if (doc["apiVersion"], kind) in _CORE_KINDS:
                root = f"v1 {kind}"
                if root in strict.known_roots():
                    _strict(doc, root, origin, kind=kind, name=name)
                _claim(seen, (kind, name), origin, kind=kind, name=name)
                _core_object(doc, kind, name, origin, inputs)
                continue
            if kind == "Workload":
                _strict_templates(doc, origin, name)
            obj = _parse(doc, origin, inputs)
            key = obj.key if isinstance(obj, LocalQueue | Workload) else obj.name
            _claim(seen, (kind, key), origin, kind=kind, name=key)
            if isinstance(obj, Workload):
                workloads.append((origin, obj))
            else:
                store(inputs, obj)

    def lookup(res: Resource, ns: str | None, name: str) -> dict[str, Any] | None:
        return referenced.get((res.plural, ns, name))

    for origin, integration, job in jobs:
        for wl in _job_workloads(integration, job, origin, inputs, lookup):
            if not wl.queue_name:
                # Kueue's defaulting: the LocalQueue named "default" in the namespace, if
                # any; otherwise the Job is not queue-managed and the service leaves it alone.
                if f"{wl.namespace}/default" not in inputs.local_queues:
                    _not_queued(inputs, origin, integration.kind, job, wl.namespace)
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


def _unwrap(file: str, index: int, doc: Any, position: int) -> Iterator[tuple[_Origin, Any]]:
    """The document, or the items of a ``List`` (``kind: List`` or ``<Kind>List``)."""
    if isinstance(doc, dict) and _is_list(doc):
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise LoadError(
                f"must be of type array, got {json_type(items)}",
                file=file,
                document=index,
                kind=str(doc.get("kind")),
                path="items",
            )
        for i, item in enumerate(items):
            origin = _Origin(file, index, position + i, item=i)
            if not isinstance(item, dict):
                raise origin.error(
                    f"is not a mapping (got {json_type(item)}); every item must be a "
                    "Kubernetes object"
                )
            yield origin, item
        return
    yield _Origin(file, index, position), doc


def _is_list(doc: dict[str, Any]) -> bool:
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind.endswith("List"):
        return False
    # kubectl unwraps any list type: kind *List with items (meta.IsListType)
    return kind == "List" or "items" in doc


def _reads(doc: dict[str, Any], origin: _Origin, inputs: Inputs) -> bool:
    """Whether the document is of a kind read; a skipped kind gets its warning line.

    A document without the identity every object needs (apiVersion, kind, a name or a
    generateName) is an error whatever its kind: it is not an object at all.
    """
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    meta = doc.get("metadata")
    kind_text = kind if isinstance(kind, str) else ""
    name = _display(kind_text, meta)

    def fail(path: str, message: str = "Required value") -> LoadError:
        return origin.error(message, kind=kind_text, name=name, path=path)

    if not isinstance(api_version, str) or not api_version:
        raise fail("apiVersion")
    if not kind_text:
        raise fail("kind")
    if kind_text == "Configuration" and _group(api_version) == CONFIG_GROUP:
        inputs.warnings.append(
            f"{origin}: skipped {kind_text} ({api_version}): the service configuration is "
            "not an object to plan; pass it with --config"
        )
        return False
    pair = (api_version, kind_text)
    if pair in api.KINDS or pair in _JOB_KINDS or pair in _CORE_KINDS or pair in _REFERENCED:
        return True
    if (_group(api_version), kind_text) in _READ_GROUP_KINDS:
        read = (*api.KINDS, *_JOB_KINDS, *_CORE_KINDS, *_REFERENCED)
        versions = sorted({v for v, k in read if k == kind_text})
        supported = ", ".join(f'"{v}"' for v in versions)
        raise fail(
            "apiVersion",
            f'Unsupported value: "{api_version}": supported values for {kind_text}: {supported}',
        )
    if meta is not None and not isinstance(meta, dict):
        raise fail("metadata", "must be of type object")
    if not name:
        raise fail("metadata.name")
    inputs.warnings.append(
        f"{origin}: skipped {kind_text} {name} ({api_version}): "
        "Quartermaster does not read this kind"
    )
    return False


def _display(kind: str, meta: Any) -> str:
    """How messages name an object: namespace/name, or the generateName prefix + '*'."""
    if not isinstance(meta, dict):
        return ""
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        prefix = meta.get("generateName")
        if not isinstance(prefix, str) or not prefix:
            return ""
        name = prefix + "*"
    if kind in ("Namespace",) or (kind not in NAMESPACED and "namespace" not in meta):
        return name
    ns = meta.get("namespace")
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


class _NameGenerator:
    """Names for ``generateName``: prefix + 5 characters, the same for the same input.

    The characters come from a hash of the document and of how many identical documents
    came before it (``kubectl create`` twice gives two Jobs), so runs are reproducible
    and adding an unrelated file renames nothing.
    """

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def name(self, prefix: str, doc: dict[str, Any], taken: Callable[[str], bool]) -> str:
        base = prefix[:_MAX_GENERATED_PREFIX]
        digest_of = json.dumps(doc, sort_keys=True, default=str)
        n = self.count.get(digest_of, 0)
        while True:
            self.count[digest_of] = n + 1
            digest = hashlib.sha256(f"{n}\n{digest_of}".encode()).digest()
            suffix = "".join(
                _NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:_GENERATED_SUFFIX]
            )
            if not taken(base + suffix):
                return base + suffix
            n += 1  # the API server retries a taken name too


def _with_name(
    doc: dict[str, Any],
    origin: _Origin,
    names: _NameGenerator,
    seen: dict[tuple[str, str], _Origin],
    inputs: Inputs,
    default_ns: str,
) -> dict[str, Any]:
    """The document with a generated name and the default namespace, if it needs them."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return doc
    kind = doc["kind"]
    updates: dict[str, Any] = {}
    namespaced = kind in NAMESPACED
    ns = meta.get("namespace")
    if namespaced and (ns is None or ns == ""):
        ns = updates["namespace"] = default_ns
    name = meta.get("name")
    prefix = meta.get("generateName")
    if (name is None or name == "") and isinstance(prefix, str) and prefix:

        def taken(candidate: str) -> bool:
            key = f"{ns}/{candidate}" if namespaced else candidate
            return (kind, key) in seen

        name = updates["name"] = names.name(prefix, doc, taken)
        shown = f"{ns}/{name}" if namespaced else name
        inputs.generated_names.append(GeneratedName(str(origin), kind, prefix, shown))
    if not updates:
        return doc
    return {**doc, "metadata": {**meta, **updates}}


def _core_object(
    doc: dict[str, Any], kind: str, name: str, origin: _Origin, inputs: Inputs
) -> None:
    """A v1 Node (topology capacity), a v1 Pod (capacity used on its node) or a DRA object."""
    if kind in DRA_KINDS:
        inputs.dra[(kind, name)] = doc
        return
    try:
        if kind == "Node":
            inputs.nodes[name] = node_from_object(doc)
        else:
            pod = pod_usage_from_object(doc)
            if pod is not None:
                inputs.pods[pod.key] = pod
            labels = (doc.get("metadata") or {}).get("labels") or {}
            if isinstance(labels, dict) and labels.get(QUEUE_NAME_LABEL):
                inputs.warnings.append(
                    f"{origin}: Pod {name} names LocalQueue {labels[QUEUE_NAME_LABEL]}: plan "
                    "does not admit plain pods (pod groups) yet; serve does"
                )
    except NodeInputError as exc:
        raise origin.error(exc.message, kind=kind, name=name, path=exc.path) from None


def _not_queued(
    inputs: Inputs, origin: _Origin, kind: str, job: dict[str, Any], namespace: str
) -> None:
    entry = NotQueued.without_label(
        str(origin), kind, _display(kind, job.get("metadata")), namespace
    )
    if entry not in inputs.not_queued:  # a kind admitted through its pods: once
        inputs.not_queued.append(entry)


def _job_workloads(
    integration: Integration,
    job: dict[str, Any],
    origin: _Origin,
    inputs: Inputs,
    lookup: ReferenceLookup,
) -> list[Workload]:
    """The Workloads the service builds for ``job`` (one, or its pods' for a kind
    admitted through them: ``Integration.plan_workloads``)."""
    try:
        resolved = integration.resolve(job, lookup)
        planned = integration.plan_workloads(resolved)
        out = []
        for i, (name, roles) in enumerate(planned):
            wl = workload_model(
                integration,
                resolved,
                workload_priority_classes=inputs.workload_priority_classes,
                priority_classes=inputs.priority_classes,
                roles=roles,
                name=name,
            )
            if len(planned) > 1:  # each its own UID, in order (the queue's tiebreak)
                wl.uid = f"{wl.uid}-{i:05d}"
            out.append(wl)
        return out
    except IntegrationError as exc:
        name = _display(integration.kind, job.get("metadata"))
        message = str(exc).removeprefix(f"{integration.lower_kind} {name}: ")  # named once
        raise origin.error(message, kind=integration.kind, name=name) from None


def _identify(doc: dict[str, Any], origin: _Origin) -> tuple[str, str]:
    """Kind and display name of a document of a kind read, once it has its name."""
    kind: str = doc["kind"]
    meta = doc.get("metadata")
    name = _display(kind, meta)
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise origin.error("Required value", kind=kind, name=name, path="metadata.name")
    return kind, name


def _strict(doc: dict[str, Any], root: str, origin: _Origin, *, kind: str, name: str) -> None:
    """Refuse unknown fields and mistyped values as the API server's strict decoding,
    and the quantities its validation refuses (:mod:`.pod_resources`)."""
    problems = strict.check(doc, root) or quantity_problems(doc)
    if problems:
        raise _strict_error(problems, origin, kind=kind, name=name)


def _strict_templates(doc: dict[str, Any], origin: _Origin, name: str) -> None:
    """A Workload's pod templates: Kueue's CRD gives them the full PodTemplateSpec schema."""
    spec = doc.get("spec")
    pod_sets = spec.get("podSets") if isinstance(spec, dict) else None
    if not isinstance(pod_sets, list):
        return  # the model reports it
    problems: list[strict.FieldProblem] = []
    for i, ps in enumerate(pod_sets):
        if isinstance(ps, dict) and isinstance(ps.get("template"), dict):
            key = content_key(ps["template"])
            if _STRICT_TEMPLATES.get(key):
                continue  # this content passed before (queues.memo)
            found = strict.check(
                ps["template"], strict.POD_TEMPLATE_SPEC, path=f"spec.podSets[{i}].template"
            )
            if not found:
                _STRICT_TEMPLATES.put(key, True)
            problems += found
    if problems:
        raise _strict_error(problems, origin, kind="Workload", name=name)


_STRICT_TEMPLATES: ContentMemo[bool] = ContentMemo()


def _strict_error(
    problems: list[strict.FieldProblem], origin: _Origin, *, kind: str, name: str
) -> LoadError:
    path, message = problems[0]
    unknown = [m.removeprefix("strict decoding error: ") for _, m in problems if "unknown" in m]
    if len(unknown) > 1:  # the server lists every unknown field in one message
        message = "strict decoding error: " + ", ".join(unknown)
    return origin.error(message, kind=kind, name=name, path=path)


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


def _parse(doc: dict[str, Any], origin: _Origin, inputs: Inputs) -> api_parse.ModelObject:
    try:
        parsed = api_parse.parse_object(doc)
        model = api_parse.to_model(parsed)
    except api_parse.InputError as exc:
        raise origin.error(exc.message, kind=exc.kind, name=exc.name, path=exc.path) from None
    if isinstance(parsed, api.AdmissionCheck) and parsed.condition("Active") is None:
        return as_written(model, str(origin), inputs.warnings)
    return model
