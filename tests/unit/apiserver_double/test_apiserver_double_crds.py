"""The double serves the CRDs of ``manifests/crd/`` and checks them as apiextensions does.

Issue 11, D1: kube-apiserver refused all six CRDs because their root ``metadata``
schema carried a ``description``; the double used a table of its own and never looked
at the CRDs.  Now it builds its custom resources from ``manifests/crd/`` and refuses a
CRD a real server would refuse (root metadata, structural schema, list-map keys, CEL
that does not compile).  D18: names, short names and categories come from the CRDs.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import aiohttp
import pytest

from admission.apiserver_double import ADMIN_TOKEN, running_apiserver
from admission.apiserver_double.crds import check_crd, crd_errors, load_crds, resource_type
from admission.apiserver_double.errors import ApiError

Obj = dict[str, Any]
ROOT = "spec.versions[0].schema.openAPIV3Schema"


def crd(schema: Obj | None = None, **spec: Any) -> Obj:
    """A small valid CRD (``widgets.example.com``) with ``schema`` as its spec schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "metadata": {"type": "object"},
                                "spec": schema or {"type": "object"},
                            },
                        }
                    },
                }
            ],
            **spec,
        },
    }


def messages(obj: Obj) -> list[str]:
    return [str(e) for e in crd_errors(obj)]


def test_the_checked_in_crds_are_accepted() -> None:
    crds = load_crds()
    assert {c["spec"]["names"]["kind"] for c in crds} == {
        "AdmissionCheck",
        "ClusterQueue",
        "Cohort",
        "LocalQueue",
        "MultiKueueCluster",
        "MultiKueueConfig",
        "ResourceFlavor",
        "Topology",
        "Workload",
        "WorkloadPriorityClass",
    }
    for c in crds:
        assert crd_errors(c) == [], c["metadata"]["name"]


def test_root_metadata_with_a_description_is_refused_as_by_kube_apiserver() -> None:
    bad = crd()
    root = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    root["properties"]["metadata"] = {"type": "object", "description": "Standard object metadata"}
    assert messages(bad) == [
        f"{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name "
        "and generateName, but metadata is implicitly specified"
    ]
    with pytest.raises(ApiError) as err:
        check_crd(bad)
    assert err.value.code == 422
    assert err.value.message.startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "widgets.example.com" is invalid: '
        f"{ROOT}.properties[metadata]: Forbidden:"
    )
    # name/generateName restrictions are allowed, anything else is not
    root["properties"]["metadata"] = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 63}},
    }
    assert messages(bad) == []
    root["properties"]["metadata"]["properties"]["labels"] = {"type": "object"}
    assert len(messages(bad)) == 1


def test_schemas_must_be_structural() -> None:
    untyped = crd({"type": "object", "properties": {"size": {"description": "no type"}}})
    assert messages(untyped) == [
        f"{ROOT}.properties[spec].properties[size].type: Required value: must not be empty "
        "for specified object fields"
    ]
    # int-or-string and preserve-unknown-fields nodes need no type
    fine = crd(
        {
            "type": "object",
            "properties": {
                "q": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "any": {"x-kubernetes-preserve-unknown-fields": True},
            },
        }
    )
    assert messages(fine) == []
    typed_junctor = crd({"type": "object", "anyOf": [{"type": "object", "required": ["a"]}]})
    assert messages(typed_junctor) == [
        f"{ROOT}.properties[spec].anyOf[0].type: Forbidden: must be empty to be structural"
    ]
    array = crd({"type": "object", "properties": {"xs": {"type": "array"}}})
    assert messages(array) == [
        f"{ROOT}.properties[spec].properties[xs].items: Required value: must be specified"
    ]
    root_type = crd()
    root_type["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["type"] = "array"
    assert f'{ROOT}.type: Invalid value: "array": must be object at the root' in messages(root_type)


def test_list_map_keys_and_cel_rules_are_checked() -> None:
    keyed = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
    }
    assert messages(crd({"type": "object", "properties": {"xs": keyed}})) == [
        f"{ROOT}.properties[spec].properties[xs].x-kubernetes-list-map-keys[0]: Invalid value: "
        '"name": all map keys must be required or have a default value'
    ]
    keyed["items"]["required"] = ["name"]
    assert messages(crd({"type": "object", "properties": {"xs": keyed}})) == []
    rules = {"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==", "message": "m"}]}
    (error,) = messages(crd(rules))
    assert error.startswith(
        f'{ROOT}.properties[spec].x-kubernetes-validations[0].rule: Invalid value: "self.a ==": '
        "compilation failed"
    )


