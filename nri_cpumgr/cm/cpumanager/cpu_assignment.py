"""Topology-aware CPU take strategies (kubelet pkg/kubelet/cm/cpumanager/cpu_assignment.go).

Pure functions: ``(topology, available CPUs, count, options) -> CPUSet`` or a typed error
(:class:`NotEnoughCPUsError`, :class:`AllocationFailedError`). They reproduce the kubelet's
decisions, including its use of the *declared* header counts (``CPUsPerCore = NumCPUs /
NumCores``, ``CPUsPerSocket = NumCPUs / NumSockets``, ``CPUsPerUncore = NumCPUs /
NumUncoreCache``) and of the per-CPU table as given (core ids are used as keys exactly as
the table spells them), with one exception: a take never returns a CPU that was not
available. On a hybrid machine (cores of one and of two threads) ``CPUsPerCore`` is 1, so
the kubelet v1.37.2 counts a two-thread core with one free thread as a free core and
``takeFullCores`` takes both threads, one of them another container's (the same for a
socket smaller than ``CPUsPerSocket``); here only the free thread is taken
(docs/concepts/differences.md, ``kubelet-takes-a-held-cpu``).

Strategies:

* :func:`take_packed` (kubelet takeByTopologyNUMAPacked): whole NUMA nodes / sockets (the
  higher level of the memory hierarchy first: NUMA nodes first when ``NumSockets >=
  NumNUMANodes``, sockets first otherwise), then optionally uncore (L3) caches
  (``prefer-align-cpus-by-uncorecache``), then whole cores (skipped by the *spread* sorting
  strategy of ``distribute-cpus-across-cores``), then single CPUs. At each level candidates are
  ordered by how few free CPUs they have (fullest first), then by id.
* :func:`take_distributed` (kubelet takeByTopologyNUMADistributed): spread the request evenly,
  in groups of ``cpu_group_size`` CPUs, over the smallest set of NUMA nodes that can hold it,
  choosing the combination that leaves the free CPUs best balanced (lowest standard deviation);
  falls back to the packed take.
* :func:`take_by_topology`: what the static policy calls, choosing the strategy from the
  :class:`StaticPolicyOptions`.

Speed: every topology gets a cached index of per-core / per-socket / per-NUMA / per-L3 CPU sets
as integer bitmasks (bit *i* = CPU *i*), so each step is a few popcounts.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from nri_cpumgr.cm.cpumanager.errors import AllocationFailedError, NotEnoughCPUsError
from nri_cpumgr.cm.cpumanager.policy_options import StaticPolicyOptions
from nri_cpumgr.cpuset import CPUSet, ids_to_mask, mask_to_list
from nri_cpumgr.topology import CPUTopology

__all__ = [
    "TopologyIndex",
    "cpus_to_mask",
    "mask_to_cpus",
    "take_by_topology",
    "take_distributed",
    "take_packed",
    "topology_index",
]


# --------------------------------------------------------------------------------------------
# bitmask helpers
# --------------------------------------------------------------------------------------------


_ID_BITS = 24  # socket, NUMA node, core and L3 ids are below 2**24 (cpuset ids: 65536)
_ID_MASK = (1 << _ID_BITS) - 1


def cpus_to_mask(cpus: Iterable[int]) -> int:
    """The bitmask of a set of CPU ids (bit *i* set = CPU *i*): a :class:`CPUSet`'s own
    (computed once per set), else computed."""
    if isinstance(cpus, CPUSet):
        return cpus.mask
    return ids_to_mask(cpus)


def mask_to_cpus(mask: int) -> CPUSet:
    """The :class:`CPUSet` of a bitmask (which keeps the mask)."""
    return CPUSet.from_mask(mask)


# --------------------------------------------------------------------------------------------
# per-topology index
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologyIndex:
    """Precomputed bitmasks of one :class:`CPUTopology` (built once, cached per topology).

    ``*_mask`` map an id to the mask of its CPUs in the table; ``*_size`` to their count.
    ``socket_cores`` / ``numa_cores`` / ``uncore_cores`` list ``(core id, mask of that core's
    CPUs inside the group)`` by ascending core id; ``numa_sockets`` / ``socket_numas`` /
    ``numa_uncores`` list ``(id, mask of the intersection)``.
    """

    all_mask: int
    num_cpus_table: int
    cpus_per_core: int
    cpus_per_socket: int
    cpus_per_uncore: int
    numa_first: bool
    cores: tuple[int, ...]
    sockets: tuple[int, ...]
    numas: tuple[int, ...]
    uncores: tuple[int, ...]
    core_mask: dict[int, int]
    socket_mask: dict[int, int]
    numa_mask: dict[int, int]
    uncore_mask: dict[int, int]
    numa_size: dict[int, int]
    min_numa_size: int
    uncore_size: dict[int, int]
    socket_cores: dict[int, tuple[tuple[int, int], ...]]
    numa_cores: dict[int, tuple[tuple[int, int], ...]]
    uncore_cores: dict[int, tuple[tuple[int, int], ...]]
    numa_sockets: dict[int, tuple[tuple[int, int], ...]]
    socket_numas: dict[int, tuple[tuple[int, int], ...]]
    numa_uncores: dict[int, tuple[tuple[int, int], ...]]
    numa_socket_ids: dict[int, frozenset[int]]
    #: two-thread cores numbered alike (core ``i``'s CPUs ``c`` and ``c + sibling_shift``,
    #: ``c`` rising with the core id, as Linux numbers most SMT machines): the shift, else 0
    sibling_shift: int = 0
    #: with ``sibling_shift``: each core's first CPU -> the core's id
    core_of_low: dict[int, int] = field(default_factory=dict)
    #: with ``sibling_shift``: per socket / NUMA node made of whole cores, its cores' first
    #: CPUs (a group with a core's CPU outside it is not there)
    socket_lows: dict[int, int] = field(default_factory=dict)
    numa_lows: dict[int, int] = field(default_factory=dict)

    @classmethod
    def build(cls, topo: CPUTopology) -> TopologyIndex:
        core_mask: dict[int, int] = {}
        socket_mask: dict[int, int] = {}
        numa_mask: dict[int, int] = {}
        uncore_mask: dict[int, int] = {}
        for cpu, info in topo.details.items():
            bit = 1 << cpu
            core_mask[info.core] = core_mask.get(info.core, 0) | bit
            socket_mask[info.socket] = socket_mask.get(info.socket, 0) | bit
            numa_mask[info.numa] = numa_mask.get(info.numa, 0) | bit
            uncore_mask[info.uncore] = uncore_mask.get(info.uncore, 0) | bit

        def pairs(outer: dict[int, int], inner: dict[int, int]) -> dict[int, tuple]:
            res: dict[int, tuple] = {}
            for o, om in outer.items():
                res[o] = tuple((i, om & im) for i, im in sorted(inner.items()) if om & im)
            return res

        all_mask = 0
        for m in core_mask.values():
            all_mask |= m
        numa_sockets = pairs(numa_mask, socket_mask)
        shift, core_of_low = _sibling_shift(core_mask)
        return cls(
            all_mask=all_mask,
            num_cpus_table=len(topo.details),
            cpus_per_core=topo.cpus_per_core(),
            cpus_per_socket=topo.cpus_per_socket(),
            cpus_per_uncore=topo.cpus_per_uncore(),
            numa_first=topo.num_sockets >= topo.num_numa_nodes,
            cores=tuple(sorted(core_mask)),
            sockets=tuple(sorted(socket_mask)),
            numas=tuple(sorted(numa_mask)),
            uncores=tuple(sorted(uncore_mask)),
            core_mask=core_mask,
            socket_mask=socket_mask,
            numa_mask=numa_mask,
            uncore_mask=uncore_mask,
            numa_size={k: v.bit_count() for k, v in numa_mask.items()},
            min_numa_size=min((v.bit_count() for v in numa_mask.values()), default=0),
            uncore_size={k: v.bit_count() for k, v in uncore_mask.items()},
            socket_cores=pairs(socket_mask, core_mask),
            numa_cores=pairs(numa_mask, core_mask),
            uncore_cores=pairs(uncore_mask, core_mask),
            numa_sockets=numa_sockets,
            socket_numas=pairs(socket_mask, numa_mask),
            numa_uncores=pairs(numa_mask, uncore_mask),
            numa_socket_ids={n: frozenset(s for s, _ in v) for n, v in numa_sockets.items()},
            sibling_shift=shift,
            core_of_low=core_of_low,
            socket_lows=_group_lows(socket_mask, core_mask, shift),
            numa_lows=_group_lows(numa_mask, core_mask, shift),
        )


def _sibling_shift(core_mask: dict[int, int]) -> tuple[int, dict[int, int]]:
    """``(shift, {first CPU: core id})`` when every core has two CPUs ``c`` and ``c + shift``
    (one shift for all) and the first CPUs rise with the core ids; else ``(0, {})``."""
    shift = 0
    core_of_low: dict[int, int] = {}
    last = -1
    for core in sorted(core_mask):
        m = core_mask[core]
        if m.bit_count() != 2:
            return 0, {}
        lo = (m & -m).bit_length() - 1
        gap = m.bit_length() - 1 - lo
        if lo <= last or (shift and gap != shift):
            return 0, {}
        shift, last = gap, lo
        core_of_low[lo] = core
    return shift, core_of_low


def _group_lows(group_mask: dict[int, int], core_mask: dict[int, int],
                shift: int) -> dict[int, int]:
    """Per group made of whole cores, its cores' first CPUs (see :func:`_sibling_shift`)."""
    if not shift:
        return {}
    out: dict[int, int] = {}
    for g, gm in group_mask.items():
        lows, whole = 0, True
        for m in core_mask.values():
            if gm & m:
                if m & ~gm:
                    whole = False
                    break
                lows |= m & -m
        if whole:
            out[g] = lows
    return out


