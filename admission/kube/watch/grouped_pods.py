"""Pods of one informer grouped by a key (a pod group, a TAS workload), read with
read-your-writes (:mod:`.read_your_writes`: a pod this replica just wrote is read as
written until the informer has caught up with that write, Kueue's expectations). The
pod-group reconciler and the topology ungater each keep one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.kube.watch.informer import DELETED
from admission.kube.watch.read_your_writes import LastWrites

Obj = dict[str, Any]


class GroupedPods:
    def __init__(self, informer: str) -> None:
        self.informer = informer  # the name of the informer the pods come from
        self.members: dict[str, set[str]] = {}  # group key -> pod keys
        self.latest: LastWrites[str] = LastWrites()  # pod key -> our last write

    def on_event(self, event: str, key: str, group: str) -> None:
        """Keep the index of ``group`` up to date with one informer event of pod ``key``."""
        if event == DELETED:
            self.latest.forget(key)
            members = self.members.get(group)
            if members is not None:
                members.discard(key)
                if not members:
                    del self.members[group]
        else:
            self.members.setdefault(group, set()).add(key)

    def wrote(self, key: str, pod: Obj | None) -> None:
        """Remember our write of pod ``key`` (None: it is gone, nothing to remember)."""
        if pod is None:
            self.latest.forget(key)
        else:
            self.latest.remember(key, pod)

    def pod(self, informers: Mapping[str, Any], key: str) -> Obj | None:
        inf = informers.get(self.informer)
        return self.latest.read(key, inf.get(key) if inf is not None else None)

    def pods(self, informers: Mapping[str, Any], group: str) -> list[Obj]:
        """The group's pods in key order (deterministic reconciles)."""
        keys = sorted(self.members.get(group, ()))
        return [p for k in keys if (p := self.pod(informers, k)) is not None]

    def groups(self) -> list[str]:
        return list(self.members)
