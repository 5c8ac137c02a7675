"""A mutation's JSON patch is the same in every process (replicas, restarts).

jsonpatch diffs object keys in set order, which follows the per-process hash seed: the
same review used to get its operations in a different order from one replica to the
next (and the webhook tests failed at random)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import json
from webhooks.review import Mutation
obj = {"metadata": {"name": "j", "annotations": {"a": "1"}}, "spec": {"template": {"spec": {}}}}
m = Mutation(obj)
m.set(("spec",), "suspend", True)
m.set(("metadata", "labels"), "kueue.x-k8s.io/queue-name", "default")
m.set(("metadata", "annotations"), "b", "2")
m.set(("spec", "template", "spec"), "nodeSelector", {"pool": "a"})
print(json.dumps(m.patch()))
"""


def test_the_patch_does_not_depend_on_the_hash_seed() -> None:
    outputs = set()
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
        ).stdout
        outputs.add(out)
    assert len(outputs) == 1, outputs
    paths = [op["path"] for op in __import__("json").loads(outputs.pop())]
    assert paths == sorted(paths)
