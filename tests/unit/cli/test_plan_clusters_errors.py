"""``plan --worker``'s bad input: one paragraph naming the flag, the file, the document,
the object and the field, exit 2, nothing on stdout and no traceback (CLI.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from admission.cli.main import main

SCENARIO = Path(__file__).resolve().parents[2] / "support" / "cluster_scenarios" / "two-workers"


@pytest.fixture
def dirs(tmp_path: Path) -> Path:
    for sub in ("manager", "w1", "w2"):
        shutil.copytree(SCENARIO / sub, tmp_path / sub)
    return tmp_path


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["plan", *argv, "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if "warning:" not in ln]
    assert len(lines) == 1, err
    return lines[0]


def test_a_worker_flag_without_a_name_and_path(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", str(dirs / "w1"))
    assert "expected NAME=PATH" in line


def test_a_worker_that_is_no_multikueuecluster_of_the_manager(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", f"w3={dirs / 'w1'}")
    assert "MultiKueueCluster w3" in line and "metadata.name" in line
    assert "(MultiKueueClusters: w1, w2)" in line


def test_a_worker_directory_that_is_not_there(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", f"w1={dirs / 'nope'}")
    assert line.startswith("quartermaster plan: --worker w1: ") and "no such file" in line


def test_a_bad_field_in_a_worker_names_the_worker_file_document_and_field(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    q = dirs / "w2" / "queues.yaml"
    q.write_text(q.read_text().replace('nominalQuota: "8"', 'nominalQuota: "8"\n        bogus: 1'))
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", f"w2={dirs / 'w2'}")
    assert "--worker w2" in line and str(q) in line and "document 1" in line
    assert "ClusterQueue cq" in line and "bogus" in line


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("clusters: [w1, w2]", "clusters: [w1, w1]", "spec.clusters[1]", 'Duplicate value: "w1"'),
        (
            "      location: w1-secret",
            "      location: w1-secret\n      bogus: x",
            "spec.clusterSource.kubeConfig.bogus",
            "unknown field",
        ),
        (
            "  clusterSource:\n    kubeConfig:\n      locationType: Secret\n      location: w2-secret",
            "  clusterSource: {}",
            "spec.clusterSource",
            "exactly one of the fields",
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueConfig",
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: MultiKueueConfig",
            "apiVersion",
            "Unsupported value",
        ),
    ],
    ids=["duplicate-cluster", "unknown-field", "no-cluster-source", "old-version"],
)
def test_a_bad_multikueue_object_of_the_manager(
    capsys: pytest.CaptureFixture[str], dirs: Path, old: str, new: str, field: str, words: str
) -> None:
    mk = dirs / "manager" / "multikueue.yaml"
    assert old in mk.read_text()
    mk.write_text(mk.read_text().replace(old, new))
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", f"w1={dirs / 'w1'}")
    assert str(mk) in line and "document" in line
    assert f": {field}: " in line and words in line


def test_a_what_if_for_a_worker_not_given(capsys: pytest.CaptureFixture[str], dirs: Path) -> None:
    line = refused(capsys, "-f", str(dirs / "manager"), "--worker", f"w1={dirs / 'w1'}",
                   "--what-if-worker", f"w2={dirs / 'w2'}")  # fmt: skip
    assert "--what-if-worker w2: no --worker w2=PATH given (workers: w1)" in line


def test_a_what_if_for_a_worker_without_workers(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    line = refused(capsys, "-f", str(dirs / "manager"), "--what-if-worker", f"w2={dirs / 'w2'}")
    assert "--what-if-worker: needs the workers" in line


def test_the_multikueue_kinds_are_not_skipped_with_a_warning(
    capsys: pytest.CaptureFixture[str], dirs: Path
) -> None:
    code = main(["plan", "-f", str(dirs / "manager"), "--worker", f"w1={dirs / 'w1'}",
                 "--worker", f"w2={dirs / 'w2'}", "-o", "json"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "MultiKueue" not in err
