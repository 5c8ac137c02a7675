"""The integration interface's generic parts: merge patches, start and restore."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.integrations.framework.fields import apply_merge_patch, merge_patch
from admission.integrations.registry import INTEGRATIONS, FrameworksError, frameworks

json_values = st.recursive(
    st.one_of(st.booleans(), st.integers(-5, 5), st.text(max_size=3)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
    ),
    max_leaves=12,
)
objects = st.dictionaries(st.sampled_from("abcde"), json_values, max_size=4)


@settings(max_examples=120, deadline=None)
@given(objects, objects)
def test_the_merge_patch_takes_the_old_object_to_the_new_one(old: Any, new: Any) -> None:
    """What the API server makes of our start/stop patches is the object we computed
    (JSON without nulls: a merge patch cannot set a null)."""
    before = copy.deepcopy(old)
    assert apply_merge_patch(old, merge_patch(old, new)) == new
    assert old == before  # neither side is modified
    assert merge_patch(new, new) == {}


def test_unknown_framework_names_are_refused_naming_the_entry() -> None:
    import pytest

    with pytest.raises(FrameworksError, match=r"frameworks\[1\]: 'kubeflow.org/tfjob'"):
        frameworks({"frameworks": ["batch/job", "kubeflow.org/tfjob"]})
    with pytest.raises(FrameworksError, match="Kind.version.group"):
        frameworks({"externalFrameworks": ["AppWrapper"]})
    ext = frameworks({"frameworks": ["batch/job"],
                      "externalFrameworks": ["AppWrapper.v1beta2.workload.codeflare.dev"]})  # fmt: skip
    assert ("workload.codeflare.dev/v1beta2", "AppWrapper") in ext.managed_owner_kinds()
    assert [i.framework for i in ext.integrations()] == ["batch/job"]
    assert len(frameworks(None).integrations()) == len(INTEGRATIONS)
