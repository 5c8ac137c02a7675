"""Realistic, varied batch/v1 Jobs for the memory benchmarks.

A cluster's pending Jobs do not share one template: each carries its own image tag,
experiment id, arguments, environment, config volume and labels, and only the
scheduling part (requests, node selectors, tolerations) comes from a handful of
shapes. :func:`realistic_job` builds such a Job (its pod template is ~1.5 KB of JSON,
different in every Job), deterministically from its index, so that a benchmark
measures what real templates cost rather than what one shared template costs.
"""

from __future__ import annotations

import json
import random
from typing import Any

Obj = dict[str, Any]

TEAMS = ("vision", "speech", "nlp", "recsys", "robotics", "search", "ads", "infra")
MODELS = ("resnet", "vit-l", "llama-7b", "whisper", "bert-base", "t5-xl", "dlrm", "sam")
SHAPES = (  # (cpu, memory, gpus, parallelism)
    ("4", "16Gi", 0, 1),
    ("8", "32Gi", 1, 1),
    ("16", "64Gi", 2, 1),
    ("32", "128Gi", 4, 2),
    ("48", "256Gi", 8, 4),
    ("2", "8Gi", 0, 8),
)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def realistic_job(i: int, *, namespace: str, queue: str, seed: int = 0) -> Obj:
    """Job number ``i``: a suspended training Job with its own pod template."""
    rng = random.Random(seed * 1_000_003 + i)
    team = TEAMS[i % len(TEAMS)]
    model = rng.choice(MODELS)
    cpu, memory, gpus, parallelism = rng.choice(SHAPES)
    exp = f"exp-{i:06d}-{rng.getrandbits(24):06x}"
    requests: Obj = {"cpu": cpu, "memory": memory}
    limits: Obj = {"memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    trainer = {
        "name": "trainer",
        "image": f"registry.example.com/{team}/{model}:v{rng.randint(1, 40)}."
        f"{rng.randint(0, 99)}-{rng.getrandbits(28):07x}",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", f"{team}.train"],
        "args": [
            f"--config=/etc/experiment/{exp}.yaml",
            f"--seed={rng.randint(0, 2**31)}",
            f"--learning-rate={rng.choice(('1e-4', '3e-4', '1e-3', '5e-5'))}",
            f"--batch-size={rng.choice((32, 64, 128, 256, 512))}",
            f"--max-steps={rng.randint(1, 200) * 1000}",
            f"--output=s3://ml-{team}/checkpoints/{exp}",
        ],
        "env": [
            {"name": "EXPERIMENT_ID", "value": exp},
            {"name": "WANDB_PROJECT", "value": f"{team}-{model}"},
            {"name": "WANDB_RUN_GROUP", "value": f"sweep-{rng.randint(1, 500)}"},
            {"name": "NCCL_DEBUG", "value": rng.choice(("WARN", "INFO"))},
            {"name": "OMP_NUM_THREADS", "value": cpu},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": [
            {"name": "datasets", "mountPath": "/data", "readOnly": True},
            {"name": "experiment", "mountPath": "/etc/experiment"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    spec: Obj = {
        "restartPolicy": "Never",
        "serviceAccountName": f"{team}-trainer",
        "containers": [trainer],
        "volumes": [
            {"name": "datasets", "persistentVolumeClaim": {"claimName": f"{team}-datasets"}},
            {"name": "experiment", "configMap": {"name": f"{exp}-config"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        ],
    }
    if rng.random() < 0.3:  # a log shipper as a native sidecar
        spec["initContainers"] = [
            {
                "name": "log-shipper",
                "image": f"registry.example.com/infra/fluent-bit:3.{rng.randint(0, 9)}",
                "restartPolicy": "Always",
                "args": ["--output", f"loki://logs.{team}.svc:3100/{exp}"],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }
        ]
    if gpus:
        spec["tolerations"] = [dict(GPU_TOLERATION)]
        if rng.random() < 0.5:
            spec["nodeSelector"] = {"nvidia.com/gpu.product": rng.choice(("H100", "A100"))}
    labels = {
        "kueue.x-k8s.io/queue-name": queue,
        "app.kubernetes.io/name": f"{model}-training",
        "team": team,
        "experiment": exp,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{model}-{exp}",
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                "ml.example.com/owner": f"user{rng.randint(1, 300)}@example.com",
                "ml.example.com/sweep": f"sweep-{rng.randint(1, 500)}",
            },
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": rng.choice((0, 3, 6)),
            "suspend": True,
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": f"{model}-training", "experiment": exp},
                    "annotations": {"prometheus.io/scrape": "true", "ml.example.com/exp": exp},
                },
                "spec": spec,
            },
        },
    }


def template_bytes(job: Obj) -> int:
    """The size of a Job's pod template as compact JSON."""
    return len(json.dumps(job["spec"]["template"], separators=(",", ":")))