def test_names_versions_and_storage_are_checked() -> None:
    wrong_name = crd()
    wrong_name["metadata"]["name"] = "widget.example.com"
    assert messages(wrong_name) == [
        'metadata.name: Invalid value: "widget.example.com": must be '
        'spec.names.plural+"."+spec.group'
    ]
    two_storage = crd()
    extra = copy.deepcopy(two_storage["spec"]["versions"][0])
    extra["name"] = "v2"
    two_storage["spec"]["versions"].append(extra)
    assert any("exactly one version marked as storage" in m for m in messages(two_storage))
    no_schema = crd()
    del no_schema["spec"]["versions"][0]["schema"]
    assert messages(no_schema) == [f"{ROOT}: Required value: schemas are required"]


def test_served_types_come_from_the_crds() -> None:
    by_kind = {c["spec"]["names"]["kind"]: resource_type(c) for c in load_crds()}
    wl = by_kind["Workload"]
    assert wl.versions == ("v1beta2",)  # v1beta1 is served: false
    assert wl.short_names == ("kwl", "kueueworkload", "kueueworkloads")
    assert wl.categories == () and wl.status_subresource and wl.namespaced
    assert by_kind["Cohort"].short_names == ("co",)
    assert by_kind["WorkloadPriorityClass"].short_names == ("wpc",)
    assert not by_kind["ResourceFlavor"].status_subresource
    assert wl.schema() is not None and wl.schema()["type"] == "object"

    async def discovery() -> Obj:
        async with running_apiserver() as server, aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            url = f"{server.url}/apis/kueue.x-k8s.io/v1beta2"
            async with http.get(url, headers=headers) as resp:
                body = await resp.json()
            async with http.get(f"{server.url}/apis/kueue.x-k8s.io/v1beta1", headers=headers) as r:
                assert r.status == 404
            return body

    listed = {r["name"]: r for r in asyncio.run(discovery())["resources"]}
    assert listed["workloads"]["shortNames"] == ["kwl", "kueueworkload", "kueueworkloads"]
    assert "categories" not in listed["workloads"]
    assert "resourceflavors/status" not in listed and "clusterqueues/status" in listed


# -- requests against the served CRDs: pruning (D2), defaulting (D5), validation (D3, D4) --

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CQS = f"{KUEUE}/clusterqueues"
LQS = f"{KUEUE}/namespaces/default/localqueues"
WLS = f"{KUEUE}/namespaces/default/workloads"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def cluster_queue(name: str = "cq", **spec: Any) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, **spec},
    }


def resource_group(**limits: str) -> list[Obj]:
    return [
        {
            "coveredResources": ["cpu"],
            "flavors": [
                {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4", **limits}]}
            ],
        }
    ]


class Session:
    def __init__(self, server: Any, http: aiohttp.ClientSession) -> None:
        self.server = server
        self.http = http

    async def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        **query: str,
    ) -> tuple[int, Any, list[str]]:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": content_type}
        data = None if body is None else json.dumps(body)
        url = self.server.url + path
        async with self.http.request(method, url, data=data, headers=headers, params=query) as r:
            return r.status, await r.json(), r.headers.getall("Warning", [])


def with_session(test: Any) -> None:
    async def main() -> None:
        async with running_apiserver() as server, aiohttp.ClientSession() as http:
            await test(Session(server, http))

    asyncio.run(main())


def test_unknown_fields_are_pruned_with_a_warning_by_default() -> None:
    async def scenario(api: Session) -> None:
        body = cluster_queue(foo="bar")
        body["metadata"]["bogus"] = 1
        status, out, warnings = await api.send("POST", CQS, body)
        assert status == 201
        assert warnings == [
            '299 - "unknown field \\"metadata.bogus\\""',
            '299 - "unknown field \\"spec.foo\\""',
        ]
        assert "foo" not in out["spec"] and "bogus" not in out["metadata"]
        stored = api.server.get_object("clusterqueues", "cq")
        assert stored is not None and "foo" not in stored["spec"]
        # Ignore: pruned silently
        status, _, warnings = await api.send(
            "POST", CQS, cluster_queue("quiet", foo="bar"), fieldValidation="Ignore"
        )
        assert status == 201 and warnings == []

    with_session(scenario)


