"""The API-server double changes objects like kube-apiserver: patch types, the status subresource, conflicts.

The controller writes with merge, JSON and strategic-merge patches, writes status through
the ``/status`` subresource and relies on resourceVersion conflicts for optimistic
concurrency; these tests pin each of those (and dry run and server-side apply) against
the real ``kubernetes.aio`` client, plus the strategic-merge directives the client tests
do not reach.
"""

from __future__ import annotations

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from ._support import JSON_PATCH, KUEUE, MERGE, SMP, V, cluster, job, run, status_body, workload


def test_three_patch_types_with_explicit_content_type() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            core = client.CoreV1Api(api)
            await batch.create_namespaced_job("default", job("p"))
            await batch.patch_namespaced_job(
                "p",
                "default",
                {"metadata": {"labels": {"a": "1"}}, "spec": {"parallelism": 2}},
                _content_type=MERGE,
            )
            # list semantics on a Pod: SMP merges containers by name and unions finalizers;
            # a merge patch replaces the list
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "finalizers": ["x/a"]},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "busybox"},
                        {"name": "side", "image": "envoy"},
                    ]
                },
            }
            await core.create_namespaced_pod("default", pod)
            smp = {
                "metadata": {"finalizers": ["x/b"]},
                "spec": {"containers": [{"name": "side", "image": "envoy:2"}]},
            }
            await core.patch_namespaced_pod("p", "default", smp, _content_type=SMP)
            stored = server.get_object("pods", "p", "default")
            assert stored is not None
            containers = stored["spec"]["containers"]
            assert [(c["name"], c["image"]) for c in containers] == [
                ("main", "busybox"),
                ("side", "envoy:2"),
            ]
            assert stored["metadata"]["finalizers"] == ["x/a", "x/b"]
            merge_replaces = {"metadata": {"finalizers": ["x/c"]}}
            await core.patch_namespaced_pod("p", "default", merge_replaces, _content_type=MERGE)
            stored = server.get_object("pods", "p", "default")
            assert stored is not None and stored["metadata"]["finalizers"] == ["x/c"]
            ops = [
                {"op": "test", "path": "/spec/parallelism", "value": 2},
                {"op": "replace", "path": "/spec/suspend", "value": True},
            ]
            patched = await batch.patch_namespaced_job(
                "p", "default", ops, _content_type=JSON_PATCH
            )
            assert patched.spec.suspend is True and patched.metadata.labels == {"a": "1"}
            failing = [{"op": "test", "path": "/spec/parallelism", "value": 99}]
            with pytest.raises(ApiException) as err:
                await batch.patch_namespaced_job("p", "default", failing, _content_type=JSON_PATCH)
            assert err.value.status == 422
            content_types = [r.content_type for r in server.requests if r.verb == "patch"]
            assert content_types == [MERGE, SMP, MERGE, JSON_PATCH, JSON_PATCH]

    run(scenario)


def test_strategic_merge_patch_is_refused_for_custom_resources_like_upstream() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w")
            )
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", {"spec": {}}, _content_type=SMP
                )
            assert err.value.status == 415

    run(scenario)


def test_status_subresource_changes_only_status_and_keeps_generation() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            body = workload("w")
            body["status"] = {"conditions": [{"type": "Admitted", "status": "True"}]}
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", body
            )
            assert "status" not in created, "status is dropped on create when the kind has /status"
            patch = {
                "spec": {"queueName": "sneaky"},
                "status": {"admission": {"clusterQueue": "cq"}},
            }
            after = await co.patch_namespaced_custom_object_status(
                KUEUE, V, "default", "workloads", "w", patch, _content_type=MERGE
            )
            assert after["status"] == {"admission": {"clusterQueue": "cq"}}
            assert after["spec"]["queueName"] == "team-a" and after["metadata"]["generation"] == 1
            main = {"spec": {"queueName": "team-b"}, "status": {"admission": None}}
            after = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", main, _content_type=MERGE
            )
            assert after["spec"]["queueName"] == "team-b" and after["metadata"]["generation"] == 2
            assert after["status"] == {"admission": {"clusterQueue": "cq"}}, (
                "main resource ignores status"
            )
            # the CRD declares no selectableFields: only metadata.name/namespace select
            with pytest.raises(ApiException) as err:
                await co.list_namespaced_custom_object(
                    KUEUE,
                    V,
                    "default",
                    "workloads",
                    field_selector="status.admission.clusterQueue=cq",
                )
            assert err.value.status == 400
            assert "field label not supported" in status_body(err.value)["message"]
            labels_only = await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"labels": {"x": "y"}}},
                _content_type=MERGE,
            )
            assert labels_only["metadata"]["generation"] == 2, (
                "metadata changes do not bump generation"
            )
            rv = server.resource_version
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"labels": {"x": "y"}}},
                _content_type=MERGE,
            )
            assert server.resource_version == rv, "a no-op patch writes nothing"

    run(scenario)