_INDEX_CACHE: dict[int, TopologyIndex] = {}


def topology_index(topo: CPUTopology) -> TopologyIndex:
    """The cached :class:`TopologyIndex` of ``topo`` (dropped when the topology is freed)."""
    key = id(topo)
    idx = _INDEX_CACHE.get(key)
    if idx is None:
        idx = TopologyIndex.build(topo)
        _INDEX_CACHE[key] = idx
        weakref.finalize(topo, _INDEX_CACHE.pop, key, None)
    return idx


# --------------------------------------------------------------------------------------------
# the accumulator (kubelet cpuAccumulator)
# --------------------------------------------------------------------------------------------


class _Accumulator:
    """Free CPUs (``avail``), CPUs taken so far (``result``), CPUs still needed."""

    __slots__ = ("idx", "avail", "result", "needed", "spread")

    def __init__(self, idx: TopologyIndex, avail: int, needed: int, spread: bool) -> None:
        self.idx = idx
        self.avail = avail & idx.all_mask
        self.result = 0
        self.needed = needed
        self.spread = spread

    # ---- bookkeeping ----
    def take(self, mask: int) -> None:
        mask &= self.avail  # never a CPU that is not free (the kubelet's takeFullCores can)
        self.result |= mask
        self.avail &= ~mask
        self.needed -= mask.bit_count()

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > self.avail.bit_count()

    def free(self, mask: int) -> int:
        return (self.avail & mask).bit_count()

    # ---- orderings: fewest free CPUs first, then lowest id ----
    def _sorted(self, ids: Iterable[int], masks: dict[int, int], avail: int = -1) -> list[int]:
        # one int per id (free count above the id's bits): sorting ints, no key calls;
        # ``avail`` (default: the CPUs free now) is the snapshot the counts are taken from
        if avail < 0:
            avail = self.avail
        keyed = sorted([((avail & masks[i]).bit_count() << _ID_BITS) | i for i in ids])
        return [k & _ID_MASK for k in keyed]

    def _present(self, group: Sequence[tuple[int, int]]) -> list[int]:
        avail = self.avail
        return [i for i, m in group if avail & m]

    def sort_numas(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            present = [n for n in idx.numas if self.avail & idx.numa_mask[n]]
            return self._sorted(present, idx.numa_mask)
        out: list[int] = []
        for s in self.sort_sockets():
            out.extend(self._sorted(self._present(idx.socket_numas[s]), idx.numa_mask))
        return out

    def sort_sockets(self) -> list[int]:
        idx = self.idx
        if not idx.numa_first:
            present = [s for s in idx.sockets if self.avail & idx.socket_mask[s]]
            return self._sorted(present, idx.socket_mask)
        out: list[int] = []
        for n in self.sort_numas():
            out.extend(self._sorted(self._present(idx.numa_sockets[n]), idx.socket_mask))
        return out

    def sort_cores(self) -> list[int]:
        out: list[int] = []
        for cores in self._core_runs():
            out.extend(cores)
        return out

    def _core_runs(self, first_only: bool = False) -> Iterator[list[int]]:
        """The order of :meth:`sort_cores`, one socket (or NUMA node) at a time, each run
        sorted only when reached and always by the free CPUs of the moment of the call.
        ``first_only``: just the first core of that order (a 1-CPU take needs no more)."""
        idx = self.idx
        avail = self.avail
        if first_only:
            # the first socket (NUMA node) of that order holds a free core: the rest of the
            # order is sorted only if it did not (it always does: a guard, not a path)
            outer: Iterable[int] = self._first_then_all()
        else:
            outer = self.sort_sockets() if idx.numa_first else self.sort_numas()
        groups, lows = self._core_groups()
        core_mask = idx.core_mask
        for g in outer:
            if first_only:
                best = self._best_core(groups[g], lows.get(g))
                if best >= 0:
                    yield [best]
                    return
                continue
            keyed = [((avail & core_mask[i]).bit_count() << _ID_BITS) | i
                     for i, m in groups[g] if avail & m]
            keyed.sort()
            yield [k & _ID_MASK for k in keyed]

    def _core_groups(self) -> tuple[dict[int, tuple[tuple[int, int], ...]], dict[int, int]]:
        """The groups :meth:`sort_cores` runs over (sockets on a NUMA-first machine, else
        NUMA nodes): their cores, and their cores' first CPUs where
        :attr:`TopologyIndex.sibling_shift` applies."""
        idx = self.idx
        if idx.numa_first:
            return idx.socket_cores, idx.socket_lows
        return idx.numa_cores, idx.numa_lows

    def _best_core(self, group: Sequence[tuple[int, int]], lows: int | None = None) -> int:
        """The first core of ``group`` (``(core id, mask)`` by ascending id) in
        :meth:`sort_cores` order: the fewest free CPUs, then the lowest id; -1 when none of
        them has a free CPU. A present core with one free CPU is the answer, and the cores
        come in id order (no need to see the rest). ``lows``: the group's cores' first CPUs
        on a machine of :attr:`TopologyIndex.sibling_shift` (the answer from a few mask
        operations, not a pass over the group's cores: a 1-CPU take on a 128-core node)."""
        avail = self.avail
        if lows is not None:
            lo = avail & lows
            hi = (avail >> self.idx.sibling_shift) & lows  # (the sibling's bit, moved down)
            pick = (lo ^ hi) or (lo & hi)  # (one CPU free, else both)
            return self.idx.core_of_low[(pick & -pick).bit_length() - 1] if pick else -1
        core_mask = self.idx.core_mask
        best, best_free = -1, 0
        for i, m in group:
            if not avail & m:
                continue
            free = (avail & core_mask[i]).bit_count()
            if free == 1:
                return i
            if best < 0 or free < best_free:
                best, best_free = i, free
        return best

    def _first_then_all(self) -> Iterator[int]:
        first = self._first_outer()
        if first >= 0:
            yield first
        yield from self.sort_sockets() if self.idx.numa_first else self.sort_numas()

    def _first_outer(self) -> int:
        """``sort_sockets()[0]`` (NUMA-first machines) or ``sort_numas()[0]``, without
        sorting; -1 when no CPU is free."""
        idx = self.idx
        if idx.numa_first:
            n = self._first(idx.numas, idx.numa_mask)
            return -1 if n < 0 else self._first_in(idx.numa_sockets[n], idx.socket_mask)
        s = self._first(idx.sockets, idx.socket_mask)
        return -1 if s < 0 else self._first_in(idx.socket_numas[s], idx.numa_mask)

    def _first(self, ids: Iterable[int], masks: dict[int, int]) -> int:
        """The first of the ``ids`` with a free CPU in :meth:`_sorted` order; -1 if none."""
        avail = self.avail
        best = -1
        for i in ids:
            free = (avail & masks[i]).bit_count()
            if free and (best < 0 or (free << _ID_BITS | i) < best):
                best = free << _ID_BITS | i
        return best & _ID_MASK if best >= 0 else -1

    def _first_in(self, group: Sequence[tuple[int, int]], masks: dict[int, int]) -> int:
        """``self._sorted(self._present(group), masks)[0]``; -1 if none is present."""
        avail = self.avail
        best = -1
        for i, m in group:
            if avail & m:
                key = (avail & masks[i]).bit_count() << _ID_BITS | i
                if best < 0 or key < best:
                    best = key
        return best & _ID_MASK if best >= 0 else -1

    def sort_uncores(self) -> list[int]:
        idx = self.idx
        out: list[int] = []
        for n in self.sort_numas():
            out.extend(self._sorted(self._present(idx.numa_uncores[n]), idx.uncore_mask))
        return out

    def sorted_cpus_packed(self) -> list[int]:
        out: list[int] = []
        core_mask = self.idx.core_mask
        for c in self.sort_cores():
            out.extend(mask_to_list(self.avail & core_mask[c]))
        return out

    def sorted_cpus_spread(self) -> list[int]:
        out: list[int] = []
        socket_mask = self.idx.socket_mask
        for s in self.sort_sockets():
            out.extend(mask_to_list(self.avail & socket_mask[s]))
        return out

    # ---- whole-group takes ----
    def _take_full(self, ids: list[int], masks: dict[int, int]) -> None:
        for i in ids:
            m = masks[i]
            if self.needed >= m.bit_count():
                self.take(m)

    # A whole group is taken only when it is entirely free and no bigger than what is still
    # needed, so each whole-group step is skipped (same result, no sorting) while fewer CPUs
    # are needed than its smallest group holds.
    def take_full_numas(self) -> None:
        idx = self.idx
        if self.needed < idx.min_numa_size:
            return
        free = [n for n in self.sort_numas() if self.free(idx.numa_mask[n]) == idx.numa_size[n]]
        self._take_full(free, idx.numa_mask)

    def take_full_sockets(self) -> None:
        idx = self.idx
        if self.needed < idx.cpus_per_socket:
            return
        free = [
            s for s in self.sort_sockets() if self.free(idx.socket_mask[s]) == idx.cpus_per_socket
        ]
        self._take_full(free, idx.socket_mask)

    def take_full_cores(self) -> None:
        idx = self.idx
        if self.needed < idx.cpus_per_core:
            return
        if idx.sibling_shift and self._take_full_sibling_cores():
            return
        free = [c for c in self.sort_cores() if self.free(idx.core_mask[c]) == idx.cpus_per_core]
        self._take_full(free, idx.core_mask)

    def _take_full_sibling_cores(self) -> bool:
        """:meth:`take_full_cores` on a machine of :attr:`TopologyIndex.sibling_shift` whose
        sockets (NUMA nodes) of :meth:`sort_cores`' runs are made of whole cores: in each run
        the free cores come last, by id, so the free cores in that order are each group's
        cores with both CPUs free, lowest first (a mask, not a sort of every core). False
        (nothing taken) when a group is not made of whole cores."""
        idx = self.idx
        outer = self.sort_sockets() if idx.numa_first else self.sort_numas()
        lows_of = self._core_groups()[1]
        if any(g not in lows_of for g in outer):
            return False
        shift = idx.sibling_shift
        avail = self.avail
        both = avail & (avail >> shift)  # (first CPUs of the cores with both CPUs free)
        for g in outer:
            m = both & lows_of[g]
            while m and self.needed >= 2:
                low = m & -m
                self.take(low | low << shift)
                m ^= low
            if self.needed < 2:
                break
        return True

    def take_full_uncores(self) -> None:
        idx = self.idx
        free = [
            u for u in self.sort_uncores() if self.free(idx.uncore_mask[u]) == idx.uncore_size[u]
        ]
        self._take_full(free, idx.uncore_mask)

    def take_partial_uncore(self, uncore: int) -> None:
        """Take the lowest-numbered cores of one L3 cache if they hold exactly the CPUs still
        needed (odd requests on SMT machines leave the last thread of the last core)."""
        idx = self.idx
        per_core = idx.cpus_per_core or 1
        cores_needed = (self.needed + per_core - 1) // per_core
        cores = self._present(idx.uncore_cores[uncore])
        if len(cores) < cores_needed:
            return
        m = 0
        for c in cores[:cores_needed]:
            m |= idx.core_mask[c]
        m &= self.avail
        if self.needed % 2 and idx.cpus_per_core > 1:
            cpus = mask_to_list(m)
            if len(cpus) > self.needed:
                m ^= 1 << cpus[-1]
        if m.bit_count() == self.needed:
            self.take(m)

    def take_uncore_caches(self) -> None:
        per_uncore = self.idx.cpus_per_uncore
        for u in self.sort_uncores():
            if self.needed >= per_uncore:
                self.take_full_uncores()
            if self.satisfied():
                return
            self.take_partial_uncore(u)
            if self.satisfied():
                return

    def take_remaining_cpus(self) -> None:
        """CPUs one by one in the order of :meth:`sorted_cpus_packed` (or ``_spread``),
        expanding only the groups it reaches: a 1-CPU take on a 256-CPU machine looks at
        one core, not 256 CPUs."""
        avail = self.avail  # the order is that of the CPUs available now
        if self.needed == 1 and not self.spread:
            # one CPU: the lowest free CPU of the first core of that order, without the
            # generators (the first socket, NUMA node, of the order always has a free core)
            idx = self.idx
            g = self._first_outer()
            if g >= 0:
                groups, lows = self._core_groups()
                core = self._best_core(groups[g], lows.get(g))
                if core >= 0:
                    m = avail & idx.core_mask[core]
                    self.take(m & -m)
                    return
        if self.spread:
            runs: Iterable[list[int]] = (self.sort_sockets(),)
            masks = self.idx.socket_mask
        else:
            runs, masks = self._core_runs(first_only=self.needed == 1), self.idx.core_mask
        for groups in runs:
            for g in groups:
                for cpu in mask_to_list(avail & masks[g]):
                    self.take(1 << cpu)
                    if self.satisfied():
                        return


# --------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------


def _packed(
    idx: TopologyIndex,
    avail: int,
    count: int,
    available_size: int,
    spread: bool,
    prefer_uncore: bool,
) -> int:
    acc = _Accumulator(idx, avail, count, spread)
    # (``acc.needed < 1`` is acc.satisfied(), spelled out: it is asked after every step)
    if acc.needed < 1:
        return acc.result
    if acc.failed():
        raise NotEnoughCPUsError(count, available_size)
    # (a whole-group step is called only when at least its smallest group is needed: the
    # steps' own first test, asked here, without the calls for a small take)
    if idx.numa_first:
        if acc.needed >= idx.min_numa_size:
            acc.take_full_numas()
            if acc.needed < 1:
                return acc.result
        if acc.needed >= idx.cpus_per_socket:
            acc.take_full_sockets()
    else:
        if acc.needed >= idx.cpus_per_socket:
            acc.take_full_sockets()
            if acc.needed < 1:
                return acc.result
        if acc.needed >= idx.min_numa_size:
            acc.take_full_numas()
    if acc.needed < 1:
        return acc.result
    if prefer_uncore:
        acc.take_uncore_caches()
        if acc.needed < 1:
            return acc.result
    if not spread and acc.needed >= idx.cpus_per_core:
        acc.take_full_cores()
        if acc.needed < 1:
            return acc.result
    acc.take_remaining_cpus()
    if acc.needed < 1:
        return acc.result
    raise AllocationFailedError("failed to allocate cpus")


def take_packed(
    topo: CPUTopology,
    available: Iterable[int],
    count: int,
    *,
    spread: bool = False,
    prefer_align_by_uncorecache: bool = False,
) -> CPUSet:
    """Take ``count`` CPUs from ``available`` packing them onto as few NUMA nodes, sockets,
    L3 caches and cores as possible (kubelet cpu_assignment.go, takeByTopologyNUMAPacked).

    ``spread`` selects the kubelet's *spread* CPU sorting strategy
    (distribute-cpus-across-cores: no whole-core step, single CPUs taken socket by socket in id
    order); ``prefer_align_by_uncorecache`` adds the uncore-cache step
    (prefer-align-cpus-by-uncorecache). CPUs of ``available`` absent from the topology are
    ignored. Returns the CPUs taken (empty for ``count <= 0``). Raises
    :class:`NotEnoughCPUsError` when ``count`` exceeds the usable CPUs,
    :class:`AllocationFailedError` if the walk cannot complete.
    """
    avail = available if isinstance(available, CPUSet) else CPUSet(available)
    idx = topology_index(topo)
    mask = _packed(idx, cpus_to_mask(avail), count, len(avail), spread, prefer_align_by_uncorecache)
    return mask_to_cpus(mask)


def _round3(x: float) -> float:
    """Go ``math.Round(x*1000)/1000`` (half away from zero) for x >= 0."""
    return math.floor(x * 1000 + 0.5) / 1000


def _stddev(values: list[int]) -> float:
    """Population standard deviation with the kubelet's rounding (mean and result to 3
    decimals)."""
    mean = _round3(sum(float(v) for v in values) / len(values))
    var = sum((v - mean) * (v - mean) for v in values)
    return _round3(math.sqrt(var / len(values)))


class _GoSlice:
    """A Go ``[]int`` as ``append`` leaves it: a length over a backing array that later
    appends to a shorter view of the same array write into. The kubelet's
    iterateCombinations (cpu_assignment.go, v1.37.2) builds each combination with
    ``append(accum, n[i])`` and hands the callback such a view; takeByTopologyNUMADistributed
    keeps the best one past its callback (``bestCombo = combo``, ``bestRemainder = subset``),
    so what it reads at the end is what the last combination visited in the same backing
    array wrote there: with 4 NUMA nodes per combination, the best combination's last node
    is the last candidate for its first three. Reproducing that keeps our picks the
    kubelet's (found by the differential run, seed 24485)."""

    __slots__ = ("arr", "length", "cap")

    def __init__(self, arr: list[int], length: int, cap: int) -> None:
        self.arr, self.length, self.cap = arr, length, cap

    def append(self, x: int) -> _GoSlice:
        if self.length < self.cap:  # room left: written in place, the array is shared
            self.arr[self.length] = x
            return _GoSlice(self.arr, self.length + 1, self.cap)
        # growslice: double a capacity under 256 (at least the new length), else grow by a
        # quarter plus 192; int-sized capacities that double stay size classes
        cap = max(self.length + 1, 2 * self.cap if self.cap < 256 else
                  self.cap + (self.cap + 3 * 256) // 4)
        return _GoSlice(self.arr[:self.length] + [x] + [0] * (cap - self.length - 1),
                        self.length + 1, cap)

    def values(self) -> tuple[int, ...]:
        """What the view holds now."""
        return tuple(self.arr[:self.length])


def _go_combinations(items: Sequence[int], k: int) -> Iterator[_GoSlice]:
    """The k-combinations of ``items`` in the kubelet's order (iterateCombinations), each
    as the live :class:`_GoSlice` the kubelet's callback gets."""
    def helper(k: int, start: int, accum: _GoSlice) -> Iterator[_GoSlice]:
        if k == 0:
            yield accum
            return
        for i in range(start, len(items) - k + 1):
            yield from helper(k - 1, i + 1, accum.append(items[i]))

    if k >= 1:
        yield from helper(k, 0, _GoSlice([], 0, 0))


#: under align-by-socket the distributed take uses the NUMA combination it chose (kubernetes
#: PR #139778's intent, fixing #114642 / #141237); False: the kubelet v1.37.2's kept Go
#: slice, which the combinations visited after it overwrite (the differential's evidence that
#: a difference is that bug's alone, tests/differential)
ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO = True


def _distributed(
    idx: TopologyIndex,
    avail: int,
    count: int,
    available_size: int,
    group: int,
    spread: bool,
    align_by_socket: bool,
    min_numas_from_hint: int = 0,
) -> int:
    if group <= 0:
        group = 1
    if count % group != 0:
        return _packed(idx, avail, count, available_size, spread, False)
    acc = _Accumulator(idx, avail, count, spread)
    if acc.satisfied():
        return acc.result
    if acc.failed():
        raise NotEnoughCPUsError(count, available_size)

    numa_mask = idx.numa_mask
    numas = acc.sort_numas()
    free_in = {n: acc.free(numa_mask[n]) for n in numas}

    # how many NUMA nodes could be needed (kubelet rangeNUMANodesNeededToSatisfy)
    num_groups = (idx.num_cpus_table - 1) // group + 1
    groups_per_numa = (num_groups - 1) // len(idx.numas) + 1
    groups_needed = (count - 1) // group + 1
    min_numas = (groups_needed - 1) // groups_per_numa + 1
    max_numas = min(groups_needed, len(numas))
    # kubernetes PR #139456: the Topology Manager's affinity is a floor on how many NUMA
    # nodes the request is spread over (ignored when it names more nodes than have free CPUs
    # or than there are groups to place)
    if min_numas < min_numas_from_hint <= max_numas:
        min_numas = min_numas_from_hint

    def same_socket(combo: Sequence[int]) -> bool:
        sockets: set[int] = set()
        for n in combo:
            sockets |= idx.numa_socket_ids[n]
        return len(sockets) == 1

    for k in range(min_numas, max_numas + 1):
        best_balance = math.inf
        best_remainder: _GoSlice | None = None
        best_combo_view: _GoSlice | None = None
        best_in_one_socket = False
        for combo_view in _go_combinations(numas, k):
            if best_balance == 0 and (not align_by_socket or best_in_one_socket):
                break
            combo = combo_view.values()
            if sum(free_in[n] for n in combo) < count:
                continue
            if sum(free_in[n] // group for n in combo) * group < count:
                continue
            distribution = count // len(combo) // group * group
            if align_by_socket:
                for n in combo:
                    distribution = min(distribution, free_in[n] // group * group)
            if any(free_in[n] < distribution for n in combo):
                continue
            after = dict(free_in)
            for n in combo:
                after[n] -= distribution
            remainder = count - distribution * len(combo)
            remainder_combo = [n for n in combo if after[n] >= group]
            best_local = math.inf
            best_local_remainder: _GoSlice | None = None
            if remainder == 0:
                best_local = _stddev(list(after.values()))
            r = len(remainder_combo)
            while remainder > 0 and r >= 1:
                for subset_view in _go_combinations(remainder_combo, r):
                    subset = subset_view.values()
                    if sum(after[n] // group for n in subset) * group < remainder:
                        continue
                    trial = dict(after)
                    left = remainder
                    while left > 0:
                        for n in subset:
                            if left == 0:
                                break
                            if trial[n] < group:
                                continue
                            trial[n] -= group
                            left -= group
                    balance = _stddev(list(trial.values()))
                    if balance < best_local:
                        best_local = balance
                        best_local_remainder = subset_view
                r -= 1
            in_one_socket = same_socket(combo) if align_by_socket else False
            better = best_local < best_balance
            if align_by_socket and in_one_socket != best_in_one_socket:
                better = in_one_socket
            if better:
                best_balance = best_local
                best_remainder = best_local_remainder
                # under align-by-socket the kubelet's kept slice, overwritten by the
                # combinations after it, may name a node of another socket (its answer for
                # #141237 still crosses sockets in v1.37.2): here the combination chosen
                # (docs/concepts/differences.md, align-by-socket-distributed)
                best_combo_view = (_GoSlice(list(combo), len(combo), len(combo))
                                   if align_by_socket and ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO
                                   else combo_view)
                if align_by_socket:
                    best_in_one_socket = in_one_socket
        if best_combo_view is None:
            continue
        # read now, as the kubelet reads its kept slices (see _GoSlice)
        best_combo = best_combo_view.values()
        remainder_nodes = best_remainder.values() if best_remainder is not None else ()

        distribution = count // len(best_combo) // group * group
        for n in best_combo:
            distribution = min(distribution, acc.free(numa_mask[n]) // group * group)
        for n in best_combo:
            node_avail = acc.avail & numa_mask[n]
            try:
                got = _packed(idx, node_avail, distribution, node_avail.bit_count(), spread, False)
            except (NotEnoughCPUsError, AllocationFailedError):
                got = 0
            acc.take(got)
        remainder = count - distribution * len(best_combo)
        while remainder > 0:
            progressed = False
            for n in remainder_nodes:
                if remainder == 0:
                    break
                node_avail = acc.avail & numa_mask[n]
                if node_avail.bit_count() < group:
                    continue
                try:
                    got = _packed(idx, node_avail, group, node_avail.bit_count(), spread, False)
                except (NotEnoughCPUsError, AllocationFailedError):
                    got = 0
                acc.take(got)
                remainder -= group
                progressed = True
            if not progressed:
                break
        if acc.needed > 0:
            raise AllocationFailedError(
                f"accounting error, not enough CPUs allocated, remaining: {acc.needed}"
            )
        if acc.needed < 0:
            raise AllocationFailedError(
                f"accounting error, too many CPUs allocated, remaining: {acc.needed}"
            )
        return acc.result

    return _packed(idx, avail, count, available_size, spread, False)


def take_distributed(
    topo: CPUTopology,
    available: Iterable[int],
    count: int,
    cpu_group_size: int = 1,
    *,
    spread: bool = False,
    align_by_socket: bool = False,
    min_numas_from_hint: int = 0,
) -> CPUSet:
    """Take ``count`` CPUs spread evenly over NUMA nodes in groups of ``cpu_group_size`` CPUs
    (kubelet cpu_assignment.go, takeByTopologyNUMADistributed; distribute-cpus-across-numa,
    with ``cpu_group_size`` = CPUs per core under full-pcpus-only).

    Tries 1, 2, ... NUMA nodes (starting at the minimum that can hold the request, raised to
    ``min_numas_from_hint`` = the number of NUMA nodes of the Topology Manager's affinity when
    that many nodes have free CPUs and the request has at least that many groups: kubernetes
    PR #139456, newer than the kubelet the conformance corpus follows) and picks
    the combination whose leftover free CPUs have the lowest standard deviation; with
    ``align_by_socket`` a combination inside one socket wins over a cross-socket one. Each node
    share is taken with the packed strategy. When ``count`` is not a multiple of
    ``cpu_group_size`` or no combination works, falls back to :func:`take_packed`. Raises
    :class:`NotEnoughCPUsError` / :class:`AllocationFailedError`.
    """
    avail = available if isinstance(available, CPUSet) else CPUSet(available)
    idx = topology_index(topo)
    mask = _distributed(
        idx,
        cpus_to_mask(avail),
        count,
        len(avail),
        cpu_group_size,
        spread,
        align_by_socket,
        min_numas_from_hint,
    )
    return mask_to_cpus(mask)


def take_by_topology(
    topo: CPUTopology,
    available: Iterable[int],
    count: int,
    options: StaticPolicyOptions | None = None,
    min_numas_from_hint: int = 0,
) -> CPUSet:
    """The static policy's take (kubelet policy_static.go, takeByTopology): distributed over
    NUMA nodes under distribute-cpus-across-numa (groups of CPUs-per-core under
    full-pcpus-only), packed otherwise; spread sorting under distribute-cpus-across-cores;
    uncore alignment under prefer-align-cpus-by-uncorecache (packed only).

    Newer than the kubelet the conformance corpus follows, as merged upstream:
    align-by-socket reaches the distributed take, so a NUMA combination inside one socket
    wins (kubernetes PR #139778, fixing #114642 / #141237); ``min_numas_from_hint`` (the
    NUMA node count of the Topology Manager's affinity, 0 = none) is the floor of the
    distributed take (PR #139456, fixing #139430). Both only matter under
    distribute-cpus-across-numa."""
    opts = options or StaticPolicyOptions()
    spread = opts.distribute_cpus_across_cores
    if opts.distribute_cpus_across_numa:
        group = topo.cpus_per_core() if opts.full_pcpus_only else 1
        return take_distributed(
            topo,
            available,
            count,
            group,
            spread=spread,
            align_by_socket=opts.align_by_socket,
            min_numas_from_hint=min_numas_from_hint,
        )
    return take_packed(
        topo,
        available,
        count,
        spread=spread,
        prefer_align_by_uncorecache=opts.prefer_align_by_uncorecache,
    )


def take_by_topology_mask(
    topo: CPUTopology,
    available: int,
    count: int,
    options: StaticPolicyOptions | None = None,
    min_numas_from_hint: int = 0,
) -> CPUSet:
    """:func:`take_by_topology` of the CPUs of the bitmask ``available`` (bit *i* = CPU *i*):
    the same take, without a set of the free CPUs built for it (a 256-CPU node's free CPUs
    are a 255-element set; the static policy has their mask)."""
    opts = options or StaticPolicyOptions()
    idx = topology_index(topo)
    size = available.bit_count()
    spread = opts.distribute_cpus_across_cores
    if opts.distribute_cpus_across_numa:
        group = topo.cpus_per_core() if opts.full_pcpus_only else 1
        mask = _distributed(idx, available, count, size, group, spread, opts.align_by_socket,
                            min_numas_from_hint)
    else:
        mask = _packed(idx, available, count, size, spread, opts.prefer_align_by_uncorecache)
    return CPUSet.from_mask(mask)  # (mask_to_cpus, one call less)