def test_strict_field_validation_refuses_unknown_fields() -> None:
    async def scenario(api: Session) -> None:
        status, out, _ = await api.send(
            "POST", CQS, cluster_queue(foo="bar"), fieldValidation="Strict"
        )
        assert status == 400 and out["reason"] == "BadRequest"
        assert out["message"] == (
            'ClusterQueue in version "v1beta2" cannot be handled as a ClusterQueue: '
            'strict decoding error: unknown field "spec.foo"'
        )
        assert api.server.get_object("clusterqueues", "cq") is None
        await api.send("POST", CQS, cluster_queue())
        patch = {"spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [], "x": 1}]}}
        status, out, _ = await api.send(
            "PATCH", f"{CQS}/cq", patch, content_type="application/merge-patch+json",
            fieldValidation="Strict",
        )  # fmt: skip
        assert status == 400
        assert out["message"] == 'strict decoding error: unknown field "spec.resourceGroups[0].x"'
        status, out, _ = await api.send("POST", CQS, cluster_queue("x"), fieldValidation="Loud")
        assert status == 400 and "fieldValidation" in out["message"]

    with_session(scenario)


def test_built_in_kinds_prune_the_fields_the_service_writes() -> None:
    async def scenario(api: Session) -> None:
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "suspend": True,
                "paralelism": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "x", "cpu": "1"}],
                        "nodeSelectors": {"a": "b"},
                    }
                },
            },
        }
        status, out, warnings = await api.send("POST", JOBS, body)
        assert status == 201
        assert sorted(warnings) == [
            '299 - "unknown field \\"spec.paralelism\\""',
            '299 - "unknown field \\"spec.template.spec.containers[0].cpu\\""',
            '299 - "unknown field \\"spec.template.spec.nodeSelectors\\""',
        ]
        assert "paralelism" not in out["spec"] and out["spec"]["parallelism"] == 1
        # fields the double does not model below the known ones are kept
        affinity = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {"any": 1}}}}}}
        status, out, warnings = await api.send(
            "PATCH", f"{JOBS}/j", affinity, content_type="application/merge-patch+json"
        )
        assert status == 200 and warnings == []

    with_session(scenario)


def test_put_object_refuses_unknown_fields_and_invalid_objects() -> None:
    async def scenario(api: Session) -> None:
        with pytest.raises(ApiError) as err:
            api.server.put_object(cluster_queue(cohort="old-field-name"))
        assert err.value.code == 400 and 'unknown field "spec.cohort"' in err.value.message
        with pytest.raises(ApiError) as err:
            api.server.put_object(cluster_queue(stopPolicy="Sometimes"))
        assert err.value.code == 422

    with_session(scenario)


def test_schema_defaults_are_applied_on_create_and_update() -> None:
    async def scenario(api: Session) -> None:
        status, out, _ = await api.send("POST", CQS, cluster_queue())
        assert status == 201
        spec = out["spec"]
        assert spec["stopPolicy"] == "None" and spec["queueingStrategy"] == "BestEffortFIFO"
        assert spec["flavorFungibility"] == {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "TryNextFlavor",
        }
        assert spec["preemption"] == {
            "borrowWithinCohort": {"policy": "Never"},
            "reclaimWithinCohort": "Never",
            "withinClusterQueue": "Never",
        }
        # an update that drops a defaulted field gets it back
        status, out, _ = await api.send(
            "PATCH", f"{CQS}/cq", {"spec": {"stopPolicy": None}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status == 200 and out["spec"]["stopPolicy"] == "None"
        lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}  # fmt: skip
        status, out, _ = await api.send("POST", LQS, lq)
        assert status == 201 and out["spec"]["stopPolicy"] == "None"
        wl = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w"},
            "spec": {"queueName": "lq", "podSets": [{"template": {"spec": {"containers": []}}}]},
        }
        status, out, _ = await api.send("POST", WLS, wl)
        assert status == 201, out
        assert out["spec"]["active"] is True
        assert (out["spec"]["podSets"][0]["name"], out["spec"]["podSets"][0]["count"]) == (
            "main",
            1,
        )
        # objects seeded through the test hook are defaulted as the server would serve them
        seeded = api.server.put_object(cluster_queue("seeded"))
        assert seeded["spec"]["stopPolicy"] == "None"

    with_session(scenario)


