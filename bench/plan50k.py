"""``plan-50k``: ``plan`` over 1,000 ClusterQueues in 10 cohorts with 50,000 pending
single-pod workloads, until quiescent (docs/benchmarks.md).

The objects are written as one multi-document YAML file and run through the real
``quartermaster plan`` pipeline (load, parse, schedule, report), so parsing is counted.
They are generated and written one at a time, so the process's peak RSS is the plan's
(``quartermaster plan -f FILE``'s), not the generator's.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

COHORTS, CQS_PER_COHORT, WORKLOADS = 10, 100, 50_000


def scenario_documents(seed: int = 1) -> Iterator[dict]:
    rng = random.Random(seed)
    yield {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default"},
    }
    cqs = []
    for c in range(COHORTS):
        for q in range(CQS_PER_COHORT):
            name = f"cq-{c}-{q}"
            cqs.append(name)
            yield (
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {
                        "cohortName": f"cohort-{c}",
                        "namespaceSelector": {},
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {
                                        "name": "default",
                                        "resources": [
                                            {
                                                "name": "cpu",
                                                "nominalQuota": "20",
                                                "borrowingLimit": "100",
                                            }
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
            yield (
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": "lq", "namespace": name},
                    "spec": {"clusterQueue": name},
                }
            )
    for i in range(WORKLOADS):
        ns = cqs[i % len(cqs)]
        yield (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": f"wl-{i}",
                    "namespace": ns,
                    "uid": f"uid-{i:06d}",
                    "creationTimestamp": f"2026-01-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                },
                "spec": {
                    "queueName": "lq",
                    "priority": rng.choice([50, 100, 200]),
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "c",
                                            "image": "busybox",
                                            "resources": {
                                                "requests": {"cpu": rng.choice(["1", "2", "500m"])}
                                            },
                                        }
                                    ]
                                }
                            },
                        }
                    ],
                },
            }
        )


def run_plan(docs: Iterable[dict], name: str) -> tuple[dict, float]:
    """``quartermaster plan -o json`` over ``docs`` written as one YAML file: the plan
    document and the CPU seconds it took (load, parse, schedule, report)."""
    from admission.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.yaml"
        with path.open("w") as f:
            yaml.dump_all(docs, f, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
        out = io.StringIO()
        t0 = time.process_time()
        with contextlib.redirect_stdout(out):
            code = main(["plan", "-f", str(path), "-o", "json"])
        cpu = time.process_time() - t0
    if code != 0:
        raise RuntimeError(f"plan exited {code}")
    return json.loads(out.getvalue()), cpu


def run() -> dict:
    doc, cpu = run_plan(scenario_documents(), "plan-50k")
    admissions = len(doc["admitted"])
    return {
        "cpuSeconds": round(cpu, 3),
        "admissions": admissions,
        "pending": len(doc["pending"]),
        "cycles": doc["cycles"],
        "admissionsPerSecond": round(admissions / cpu, 1) if cpu else None,
    }
