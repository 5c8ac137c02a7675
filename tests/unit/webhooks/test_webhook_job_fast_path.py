"""The Job mutating webhook's fast path decides exactly as the general path.

The fast path (plain checks for the common Job, patches reused per combination of
edits) exists only for throughput; for every Job — common or odd — its verdict must be
the one the general, field-by-field path gives.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.model import LabelSelector
from tests.support.webhook_server import sample_view
from webhooks.config import WebhookConfig
from webhooks.handlers import job as jobs
from webhooks.review import AdmissionRequest, HandlerContext

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"

label_values = st.sampled_from(["queue-a", "default", "missing", "", "Bad_Name"])
labels = st.dictionaries(
    st.sampled_from([QUEUE, PRIORITY, "app", "team"]), label_values, max_size=3
)
owners = st.one_of(
    st.none(),
    st.just([]),
    st.lists(
        st.fixed_dictionaries(
            {
                "apiVersion": st.sampled_from(["batch/v1", "apps/v1", "kubeflow.org/v1", "v1"]),
                "kind": st.sampled_from(["Job", "Deployment", "PyTorchJob", "Pod", "CronJob"]),
                "name": st.just("owner"),
                "uid": st.just("u"),
                "controller": st.booleans(),
            }
        ),
        max_size=2,
    ),
)


@st.composite
def job(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "j",
        "namespace": draw(st.sampled_from(["team-a", "team-b", "kube-system"])),
    }
    lab = draw(st.one_of(st.none(), labels))
    if lab is not None:
        meta["labels"] = lab
    own = draw(owners)
    if own is not None:
        meta["ownerReferences"] = own
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c"}]}}}
    suspend = draw(st.sampled_from([None, True, False, "yes"]))
    if suspend is not None:
        spec["suspend"] = suspend
    parallelism = draw(st.sampled_from([None, 1, 3, "2"]))
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _verdict(obj: dict[str, Any], ctx: HandlerContext, *, fast: bool) -> tuple:
    req = AdmissionRequest(
        uid="u1",
        operation="CREATE",
        group="batch",
        version="v1",
        kind="Job",
        namespace=obj["metadata"]["namespace"],
        name="j",
        object=copy.deepcopy(obj),
        old_object=None,
    )
    saved = jobs._mutate_job_fast
    if not fast:
        jobs._mutate_job_fast = lambda *_a, **_k: None  # type: ignore[assignment]
    try:
        v = jobs.mutate_job(req, ctx)
    except Exception as exc:  # noqa: BLE001 - both paths must fail the same way
        return ("raised", type(exc).__name__, str(exc))
    finally:
        jobs._mutate_job_fast = saved
    return (v.allowed, list(v.patch), v.warnings, v.code, v.message)


@settings(max_examples=600, deadline=None)
@given(job(), st.booleans(), st.booleans())
def test_fast_path_matches_the_general_path(
    obj: dict[str, Any], all_ns: bool, without_queue: bool
) -> None:
    config = WebhookConfig(
        managed_jobs_namespace_selector=LabelSelector() if all_ns else None,
        manage_jobs_without_queue_name=without_queue,
    )
    ctx = HandlerContext(view=sample_view(), config=config)
    assert _verdict(obj, ctx, fast=True) == _verdict(obj, ctx, fast=False)
