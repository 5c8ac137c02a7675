"""The loader's line-by-line YAML path gives exactly what ``yaml.safe_load_all`` gives,
or leaves the text to libyaml (``NotPlain``) — never a value for text libyaml refuses.

Checked three ways: hand-picked lines at the edges of the subset, every YAML file of
the repository, and generated documents (``yaml.safe_dump`` in its block styles) with
random edits — comments, quotes, indentation, characters removed or added — so that
most of them are at or beyond the edge.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.drivers.documents import LoadError, _block_documents, _documents
from admission.drivers.loader_blocks import NotPlain, _lines

REPO = Path(__file__).resolve().parents[3]


def _libyaml(text: str) -> list[Any] | Exception:
    try:
        return list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except Exception as exc:  # noqa: BLE001 - any refusal (a ValueError too) is one
        return exc


def _typed(value: Any) -> Any:
    """The value with its types spelt out (``1 == True`` and ``1 == 1.0`` in Python)."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, value)


def check(text: str) -> bool:
    """True when the fast path read the text (and gave libyaml's values)."""
    want = _libyaml(text)
    try:
        got = list(_block_documents(text))
    except NotPlain:
        return False
    assert not isinstance(want, Exception), f"accepted what libyaml refuses ({want!r}):\n{text}"
    assert _typed(got) == _typed(want), text
    return True


READ = [
    "a: 1\nb: '1'\nc: 1.5\nd: true\ne: null\nf: ~\ng: 2024-01-02T03:04:05Z\nh: 2024-01-02\n",
    "a: 0x1F\nb: 0o17\nc: 1_000\nd: .inf\ne: 1:20\nf: Yes\ng: off\nh: -1\ni: --x\nj: ?x\nk: :x\n",
    "---\n---\nk: v\n---\n",
    "# only a comment\n",
    "---\n# a comment in an empty document\n",
    "--- # a comment on the marker\na: 1\n",
    "a: 1\n---\n",
    "a:\n- 1\n- x: 2\n  y:\n  - 3\n  z: {}\n- []\n-\n- - \nb: c\n".replace("- - \n", "-\n"),
    "a:\n  - 1\n  -   b: 2\n      c: 3\nd: 4\n",
    "'quoted key': 'it''s'\n\"double\": \"a # b: c\"\nplain: a#b\nurl: http://x/y\n",
    "a: b # trailing\nc: 'd' # trailing\ne: # nothing\nf: {} # empty\n",
    "1: int key\ntrue: bool key\n~: null key\n",
    "a: 1\na: 2\n",  # a duplicate key: the last wins, as the full loader does
    "name: ünïcödé — ok\n# ein Kommentar — mit Gedankenstrich\n",
    "spaces in key : value with  spaces   \n",
]

LEFT_TO_LIBYAML = [
    "a: &x 1\nb: *x\n",  # anchors, aliases
    "a: !!str 1\n",  # tags
    "m:\n  <<: {a: 1}\n",  # merge keys
    "a: |\n  block\n",  # block scalars
    "a: >\n  folded\n",
    "a: b\n  c\n",  # a multi-line plain scalar
    "a: 'two\n  lines'\n",
    'a: "esc\\n"\n',  # escapes
    "a: {b: 1}\n",  # flow collections with content
    "a: [1, 2]\n",
    "? complex\n: key\n",
    "a:\tb\n",  # tabs
    "a: b\r\n",  # CRs
    "%YAML 1.1\n---\na: 1\n",  # directives
    "a: 1\n...\n",  # document end markers
    "- root\n- sequence\n",
    "  indented: root\n",
    "just a scalar\n",
    "a: =\n",  # no safe constructor: the full loader words it
    "a: <<\n",
    "\ufeffa: 1\n",  # a byte-order mark
    "a: 2001-13-45\n",  # a timestamp that is no date
]

INVALID = [
    "a: b: c\n",
    "a: - x\n",
    "a: -\n",
    "a: 'x' y\n",
    'a: "x"y\n',
    "a: 'x'#c\n",
    "a:\n  b: 1\n c: 2\n",
    "a:\n  b: 1\n    c: 2\n",
    "a: 1\n- x\n",
    "- x\na: 1\n",
    "a:\n- x\n  b: 1\n",
    "a:\n  - x\n  b: 1\n",
    "a: 1\n b: 2\n",
    "key:value\n",
    "a: 'open\n",
    "a: {\n",
    "a: }\n",
    "--- x\n",
    "a: [] x\n",
]


@pytest.mark.parametrize("text", READ)
def test_lines_it_reads_give_the_full_loaders_values(text: str) -> None:
    assert check(text)


@pytest.mark.parametrize("text", LEFT_TO_LIBYAML + INVALID)
def test_anything_beyond_the_subset_or_invalid_is_left_to_libyaml(text: str) -> None:
    assert not check(text)


def test_empty_flow_collections_are_new_objects() -> None:
    docs = list(_block_documents("a: {}\nb: {}\nc: []\nd: []\n---\na: {}\n"))
    values = [docs[0]["a"], docs[0]["b"], docs[0]["c"], docs[0]["d"], docs[1]["a"]]
    assert len({id(v) for v in values}) == len(values)
    docs[0]["a"]["x"] = 1
    assert docs[1]["a"] == {}


