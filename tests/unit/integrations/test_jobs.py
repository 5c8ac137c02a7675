"""batch/v1 Job -> Workload, as Kueue's job controller builds it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from admission.integrations.kinds.job import JobError, workload_from_job, workload_name
from queues.model import PodSet, PriorityClass, Toleration, Workload

UID = "2b4c4c8e-1111-4222-8333-444455556666"

WPCS = {
    "high": PriorityClass(name="high", value=10000),
    "low": PriorityClass(name="low", value=-5),
}
PCS = {
    "system-critical": PriorityClass(name="system-critical", value=1_000_000, kind="PriorityClass"),
    "batch": PriorityClass(name="batch", value=50, kind="PriorityClass"),
}


def make_job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample-job",
            "namespace": "team-a",
            "uid": UID,
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a-queue"},
            "annotations": {"note": "x"},
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                            "resources": {
                                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                }
            },
        },
    }
    for path, value in overrides.items():
        *parents, leaf = path.split("__")
        node = job
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return job


_DELETE = object()


def convert(
    job: dict[str, Any],
    *,
    wpcs: dict[str, PriorityClass] | None = None,
    pcs: dict[str, PriorityClass] | None = None,
) -> Workload:
    return workload_from_job(
        job,
        workload_priority_classes=WPCS if wpcs is None else wpcs,
        priority_classes=PCS if pcs is None else pcs,
    )


# ----------------------------------------------------------------------- naming


def test_workload_name_matches_kueue_hash_of_kind_group_name_uid() -> None:
    # sha1("Job\nbatch\nsample-job\n<uid>") = c521be5e..., computed with sha1sum.
    assert workload_name(owner_name="sample-job", owner_uid=UID) == "job-sample-job-c521b"


def test_workload_name_uses_given_kind_and_group() -> None:
    # Kueue's own unit test case: kind "kind", group "group", owner "owner", uid "uid".
    # sha1("kind\ngroup\nowner\nuid") = 2aabfae8...
    assert (
        workload_name(owner_name="owner", owner_uid="uid", kind="kind", group="group")
        == "kind-owner-2aabf"
    )


def test_workload_name_lowercases_kind_in_prefix_only() -> None:
    name = workload_name(owner_name="x", owner_uid="u", kind="RayJob", group="ray.io")
    assert name.startswith("rayjob-x-")
    assert name != workload_name(owner_name="x", owner_uid="u", kind="rayjob", group="ray.io")


def test_long_workload_names_are_truncated_to_253_with_full_name_hash() -> None:
    long_name = "a" * 300
    name = workload_name(owner_name=long_name, owner_uid="uid-1")
    assert len(name) == 253
    # prefix is "job-" + name truncated to 247 chars, hash over the untruncated name
    assert name == ("job-" + long_name)[:247] + "-1e11d"


def test_workload_name_depends_on_uid() -> None:
    assert workload_name(owner_name="j", owner_uid="a") != workload_name(
        owner_name="j", owner_uid="b"
    )


# ----------------------------------------------------------------------- conversion


def test_sample_job_becomes_one_main_podset_workload() -> None:
    wl = convert(make_job())
    assert wl.namespace == "team-a"
    assert wl.name == "job-sample-job-c521b"
    assert wl.queue_name == "team-a-queue"
    assert wl.uid == UID
    assert wl.creation_time == datetime(2024, 5, 1, 12, 0, tzinfo=UTC).timestamp()
    assert wl.pod_sets == [
        PodSet(
            name="main",
            count=4,
            requests={"cpu": 8000, "memory": 64 * 2**30, "nvidia.com/gpu": 4},
        )
    ]
    assert wl.priority == 0
    assert wl.priority_class is None
    assert wl.priority_class_kind is None
    assert wl.labels == {"kueue.x-k8s.io/queue-name": "team-a-queue"}
    assert wl.annotations == {"note": "x"}
    assert wl.active is True
    assert wl.admission is None


def test_labels_and_annotations_are_copies() -> None:
    job = make_job()
    wl = convert(job)
    wl.labels["new"] = "1"
    assert "new" not in job["metadata"]["labels"]


@pytest.mark.parametrize(
    ("parallelism", "completions", "count"),
    [
        (4, 4, 4),
        (4, 2, 2),
        (2, 10, 2),
        (3, None, 3),
        (None, None, 1),
        (None, 5, 1),
        (0, 5, 0),
        (5, 0, 0),
    ],
)
def test_count_is_min_of_parallelism_and_completions(
    parallelism: Any, completions: Any, count: int
) -> None:
    job = make_job(spec__parallelism=parallelism, spec__completions=completions)
    if parallelism is None:
        del job["spec"]["parallelism"]
    if completions is None:
        del job["spec"]["completions"]
    assert convert(job).pod_sets[0].count == count


@pytest.mark.parametrize("value", [-1, 1.5, "4", True, 2**31])
def test_bad_parallelism_is_rejected_naming_the_field(value: Any) -> None:
    with pytest.raises(JobError, match=r"job team-a/sample-job: spec\.parallelism"):
        convert(make_job(spec__parallelism=value))


def test_bad_completions_is_rejected_naming_the_field() -> None:
    with pytest.raises(JobError, match=r"job team-a/sample-job: spec\.completions"):
        convert(make_job(spec__completions=-2))


def test_min_parallelism_annotation_sets_min_count() -> None:
    job = make_job()
    job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = "2"
    assert convert(job).pod_sets[0].min_count == 2
    job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = (
        "+3"  # strconv.Atoi syntax
    )
    assert convert(job).pod_sets[0].min_count == 3


@pytest.mark.parametrize("value", ["0", "4", "5", "-1", "abc", "1.5", " 2", "2_0", ""])
def test_min_parallelism_outside_1_to_count_minus_1_is_rejected(value: str) -> None:
    job = make_job()
    job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = value
    with pytest.raises(
        JobError, match=r"team-a/sample-job.*kueue\.x-k8s\.io/job-min-parallelism.*between 1 and 3"
    ):
        convert(job)


def test_min_parallelism_on_a_single_pod_job_is_rejected() -> None:
    job = make_job(spec__parallelism=1, spec__completions=1)
    job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = "1"
    with pytest.raises(JobError, match="job-min-parallelism"):
        convert(job)


def test_no_min_parallelism_annotation_means_no_min_count() -> None:
    assert convert(make_job()).pod_sets[0].min_count is None


def test_template_placement_constraints_reach_the_podset() -> None:
    job = make_job()
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec["nodeSelector"] = {"cloud.example.com/accelerator": "nvidia-h100"}
    pod_spec["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    ps = convert(job).pod_sets[0]
    assert ps.node_selector == {"cloud.example.com/accelerator": "nvidia-h100"}
    assert ps.tolerations == [
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    ]


def test_missing_queue_label_gives_empty_queue_name() -> None:
    job = make_job()
    job["metadata"]["labels"] = {}
    assert convert(job).queue_name == ""


# ----------------------------------------------------------------------- priority


def test_workload_priority_class_label_wins() -> None:
    job = make_job()
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    job["spec"]["template"]["spec"]["priorityClassName"] = "system-critical"
    wl = convert(job)
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (
        10000,
        "high",
        "WorkloadPriorityClass",
    )


def test_missing_workload_priority_class_is_an_error() -> None:
    job = make_job()
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    with pytest.raises(
        JobError, match=r"team-a/sample-job.*kueue\.x-k8s\.io/priority-class.*'urgent' not found"
    ):
        convert(job)


def test_pod_priority_class_name_is_used_without_the_label() -> None:
    job = make_job()
    job["spec"]["template"]["spec"]["priorityClassName"] = "batch"
    wl = convert(job)
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (
        50,
        "batch",
        "PriorityClass",
    )


def test_missing_pod_priority_class_is_an_error() -> None:
    job = make_job()
    job["spec"]["template"]["spec"]["priorityClassName"] = "nope"
    with pytest.raises(
        JobError, match=r"team-a/sample-job: spec\.template\.spec\.priorityClassName"
    ):
        convert(job)


def test_global_default_priority_class_applies_when_nothing_is_named() -> None:
    pcs = dict(PCS)
    pcs["default-low"] = PriorityClass(
        name="default-low", value=7, kind="PriorityClass", global_default=True
    )
    wl = convert(make_job(), pcs=pcs)
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (
        7,
        "default-low",
        "PriorityClass",
    )


def test_lowest_of_several_global_defaults_wins() -> None:
    pcs = {
        "b": PriorityClass(name="b", value=3, kind="PriorityClass", global_default=True),
        "a": PriorityClass(name="a", value=9, kind="PriorityClass", global_default=True),
    }
    assert convert(make_job(), pcs=pcs).priority_class == "b"


def test_global_default_workload_priority_class_is_not_used() -> None:
    wpcs = {"x": PriorityClass(name="x", value=99, global_default=True)}
    assert convert(make_job(), wpcs=wpcs, pcs={}).priority == 0


def test_empty_priority_label_is_treated_as_absent() -> None:
    job = make_job()
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = ""
    job["spec"]["template"]["spec"]["priorityClassName"] = "batch"
    assert convert(job).priority_class == "batch"


# ----------------------------------------------------------------------- metadata


def test_missing_uid_gets_a_stable_fake_uid() -> None:
    job = make_job(metadata__uid=_DELETE)
    first, second = convert(job), convert(copy.deepcopy(job))
    assert first.uid and first.uid == second.uid
    assert first.name == second.name
    other = make_job(metadata__uid=_DELETE, metadata__name="other-job")
    assert convert(other).uid != first.uid


def test_missing_namespace_defaults_to_default() -> None:
    wl = convert(make_job(metadata__namespace=_DELETE))
    assert wl.namespace == "default"


def test_missing_creation_timestamp_is_zero() -> None:
    assert convert(make_job(metadata__creationTimestamp=_DELETE)).creation_time == 0.0


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()),
        ("2024-05-01T12:00:00.25Z", datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp() + 0.25),
        ("1970-01-01T00:00:10.123456789Z", 10.123456789),
        (datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()),
    ],
)
def test_creation_timestamp_is_parsed_as_rfc3339(stamp: Any, expected: float) -> None:
    assert convert(make_job(metadata__creationTimestamp=stamp)).creation_time == pytest.approx(
        expected, abs=1e-6
    )


@pytest.mark.parametrize(
    "stamp", ["yesterday", "2024-05-01", "2024-05-01T12:00:00", "2024-13-01T00:00:00Z", 1714564800]
)
def test_bad_creation_timestamp_is_rejected(stamp: Any) -> None:
    with pytest.raises(JobError, match=r"team-a/sample-job: metadata\.creationTimestamp"):
        convert(make_job(metadata__creationTimestamp=stamp))


@pytest.mark.parametrize("name", [None, "", 5])
def test_job_name_is_required(name: Any) -> None:
    job = make_job(metadata__name=name)
    with pytest.raises(JobError, match=r"job team-a/<unnamed>: metadata\.name"):
        convert(job)


def test_job_without_metadata_is_rejected_naming_metadata_name() -> None:
    with pytest.raises(JobError, match=r"metadata\.name"):
        convert({"spec": {}})


def test_non_object_job_is_rejected() -> None:
    with pytest.raises(JobError):
        convert(["not", "a", "job"])  # type: ignore[arg-type]


def test_wrong_kind_is_rejected() -> None:
    with pytest.raises(JobError, match="kind"):
        convert(make_job(kind="CronJob"))


def test_labels_must_be_strings() -> None:
    job = make_job()
    job["metadata"]["labels"]["n"] = 3
    with pytest.raises(JobError, match=r"team-a/sample-job: metadata\.labels"):
        convert(job)


def test_missing_template_is_rejected() -> None:
    with pytest.raises(JobError, match=r"team-a/sample-job: spec\.template"):
        convert(make_job(spec__template=_DELETE))


def test_template_without_containers_is_rejected() -> None:
    with pytest.raises(JobError, match=r"spec\.template\.spec\.containers"):
        convert(make_job(spec__template={"spec": {"containers": []}}))


def test_bad_quantity_in_template_names_job_container_and_resource() -> None:
    job = make_job()
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "64GB"
    with pytest.raises(JobError) as info:
        convert(job)
    message = str(info.value)
    for part in ("team-a/sample-job", 'container "worker"', '"memory"', '"64GB"'):
        assert part in message


def test_malformed_template_is_reported_as_job_error() -> None:
    job = make_job()
    job["spec"]["template"]["spec"]["tolerations"] = [{"key": "a", "operator": "Sometimes"}]
    with pytest.raises(JobError, match=r"team-a/sample-job.*tolerations\[0\]\.operator"):
        convert(job)
