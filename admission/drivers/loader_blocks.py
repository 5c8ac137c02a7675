"""The loader's fastest path: block-style YAML read line by line, without libyaml.

Kubernetes manifests, and everything ``yaml.dump`` or ``kubectl get -o yaml`` writes,
are made of a few YAML constructs: block mappings and sequences, one scalar per line
(plain, or quoted without escapes), the empty flow collections ``{}`` and ``[]``,
whole-line and trailing comments and ``---`` between documents. For such text,
reading lines costs a fraction of what libyaml's event stream costs in Python (one
event object, with two position marks, per scalar and per collection).

:func:`block_documents` gives the same values ``yaml.safe_load_all`` gives for that
subset and nothing else: at the first line using anything more (anchors, aliases,
tags, block or multi-line scalars, escapes, flow collections with content, complex
keys, tabs, control characters, directives) it raises :class:`NotPlain`,
and so it does for everything that is not valid YAML (bad indentation, a second
mapping indicator on a line), so the caller reads on with libyaml from the first
document not yet given, and errors are always libyaml's, with its line and column.
Plain scalars are resolved by the caller's ``plain`` (the YAML 1.1 resolver and
constructors of the full loader: ``"1"`` and ``1``, ``true``, ``~`` and timestamps
are what they are there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["NotPlain", "block_documents"]


class NotPlain(Exception):
    """The text uses YAML a fast path leaves to the full loader (or is not valid YAML)."""


# Characters this path leaves to libyaml: tabs, CRs and YAML's other line breaks (NEL,
# U+2028, U+2029), a byte-order mark, and what YAML does not allow in a stream at all.
_OUTSIDE = re.compile(
    "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
# A character that cannot start a plain scalar (YAML's indicators); "-", "?" and ":"
# can when a non-space follows ("-1", "--verbose").
_NOT_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@`")
_MAX_SIMPLE_KEY = 1024  # libyaml's limit on an implicit key's length


def block_documents(text: str, plain: Callable[[str], Any]) -> Iterator[Any]:
    """Every document of ``text`` (``None`` for an empty one), one at a time.

    ``plain`` turns a plain scalar's text into its value. Raises :class:`NotPlain`
    where the text leaves the subset, after the documents before it were given.

    One pass over the lines with a stack of the open collections. What a line says
    (its indent, kind, key and value) is worked out once per distinct line: manifests
    repeat most of their lines (``kind: Workload``, ``- name: main``, ``cpu: '1'``).
    """
    if _OUTSIDE.search(text) is not None:
        raise NotPlain
    classify = _Classifier(plain)
    known = classify.known
    root: Any = None
    started = False  # a document is open (content seen, or an explicit "---")
    # The open collections, innermost last, as (indent, collection, is a sequence);
    # the innermost one also in top_indent, top, is_list.
    stack: list[tuple[int, Any, bool]] = []
    top_indent, is_list = -1, False
    top: Any = None
    # A key or entry whose value is the block below it: its indent, its collection,
    # its key (_NO_KEY: an entry), and whether a sequence at its own indent is its value.
    waiting = False
    w_indent, w_key, w_same_level = 0, _NO_KEY, False
    w_collection: Any = None
    for raw in _lines(text):
        line = known.get(raw)
        if line is None:
            line = classify(raw)
        code, indent, key, value, column = line
        if code >= _KEY:
            if value is _NEW_DICT:
                value = {}
            elif value is _NEW_LIST:
                value = []
            if not waiting and indent == top_indent and code == _KEY and not is_list:
                top[key] = value  # the common line: a key of the innermost mapping
                continue
        elif code == _SKIP:
            continue
        else:  # a document marker
            if started:
                if waiting:
                    _put(w_collection, w_key, None)
                    waiting = False
                yield root
            root, started, stack = None, True, []
            top_indent, top, is_list = -1, None, False
            continue
        started = True
        entry = code >= _ENTRY
        if waiting:
            waiting = False
            if indent > w_indent or (indent == w_indent and entry and w_same_level):
                block: Any = [] if entry else {}
                _put(w_collection, w_key, block)
                stack.append((indent, block, entry))
                top_indent, top, is_list = indent, block, entry
            else:
                _put(w_collection, w_key, None)
        elif top is None:
            if indent != 0 or entry or root is not None:
                raise NotPlain  # an indented root, a root sequence, or a second root
            root = {}
            stack.append((0, root, False))
            top_indent, top, is_list = 0, root, False
        if top_indent > indent:
            while stack[-1][0] > indent:
                stack.pop()
                if not stack:
                    raise NotPlain
            top_indent, top, is_list = stack[-1]
        if top_indent != indent:
            raise NotPlain  # bad indentation: libyaml says where
        if is_list and not entry:
            # a sequence at its key's indent ends at the next key of that mapping
            stack.pop()
            if not stack:
                raise NotPlain
            top_indent, top, is_list = stack[-1]
            if top_indent != indent or is_list:
                raise NotPlain
        elif entry and not is_list:
            raise NotPlain  # an entry where a key belongs
        if code == _KEY:
            top[key] = value
        elif code == _KEY_OPEN:
            waiting = True
            w_indent, w_collection, w_key, w_same_level = indent, top, key, True
        elif code == _ENTRY:
            top.append(value)
        elif code == _ENTRY_OPEN:
            waiting = True
            w_indent, w_collection, w_key, w_same_level = indent, top, _NO_KEY, False
        else:  # an entry that starts a mapping on its own line, at its key's column
            mapping: dict[Any, Any] = {}
            top.append(mapping)
            stack.append((column, mapping, False))
            top_indent, top, is_list = column, mapping, False
            if code == _ENTRY_MAP:
                mapping[key] = value
            else:
                waiting = True
                w_indent, w_collection, w_key, w_same_level = column, mapping, key, True
    if started:
        if waiting:
            _put(w_collection, w_key, None)
        yield root


def _lines(text: str, chunk: int = 1 << 16) -> Iterator[str]:
    """``text.split("\\n")``, a chunk at a time: the lines of a large input are never
    all held at once."""
    start = 0
    while True:
        cut = text.find("\n", start + chunk)
        if cut < 0:
            yield from text[start:].split("\n")
            return
        yield from text[start:cut].split("\n")
        start = cut + 1


def _put(collection: Any, key: Any, value: Any) -> None:
    if key is _NO_KEY:
        collection.append(value)
    else:
        collection[key] = value


_NO_KEY = object()
# Line kinds: the ones from _KEY on have content, the ones from _ENTRY on are entries
_SKIP, _DOCUMENT = 0, 1  # blank or comment / ---
_KEY, _KEY_OPEN = 2, 3  # key: value / key: (the block below)
_ENTRY, _ENTRY_OPEN = 4, 5  # - value / - (the block below)
_ENTRY_MAP, _ENTRY_MAP_OPEN = 6, 7  # - key: value / - key: (the block below)
# Values that must be a new object at every use
_NEW_DICT, _NEW_LIST = object(), object()
_EMPTY_FLOW = {"{}": _NEW_DICT, "[]": _NEW_LIST}
_MAX_KNOWN_LINES = 1 << 14

Line = tuple[int, int, Any, Any, int]  # kind, indent, key, value, column of an entry's map


class _Classifier:
    """What a line says, remembered per distinct line (a bounded table)."""

    __slots__ = ("known", "plain")

    def __init__(self, plain: Callable[[str], Any]) -> None:
        self.known: dict[str, Line] = {}
        self.plain = plain

    def __call__(self, raw: str) -> Line:
        line = self._classify(raw)
        known = self.known
        if len(known) >= _MAX_KNOWN_LINES:
            known.clear()
        known[raw] = line
        return line

    def _classify(self, raw: str) -> Line:
        content = raw.lstrip(" ")
        indent = len(raw) - len(content)
        content = content.rstrip(" ")
        if not content or content[0] == "#":
            return (_SKIP, indent, None, None, 0)
        if indent == 0:
            if content.startswith("---") and (len(content) == 3 or content[3] == " "):
                after = content[3:].lstrip(" ")
                if after and after[0] != "#":
                    raise NotPlain  # content after the marker ("--- !tag", "--- a")
                return (_DOCUMENT, 0, None, None, 0)
            if content[0] == "%" or content.startswith("..."):
                raise NotPlain  # directives and document end markers
        if content == "-" or content.startswith("- "):
            rest = content[1:].lstrip(" ")
            if not rest or rest[0] == "#":
                return (_ENTRY_OPEN, indent, None, None, 0)
            if rest == "-" or rest.startswith("- ") or rest[0] == "?":
                raise NotPlain  # "- - x", "- ? x"
            if ": " in rest or rest.endswith(":"):
                column = indent + len(content) - len(rest)
                opens, key, value = self._key_value(rest)
                return (_ENTRY_MAP_OPEN if opens else _ENTRY_MAP, indent, key, value, column)
            return (_ENTRY, indent, None, self._scalar(rest, key=False), 0)
        opens, key, value = self._key_value(content)
        return (_KEY_OPEN if opens else _KEY, indent, key, value, 0)

    def _key_value(self, content: str) -> tuple[bool, Any, Any]:
        """(whether the value is the block below, key, value) of ``key: value``."""
        colon = content.find(": ")
        if colon < 0:
            if not content.endswith(":"):
                raise NotPlain  # a multi-line scalar, a flow key, or not YAML
            colon = len(content) - 1
        if colon > _MAX_SIMPLE_KEY:
            raise NotPlain
        key = self._scalar(content[:colon].rstrip(" "), key=True)
        rest = content[colon + 1 :].lstrip(" ")
        if not rest or rest[0] == "#":
            return True, key, None
        return False, key, self._scalar(rest, key=False)

    def _scalar(self, text: str, *, key: bool) -> Any:
        """One scalar written on one line (a trailing comment allowed after a value)."""
        if not text:
            raise NotPlain
        first = text[0]
        if first == "'":
            end = text.find("'", 1)
            while end > 0 and text[end + 1 : end + 2] == "'":  # '' is a quote
                end = text.find("'", end + 2)
            if end < 0:
                raise NotPlain  # continues on the next line
            value: Any = text[1:end].replace("''", "'")
            tail = text[end + 1 :]
        elif first == '"':
            end = text.find('"', 1)
            if end < 0 or "\\" in text[:end]:
                raise NotPlain  # escapes or a line break: libyaml's
            value, tail = text[1:end], text[end + 1 :]
        elif first in "{[":
            value_text, _, tail = text.partition(" #")
            empty = _EMPTY_FLOW.get(value_text.rstrip(" "))
            if empty is None or key:
                raise NotPlain
            return empty
        else:
            if first in _NOT_PLAIN_START and not (
                first in "-?:" and len(text) > 1 and text[1] != " "
            ):
                raise NotPlain
            cut = text.find(" #")
            if cut >= 0:
                if key:
                    raise NotPlain
                text = text[:cut].rstrip(" ")
            if ": " in text or text.endswith(":"):
                raise NotPlain  # a second mapping indicator: not YAML
            return self.plain(text)
        if tail and (key or not tail.startswith(" ") or tail.lstrip(" ")[0] != "#"):
            raise NotPlain  # something after the closing quote (a comment needs a space)
        return value
