"""``serve_webhooks_only``: model from YAML, self-generated certs, ``ready`` on stdout."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.webhook_server import ReviewClient, decode_patch, make_review

ROOT = Path(__file__).resolve().parents[3]

MODEL = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec: {parentName: org}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohortName: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: cq}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_webhooks_only_serves_the_yaml_model_with_generated_certs(tmp_path: Path) -> None:
    model = tmp_path / "model.yaml"
    model.write_text(MODEL)
    cert_dir = tmp_path / "certs"
    port = free_port()
    code = (
        "from webhooks.server.entry import serve_webhooks_only; "
        f"serve_webhooks_only([{str(model)!r}], cert_dir={str(cert_dir)!r}, port={port}, host='127.0.0.1')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        assert sorted(p.name for p in cert_dir.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
        client = ReviewClient(port, cert_dir / "ca.crt")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"},
            "spec": {},
        }
        status, resp = client.post("/mutate-batch-v1-job", make_review("Job", job))
        assert status == 200
        assert decode_patch(resp) == [
            {
                "op": "add",
                "path": "/metadata/labels",
                "value": {"kueue.x-k8s.io/queue-name": "default"},
            },
            {"op": "add", "path": "/spec/suspend", "value": True},
        ]
        org = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "org"},
        }
        cyclic = {**org, "spec": {"parentName": "research"}}
        status, resp = client.post(
            "/validate-kueue-x-k8s-io-v1beta2-cohort",
            make_review("Cohort", cyclic, old=org, operation="UPDATE"),
        )
        assert status == 200
        assert resp["response"]["status"]["message"] == (
            'spec.parentName: Invalid value: "research": would create a cycle in the cohort tree: '
            "org -> research -> org"
        )
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
