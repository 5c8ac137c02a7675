"""Hostile AdmissionReviews never crash the server or leak memory.

The server runs alone in a subprocess (``python -m tests.support.webhook_server``) so its memory
can be read from /proc; one keep-alive HTTPS connection sends at least 5,000
hypothesis-generated bodies: random bytes, random JSON, and valid reviews of every
kind with random fields deleted or replaced. Every answer must be HTTP 400/413, or 200
with a well-formed AdmissionReview whose patch (if any) applies to the object.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.webhook_server import ReviewClient, make_review

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = 5000
RSS_GROWTH_LIMIT_MIB = 48
API = "kueue.x-k8s.io/v1beta2"

TEMPLATES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "/mutate-batch-v1-job",
        "Job",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j",
                "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/queue-name": "queue-a"},
            },
            "spec": {"parallelism": 3, "template": {"spec": {"containers": [{"name": "c"}]}}},
        },
    ),
    (
        "/validate-batch-v1-job",
        "Job",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j",
                "namespace": "team-a",
                "annotations": {"kueue.x-k8s.io/job-min-parallelism": "2"},
            },
            "spec": {"parallelism": 3, "suspend": False},
        },
    ),
    (
        "/mutate--v1-pod",
        "Pod",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/pod-group-name": "g"},
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
            },
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        },
    ),
    (
        "/validate--v1-pod",
        "Pod",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
    ),
    (
        "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "ClusterQueue",
        {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "co",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4"}]}
                        ],
                    }
                ],
            },
        },
    ),
    (
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "ClusterQueue",
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}},
    ),
    (
        "/validate-kueue-x-k8s-io-v1beta2-cohort",
        "Cohort",
        {
            "apiVersion": API,
            "kind": "Cohort",
            "metadata": {"name": "a"},
            "spec": {"parentName": "b"},
        },
    ),
    (
        "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
        "ResourceFlavor",
        {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "f"},
            "spec": {"nodeLabels": {"a": "b"}},
        },
    ),
    (
        "/validate-kueue-x-k8s-io-v1beta2-localqueue",
        "LocalQueue",
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "n"},
            "spec": {"clusterQueue": "cq"},
        },
    ),
    (
        "/validate-kueue-x-k8s-io-v1beta2-workload",
        "Workload",
        {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "n"},
            "spec": {
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {"spec": {"containers": [{"name": "c"}]}},
                    }
                ]
            },
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": []},
                "reclaimablePods": [],
            },
        },
    ),
]

EDIT_PATHS: list[tuple[str, ...]] = [
    (),
    ("apiVersion",),
    ("kind",),
    ("request",),
    ("request", "uid"),
    ("request", "kind"),
    ("request", "kind", "kind"),
    ("request", "kind", "group"),
    ("request", "operation"),
    ("request", "object"),
    ("request", "oldObject"),
    ("request", "namespace"),
    ("request", "name"),
    ("request", "userInfo"),
    ("request", "userInfo", "username"),
    ("request", "dryRun"),
    ("request", "object", "metadata"),
    ("request", "object", "metadata", "name"),
    ("request", "object", "metadata", "labels"),
    ("request", "object", "metadata", "labels", "kueue.x-k8s.io/queue-name"),
    ("request", "object", "metadata", "labels", "kueue.x-k8s.io/managed"),
    ("request", "object", "metadata", "annotations"),
    ("request", "object", "metadata", "annotations", "kueue.x-k8s.io/pod-group-total-count"),
    ("request", "object", "metadata", "ownerReferences"),
    ("request", "object", "metadata", "finalizers"),
    ("request", "object", "metadata", "deletionTimestamp"),
    ("request", "object", "spec"),
    ("request", "object", "spec", "parallelism"),
    ("request", "object", "spec", "completions"),
    ("request", "object", "spec", "suspend"),
    ("request", "object", "spec", "schedulingGates"),
    ("request", "object", "spec", "resourceGroups"),
    ("request", "object", "spec", "parentName"),
    ("request", "object", "spec", "clusterQueue"),
    ("request", "object", "spec", "podSets"),
    ("request", "object", "status"),
    ("request", "object", "status", "admission"),
    ("request", "object", "status", "reclaimablePods"),
    ("request", "oldObject", "spec"),
    ("request", "oldObject", "metadata", "labels"),
    ("request", "oldObject", "status", "admission"),
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(
        ["", "-1", "0", "true", "Team_A", "a" * 300, "\x00", "1e999", "../..", "\u202e"]
    ),
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
HOSTILE_BODIES = [
    b"",
    b"null",
    b"{}",
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}',
    b"[" * 50_000,
    b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    b"1" * 10_000,
    b'"' + b"\\ud800" * 1000 + b'"',
    b'{"apiVersion":"admission.k8s.io/v1","apiVersion":"x"}',
    "{\u00e9}".encode("utf-16"),
]


def edit(doc: dict[str, Any], path: tuple[str, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    cur: Any = doc
    for key in path[:-1]:
        if not isinstance(cur, dict):
            return doc
        cur = cur.setdefault(key, {})
    if isinstance(cur, dict):
        if delete:
            cur.pop(path[-1], None)
        else:
            cur[path[-1]] = value
    return doc


@st.composite
def mutated_reviews(draw: st.DrawFn) -> tuple[str, bytes, dict[str, Any] | None]:
    path, kind, obj = draw(st.sampled_from(TEMPLATES))
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
    old = copy.deepcopy(obj) if operation != "CREATE" else None
    review: Any = make_review(kind, copy.deepcopy(obj), old=old, operation=operation, uid="fuzz")
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        review = edit(
            review, draw(st.sampled_from(EDIT_PATHS)), draw(json_value), draw(st.booleans())
        )
    return path, json.dumps(review).encode(), review if isinstance(review, dict) else None


bodies = st.one_of(
    mutated_reviews(),
    mutated_reviews(),
    mutated_reviews(),
    st.tuples(st.sampled_from([t[0] for t in TEMPLATES]), st.binary(max_size=64), st.none()),
    st.tuples(
        st.sampled_from([t[0] for t in TEMPLATES]),
        json_value.map(lambda v: json.dumps(v).encode()),
        st.none(),
    ),
    st.tuples(
        st.sampled_from([t[0] for t in TEMPLATES]), st.sampled_from(HOSTILE_BODIES), st.none()
    ),
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server_process(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    cert_dir = tmp_path_factory.mktemp("certs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.webhook_server", str(cert_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["ready"], line
    yield proc, int(line[1]), cert_dir / "ca.crt"
    proc.terminate()
    proc.wait(10)


def check_answer(status: int, payload: Any, review: dict[str, Any] | None) -> None:
    assert status in (200, 400, 413), (status, payload)
    if status != 200:
        assert isinstance(payload, str) and payload.endswith("\n") and payload.count("\n") == 1
        return
    assert payload["apiVersion"] == "admission.k8s.io/v1"
    assert payload["kind"] == "AdmissionReview"
    response = payload["response"]
    assert isinstance(response["uid"], str) and response["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert isinstance(response["status"]["message"], str)
        assert response["status"]["code"] in (400, 403, 500)
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(response["patch"]))
        assert isinstance(patch, list) and patch
        assert review is not None
        jsonpatch.apply_patch(review["request"]["object"], patch)  # the patch applies


def test_hostile_reviews_get_400_or_a_well_formed_review_and_memory_stays_flat(
    server_process: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, port, ca_file = server_process
    client = ReviewClient(port, ca_file)
    # warm up: allocator arenas, TLS, every handler, a large body
    for path, _kind, obj in TEMPLATES * 20:
        client.post(path, make_review(_kind, obj))
    big = make_review(
        "Job", {**TEMPLATES[0][2], "metadata": {"name": "j", "annotations": {"x": "y" * 2_000_000}}}
    )
    client.post(TEMPLATES[0][0], big)
    before = rss_mib(proc.pid)
    sent = [0]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(bodies)
    def fuzz(case: tuple[str, bytes, dict[str, Any] | None]) -> None:
        path, body, review = case
        status, payload = client.post(path, body)
        sent[0] += 1
        check_answer(status, payload, review)

    fuzz()
    assert sent[0] >= EXAMPLES
    assert proc.poll() is None, "the server process died"
    assert client.get("/healthz") == (200, "ok\n")
    growth = rss_mib(proc.pid) - before
    assert growth < RSS_GROWTH_LIMIT_MIB, f"server RSS grew by {growth:.1f} MiB"
    client.close()
