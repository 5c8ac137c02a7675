"""The API-server double stores, lists and deletes objects like kube-apiserver for the real clients.

The official ``kubernetes.aio`` client (and ``kubectl`` when installed) creates, reads,
lists and deletes objects over loopback, so the basics the controller depends on -- 201
on create, 409 on duplicates, 404 for a missing namespace or an unserved version,
generateName, label and field selectors, pagination, finalizers and the garbage
collector -- are pinned down. Patches, watches, the test hooks and webhooks have modules
of their own beside this one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from admission.apiserver_double import start_apiserver

from ._support import KUEUE, MERGE, V, cluster, job, run, status_body, until_gone, workload


def test_job_crud_returns_typed_objects_and_201_on_create() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            created = await batch.create_namespaced_job("default", job("j1", labels={"app": "x"}))
            assert created is not None, "v37 returns None unless the server answers 201"
            assert created.metadata.uid and created.metadata.creation_timestamp
            assert created.metadata.namespace == "default" and created.metadata.generation == 1
            fetched = await batch.read_namespaced_job("j1", "default")
            assert fetched.metadata.resource_version == created.metadata.resource_version
            fetched.spec.parallelism = 3
            replaced = await batch.replace_namespaced_job("j1", "default", fetched)
            assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
            assert replaced.metadata.generation == 2
            deleting = await batch.delete_namespaced_job("j1", "default")
            # batch/v1 Jobs default to Orphan: the garbage collector finishes the deletion
            assert deleting["metadata"]["finalizers"] == ["orphan"]
            await until_gone(server, "jobs", "j1", "default")
            with pytest.raises(ApiException) as err:
                await batch.read_namespaced_job("j1", "default")
            assert err.value.status == 404
            assert status_body(err.value)["message"] == 'jobs.batch "j1" not found'

    run(scenario)


def test_custom_objects_crud_cluster_and_namespaced_and_unserved_v1beta1_is_404() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            cq = {
                "apiVersion": f"{KUEUE}/{V}",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {"cohortName": "all"},
            }
            created = await co.create_cluster_custom_object(KUEUE, V, "clusterqueues", cq)
            assert created["metadata"]["resourceVersion"] and "namespace" not in created["metadata"]
            wl = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w1")
            )
            assert wl["metadata"]["namespace"] == "default"
            # the CRDs declare v1beta1 with served: false
            with pytest.raises(ApiException) as err:
                await co.get_namespaced_custom_object(
                    KUEUE, "v1beta1", "default", "workloads", "w1"
                )
            assert err.value.status == 404
            listed = await co.list_cluster_custom_object(KUEUE, V, "workloads")
            assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]
            assert listed["metadata"]["resourceVersion"] == str(server.resource_version)
            deleted = await co.delete_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w1"
            )
            assert deleted["kind"] == "Status" and deleted["status"] == "Success"
            assert server.get_object("workloads", "w1", "default") is None

    run(scenario)


def test_create_duplicate_is_409_already_exists_and_missing_namespace_is_404() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job("default", job("dup"))
            with pytest.raises(ApiException) as err:
                await batch.create_namespaced_job("default", job("dup"))
            assert err.value.status == 409 and status_body(err.value)["reason"] == "AlreadyExists"
            with pytest.raises(ApiException) as err:
                await batch.create_namespaced_job("nowhere", job("x"))
            assert err.value.status == 404
            assert status_body(err.value)["message"] == 'namespaces "nowhere" not found'

    run(scenario)


def test_generate_name_and_invalid_names_and_labels() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            body = workload("")
            body["metadata"] = {"generateName": "wl-"}
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", body
            )
            assert (
                created["metadata"]["name"].startswith("wl-")
                and len(created["metadata"]["name"]) == 8
            )
            with pytest.raises(ApiException) as err:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload("Bad_Name")
                )
            assert err.value.status == 422 and "metadata.name" in status_body(err.value)["message"]
            bad_label = workload("ok", labels={"team": "not valid!"})
            with pytest.raises(ApiException) as err:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", bad_label
                )
            assert err.value.status == 422 and status_body(err.value)["reason"] == "Invalid"

    run(scenario)


def test_label_and_field_selectors_filter_lists() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            for name, labels in [
                ("a", {"tier": "gold", "gpu": ""}),
                ("b", {"tier": "silver"}),
                ("c", {}),
            ]:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload(name, labels=labels)
                )

            async def names(**kw: str) -> list[str]:
                result = await co.list_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", **kw
                )
                return [i["metadata"]["name"] for i in result["items"]]

            assert await names(label_selector="tier=gold") == ["a"]
            assert await names(label_selector="tier==silver") == ["b"]
            assert await names(label_selector="tier!=gold") == ["b", "c"]
            assert await names(label_selector="tier in (gold, silver)") == ["a", "b"]
            assert await names(label_selector="tier notin (gold)") == ["b", "c"]
            assert await names(label_selector="gpu") == ["a"]
            assert await names(label_selector="!tier") == ["c"]
            assert await names(label_selector="tier,!gpu") == ["b"]
            assert await names(field_selector="metadata.name=b") == ["b"]
            assert await names(field_selector="metadata.name!=b,metadata.namespace=default") == [
                "a",
                "c",
            ]
            with pytest.raises(ApiException) as err:
                await names(field_selector="spec.queueName=x")
            assert err.value.status == 400

    run(scenario)


def test_list_pagination_with_limit_and_continue() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            core = client.CoreV1Api(api)
            for i in range(5):
                await core.create_namespaced_config_map(
                    "default", {"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}}
                )
            first = await core.list_namespaced_config_map("default", limit=2)
            assert [c.metadata.name for c in first.items] == ["cm0", "cm1"]
            assert first.metadata.remaining_item_count == 3
            rest = await core.list_namespaced_config_map(
                "default", limit=10, _continue=first.metadata.var_continue
            )
            assert [c.metadata.name for c in rest.items] == ["cm2", "cm3", "cm4"]
            assert rest.metadata.var_continue is None

    run(scenario)


def test_finalizers_delay_deletion_until_removed() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            body = workload("w")
            body["metadata"]["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
            await co.create_namespaced_custom_object(KUEUE, V, "default", "workloads", body)
            deleted = await co.delete_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w"
            )
            assert deleted["metadata"]["deletionTimestamp"], "pending deletion returns the object"
            still = await co.get_namespaced_custom_object(KUEUE, V, "default", "workloads", "w")
            assert still["metadata"]["deletionTimestamp"] and still["metadata"]["finalizers"]
            with pytest.raises(ApiException) as err:
                more = {"metadata": {"finalizers": ["kueue.x-k8s.io/resource-in-use", "new"]}}
                await co.patch_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", more, _content_type=MERGE
                )
            assert err.value.status == 422
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"finalizers": None}},
                _content_type=MERGE,
            )
            assert server.get_object("workloads", "w", "default") is None

    run(scenario)


def test_background_deletion_collects_owned_dependents() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            owner = await batch.create_namespaced_job("default", job("j"))
            body = workload("job-j")
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": owner.metadata.uid,
                    "controller": True,
                }
            ]
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(KUEUE, V, "default", "workloads", body)
            await batch.delete_namespaced_job("j", "default", propagation_policy="Background")
            assert server.get_object("jobs", "j", "default") is None  # the owner goes at once
            await until_gone(server, "workloads", "job-j", "default")  # dependents after

    run(scenario)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_create_get_and_patch_against_the_double(tmp_path: Path) -> None:
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: sample, labels: {kueue.x-k8s.io/queue-name: q}}\n"
        "spec: {template: {spec: {containers: [{name: c, image: busybox}], restartPolicy: Never}}}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\n"
        "spec: {cohortName: all}\n"
    )
    with start_apiserver() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")

        def kubectl(*args: str) -> str:
            cmd = [
                "kubectl",
                f"--kubeconfig={kubeconfig}",
                f"--cache-dir={tmp_path / 'cache'}",
                *args,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr}"
            return done.stdout

        assert "job.batch/sample created" in kubectl(
            "create", "--validate=false", "-f", str(manifest)
        )
        assert "sample" in kubectl("get", "jobs")
        listed = json.loads(kubectl("get", "clusterqueues", "-o", "json"))
        assert [i["metadata"]["name"] for i in listed["items"]] == ["cq"]
        kubectl(
            "patch", "clusterqueue", "cq", "--type=merge", "-p", '{"spec":{"cohortName":"other"}}'
        )
        kubectl("patch", "job", "sample", "-p", '{"spec":{"suspend":true}}')
        cq = api.get_object("clusterqueues", "cq")
        sample = api.get_object("jobs", "sample", "default")
        assert cq is not None and cq["spec"]["cohortName"] == "other"
        assert sample is not None and sample["spec"]["suspend"] is True
        # short names come from the CRD (kwl), not an invented "wl"
        assert kubectl("get", "kwl", "-A") == ""
        with pytest.raises(AssertionError, match='resource type "wl"'):
            kubectl("get", "wl", "-A")


def test_label_selector_parser_rejects_garbage_with_400() -> None:
    from admission.apiserver_double.errors import ApiError
    from admission.apiserver_double.selectors import label_selector_from_dict, parse_label_selector

    with pytest.raises(ApiError) as err:
        parse_label_selector("a in b")
    assert err.value.code == 400
    selector = label_selector_from_dict(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]},
        where="test",
    )
    assert selector.matches({"a": "1"}) and not selector.matches({"a": "1", "b": "x"})
    with pytest.raises(ValueError, match=r"test.matchExpressions\[0\]"):
        label_selector_from_dict(
            {"matchExpressions": [{"key": "b", "operator": "Near"}]}, where="test"
        )
