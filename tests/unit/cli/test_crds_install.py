"""The installation renders, validates offline, and its README's commands hold.

``kubectl kustomize`` must render ``manifests/`` and both overlays (skipped where
kubectl is absent) with the generated CRDs first, and every rendered object must pass
``kubernetes-validate --strict`` against the oldest and newest Kubernetes minor we
support (stated in manifests/README.md). Every command in manifests/README.md is run
here or marked there as needing a cluster or Docker.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support.crd_validation import (
    K8S_NEWEST,
    K8S_OLDEST,
    MANIFESTS,
    README,
    REPO,
    SERVED_KINDS,
    Obj,
    checked_in_crds,
    load_all,
)
from tests.unit.queues import test_crds

# ------------------------------------------------------- render and validate the installation


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    return kubectl


def _kustomize(path: Path) -> list[Obj]:
    proc = subprocess.run(
        [_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


THIRD_PARTY_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
"""Kinds kubernetes-validate has no schema for (the overlays need those operators)."""


def _k8s_problems(obj: Obj, version: str) -> str | None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{obj['kind']} {obj['metadata']['name']}: {exc}"
    return None


@pytest.mark.parametrize("version", [K8S_OLDEST, K8S_NEWEST])
@pytest.mark.parametrize("directory", ["", "overlays/cert-manager", "overlays/prometheus"])
def test_rendered_install_validates_strictly_against_kubernetes(
    directory: str, version: str
) -> None:
    objs = _kustomize(MANIFESTS / directory)
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert sorted(c["spec"]["names"]["kind"] for c in crds) == sorted(SERVED_KINDS)
    checked = [o for o in objs if not o["apiVersion"].startswith(THIRD_PARTY_GROUPS)]
    assert len(objs) - len(checked) <= 2
    problems = [p for o in checked if (p := _k8s_problems(o, version)) is not None]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("version", [K8S_OLDEST, K8S_NEWEST])
def test_checked_in_crds_validate_strictly_against_kubernetes(version: str) -> None:
    for kind, crd in checked_in_crds().items():
        assert _k8s_problems(crd, version) is None, kind


def test_kubernetes_validate_catches_a_broken_crd() -> None:
    crd = copy.deepcopy(checked_in_crds()["LocalQueue"])
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["const"] = 1
    assert _k8s_problems(crd, K8S_NEWEST) is not None
    crd = copy.deepcopy(checked_in_crds()["LocalQueue"])
    crd["spec"]["names"]["shortNames"] = "lq"
    assert _k8s_problems(crd, K8S_OLDEST) is not None


def test_crds_are_in_the_base_and_applied_before_the_service() -> None:
    base = load_all(MANIFESTS / "base" / "kustomization.yaml")[0]
    assert base["resources"][0] == "../crd"
    kinds = [o["kind"] for o in _kustomize(MANIFESTS)]
    # kustomize orders the output: the namespace, then the CRDs, then the rest.
    assert kinds[: 1 + len(SERVED_KINDS)] == ["Namespace"] + ["CustomResourceDefinition"] * len(
        SERVED_KINDS
    )


# ------------------------------------------------------------------------------ the README


def readme_commands() -> list[tuple[str, str]]:
    """(command, marker comment or '') for every ``$ `` line in the README's sh blocks."""
    out: list[tuple[str, str]] = []
    fence: str | None = None
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
        elif fence == "sh":
            assert line.startswith("$ "), f"README sh blocks hold only commands: {line!r}"
            command, _, comment = line[2:].partition("  #")
            out.append((command.strip(), comment.strip()))
    return out


TESTED_COMMANDS = {
    "kubectl kustomize manifests/": "test_readme_kustomize_commands_render",
    "kubectl kustomize manifests/overlays/cert-manager": "test_readme_kustomize_commands_render",
    "kubectl kustomize manifests/overlays/prometheus": "test_readme_kustomize_commands_render",
    "kubectl kustomize my-install/": "test_readme_image_overlay_renders_with_the_new_image",
    "kubectl kustomize my-cluster/": "test_readme_network_policy_patch_sets_the_pod_cidr",
    "python hack/gen_crds.py": "test_check_mode_reports_stale_missing_and_extra_files",
    "python hack/gen_crds.py --check": "test_script_runs_from_the_command_line_in_check_mode",
    "quartermaster plan -f manifests/examples/ --config manifests/base/config/config.yaml": (
        "test_readme_plan_with_the_shipped_configuration_runs"
    ),
    f"kubectl kustomize manifests/ | kubernetes-validate -k {K8S_OLDEST} --strict -": (
        "test_readme_offline_validation_command_passes"
    ),
    f"kubectl kustomize manifests/ | kubernetes-validate -k {K8S_NEWEST} --strict -": (
        "test_readme_offline_validation_command_passes"
    ),
}
MARKERS = ("needs a cluster", "needs Docker")


