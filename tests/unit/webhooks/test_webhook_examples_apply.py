"""The documented first steps (manifests/README.md): ``kubectl apply -f
manifests/examples/`` on a fresh install, with the real ``kubectl``, the API server
calling the real webhook server over TLS. Every quota object is created with nothing
pending, so there is no impact to compute: no what-if runs and no warning is printed.
A what-if that ran would say so in a warning (the seam is replaced: the real one finds
nothing to report on this state, however late it runs)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_e2e_kubectl import KUBECTL, kubectl
from tests.support.kube_harness import stack
from webhooks.handlers import quota

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")


def test_applying_the_examples_on_a_fresh_install_runs_no_what_if_and_warns_nothing(
    tmp_path: Path, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quota, "impact_lines", lambda kind, obj, *_a: [f"what-if of {obj.name}"])

    async def main() -> None:
        # 70-training-kinds.yaml's JobSet and PyTorchJob need their operators' CRDs
        # (manifests/examples/README.md), installed as on a cluster that runs them
        async with stack(tmp_path, backend=backend, crds=("jobsets", "pytorchjobs")) as s:
            kc = s.kubeconfig(tmp_path / "kubeconfig")
            # client-side schema validation needs /openapi/v2 (the double serves v3)
            code, out, err = await kubectl(
                kc, tmp_path, "apply", "-f", str(EXAMPLES), "--validate=false"
            )
            assert code == 0, err
            assert "clusterqueue.kueue.x-k8s.io/llm-research created" in out
            assert "job.batch/llm-pretrain-gang created" in out
            assert "jobset.jobset.x-k8s.io/vision-eval created" in out
            assert "Warning" not in err, err
            assert err == "", err

    asyncio.run(main())