def test_openapi_schema_is_enforced_with_upstreams_messages() -> None:
    async def scenario(api: Session) -> None:
        status, out, _ = await api.send("POST", CQS, cluster_queue(stopPolicy="Sometimes"))
        assert status == 422 and out["reason"] == "Invalid"
        assert out["message"] == (
            'ClusterQueue.kueue.x-k8s.io "cq" is invalid: spec.stopPolicy: Unsupported value: '
            '"Sometimes": supported values: "None", "Hold", "HoldAndDrain"'
        )
        groups = resource_group()
        groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
        status, out, _ = await api.send("POST", CQS, cluster_queue(resourceGroups=groups))
        assert status == 422
        (cause,) = out["details"]["causes"]
        assert cause["field"] == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
        assert "should match" in cause["message"]
        status, out, _ = await api.send("POST", CQS, cluster_queue(queueingStrategy=7))
        assert status == 422 and "must be of type string" in out["message"]

    with_session(scenario)


def test_cel_rules_answer_before_webhooks_with_transition_rules_on_update() -> None:
    async def scenario(api: Session) -> None:
        body = cluster_queue(resourceGroups=resource_group(borrowingLimit="1"))
        status, out, _ = await api.send("POST", CQS, body)
        assert status == 422
        assert out["message"] == (
            'ClusterQueue.kueue.x-k8s.io "cq" is invalid: spec: Invalid value: "object": '
            "borrowingLimit must be nil when cohort is empty"
        )
        body["spec"]["cohortName"] = "all"
        status, _, _ = await api.send("POST", CQS, body)
        assert status == 201
        lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}  # fmt: skip
        status, _, _ = await api.send("POST", LQS, lq)
        assert status == 201  # the transition rule does not run on create
        status, out, _ = await api.send(
            "PATCH", f"{LQS}/lq", {"spec": {"clusterQueue": "other"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status == 422 and out["message"] == (
            'LocalQueue.kueue.x-k8s.io "lq" is invalid: spec.clusterQueue: Invalid value: '
            '"string": field is immutable'
        )

    with_session(scenario)


def test_ratcheting_lets_an_update_keep_an_already_invalid_value() -> None:
    async def scenario(api: Session) -> None:
        # seeded past validation (as if stored under an older, laxer CRD)
        bad = cluster_queue(stopPolicy="Sometimes")
        api.server.store.insert(
            api.server.registry.resolve("clusterqueues"),
            {**bad, "metadata": {**bad["metadata"], "uid": "u", "generation": 1}},
        )
        status, out, _ = await api.send(
            "PATCH", f"{CQS}/cq", {"metadata": {"labels": {"a": "b"}}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status == 200, out
        status, out, _ = await api.send(
            "PATCH", f"{CQS}/cq", {"spec": {"stopPolicy": "Never"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status == 422 and "spec.stopPolicy: Unsupported value" in out["message"]

    with_session(scenario)


def test_tables_show_the_crds_printer_columns() -> None:
    """D10: ``kubectl get`` asks for a Table; a CRD's additionalPrinterColumns fill it."""

    async def scenario(api: Session) -> None:
        wl = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w"},
            "spec": {"queueName": "lq", "podSets": [{"template": {"spec": {"containers": []}}}]},
        }
        await api.send("POST", WLS, wl)
        status = {"status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1}]}, "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}  # fmt: skip
        code, out, _ = await api.send(
            "PATCH", f"{WLS}/w/status", status, content_type="application/merge-patch+json"
        )
        assert code == 200, out
        headers = {
            "Authorization": f"Bearer {ADMIN_TOKEN}",
            "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        }
        async with api.http.get(api.server.url + WLS, headers=headers) as resp:
            tbl = await resp.json()
        assert tbl["kind"] == "Table"
        assert [c["name"] for c in tbl["columnDefinitions"]] == [
            "Name", "Queue", "Reserved in", "Admitted", "Finished", "Age",
        ]  # fmt: skip
        (row,) = tbl["rows"]
        assert row["cells"][:5] == ["w", "lq", "cq", "True", None]
        assert row["cells"][5].endswith("s")  # a date column is shown as an age ("0s")
        async with api.http.get(api.server.url + "/api/v1/namespaces", headers=headers) as resp:
            builtin = await resp.json()
        assert [c["name"] for c in builtin["columnDefinitions"]] == ["Name", "Age"]

    with_session(scenario)


def test_load_crds_gives_each_caller_its_own_copy() -> None:
    """A test that edits a loaded CRD (to see it refused) must not change what every
    later double installs."""
    first = load_crds()
    first[0]["spec"]["names"]["kind"] = "Changed"
    assert load_crds()[0]["spec"]["names"]["kind"] != "Changed"