def test_stale_resource_version_is_409_conflict_for_put_and_patch() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w")
            )
            stale_rv = created["metadata"]["resourceVersion"]
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"spec": {"queueName": "b"}},
                _content_type=MERGE,
            )
            with pytest.raises(ApiException) as err:
                await co.replace_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", created
                )
            assert err.value.status == 409
            body = status_body(err.value)
            assert (
                body["reason"] == "Conflict"
                and body["kind"] == "Status"
                and body["status"] == "Failure"
            )
            assert "the object has been modified" in body["message"]
            pinned = {
                "metadata": {"resourceVersion": stale_rv},
                "status": {"admission": {"clusterQueue": "cq"}},
            }
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object_status(
                    KUEUE, V, "default", "workloads", "w", pinned, _content_type=MERGE
                )
            assert err.value.status == 409
            current = await co.get_namespaced_custom_object(KUEUE, V, "default", "workloads", "w")
            pinned["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            ok = await co.patch_namespaced_custom_object_status(
                KUEUE, V, "default", "workloads", "w", pinned, _content_type=MERGE
            )
            assert ok["status"]["admission"]["clusterQueue"] == "cq"

    run(scenario)


def test_strategic_merge_directives_and_primitive_list_merge() -> None:
    from admission.apiserver_double.patches import strategic_merge_patch

    target = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "x", "image": "1"}, {"name": "y", "image": "2"}],
            "tolerations": [{"key": "k"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    patch = {
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "y", "$patch": "delete"}, {"name": "z", "image": "3"}],
            "tolerations": [{"key": "only"}],
            "$setElementOrder/containers": [{"name": "x"}, {"name": "z"}],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ]
        },
    }
    result = strategic_merge_patch(target, patch)
    assert result["metadata"]["finalizers"] == ["b"]
    assert result["spec"]["containers"] == [
        {"name": "x", "image": "1"},
        {"name": "z", "image": "3"},
    ]
    assert result["spec"]["tolerations"] == [{"key": "only"}], (
        "lists without a merge key are replaced"
    )
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Admitted", "status": "True"},
    ]
    assert target["spec"]["containers"][1]["name"] == "y", "the target is not modified"


def test_dry_run_and_server_side_apply() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            preview = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w"), dry_run="All"
            )
            assert (
                preview["metadata"]["name"] == "w"
                and server.get_object("workloads", "w", "default") is None
            )
            applied = workload("w")
            created = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", applied, field_manager="test",
                _content_type="application/apply-patch+yaml",
            )  # fmt: skip
            assert created is None, "apply that creates answers 201, which v37's patch maps to None"
            assert server.get_object("workloads", "w", "default") is not None
            applied["spec"]["queueName"] = "team-b"
            updated = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", applied, field_manager="test",
                _content_type="application/apply-patch+yaml",
            )  # fmt: skip
            assert (
                updated["spec"]["queueName"] == "team-b" and updated["metadata"]["generation"] == 2
            )
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object(
                    KUEUE,
                    V,
                    "default",
                    "workloads",
                    "w",
                    applied,
                    _content_type="application/apply-patch+yaml",
                )
            assert err.value.status == 422, "apply needs a fieldManager"

    run(scenario)
