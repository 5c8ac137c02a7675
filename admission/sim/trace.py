"""Trace scenarios: queue objects as ``plan`` reads them plus timed workloads.

A trace is one YAML file. Its Kubernetes documents (ResourceFlavor, ClusterQueue,
Cohort, LocalQueue, WorkloadPriorityClass, PriorityClass, Namespace) are loaded by
``admission.drivers.loader`` exactly as ``plan`` loads them; one more document, without
``apiVersion``/``kind``, holds the workloads::

    trace:                      # a list, or the path of a JSON-lines file
    - name: pretrain-1          # optional (default trace-<index>)
      namespace: team-a
      localQueue: team-a
      arrival: 3600             # seconds from the start
      runtime: 7200             # seconds, after admission
      priorityClass: research   # or priority: 100 (or neither: the default class)
      class: training           # optional workload class (default: the class name)
      checkpointInterval: 600   # optional: seconds of run time between checkpoints
      checkpointJitter: 60      # optional: each checkpoint up to ±this many seconds off
      checkpointOnNotice: 90    # optional: given a preemption notice, it saves this
                                # many seconds later (and yields); default: ignores it
      podSets:
      - {name: workers, count: 8, requests: {nvidia.com/gpu: 8, cpu: "96"},
         nodeSelector: {...}, minCount: 4,   # optional
         topologyRequest: {required: nvidia.com/gpu.clique}}   # optional (TAS)
    - arrival: 7200             # or a job of any kind the service admits, instead of
      runtime: 3600             # podSets: its Workload is the one serve would build
      job:                      # (podSets, queue, priority, name); namespace and
        apiVersion: jobset.x-k8s.io/v1alpha2   # localQueue default to its own, the
        kind: JobSet                            # class to its kind (jobset)
        metadata: {name: train, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: team-a}}
        spec: {replicatedJobs: [...]}

Topology and v1 Node documents (and bound v1 Pods) give topology-aware scheduling its
cluster, and resource.k8s.io/v1 DeviceClasses and ResourceClaimTemplates count the DRA
devices of the jobs' claims (with the configuration's ``deviceClassMappings``), as for
``plan``.

A JSON-lines file (``trace: trace.jsonl`` beside the YAML, or ``--trace FILE``) holds one
such object per line. Workload classes default to the priority class name (or
``default``); ClusterQueue classes are the ClusterQueue names. Errors name the file,
the document or line, and the field.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import sys
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import yaml

from admission.drivers.documents import LoadError, plain_yaml_documents
from admission.drivers.inputs import Inputs
from admission.drivers.loader import load_documents
from admission.drivers.loader_blocks import NotPlain
from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import IntegrationError
from admission.integrations.registry import BY_KIND, INTEGRATIONS
from admission.sim.scenario import US_PER_S, Scenario, ScenarioError, SimWorkload
from admission.sim.sharing import EMPTY, Ints, PodSetShapes
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.model import PodSet, PriorityClass, TopologyRequest, Workload
from queues.quantity import QuantityError, to_units

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TRACE_DOC = {"trace", "name", "description"}
_ENTRY = {
    "name",
    "namespace",
    "localQueue",
    "arrival",
    "runtime",
    "priority",
    "priorityClass",
    "class",
    "podSets",
    "checkpointInterval",
    "checkpointJitter",
    "checkpointOnNotice",
    "job",
}
_REQUIRED_ORDER = ("namespace", "localQueue", "arrival", "runtime", "podSets")
_REQUIRED = frozenset(_REQUIRED_ORDER)
_POD_SET = {"name", "count", "requests", "nodeSelector", "minCount", "topologyRequest"}
_TOPOLOGY_REQUEST = {
    "required": "required",
    "preferred": "preferred",
    "unconstrained": "unconstrained",
    "podSetGroupName": "pod_set_group_name",
    "podSetSliceRequiredTopology": "slice_required_topology",
    "podSetSliceSize": "slice_size",
}


def read_documents(path: str) -> list[Any]:
    """Every document of a YAML file (``None`` for empty ones), or a ScenarioError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read: {e}") from None
    try:
        return plain_yaml_documents(text)
    except NotPlain:
        pass  # anchors, tags, block scalars, or a syntax error: the full loader's
    try:
        return list(yaml.load_all(text, Loader=_SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError(
            f"{path}: invalid YAML{where}: {getattr(e, 'problem', None) or e}"
        ) from None


def load_trace(path: str, docs: list[Any], *, trace_path: str | None = None) -> Scenario:
    """A ``Scenario`` from a trace YAML file already split into ``docs``."""
    objects: list[tuple[int, Any]] = []
    trace_docs: list[tuple[int, dict[str, Any]]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if (
            isinstance(doc, dict)
            and "trace" in doc
            and "kind" not in doc
            and "apiVersion" not in doc
        ):
            for key in doc:
                if key not in _TRACE_DOC:
                    raise ScenarioError(f"{path}: document {i}: {key}: unknown field")
            trace_docs.append((i, doc))
        else:
            objects.append((i, doc))
    if len(trace_docs) > 1:
        raise ScenarioError(
            f"{path}: document {trace_docs[1][0]}: trace: only one trace document is allowed"
        )
    inputs = _load_objects(path, objects)
    if inputs.workloads:
        raise ScenarioError(
            f"{path}: Workload {inputs.workloads[0].key}: workloads of a trace go in the trace: list "
            "(they need an arrival and a runtime)"
        )
    entries: Iterable[tuple[str, Any]] = ()
    name = os.path.splitext(os.path.basename(path))[0]
    if trace_docs:
        index, tdoc = trace_docs[0]
        where = f"{path}: document {index}: trace"
        name = str(tdoc.get("name") or name)
        value = tdoc["trace"]
        if isinstance(value, str):
            if trace_path is not None:
                raise ScenarioError(f"{where}: a trace file is given both here and with --trace")
            trace_path = os.path.join(os.path.dirname(path), value)
        elif isinstance(value, list):
            if trace_path is not None:
                raise ScenarioError(f"{where}: a trace list is given both here and with --trace")
            entries = [(f"{where}[{k}]", e) for k, e in enumerate(value)]
        else:
            raise ScenarioError(
                f"{where}: must be a list of workloads or the path of a JSON-lines file"
            )
    jsonl = _JsonLines(trace_path) if trace_path is not None else None
    if jsonl is not None:
        entries = jsonl
    priorities = {**inputs.priority_classes, **inputs.workload_priority_classes}
    default = next((p for p in inputs.priority_classes.values() if p.global_default), None)
    shared = _Shared()  # what the entries repeat, held once (admission.sim.sharing)
    workloads: list[SimWorkload] = []
    seen: dict[str, int] = {}  # workload key -> index of the entry that defined it
    wheres: list[str] = []  # (a trace list's entries only; a file's are its line numbers)
    duplicate: ScenarioError | None = None  # reported once every entry is known good
    try:
        for k, (where, entry) in enumerate(entries):
            s = _entry(where, entry, index=k, inputs=inputs, priorities=priorities,
                       default=default, shared=shared)  # fmt: skip
            workloads.append(s)
            if jsonl is None:
                wheres.append(where)
            key = s.workload.key
            first = seen.get(key)
            if first is None:
                seen[key] = k
            elif duplicate is None:
                at = wheres[first] if jsonl is None else jsonl.where(first)
                duplicate = ScenarioError(
                    f"{where}: name: workload {key} is already defined at {at}"
                )
    except ScenarioError:
        if jsonl is not None:
            jsonl.check_rest()  # the file's own errors (JSON, encoding) come first
        raise
    if not workloads:
        raise ScenarioError(f"{path}: no workloads: add a trace: list (or a JSON-lines file)")
    if duplicate is not None:
        raise duplicate
    return Scenario(
        name=name,
        flavors=inputs.flavors,
        cluster_queues=inputs.cluster_queues,
        cohorts=inputs.cohorts,
        local_queues=inputs.local_queues,
        workloads=workloads,
        namespaces=inputs.namespaces if inputs.namespaces_given else None,
        cq_class={n: n for n in inputs.cluster_queues},
        source=path,
        topologies=inputs.topologies,
        nodes=inputs.nodes,
        pods=inputs.pods,
        dra=inputs.dra,
    )


def _load_objects(path: str, objects: list[tuple[int, Any]]) -> Inputs:
    """The queue objects through ``admission.drivers.loader`` (errors mapped back to ``path``)."""
    if not objects:
        raise ScenarioError(
            f"{path}: no queue objects (ResourceFlavor, ClusterQueue, LocalQueue, …)"
        )
    try:
        return load_documents((path, index, doc) for index, doc in objects)
    except LoadError as e:
        # the document's index in the trace file, as loading that file alone names it
        err = LoadError(
            e.detail, file=path, document=e.document, kind=e.kind, name=e.name, path=e.path
        )
        raise ScenarioError(str(err)) from None


class _JsonLines:
    """(where, entry) of every non-blank line of a JSON-lines file, read one at a time:
    a large trace's text and raw entries are never all held at once.

    Its errors are the ones, and in the order, a read of the whole file before any
    entry is looked at would give: cannot read (encoding) first, then the first line
    that is not JSON. A caller that finds an entry bad calls ``check_rest`` before
    saying so."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines = array("q")  # line number of each entry given (8 bytes each)
        try:
            self._file = open(path, encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as e:
            raise ScenarioError(f"{path}: cannot read: {e}") from None
        self._rest = self._numbered()

    def where(self, entry: int) -> str:
        return f"{self.path}: line {self.lines[entry]}"

    def _numbered(self) -> Iterator[tuple[int, str]]:
        """(number, text) of every line, numbered as ``str.splitlines`` numbers them."""
        n = 0
        try:
            with self._file:
                for chunk in self._file:
                    for line in chunk.splitlines():
                        n += 1
                        yield n, line
        except (OSError, UnicodeDecodeError) as e:
            raise ScenarioError(f"{self.path}: cannot read: {e}") from None

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for n, line in self._rest:
            if line.strip():
                entry = self._decode(n, line)
                self.lines.append(n)
                yield f"{self.path}: line {n}", entry

    def check_rest(self) -> None:
        """Raise the error the rest of the file holds, if any."""
        for n, line in self._rest:
            if line.strip():
                self._decode(n, line)

    def _decode(self, n: int, line: str) -> Any:
        # orjson where it gives what json gives (a few times faster on 200,000 lines):
        # it refuses what json accepts (NaN, lone surrogates, 1e400: json then decides,
        # and words the error), and reads integers past 64 bits as floats (json then).
        if _LONG_DIGITS.search(line) is None:
            try:
                return orjson.loads(line)
            except orjson.JSONDecodeError:
                pass
        try:
            return json.loads(line)
        except json.JSONDecodeError as e:
            error = ScenarioError(f"{self.path}: line {n}: not valid JSON: {e.msg}")
        for _ in self._rest:  # a file that cannot be read says that first
            pass
        raise error


_LONG_DIGITS = re.compile(r"\d{19}")


def _fail(where: str, field: str, message: str) -> ScenarioError:
    return ScenarioError(f"{where}: {field}: {message}")


def _seconds(where: str, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(where, field, f"must be a number of seconds, got {value!r}")
    if value < 0:
        raise _fail(where, field, f"must not be negative, got {value!r}")
    return round(value * US_PER_S)


def _text(where: str, field: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, field, "must be a non-empty string")
    return value


class _Shared:
    """One trace's caches of repeated values (podSet lists by raw value, run times)."""

    def __init__(self) -> None:
        self.pod_sets = PodSetShapes()
        self.ints = Ints()


def _entry(
    where: str,
    e: Any,
    *,
    index: int,
    inputs: Inputs,
    priorities: dict[str, PriorityClass],
    default: PriorityClass | None,
    shared: _Shared,
) -> SimWorkload:
    if not isinstance(e, dict):
        raise ScenarioError(f"{where}: must be a mapping, got {type(e).__name__}")
    if not _ENTRY.issuperset(e):  # (one set operation for the common, good entry)
        for key in e:
            if key not in _ENTRY:
                raise _fail(where, str(key), "unknown field")
    if "job" in e:
        return _job_entry(where, e, inputs=inputs)
    if not _REQUIRED.issubset(e):
        for key in _REQUIRED_ORDER:
            if key not in e:
                raise _fail(where, key, "Required value")
    # one string object per distinct value, not one per entry (the JSON decoder makes
    # a new one every time; a trace repeats a few namespaces and queues 100,000s of times)
    namespace = sys.intern(_text(where, "namespace", e["namespace"]))
    queue = sys.intern(_text(where, "localQueue", e["localQueue"]))
    name = _text(where, "name", e["name"]) if "name" in e else f"trace-{index:06d}"
    arrival = _seconds(where, "arrival", e["arrival"])
    runtime = shared.ints(_seconds(where, "runtime", e["runtime"]))
    if "priority" in e and "priorityClass" in e:
        raise _fail(where, "priority", "give priority or priorityClass, not both")
    pclass: PriorityClass | None = None
    if "priorityClass" in e:
        pname = _text(where, "priorityClass", e["priorityClass"])
        pclass = priorities.get(pname)
        if pclass is None:
            known = ", ".join(sorted(priorities)) or "none defined"
            raise _fail(
                where, "priorityClass", f"unknown priority class {pname!r} (known: {known})"
            )
        priority = pclass.value
    elif "priority" in e:
        priority = e["priority"]
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise _fail(where, "priority", f"must be an integer, got {priority!r}")
    else:
        pclass = default
        priority = default.value if default is not None else 0
    wl_class = e.get("class")
    if wl_class is not None:
        wl_class = sys.intern(_text(where, "class", wl_class))
    else:
        wl_class = pclass.name if pclass is not None else "default"
    # equal podSets share one list; labels and the like one empty map (never written)
    pod_sets = shared.pod_sets(e["podSets"], lambda raw: _pod_sets(where, raw))
    wl = Workload(
        namespace=namespace,
        name=name,
        pod_sets=pod_sets,
        queue_name=queue,
        priority=priority,
        priority_class=pclass.name if pclass is not None else None,
        priority_class_kind=pclass.kind if pclass is not None else None,
        labels=EMPTY,
        annotations=EMPTY,
        reclaimable_pods=EMPTY,
    )
    return _sim_workload(where, e, wl, arrival_us=arrival, runtime_us=runtime, wl_class=wl_class)


def _sim_workload(
    where: str, e: dict[str, Any], wl: Workload, *, arrival_us: int, runtime_us: int, wl_class: str
) -> SimWorkload:
    """The entry's timing and checkpoint fields around its Workload."""
    if (
        "checkpointInterval" not in e
        and "checkpointJitter" not in e
        and "checkpointOnNotice" not in e
    ):  # the common entry: no checkpoints
        return SimWorkload(
            workload=wl, arrival_us=arrival_us, runtime_us=runtime_us, wl_class=wl_class
        )
    interval = _seconds(where, "checkpointInterval", e.get("checkpointInterval", 0))
    jitter = _seconds(where, "checkpointJitter", e.get("checkpointJitter", 0))
    if "checkpointInterval" in e and interval == 0:
        raise _fail(where, "checkpointInterval", "must be positive (leave it out for none)")
    if jitter and not interval:
        raise _fail(where, "checkpointJitter", "needs a checkpointInterval")
    if jitter >= interval > 0:
        raise _fail(where, "checkpointJitter", "must be less than checkpointInterval")
    return SimWorkload(
        workload=wl,
        arrival_us=arrival_us,
        runtime_us=runtime_us,
        wl_class=wl_class,
        checkpoint_interval_us=interval,
        checkpoint_jitter_us=jitter,
        checkpoint_on_notice_us=_seconds(
            where, "checkpointOnNotice", e.get("checkpointOnNotice", 0)
        ),
    )


def _job_entry(where: str, e: dict[str, Any], *, inputs: Inputs) -> SimWorkload:
    """A trace entry naming a job of a registered kind (``job:``): its Workload as the
    integration builds it (a TrainJob's runtime from the trace's documents)."""
    for key in ("arrival", "runtime"):
        if key not in e:
            raise _fail(where, key, "Required value")
    for key in ("podSets", "priority", "priorityClass"):
        if key in e:
            raise _fail(where, key, "not with job: the job's own podSets and priority count")
    job = e["job"]
    if not isinstance(job, dict):
        raise _fail(where, "job", "must be a mapping (a job object)")
    integ = BY_KIND.get((str(job.get("apiVersion")), str(job.get("kind"))))
    if integ is None or integ.reconciler == "pods":
        kinds = ", ".join(sorted(f"{i.api_version} {i.kind}" for i in INTEGRATIONS
                                 if i.reconciler != "pods"))  # fmt: skip
        raise _fail(where, "job", f"{job.get('apiVersion')} {job.get('kind')}: not a job kind "
                                  f"(known: {kinds})")  # fmt: skip
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    if "namespace" in e:
        meta["namespace"] = _text(where, "namespace", e["namespace"])
    if "localQueue" in e:
        meta.setdefault("labels", {})[QUEUE_NAME_LABEL] = _text(
            where, "localQueue", e["localQueue"]
        )
    if "name" in e:
        meta["name"] = _text(where, "name", e["name"])

    def lookup(res: Any, ns: str | None, name: str) -> dict[str, Any] | None:
        return inputs.references.get((res.plural, ns, name))

    try:
        wl = workload_model(
            integ,
            integ.resolve(job, lookup),
            workload_priority_classes=inputs.workload_priority_classes,
            priority_classes=inputs.priority_classes,
        )
    except IntegrationError as err:
        raise _fail(where, "job", str(err)) from None
    if not wl.queue_name:
        raise _fail(where, "job", f"{integ.lower_kind} names no queue: label {QUEUE_NAME_LABEL} "
                                  "or localQueue")  # fmt: skip
    wl_class = _text(where, "class", e["class"]) if "class" in e else integ.lower_kind
    return _sim_workload(
        where,
        e,
        wl,
        arrival_us=_seconds(where, "arrival", e["arrival"]),
        runtime_us=_seconds(where, "runtime", e["runtime"]),
        wl_class=wl_class,
    )


def _pod_sets(where: str, value: Any) -> list[PodSet]:
    if not isinstance(value, list) or not value:
        raise _fail(where, "podSets", "must be a non-empty list")
    out: list[PodSet] = []
    names: set[str] = set()
    for i, ps in enumerate(value):
        path = f"podSets[{i}]"
        if not isinstance(ps, dict):
            raise _fail(where, path, "must be a mapping")
        for key in ps:
            if key not in _POD_SET:
                raise _fail(where, f"{path}.{key}", "unknown field")
        name = sys.intern(_text(where, f"{path}.name", ps.get("name", "main")))
        if name in names:
            raise _fail(where, f"{path}.name", f"duplicate podSet name {name!r}")
        names.add(name)
        count = ps.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _fail(where, f"{path}.count", f"must be a positive integer, got {count!r}")
        min_count = ps.get("minCount")
        if min_count is not None and (
            isinstance(min_count, bool)
            or not isinstance(min_count, int)
            or not 1 <= min_count <= count
        ):
            raise _fail(
                where, f"{path}.minCount", f"must be an integer in [1, count], got {min_count!r}"
            )
        reqs = ps.get("requests")
        if not isinstance(reqs, dict) or not reqs:
            raise _fail(
                where, f"{path}.requests", "must be a non-empty mapping of resource to quantity"
            )
        requests: dict[str, int] = {}
        for r, q in reqs.items():
            try:
                units = to_units(str(r), q)
            except QuantityError as exc:
                raise _fail(where, f"{path}.requests.{r}", str(exc)) from None
            if units < 0:
                raise _fail(where, f"{path}.requests.{r}", f"must not be negative, got {q!r}")
            requests[sys.intern(str(r))] = units
        selector = ps.get("nodeSelector") or {}
        if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
            raise _fail(where, f"{path}.nodeSelector", "must be a mapping of label to string value")
        out.append(
            PodSet(
                name=name,
                count=count,
                requests=requests,
                min_count=min_count,
                node_selector={str(k): v for k, v in selector.items()},
                topology=_topology_request(where, f"{path}.topologyRequest", ps, count),
            )
        )
    return out


def _topology_request(
    where: str, path: str, ps: dict[str, Any], count: int
) -> TopologyRequest | None:
    """A podSet's ``topologyRequest`` (the Workload field names)."""
    raw = ps.get("topologyRequest")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail(where, path, "must be a mapping")
    for key in raw:
        if key not in _TOPOLOGY_REQUEST:
            raise _fail(
                where, f"{path}.{key}", f"unknown field (known: {', '.join(_TOPOLOGY_REQUEST)})"
            )
    values: dict[str, Any] = {}
    for key, attr in _TOPOLOGY_REQUEST.items():
        if key not in raw:
            continue
        v = raw[key]
        if key == "unconstrained":
            if not isinstance(v, bool):
                raise _fail(where, f"{path}.{key}", f"must be a boolean, got {v!r}")
        elif key == "podSetSliceSize":
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= count:
                raise _fail(where, f"{path}.{key}", f"must be an integer in [1, count], got {v!r}")
        elif not isinstance(v, str) or not v:
            raise _fail(where, f"{path}.{key}", f"must be a non-empty string, got {v!r}")
        values[attr] = v
    if ("slice_size" in values) != ("slice_required_topology" in values):
        raise _fail(where, path, "podSetSliceRequiredTopology and podSetSliceSize go together")
    return TopologyRequest(**values)
