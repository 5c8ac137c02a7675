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
from typing import Any

import aiohttp
import pytest

from tests.apiserver import ADMIN_TOKEN, running_apiserver
from tests.apiserver.crds import check_crd, crd_errors, load_crds, resource_type
from tests.apiserver.errors import ApiError

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
        "ClusterQueue",
        "Cohort",
        "LocalQueue",
        "ResourceFlavor",
        "Workload",
        "WorkloadPriorityClass",
    }
    for c in crds:
        assert crd_errors(c) == [], c["metadata"]["name"]


def test_root_metadata_with_a_description_is_refused_like_the_real_server() -> None:
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