@given(text=st.text(st.sampled_from("ab\n"), max_size=40), chunk=st.integers(0, 6))
def test_lines_are_split_a_chunk_at_a_time_as_split_splits_them(text: str, chunk: int) -> None:
    assert list(_lines(text, chunk)) == text.split("\n")


def test_every_yaml_file_of_the_repository() -> None:
    read = 0
    for path in sorted(REPO.glob("**/*.y*ml")):
        if any(part.startswith(".") or part == "test-artifacts" for part in path.parts):
            continue
        read += check(path.read_text(encoding="utf-8"))
    assert read >= 10  # manifests/, hack/ and docs are block style


def test_a_manifest_as_kubectl_writes_it() -> None:
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "pi",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "app": "pi"},
            "annotations": {"description": "a job: with colons # and a hash", "n": "010"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "parallelism": 3,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "pi",
                            "image": "perl:5.34",
                            "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                            "args": ["--verbose", "-", "'quoted'", '"double"', ""],
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                            "env": [{"name": "X", "value": "true"}, {"name": "Y", "value": None}],
                        }
                    ],
                    "nodeSelector": {},
                    "tolerations": [],
                }
            },
        },
    }
    for indent in (2, 4):
        for sort_keys in (False, True):
            text = yaml.safe_dump_all([doc, doc], indent=indent, sort_keys=sort_keys)
            assert check(text), text


# -- generated documents, then edited -------------------------------------------------

_ALPHABET = st.sampled_from(list("ab1 :#-'\"{}[],.~!&*|>%@`?\\") + ["\u00e9", "\u2014"])
_WORDS = st.sampled_from(
    ["true", "no", "null", "~", "1", "0x1F", "1.5e3", "2024-01-02", "12:30", "-", "--x", ""]
)
_SCALARS = st.one_of(
    st.text(_ALPHABET, max_size=8),
    _WORDS,
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=32),
    st.dates(min_value=dt.date(1990, 1, 1), max_value=dt.date(2100, 1, 1)),
)
_KEYS = st.one_of(st.text(_ALPHABET, min_size=1, max_size=6), _WORDS, st.integers(0, 9))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=16,
)
_DOCUMENTS = st.lists(st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=5), min_size=1,
                      max_size=3)  # fmt: skip


def _dump(docs: list[Any], indent: int, sort_keys: bool) -> str:
    return yaml.safe_dump_all(docs, indent=indent, sort_keys=sort_keys, allow_unicode=True,
                              default_flow_style=False, width=1000)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_DOCUMENTS, indent=st.sampled_from([2, 4]), sort_keys=st.booleans())
def test_generated_documents(docs: list[Any], indent: int, sort_keys: bool) -> None:
    check(_dump(docs, indent, sort_keys))


_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "delete", "indent", "dedent", "comment", "duplicate"]),
        st.integers(0, 10**6),
        st.sampled_from(list(" :#-'\"{}[]\n?&*|>!") + ["  # c", " x", "\n---\n", "- ", "\u2028"]),
    ),
    min_size=1,
    max_size=3,
)


def _edit(text: str, edits: list[tuple[str, int, str]]) -> str:
    for op, at, piece in edits:
        lines = text.split("\n")
        i = at % max(1, len(lines))
        pos = at % max(1, len(text))
        if op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + 1 :]
        elif op == "indent":
            lines[i] = " " + lines[i]
            text = "\n".join(lines)
        elif op == "dedent":
            lines[i] = lines[i][1:]
            text = "\n".join(lines)
        elif op == "comment":
            lines.insert(i, " " * (at % 5) + "# note")
            text = "\n".join(lines)
        else:
            lines.insert(i, lines[i])
            text = "\n".join(lines)
    return text


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_DOCUMENTS, indent=st.sampled_from([2, 4]), edits=_EDITS)
def test_edited_documents(docs: list[Any], indent: int, edits: list[tuple[str, int, str]]) -> None:
    check(_edit(_dump(docs, indent, False), edits))


# -- through the loader: same documents, same errors ----------------------------------


def test_a_fall_back_resumes_after_the_documents_given(tmp_path: Path) -> None:
    """The line path gives the documents before the first anchor; the event path and
    the full loader resume there, and nothing is given twice."""
    text = "a: 1\n---\nb: {c: 2}\n---\nd: &x 3\ne: *x\n---\nf: 4\n"
    f = tmp_path / "x.yaml"
    f.write_text(text)
    want = [(i, d) for i, d in enumerate(yaml.safe_load_all(text)) if d is not None]
    assert list(_documents(str(f))) == want


@pytest.mark.parametrize(
    ("text", "document", "where"),
    [
        ("a: 1\n---\nb: c: d\n", 1, "line 3, column 5"),
        ("a: 1\n---\nb:\n  c: 1\n d: 2\n", 1, "line 5, column 2"),
        ("a: 1\n---\nb: 'open\n", 1, "line 4, column 1"),
    ],
)
def test_syntax_errors_are_worded_by_libyaml_with_their_document(
    text: str, document: int, where: str, tmp_path: Path
) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(text)
    got = []
    with pytest.raises(LoadError, match="invalid YAML") as err:
        for item in _documents(str(f)):
            got.append(item)
    assert got == [(0, {"a": 1})]
    assert err.value.document == document
    assert where in str(err.value)


def test_a_value_without_a_safe_constructor_is_an_error_not_a_crash(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: =\n")
    with pytest.raises(LoadError, match="invalid YAML.*constructor"):
        list(_documents(str(f)))