def test_every_readme_command_is_tested_or_marked() -> None:
    commands = readme_commands()
    assert len(commands) >= 10
    for command, marker in commands:
        if command in TESTED_COMMANDS:
            test = TESTED_COMMANDS[command]
            assert test in globals() or hasattr(test_crds, test), (command, test)
        else:
            assert marker in MARKERS, f"README command neither tested nor marked: {command}"


def test_readme_states_the_supported_and_validated_kubernetes_versions() -> None:
    text = README.read_text(encoding="utf-8")
    oldest, newest = (v.rsplit(".", 1)[0] for v in (K8S_OLDEST, K8S_NEWEST))
    assert f"Kubernetes {oldest} to {newest}" in text


def test_readme_image_tag_matches_the_deployment() -> None:
    base = load_all(MANIFESTS / "base" / "kustomization.yaml")[0]
    (image,) = base["images"]
    builds = [c for c, _ in readme_commands() if c.startswith("docker build")]
    assert builds == [f"docker build -t {image['name']}:{image['newTag']} ."]
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert f"docker build -t {image['name']}:{image['newTag']} ." in dockerfile


def test_readme_kustomize_commands_render() -> None:
    kubectl = _kubectl()
    commands = [
        c for c, _ in readme_commands() if re.fullmatch(r"kubectl kustomize manifests/\S*", c)
    ]
    assert len(commands) == 3, commands
    for command in commands:
        argv = [kubectl, *command.split()[1:]]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        kinds = [d["kind"] for d in yaml.safe_load_all(proc.stdout) if d]
        assert kinds.count("CustomResourceDefinition") == len(SERVED_KINDS), command
        assert "Deployment" in kinds, command


def test_readme_image_overlay_renders_with_the_new_image(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    (snippet,) = re.findall(r"```yaml\n# my-install/kustomization.yaml\n(.*?)```", text, re.S)
    shutil.copytree(MANIFESTS, tmp_path / "quartermaster" / "manifests")
    install = tmp_path / "my-install"
    install.mkdir()
    (install / "kustomization.yaml").write_text(snippet, encoding="utf-8")
    objs = _kustomize(install)
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/platform/quartermaster:0.1.0"
    assert sum(o["kind"] == "CustomResourceDefinition" for o in objs) == len(SERVED_KINDS)


def test_readme_network_policy_patch_sets_the_pod_cidr(tmp_path: Path) -> None:
    """The README's one-value patch keeps the pod network off the webhook port and
    changes nothing else."""
    text = README.read_text(encoding="utf-8")
    (snippet,) = re.findall(r"```yaml\n# my-cluster/kustomization.yaml\n(.*?)```", text, re.S)
    shutil.copytree(MANIFESTS, tmp_path / "quartermaster" / "manifests")
    install = tmp_path / "my-cluster"
    install.mkdir()
    (install / "kustomization.yaml").write_text(snippet, encoding="utf-8")
    (patched,) = [o for o in _kustomize(install) if o["kind"] == "NetworkPolicy"]
    (shipped,) = [o for o in _kustomize(MANIFESTS) if o["kind"] == "NetworkPolicy"]
    webhook = patched["spec"]["ingress"][0]
    assert [p["port"] for p in webhook["ports"]] == ["webhook", "visibility"]
    assert webhook["from"][0]["ipBlock"] == {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}
    patched["spec"]["ingress"][0]["from"][0]["ipBlock"]["except"] = []
    assert patched == shipped


def test_readme_offline_validation_command_passes() -> None:
    kubectl = _kubectl()
    cli = Path(sys.executable).parent / "kubernetes-validate"
    assert cli.exists(), "kubernetes-validate is not installed next to this Python"
    rendered = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=120
    )
    assert rendered.returncode == 0, rendered.stderr
    for version in (K8S_OLDEST, K8S_NEWEST):
        proc = subprocess.run(
            [str(cli), "-k", version, "--strict", "-"],
            input=rendered.stdout,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "passed for resource customresourcedefinition/workloads.kueue.x-k8s.io" in (
            proc.stdout + proc.stderr
        )


def test_readme_plan_with_the_shipped_configuration_runs() -> None:
    from admission.cli.main import main

    (command,) = [c for c, _ in readme_commands() if c.startswith("quartermaster plan")]
    argv = command.split()[1:]
    out = io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out):
        assert main(argv) == 0
    assert out.getvalue().strip()
