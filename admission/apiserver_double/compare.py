"""How the built-in kinds' update rules compare a stored object with its update.

kube-apiserver's ``ValidateUpdate`` functions compare decoded Go structs, where an
absent field, ``null`` and an empty map or list are the same value
(``apiequality.Semantic.DeepEqual``); on JSON they are not, so every rule of
:mod:`.jobs`, :mod:`.pods` and :mod:`.apps` compares through :func:`normalized`.  A rule
that lets some fields change copies them from one side to the other first
(:func:`copy_key`), as upstream's rules copy them into the old object, and then compares
what is left.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


def normalized(value: Any) -> Any:
    """Go's semantic equality treats absent, null and empty maps/lists alike."""
    if isinstance(value, dict):
        out = {k: normalized(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def copy_key(source: Obj, target: Obj, key: str) -> None:
    """``target[key]`` becomes a copy of ``source[key]``, or goes if ``source`` has none."""
    if key in source:
        target[key] = copy.deepcopy(source[key])
    else:
        target.pop(key, None)
