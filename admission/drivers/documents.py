"""Files to documents, as kubectl reads them: a path is a file, ``-`` (standard input)
or a directory of ``*.yaml``, ``*.yml`` and ``*.json`` files; a file is a YAML stream
or a JSON stream. Every failure is a ``LoadError`` naming the file and document.

Plain block YAML (what ``kubectl get -o yaml`` and most manifests are) is read by the
fast readers here and in ``admission.drivers.loader_blocks``; anything they do not
handle (``NotPlain``: flow style, anchors, tags, merge keys) is read again by PyYAML's
full loader, so the values are always ``yaml.safe_load_all``'s.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import yaml

from admission.drivers.loader_blocks import NotPlain, block_documents

FILE_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_LABEL = "<stdin>"
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available


class LoadError(Exception):
    """Input that cannot be loaded. The message is one paragraph naming where and what."""

    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        document: int | None = None,
        kind: str = "",
        name: str = "",
        path: str = "",
        item: int | None = None,
    ) -> None:
        self.file = file
        self.document = document
        self.item = item
        self.kind = kind
        self.name = name
        self.path = path
        self.detail = message
        where = [part for part in (file, document_label(document, item)) if part]
        what = " ".join(part for part in (kind, name) if part)
        parts = [*where, what, path, message]
        super().__init__(": ".join(part for part in parts if part))


def document_label(index: int | None, item: int | None = None) -> str:
    if index is None:
        return ""
    return f"document {index}" + ("" if item is None else f" items[{item}]")


def _plain_scalars(loader: Any) -> Callable[[str], Any]:
    """The value of a plain scalar as the full loader makes it (YAML 1.1 resolver and
    safe constructors), once per distinct text: they repeat a lot (kinds, API versions,
    images). A merge key or a value without a safe constructor (``=``) is the full
    loader's to report."""
    cache: dict[str, Any] = {}
    constructors = loader.yaml_constructors
    str_tag = "tag:yaml.org,2002:str"
    miss = _NO_KEY

    def plain(value: str) -> Any:
        got = cache.get(value, miss)
        if got is not miss:
            return got
        tag = loader.resolve(yaml.ScalarNode, value, (True, False))
        if tag == str_tag:
            obj: Any = value
        else:
            construct = constructors.get(tag)
            if construct is None or tag == "tag:yaml.org,2002:merge":
                raise NotPlain
            try:
                obj = construct(loader, yaml.ScalarNode(tag, value))
            except (ValueError, OverflowError):  # "2001-13-45": a timestamp, but no date
                raise NotPlain from None
        cache[value] = obj
        return obj

    return plain


def _block_documents(text: str) -> Iterator[Any]:
    """The documents of a block-style stream, read line by line (``loader_blocks``)."""
    loader = _SafeLoader("")
    try:
        yield from block_documents(text, _plain_scalars(loader))
    finally:
        loader.dispose()


def plain_yaml_documents(text: str) -> list[Any]:
    """Every document of a YAML stream (``None`` for an empty one) read by the fast
    paths, the values ``yaml.safe_load_all`` gives; ``NotPlain`` when the text needs the
    full loader (which then also words any syntax error)."""
    try:
        return list(_block_documents(text))
    except NotPlain:
        return list(_fast_documents(text))


def _fast_documents(text: str) -> Iterator[Any]:
    """Every document of a YAML stream, built straight from libyaml's events, one at a
    time (a caller that converts and drops each one never holds them all).

    The same values as ``yaml.safe_load_all`` for the plain YAML Kubernetes manifests
    are made of, without composing a node graph first: plain scalars are resolved
    once per distinct value, quoted ones are strings. Anything else (anchors, aliases,
    tags, merge keys) raises ``NotPlain``, and the caller reads on with the full
    loader from the first document not yet given; so do syntax errors, so that their
    messages come from one place.
    """
    loader = _SafeLoader(text)
    plain = _plain_scalars(loader)

    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
    mapping_end, sequence_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
    document_end, stream_end = yaml.DocumentEndEvent, yaml.StreamEndEvent
    next_event = loader.get_event
    no_key = _NO_KEY
    # The container being built, its pending key (mappings; _NO_KEY: none yet) and
    # whether it is a list; the enclosing ones wait on the stack.
    stack: list[tuple[Any, Any, bool]] = []
    container: Any = None
    key: Any = no_key
    is_list = False
    try:
        while True:
            ev = next_event()
            cls = type(ev)
            if cls is scalar_event:
                if ev.anchor is not None or ev.tag is not None:
                    raise NotPlain
                value: Any = ev.value
                if ev.implicit[0]:
                    value = plain(value)
            elif cls is mapping_start or cls is sequence_start:
                if ev.anchor is not None or (ev.tag is not None and ev.tag != "!"):
                    raise NotPlain
                stack.append((container, key, is_list))
                is_list = cls is sequence_start
                container, key = ([] if is_list else {}), no_key
                continue
            elif cls is mapping_end or cls is sequence_end:
                value = container
                container, key, is_list = stack.pop()
            elif cls is document_end:
                doc, container = container, None
                yield doc
                continue
            elif cls is stream_end:
                return
            elif cls is alias_event:
                raise NotPlain
            else:  # stream and document starts
                continue
            if not stack:  # the document's root
                container = value
            elif is_list:
                container.append(value)
            elif key is no_key:
                try:
                    hash(value)
                except TypeError:
                    raise NotPlain from None
                key = value
            else:
                container[key] = value
                key = no_key
    except yaml.YAMLError:
        raise NotPlain from None
    finally:
        loader.dispose()


