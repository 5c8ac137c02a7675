"""Table-style scenario tests: YAML objects in, `quartermaster plan` decisions out.

A scenario file holds:

```yaml
description: what the scenario pins down
args: ["--cycles", "1"]          # optional extra plan arguments
config: {...}                    # optional configuration file content
bases: [cohort-trio]             # optional: objects from tests/support/scenario_bases/<name>.yaml
objects: [ {...}, {...} ]        # Kubernetes objects, as plan reads them; one named as
                                 # a base object (kind, namespace, name) replaces it
workloads:                       # optional shorthand, expanded to kueue Workload objects
  - {name: a, ns: team-a, queue: lq, priority: 10, created: 1,
     podSets: [{count: 2, requests: {cpu: 1}, minCount: 1, nodeSelector: {...}, tolerations: [...]}],
     admitted: {clusterQueue: cq, flavors: {cpu: default}, at: 0},
     # progress signals (queues.api.progress), times in seconds like ``created``:
     checkpoint: 3500, checkpointCondition: 3500, notice: {at: 3500, deadline: 3800},
     requeueCount: 1, finished: true,
     # status.admissionChecks (times in seconds); admitted.admittedCondition: Admitted=True
     checks: [{name: prov, state: Retry, message: "...", at: 5, requeueAfterSeconds: 60}],
     annotations: {quartermaster.io/avoid-nodes: "h0=2030-01-01T00:00:00Z"}}
whatIf: [ {...} ]                # optional: objects for --what-if
expect:
  exit: 0                        # optional (2 for bad input)
  stderr: ["text", ...]          # substrings of stderr (bad input)
  admitted:                      # exactly these workloads are admitted by the run
    ns/name: {clusterQueue: cq, flavors: {cpu: default}, counts: {main: 3}, cycle: 1,
              topology: {main: {host-a: 2}},       # TAS domains, decoded
              topologyAssignment: {main: {...}}}   # TAS assignment, v1beta2 wire form
  pending:                       # exactly these are pending
    ns/name: {reason: WaitingForQuota, message: ["substring", ...], clusterQueue: cq}
  preempted:                     # exactly these are preempted (any cycle)
    ns/name: {by: ns/other, reason: InClusterQueue,
              noticeDeadline: "1970-01-01T01:05:00Z", evicted: false,   # notice window
              requeue: {action: Backoff, count: 2, requeueAt: "..."}}  # requeue policy
  usage: {cq: {flavor: {resource: {total: "3", borrowed: "0"}}}}   # partial check
  whatIf: {ns/name: {before: admitted, after: pending}}            # outcome kinds
  checks:                      # exactly these hold (or held) quota with AdmissionChecks
    ns/name: {action: Wait, clusterQueue: cq, message: ["substring"], requeueAt: 65,
              states: {prov: Pending}}
  left: {cq: [ns/name, ...]}              # Kueue's wantLeft: still in the heap at the end
  inadmissibleLeft: {cq: [ns/name, ...]}  # Kueue's wantInadmissibleLeft: parked at the end
```

Every key given under ``expect`` is checked strictly; keys left out are not checked.
``left`` and ``inadmissibleLeft`` list every ClusterQueue with such workloads (empty
ones may be left out); they are read from the engine's pending queues after the same
run, in-process, since the CLI's JSON does not say which pending workloads are parked.
A key the runner does not know, anywhere in the file, fails the scenario (a typo must
not silently drop a check).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import yaml

from admission.cli.main import main
from tests.support.scenario_shorthand import NODE_KEYS, scenario_objects


def run_plan_cli(args: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *args, "-o", "json"])
    doc = json.loads(out.getvalue()) if code == 0 else None
    if doc is not None:  # the text is the standard encoder's, whoever wrote it (plan_json_text)
        assert out.getvalue() == json.dumps(doc, indent=2) + "\n"
    return code, doc, err.getvalue()


TOP_KEYS = {
    "description",
    "args",
    "config",
    "bases",
    "objects",
    "nodes",
    "workloads",
    "whatIf",
    "expect",
}


WORKLOAD_KEYS = {
    "name",
    "ns",
    "queue",
    "priority",
    "created",
    "uid",
    "podSets",
    "requests",
    "count",
    "active",
    "admitted",
    "reclaimablePods",
    "checkpoint",
    "checkpointCondition",
    "notice",
    "requeueCount",
    "finished",
    "checks",
    "annotations",
}


POD_SET_KEYS = {
    "name",
    "count",
    "requests",
    "limits",
    "minCount",
    "nodeSelector",
    "tolerations",
    "affinity",
    "topologyRequest",
}


ADMITTED_SHORTHAND_KEYS = {
    "clusterQueue",
    "flavors",
    "at",
    "topology",
    "topologyLevels",
    "admittedCondition",
}


CHECK_SHORTHAND_KEYS = {"name", "state", "message", "at", "requeueAfterSeconds", "retryCount"}


EXPECT_KEYS = {
    "exit",
    "stderr",
    "admitted",
    "pending",
    "preempted",
    "usage",
    "cycles",
    "whatIf",
    "left",
    "inadmissibleLeft",
    "checks",
}


EXPECT_ENTRY_KEYS = {
    "admitted": {
        "admissionChecks",
        "clusterQueue",
        "cycle",
        "flavors",
        "podSetFlavors",
        "counts",
        "topology",
        "topologyAssignment",
    },
    "pending": {"reason", "clusterQueue", "message"},
    "preempted": {
        "by",
        "reason",
        "clusterQueue",
        "cycle",
        "message",
        "noticeDeadline",
        "evicted",
        "requeue",
    },
    "whatIf": {"before", "after"},
    "checks": {"action", "clusterQueue", "message", "requeueAt", "states"},
}


def _check_keys(where: str, got: Any, allowed: set[str]) -> None:
    if not isinstance(got, dict):
        return
    unknown = sorted(set(got) - allowed)
    assert not unknown, f"{where}: unknown key(s) {unknown}; known: {sorted(allowed)}"


def validate_spec(spec: dict[str, Any]) -> None:
    """Reject keys the runner would silently ignore."""
    _check_keys("scenario", spec, TOP_KEYS)
    for i, n in enumerate(spec.get("nodes") or []):
        _check_keys(f"nodes[{i}]", n, NODE_KEYS)
    for i, w in enumerate(spec.get("workloads") or []):
        _check_keys(f"workloads[{i}]", w, WORKLOAD_KEYS)
        for j, p in enumerate(w.get("podSets") or []):
            _check_keys(f"workloads[{i}].podSets[{j}]", p, POD_SET_KEYS)
        _check_keys(f"workloads[{i}].admitted", w.get("admitted"), ADMITTED_SHORTHAND_KEYS)
        for j, c in enumerate(w.get("checks") or []):
            _check_keys(f"workloads[{i}].checks[{j}]", c, CHECK_SHORTHAND_KEYS)
    expect = spec.get("expect") or {}
    _check_keys("expect", expect, EXPECT_KEYS)
    for section, allowed in EXPECT_ENTRY_KEYS.items():
        for key, entry in (expect.get(section) or {}).items():
            _check_keys(f"expect.{section}[{key}]", entry, allowed)


def run_scenario(path: Path, tmp: Path) -> None:
    run_scenario_spec(yaml.safe_load(path.read_text()), tmp)


def run_scenario_spec(spec: dict[str, Any], tmp: Path) -> None:
    """One scenario given as a dict (the job kinds' test modules keep their tables inline)."""
    validate_spec(spec)
    objs = tmp / "objects.yaml"
    objs.write_text(yaml.safe_dump_all(scenario_objects(spec), sort_keys=False))
    args = ["-f", str(objs), *spec.get("args", [])]
    if "config" in spec:
        cfg = tmp / "config.yaml"
        cfg.write_text(yaml.safe_dump(spec["config"]))
        args += ["--config", str(cfg)]
    if "whatIf" in spec:
        wi = tmp / "whatif.yaml"
        wi.write_text(yaml.safe_dump_all(spec["whatIf"], sort_keys=False))
        args += ["--what-if", str(wi)]
    code, doc, err = run_plan_cli(args)
    expect = spec.get("expect", {})
    want_exit = expect.get("exit", 0)
    assert code == want_exit, f"exit {code}, want {want_exit}; stderr: {err}"
    for text in expect.get("stderr", []):
        assert text in err, f"stderr lacks {text!r}: {err}"
    if code != 0:
        return
    assert doc is not None
    check_decisions(doc, expect)
    if "left" in expect or "inadmissibleLeft" in expect:
        check_left(spec, objs, tmp, expect)


def check_left(spec: dict[str, Any], objs: Path, tmp: Path, expect: dict[str, Any]) -> None:
    """Kueue's wantLeft / wantInadmissibleLeft: which pending workloads are still in
    each ClusterQueue's heap, and which are parked, after the same plan run."""
    from admission.config.load import load_config
    from admission.drivers.loader import load_paths
    from admission.drivers.plan import run_plan

    args = list(spec.get("args", []))
    cycles = int(args[args.index("--cycles") + 1]) if "--cycles" in args else None
    config = load_config(str(tmp / "config.yaml") if "config" in spec else None)
    result = run_plan(load_paths([str(objs)]), cycles=cycles, config=config)
    assert result.cache is not None
    left: dict[str, list[str]] = {}
    parked: dict[str, list[str]] = {}
    for name, q in result.cache.queues.items():
        for wl in q.workloads():
            (parked if q.is_parked(wl.key) else left).setdefault(name, []).append(wl.key)
    for field, got in (("left", left), ("inadmissibleLeft", parked)):
        if field in expect:
            want = {cq: sorted(keys) for cq, keys in (expect[field] or {}).items() if keys}
            have = {cq: sorted(keys) for cq, keys in got.items()}
            assert have == want, f"{field}: {have}, want {want}"


def check_decisions(doc: dict[str, Any], expect: dict[str, Any]) -> None:
    if "admitted" in expect:
        got = {a["workload"]: a for a in doc["admitted"]}
        want = expect["admitted"] or {}
        assert set(got) == set(want), f"admitted {sorted(got)}, want {sorted(want)}"
        for key, w in want.items():
            a = got[key]
            w = w or {}
            if "clusterQueue" in w:
                assert a["clusterQueue"] == w["clusterQueue"], (key, a)
            if "cycle" in w:
                assert a["cycle"] == w["cycle"], (key, a)
            if "admissionChecks" in w:
                assert a.get("admissionChecks", []) == w["admissionChecks"], (key, a)
            if "flavors" in w:
                flavors: dict[str, str] = {}
                for p in a["podSetAssignments"]:
                    flavors.update(p["flavors"])
                assert flavors == w["flavors"], (key, a)
            if "podSetFlavors" in w:
                got_ps = {p["name"]: p["flavors"] for p in a["podSetAssignments"]}
                assert got_ps == w["podSetFlavors"], (key, a)
            if "counts" in w:
                assert {p["name"]: p["count"] for p in a["podSetAssignments"]} == w["counts"], (
                    key,
                    a,
                )
            if "topology" in w:
                # {podSet: {"level/values": pods}}: the whole TAS assignment, decoded.
                from queues.api.topology_assignment import from_v1beta2

                got_ta = {
                    p["name"]: {
                        "/".join(v): c for v, c in from_v1beta2(p["topologyAssignment"]).domains
                    }
                    for p in a["podSetAssignments"]
                    if "topologyAssignment" in p
                }
                assert got_ta == w["topology"], (key, got_ta)
            if "topologyAssignment" in w:
                # {podSet: {levels, slices}}: the v1beta2 wire form, exactly as written.
                got_wire = {
                    p["name"]: p["topologyAssignment"]
                    for p in a["podSetAssignments"]
                    if "topologyAssignment" in p
                }
                assert got_wire == w["topologyAssignment"], (key, got_wire)
    if "pending" in expect:
        got = {p["workload"]: p for p in doc["pending"]}
        want = expect["pending"] or {}
        assert set(got) == set(want), f"pending {sorted(got)}, want {sorted(want)}"
        for key, w in want.items():
            p = got[key]
            w = w or {}
            if "reason" in w:
                assert p["reason"] == w["reason"], (key, p)
            if "clusterQueue" in w:
                assert p["clusterQueue"] == w["clusterQueue"], (key, p)
            for text in w.get("message", []):
                assert text in p["message"], f"{key}: message lacks {text!r}: {p['message']}"
    if "preempted" in expect:
        got = {p["workload"]: p for p in doc["preempted"]}
        want = expect["preempted"] or {}
        assert set(got) == set(want), f"preempted {sorted(got)}, want {sorted(want)}"
        for key, w in want.items():
            for field in ("by", "reason", "clusterQueue", "cycle", "noticeDeadline", "evicted"):
                if field in (w or {}):
                    assert got[key].get(field) == w[field], (key, got[key])
            if "requeue" in (w or {}):
                rq = got[key].get("requeue")
                assert rq is not None, (key, got[key])
                for field, want_value in w["requeue"].items():
                    if field == "message":
                        assert want_value in rq["message"], (key, rq)
                    else:
                        assert rq.get(field) == want_value, (key, rq)
            for text in (w or {}).get("message", []):
                assert text in got[key]["message"], (key, got[key]["message"])
    if "usage" in expect:
        for cq, flavors in expect["usage"].items():
            for flv, res in flavors.items():
                for r, u in res.items():
                    assert doc["usage"][cq][flv][r] == u, (cq, flv, r, doc["usage"][cq][flv][r])
    if "cycles" in expect:
        assert doc["cycles"] == expect["cycles"]
    if "checks" in expect:
        _check_checks(doc, expect["checks"] or {})
    if "whatIf" in expect:
        changes = {c["workload"]: c for c in doc["whatIf"]["changes"]}
        assert set(changes) == set(expect["whatIf"]), f"whatIf changes {sorted(changes)}"
        for key, w in expect["whatIf"].items():
            for side in ("before", "after"):
                o = changes[key][side]
                assert (o["outcome"] if o else None) == w[side], (key, side, o)


def _check_checks(doc: dict[str, Any], want: dict[str, Any]) -> None:
    """``expect.checks``: the AdmissionChecks verdicts of the plan (its ``admissionChecks``)."""
    got = {c["workload"]: c for c in doc.get("admissionChecks", [])}
    assert set(got) == set(want), f"checks {sorted(got)}, want {sorted(want)}"
    for key, w in want.items():
        c, w = got[key], w or {}
        for field in ("action", "clusterQueue", "requeueAt"):
            if field in w:
                assert c.get(field) == w[field], (key, c)
        if "states" in w:
            assert {s["name"]: s["state"] for s in c["checks"]} == w["states"], (key, c)
        for text in w.get("message", []):
            assert text in c.get("message", ""), f"{key}: message lacks {text!r}: {c}"
