"""Pending workloads of one ClusterQueue, in the order the scheduler takes them.

Kueue keeps a heap per ClusterQueue (docs/semantics.md §4.3): higher priority first,
then the earlier queue-order timestamp, then the UID. We keep one sorted list per
LocalQueue and pick the ClusterQueue's head among the LocalQueue heads, which gives the
same order and lets Admission Fair Sharing put the LocalQueue with the lowest usage
first without re-sorting anything when usage changes.

BestEffortFIFO parks a head that cannot be admitted in an *inadmissible* set until a
capacity event (a workload finishes or is evicted, a quota or cohort changes) moves it
back; StrictFIFO puts it straight back so it keeps blocking the queue. With deficit-
bounded parking (``parkUntilFeasible``, admission.engine.preemption.feasibility) the owner may give
parked work a *ticket*: it then wakes only with its ticket (:meth:`wake`) or on a spec
change (:meth:`requeue_inadmissible`), not on every capacity event
(:meth:`wake_unbounded`).

As in Kueue (SchedulingEquivalenceHashing, ``ClusterQueue.PushOrUpdate``), a workload
that arrives (or changes) while workloads of its scheduling hash are parked because one
of them could not be admitted goes straight to the parked set (:meth:`arrive`) until the
next capacity event; it does not wake the parked ones, and a push into a parked group
leaves the group's workloads parked.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator

from sortedcontainers import SortedList

from queues.model import Workload

OrderKey = tuple[int, float, str]


class _Heads(list):  # type: ignore[type-arg]
    """A plain list kept sorted, for the index of group heads: a queue has a few
    distinct shapes of workload, and for a few items a list with bisection reads and
    changes several times faster than a ``SortedList``."""

    __slots__ = ()

    def add(self, item: object) -> None:
        insort(self, item)

    def remove(self, item: object) -> None:
        i = bisect_left(self, item)
        if i == len(self) or self[i] != item:
            raise ValueError(f"{item!r} not in list")
        del self[i]


def order_key(wl: Workload) -> OrderKey:
    """Higher priority, then earlier queue-order timestamp, then UID (or name)."""
    return (-wl.priority, wl.queue_order_time, wl.tiebreak)


def scheduling_hash(wl: Workload) -> int:
    """Workloads with equal hashes are interchangeable for admission in one ClusterQueue:
    same priority and the same podSets (counts, requests, placement constraints).

    Kueue's SchedulingEquivalenceHashing: when one of them cannot be admitted, none of
    the others can either, so a BestEffortFIFO queue parks them all at once instead of
    nominating each in turn.
    """
    return hash(
        (
            wl.priority,
            tuple(
                (
                    ps.count,
                    ps.min_count,
                    tuple(sorted(ps.requests.items())),
                    tuple(sorted(ps.node_selector.items())),
                    tuple(ps.tolerations),
                    tuple(ps.required_affinity),
                    ps.topology,
                    ps.limit_violations,
                    ps.dra_error,
                )
                for ps in wl.pod_sets
            ),
            tuple(sorted(wl.reclaimable_pods.items())) if wl.reclaimable_pods else (),
        )
    )


class PendingQueue:
    """The pending workloads of one ClusterQueue.

    Workloads are grouped by (LocalQueue, scheduling hash); each group is a sorted list.
    Parking every workload equivalent to a failed one, and waking everything on a
    capacity event, then touch groups, not workloads: a queue of thousands of identical
    pending jobs costs the same as one.

    The head of every active group is kept in one sorted list (and per LocalQueue, for
    admission fair sharing), so ``head`` is O(log n) however many distinct shapes wait:
    O(1) to read, O(log n) to maintain on every push, removal and park.
    """

    __slots__ = (
        "_groups",
        "_canon",
        "_active",
        "_by_hash",
        "_keys",
        "_parked",
        "_heads",
        "_lq_heads",
        "sticky",
        "on_park",
        "on_head",
        "_group_ticket",
        "_key_ticket",
        "_ticket_members",
        "_bulk",
        "on_bulk",
    )

    def __init__(self) -> None:
        self._groups: dict[tuple[str, int], SortedList] = {}
        # one (LocalQueue key, hash) tuple per group, shared by all its workloads' entries
        self._canon: dict[tuple[str, int], tuple[str, int]] = {}
        self._active: set[tuple[str, int]] = set()  # groups whose workloads may be nominated
        self._by_hash: dict[int, set[tuple[str, int]]] = {}
        self._keys: dict[str, tuple[tuple[str, int], OrderKey, Workload]] = {}
        # Individually parked workloads (BestEffortFIFO), outside any group.
        self._parked: dict[str, Workload] = {}
        # (order key, workload key) of each active group's first workload: all of them,
        # and per LocalQueue (kept only once admission fair sharing asks for it: without
        # it, maintaining it was half the cost of every pop and park).
        self._heads = _Heads()
        self._lq_heads: dict[str, _Heads] | None = None
        # A preemptor waiting for its victims stays the head (Kueue's "sticky" head).
        self.sticky: str | None = None
        # Called with the failed workload when work is parked: the owner keeps track of
        # which queues a capacity event must wake, so it does not visit every queue of a
        # large tree each time; it may answer with a ticket (bounded parking).
        self.on_park: Callable[[Workload], int | None] | None = None
        # Called when the queue gets a head after having none: the owner keeps the set
        # of queues a cycle must visit, so it does not visit every queue of a large
        # cluster when only a few have work to nominate.
        self.on_head: Callable[[], None] | None = None
        # Parked work that has a ticket (parked groups, individually parked keys), and
        # what each ticket parked (entries may be stale: the maps above decide).
        self._group_ticket: dict[tuple[str, int], int] = {}
        self._key_ticket: dict[str, int] = {}
        self._ticket_members: dict[int, list[tuple[str, int] | str]] = {}
        # Kueue's hashToBulkMoveReason: the scheduling hashes parked with their failed
        # workload since the last capacity event (:meth:`requeue_inadmissible`); a
        # workload of one of them that :meth:`arrive`s is parked at once.
        self._bulk: set[int] = set()
        # Called when a hash joins that set: the owner makes sure the next capacity
        # event in the queue's tree reaches the queue (and clears it), as Kueue's does.
        self.on_bulk: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._keys) + len(self._parked)

    def active_count(self) -> int:
        return sum(len(self._groups[g]) for g in self._active)

    def __contains__(self, key: str) -> bool:
        return key in self._keys or key in self._parked

    def is_parked(self, key: str) -> bool:
        entry = self._keys.get(key)
        return key in self._parked or (entry is not None and entry[0] not in self._active)

    # -- the index of group heads (only active, non-empty groups are in it) ----------

    def _index(self, group: tuple[str, int]) -> None:
        head = self._groups[group][0]
        if not self._heads and self.on_head is not None:
            self.on_head()
        self._heads.add(head)
        if self._lq_heads is not None:
            self._lq_index(group[0], head)

    def _lq_index(self, lq_key: str, head: tuple[OrderKey, str]) -> None:
        assert self._lq_heads is not None
        lq = self._lq_heads.get(lq_key)
        if lq is None:
            lq = self._lq_heads[lq_key] = _Heads()
        lq.add(head)

    def _unindex(self, group: tuple[str, int]) -> None:
        head = self._groups[group][0]
        self._heads.remove(head)
        if self._lq_heads is None:
            return
        lq = self._lq_heads[group[0]]
        lq.remove(head)
        if not lq:
            del self._lq_heads[group[0]]

    # -- changes ---------------------------------------------------------------------

    def push(self, wl: Workload) -> None:
        """Add (or re-add) a workload; its group becomes active again."""
        key = wl.key
        self.remove(key)
        group = (f"{wl.namespace}/{wl.queue_name}", scheduling_hash(wl))
        group = self._canon.setdefault(group, group)
        okey = order_key(wl)
        item = (okey, key)
        self._keys[key] = (group, okey, wl)
        lst = self._groups.get(group)
        if lst is None:
            lst = self._groups[group] = SortedList()
            self._by_hash.setdefault(group[1], set()).add(group)
        elif group in self._active:
            if item < lst[0]:  # the group's new head: re-index it
                self._unindex(group)
                lst.add(item)
                self._index(group)
            else:  # behind the head: the index of heads stays as it is
                lst.add(item)
            return
        elif lst:
            self._unpark_group_members(group)
        lst.add(item)
        self._active.add(group)
        self._index(group)

    def _unpark_group_members(self, group: tuple[str, int]) -> None:
        """A workload joins a parked group as an active one: the group's workloads stay
        parked, one by one (with the group's ticket, if it has one), as Kueue keeps
        its inadmissible workloads where they are when another one is queued."""
        lst = self._groups[group]
        ticket = self._group_ticket.pop(group, None) if self._group_ticket else None
        for _, key in lst:
            _, _, wl = self._keys.pop(key)
            self._parked[key] = wl
        if ticket is not None:
            keys = [key for _, key in lst]
            for key in keys:
                self._key_ticket[key] = ticket
            self._ticket_members.setdefault(ticket, []).extend(keys)
        lst.clear()

    def park(self, wl: Workload) -> None:
        """Move one workload out of its group to the parked set (BestEffortFIFO)."""
        self.remove(wl.key)
        self._parked[wl.key] = wl
        if self.on_park is not None:
            ticket = self.on_park(wl)
            if ticket is not None:
                self._key_ticket[wl.key] = ticket
                self._ticket_members.setdefault(ticket, []).append(wl.key)

    def arrive(self, wl: Workload) -> None:
        """A new (or changed) pending workload, as Kueue's ``PushOrUpdate``: queued
        (:meth:`push`), unless it is not queued as active already and workloads of its
        scheduling hash were parked for failing since the last capacity event — then
        it is parked with them, and wakes nobody."""
        if self._bulk:
            entry = self._keys.get(wl.key)
            if (entry is None or entry[0] not in self._active) and scheduling_hash(
                wl
            ) in self._bulk:
                self.park(wl)
                return
        self.push(wl)

    def _remember(self, h: int) -> None:
        if h not in self._bulk:
            self._bulk.add(h)
            if self.on_bulk is not None:
                self.on_bulk()

    def park_with_equivalents(self, wl: Workload, *, remember: bool = True) -> int:
        """:meth:`park` then :meth:`park_equivalent` (``wl`` failed and parks every
        workload interchangeable with it), in fewer sorted-list operations: ``wl``
        stays first in its group and the group is parked with it (one removal from
        the index of heads, none from the group). Returns the number of workloads
        parked besides ``wl``, as :meth:`park_equivalent`."""
        key = wl.key
        entry = self._keys.get(key)
        if (
            self.sticky is not None
            or entry is None
            or entry[2] is not wl
            or entry[0] not in self._active
        ):
            self.park(wl)  # (a waiting preemptor, or not queued as active: the long way)
            return self.park_equivalent(wl, remember=remember)
        group, okey, _ = entry
        if self._groups[group][0][1] != key:
            self.park(wl)
            return self.park_equivalent(wl, remember=remember)
        h = group[1]
        if remember:
            self._remember(h)
        groups = []
        parked = -1  # wl itself
        for g in self._by_hash[h]:
            if g in self._active:
                self._unindex(g)
                self._active.discard(g)
                parked += len(self._groups[g])
                groups.append(g)
        self._ticket_groups(wl, groups)
        return parked

    def _ticket_groups(self, wl: Workload, groups: list[tuple[str, int]]) -> None:
        """Tell the owner ``wl`` was parked with ``groups``; they share its ticket."""
        if self.on_park is not None:
            ticket = self.on_park(wl)
            if ticket is not None:
                for group in groups:
                    self._group_ticket[group] = ticket
                self._ticket_members.setdefault(ticket, []).extend(groups)

    def hash_of(self, wl: Workload) -> int:
        """``scheduling_hash(wl)``, read from its group when it is queued in one."""
        entry = self._keys.get(wl.key)
        if entry is not None and entry[2] is wl:
            return entry[0][1]
        return scheduling_hash(wl)

    def park_equivalent(self, wl: Workload, *, remember: bool = True) -> int:
        """Park every workload interchangeable with ``wl`` (which just failed): their
        groups stop being nominated until the next capacity event. Returns how many.

        ``remember``: as Kueue's bulk move, workloads of that hash that :meth:`arrive`
        before the next capacity event are parked too."""
        h = scheduling_hash(wl)
        if remember:
            self._remember(h)
        sticky_group = self._keys[self.sticky][0] if self.sticky in self._keys else None
        parked = 0
        groups = []
        for group in self._by_hash.get(h, ()):
            if (
                group in self._active and group != sticky_group
            ):  # a waiting preemptor keeps its place
                self._unindex(group)
                self._active.discard(group)
                parked += len(self._groups[group])
                groups.append(group)
        if parked:
            self._ticket_groups(wl, groups)
        return parked

    def remove(self, key: str) -> Workload | None:
        entry = self._keys.pop(key, None)
        if self.sticky == key:
            self.sticky = None
        if entry is not None:
            group, okey, wl = entry
            lst = self._groups[group]
            item = (okey, key)
            active = group in self._active
            if active and lst[0] != item:  # not the group's head: the index stays
                lst.remove(item)
                return wl
            if active:
                self._unindex(group)
            lst.remove(item)
            if not lst:
                del self._groups[group]
                del self._canon[group]
                self._active.discard(group)
                if self._group_ticket:
                    self._group_ticket.pop(group, None)
                groups = self._by_hash[group[1]]
                groups.discard(group)
                if not groups:
                    del self._by_hash[group[1]]
            elif active:
                self._index(group)
            return wl
        if self._key_ticket:
            self._key_ticket.pop(key, None)
        return self._parked.pop(key, None)

    def take_local_queue(self, lq_key: str) -> list[Workload]:
        """Remove and return every workload of one LocalQueue ("ns/name")."""
        keys = [k for g, lst in self._groups.items() if g[0] == lq_key for _, k in lst]
        keys += [k for k, wl in self._parked.items() if f"{wl.namespace}/{wl.queue_name}" == lq_key]
        out = []
        for k in keys:
            wl = self.remove(k)
            if wl is not None:
                out.append(wl)
        return out

    def requeue_inadmissible(self) -> int:
        """A capacity event: every parked workload may be nominated again. Returns the
        number of groups and individually parked workloads woken."""
        woken = 0
        self._bulk.clear()
        if self._ticket_members:
            self._group_ticket.clear()
            self._key_ticket.clear()
            self._ticket_members.clear()
        if len(self._active) != len(self._groups):
            for group in self._groups:
                if group not in self._active:
                    self._active.add(group)
                    self._index(group)
                    woken += 1
        if self._parked:
            parked = list(self._parked.values())
            self._parked.clear()
            for wl in parked:
                self.push(wl)
            woken += len(parked)
        return woken

    def wake_unbounded(self) -> int:
        """A capacity event under bounded parking: what was parked without a ticket may
        be nominated again (everything, when nothing has one). Returns as
        :meth:`requeue_inadmissible`."""
        if not self._ticket_members:
            return self.requeue_inadmissible()
        self._bulk.clear()
        woken = 0
        bound = self._group_ticket
        if len(self._active) != len(self._groups):
            for group in self._groups:
                if group not in self._active and group not in bound:
                    self._active.add(group)
                    self._index(group)
                    woken += 1
        if len(self._parked) != len(self._key_ticket):
            free = [wl for k, wl in self._parked.items() if k not in self._key_ticket]
            for wl in free:
                del self._parked[wl.key]
                self.push(wl)
            woken += len(free)
        return woken

    def wake(self, ticket: int) -> int:
        """What was parked with ``ticket`` and is still parked with it may be nominated
        again. Returns the number of groups and workloads woken."""
        woken = 0
        members = self._ticket_members.pop(ticket, ())
        for m in members:  # the groups first: a workload woken joins its group awake
            if not isinstance(m, str) and self._group_ticket.get(m) == ticket:
                del self._group_ticket[m]
                if m in self._groups and m not in self._active:
                    self._active.add(m)
                    self._index(m)
                    woken += 1
        for m in members:
            if isinstance(m, str) and self._key_ticket.get(m) == ticket:
                del self._key_ticket[m]
                wl = self._parked.pop(m)
                self.push(wl)
                woken += 1
        return woken

    def ticket_head(self, ticket: int) -> Workload | None:
        """The first, in queue order, of what :meth:`wake` of ``ticket`` would make
        nominable (None: nothing is parked with it any more)."""
        best: tuple[OrderKey, Workload] | None = None
        for m in self._ticket_members.get(ticket, ()):
            if isinstance(m, str):
                if self._key_ticket.get(m) != ticket:
                    continue
                wl = self._parked[m]
                cand = (order_key(wl), wl)
            else:
                lst = self._groups.get(m)
                if self._group_ticket.get(m) != ticket or not lst or m in self._active:
                    continue
                okey, key = lst[0]
                cand = (okey, self._keys[key][2])
            if best is None or cand[0] < best[0]:
                best = cand
        return None if best is None else best[1]

    def holds(self, ticket: int) -> bool:
        """Is anything still parked with ``ticket``? (Forgets the ticket when not.)"""
        for m in self._ticket_members.get(ticket, ()):
            if isinstance(m, str):
                if self._key_ticket.get(m) == ticket:
                    return True
            elif self._group_ticket.get(m) == ticket:
                return True
        self._ticket_members.pop(ticket, None)
        return False

    def parked(self) -> list[tuple[Workload, int | None]]:
        """Each parked group's first workload and each individually parked workload,
        with its ticket (None: parked as Kueue parks, woken by any capacity event)."""
        out: list[tuple[Workload, int | None]] = [
            (self._keys[lst[0][1]][2], self._group_ticket.get(g))
            for g, lst in self._groups.items()
            if g not in self._active
        ]
        out += [(wl, self._key_ticket.get(k)) for k, wl in self._parked.items()]
        return out

    def head(self, lq_usage: Callable[[str], float] | None = None) -> Workload | None:
        """The next workload to nominate, without removing it.

        ``lq_usage`` (admission fair sharing) maps a LocalQueue key ("ns/name") to its
        usage; the LocalQueue with the lowest usage provides the head (one call per
        LocalQueue with active workloads).
        """
        if self.sticky is not None:
            entry = self._keys.get(self.sticky)
            if entry is not None and entry[0] in self._active:
                return entry[2]
        if not self._heads:
            return None
        if lq_usage is None:
            return self._keys[self._heads[0][1]][2]
        if self._lq_heads is None:  # first use: index the heads by LocalQueue from now on
            self._lq_heads = {}
            for head in self._heads:
                self._lq_index(self._keys[head[1]][0][0], head)
        best: tuple | None = None
        for lq, heads in self._lq_heads.items():
            cand = (lq_usage(lq), heads[0])
            if best is None or cand < best:
                best = cand
        assert best is not None
        return self._keys[best[1][1]][2]

    def take_head(self, lq_usage: Callable[[str], float] | None = None) -> Workload | None:
        """The workload a cycle nominates, left where it is until the cycle decides
        (:meth:`remove` when admitted, :meth:`park`, or :meth:`keep` when it goes back
        to the heap): a head that goes back costs nothing. A waiting preemptor stops
        being the sticky head when another workload is taken (as :meth:`pop_head`)."""
        wl = self.head(lq_usage)
        if wl is not None and self.sticky != wl.key:
            self.sticky = None
        return wl

    def keep(self, wl: Workload) -> None:
        """A head taken by :meth:`take_head` goes back to the heap: where it is, exactly
        as :meth:`push` would put it back (it stops being the sticky head)."""
        entry = self._keys.get(wl.key)
        if entry is None or entry[2] is not wl or entry[0] not in self._active:
            self.push(wl)
            return
        if self.sticky == wl.key:
            self.sticky = None

    def pop_head(self, lq_usage: Callable[[str], float] | None = None) -> Workload | None:
        wl = self.head(lq_usage)
        if wl is not None:
            sticky = self.sticky
            self.remove(wl.key)
            self.sticky = sticky if sticky == wl.key else None
        return wl

    def workloads(self) -> Iterator[Workload]:
        """Workloads that may be nominated, in queue order, then the parked ones."""
        active = sorted(item for g in self._active for item in self._groups[g])
        for _, wkey in active:
            yield self._keys[wkey][2]
        parked = sorted(
            item for g, lst in self._groups.items() if g not in self._active for item in lst
        )
        for _, wkey in parked:
            yield self._keys[wkey][2]
        yield from self._parked.values()