_NO_KEY = object()


def sources(path: str, *, recursive: bool, stdin: TextIO | None) -> Iterator[tuple[str, str]]:
    """(file label, text) of every file a ``-f`` path names, in kubectl's order."""
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin
        try:
            yield STDIN_LABEL, stream.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise LoadError(f"cannot read: {exc}", file=STDIN_LABEL) from None
        return
    if os.path.isdir(path):
        for file in _directory_files(path, recursive=recursive):
            yield file, _read(file)
    elif os.path.isfile(path):
        yield path, _read(path)
    elif os.path.exists(path):
        raise LoadError("not a regular file or directory", file=path)
    else:
        raise LoadError("no such file or directory", file=path)


def _directory_files(path: str, *, recursive: bool) -> Iterator[str]:
    """``*.yaml``, ``*.yml`` and ``*.json`` files, by name; subdirectories in place."""
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror}", file=path) from None
    for name in entries:
        full = os.path.join(path, name)
        if os.path.isdir(full):
            if recursive:
                yield from _directory_files(full, recursive=True)
        elif name.endswith(FILE_SUFFIXES) and os.path.isfile(full):
            yield full


def _read(file: str) -> str:
    try:
        with open(file, encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"cannot read: {exc}", file=file) from None


def _documents(file: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Non-empty documents of a file with their 0-based index in the file."""
    return documents_of(file, _read(file))


def documents_of(file: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Non-empty documents of a YAML or JSON stream with their 0-based index."""
    if file.endswith(".json") or text.lstrip().startswith("{"):
        for index, doc in enumerate(_json_documents(file, text)):
            if doc is not None:
                yield index, _mapping(doc, file, index)
        return
    given = 0  # documents a fast path gave (the next path resumes after them)
    for fast in (_block_documents, _fast_documents):
        try:
            for index, doc in enumerate(fast(text)):
                if index < given:
                    continue
                given = index + 1
                if doc is not None:
                    yield index, _mapping(doc, file, index)
            return
        except NotPlain:
            pass
    for index, doc in _yaml_documents(file, text):
        if index >= given:
            yield index, doc


def _mapping(doc: Any, file: str, index: int) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise LoadError(
            f"is not a mapping (got {json_type(doc)}); every document must be a Kubernetes object",
            file=file,
            document=index,
        )
    return doc


def _json_documents(file: str, text: str) -> list[Any]:
    """The values of a JSON stream (one object, or several one after the other)."""
    decoder = json.JSONDecoder()
    docs: list[Any] = []
    pos = 0
    end = len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return docs
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise LoadError(
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                file=file,
                document=len(docs),
            ) from None
        docs.append(doc)


def _yaml_documents(file: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    index = 0
    loader = _SafeLoader(text)
    try:
        while loader.check_data():
            doc = loader.get_data()
            if doc is not None:
                yield index, _mapping(doc, file, index)
            index += 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = ""
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
            index = _document_at(text, mark.line)  # the scanner reads ahead of the index
        problem = getattr(exc, "problem", None) or str(exc)
        raise LoadError(f"invalid YAML{where}: {problem}", file=file, document=index) from None
    except (ValueError, OverflowError) as exc:  # a scalar its constructor refuses
        raise LoadError(f"invalid YAML: {exc}", file=file, document=index) from None
    finally:
        loader.dispose()


_DOCUMENT_START = re.compile(r"^---(\s|$)")


def _document_at(text: str, line: int) -> int:
    """The 0-based index of the document that contains ``line`` (0-based) of ``text``."""
    index = 0
    content_seen = False
    for current in text.splitlines()[: line + 1]:
        if _DOCUMENT_START.match(current):
            if content_seen:
                index += 1
            content_seen = True  # an explicit start opens a document, even if it stays empty
        elif current.strip() and not current.lstrip().startswith(("#", "%")):
            content_seen = True
    return index


def json_type(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
