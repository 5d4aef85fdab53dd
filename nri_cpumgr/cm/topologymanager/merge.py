"""Merging the hint providers' topology hints into one best hint, without enumerating the
cartesian product of all hints.

The kubelet (pkg/kubelet/cm/topologymanager/policy.go: filterProvidersHints,
mergePermutation, HintMerger.compare / Merge, iterateAllProviderTopologyHints) walks every
permutation (one hint per resource list), ANDs the masks of each permutation with the
default affinity and folds the results with ``compare``. That fold is a selection of the
minimum of a *total order* on (mask, preferred) pairs:

1. a preferred merged hint beats every non-preferred one;
2. preferred hints: the fitter mask wins, where *fitter* is "fewer nodes, then numerically
   smaller mask" (Narrowest) or, with prefer-closest-numa-nodes and a policy other than
   single-numa-node, "fewer nodes, then smaller average distance, then numerically smaller"
   (Closest);
3. non-preferred hints, with B = max over resources of the node count of the resource's
   narrowest hint (maxOfMinAffinityCounts): a mask of exactly B nodes first, then masks
   below B by decreasing size, then masks above B by increasing size; equal sizes by
   fitness;
4. merged masks with no node never win; without any winner the result is
   (default affinity, not preferred).

So the result depends only on the *set* of achievable merged hints, which this module
computes directly:

* preferred merged hints need every list to pick a preferred hint that is either
  "don't care" (nil mask) or one common mask M; their set is found from per-list sets of
  preferred masks in time linear in the number of hints;
* only if none exists are non-preferred masks needed. The nodes that can appear in any
  merged mask are pruned first (intersection over lists of the union of their masks); with
  k remaining nodes the exact set of achievable AND-results is obtained by counting:
  for each mask Z, ``prod_i #{hints of list i that contain Z}`` counts the permutations whose
  AND contains Z, and a Möbius inversion over supersets gives the number whose AND *is* Z
  (O(lists * k * 2**k), k <= 8 by default). When k is large and the lists are short a
  direct set-of-ANDs propagation is used instead. Candidate sizes are then visited in rank
  order (B, B-1, ..., 1, B+1, ...) and the search stops at the first size that has an
  achievable mask.

:func:`reference_merge` is the literal permutation fold, kept as a test oracle.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from nri_cpumgr.cm.topologymanager.bitmask import bits_of, mask_of, nodes_of
from nri_cpumgr.cm.topologymanager.family import MaskFamily
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo

#: What one hint provider returns: resource name -> hints. ``None`` or ``{}`` = no
#: preference; a resource mapped to ``None`` = no preference for it (any NUMA, preferred);
#: a resource mapped to ``[]`` = no possible affinity (any NUMA, not preferred).
ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None

_ANY_PREFERRED = TopologyHint(None, True)
_ANY_NOT_PREFERRED = TopologyHint(None, False)

# A hint as the merger handles it: (mask or None for "don't care", preferred).
_IntHint = tuple[int | None, bool]


def filter_providers_hints(
    providers_hints: Sequence[ProviderHints],
) -> list[Sequence[TopologyHint]]:
    """Flatten the providers' answers into one hint list per (provider, resource).

    A provider with no answer contributes ``[any, preferred]``; a resource mapped to ``None``
    contributes ``[any, preferred]``; a resource mapped to an empty list contributes
    ``[any, not preferred]``. Kubelet policy.go filterProvidersHints.
    """
    out: list[Sequence[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            out.append([_ANY_PREFERRED])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                out.append([_ANY_PREFERRED])
            elif isinstance(resource_hints, MaskFamily):
                out.append(resource_hints)  # never empty; kept as described
            elif len(resource_hints) == 0:
                out.append([_ANY_NOT_PREFERRED])
            else:
                out.append(list(resource_hints))
    return out


def filter_single_numa_hints(
    all_hints: Sequence[Sequence[TopologyHint]],
) -> list[list[TopologyHint]]:
    """Keep, per resource, only preferred hints that are "don't care" or name exactly one
    NUMA node (kubelet policy_single_numa_node.go filterSingleNumaHints)."""
    out: list[list[TopologyHint]] = []
    for hints in all_hints:
        if isinstance(hints, MaskFamily) and hints.simple:
            single = hints.masks_of_size(1) if hints.min_size == 1 else ()
            out.append([TopologyHint(nodes_of(m), True) for m in single])
        else:
            out.append([h for h in hints if h.preferred and (h.numa is None or len(h.numa) == 1)])
    return out


def max_of_min_affinity_counts(all_hints: Sequence[Sequence[TopologyHint]]) -> int:
    """Max over resources of the node count of the resource's narrowest non-nil hint (0 when
    there is none): the kubelet's bestNonPreferredAffinityCount (policy.go
    maxOfMinAffinityCounts)."""
    best = 0
    for hints in all_hints:
        if isinstance(hints, MaskFamily):
            best = max(best, hints.min_count())
            continue
        counts = [len(h.numa) for h in hints if h.numa is not None]
        if counts:
            best = max(best, min(counts))
    return best


def _to_int_hints(all_hints: Sequence[Sequence[TopologyHint]]) -> list[list[_IntHint]]:
    cache: dict[frozenset[int], int] = {}
    out: list[list[_IntHint]] = []
    for hints in all_hints:
        lst: list[_IntHint] = []
        for h in hints:
            if h.numa is None:
                lst.append((None, h.preferred))
            else:
                m = cache.get(h.numa)
                if m is None:
                    m = cache[h.numa] = mask_of(h.numa)
                lst.append((m, h.preferred))
        out.append(lst)
    return out


class MaskOrder:
    """The total orders of HintMerger.compare, as sort keys over int masks.

    ``closest`` selects the prefer-closest-numa-nodes comparison (NUMAInfo.Closest) instead of
    NUMAInfo.Narrowest; ``best_non_preferred`` is B (see module docstring).
    """

    def __init__(self, numa_info: NUMAInfo, closest: bool, best_non_preferred: int) -> None:
        self.numa_info = numa_info
        self.closest = closest
        self.b = best_non_preferred
        self._dist: dict[int, float] = {}

    def _tie(self, mask: int) -> tuple[float, int]:
        if not self.closest:
            return (0.0, mask)
        d = self._dist.get(mask)
        if d is None:
            d = self._dist[mask] = self.numa_info.average_distance(mask)
        return (d, mask)

    def preferred_key(self, mask: int) -> tuple[int, float, int]:
        """Smaller is better among preferred merged hints."""
        return (mask.bit_count(), *self._tie(mask))

    def fit_key(self, mask: int) -> tuple[float, int]:
        """Smaller is fitter among masks of the same size (non-preferred selection)."""
        return self._tie(mask)

    def size_order(self, k: int) -> list[int]:
        """Candidate mask sizes 1..k in non-preferred rank order."""
        b = self.b
        sizes = [b] if 1 <= b <= k else []
        sizes += [c for c in range(min(b - 1, k), 0, -1)]
        sizes += [c for c in range(max(b + 1, 1), k + 1)]
        return sizes


def _preferred_masks(lst: list[_IntHint]) -> tuple[set[int], bool]:
    """The masks of a provider's preferred hints, and whether one of them is "don't care"
    (a preferred hint without an affinity)."""
    masks: set[int] = set()
    has_nil = False
    for m, p in lst:
        if p:
            if m is None:
                has_nil = True
            else:
                masks.add(m)
    return masks, has_nil


def _preferred_candidates(lists: list[list[_IntHint]], default: int) -> set[int]:
    """Merged masks (already ANDed with ``default``) of all-preferred permutations."""
    constrained: list[set[int]] = []
    free: list[set[int]] = []
    for lst in lists:
        masks, has_nil = _preferred_masks(lst)
        (free if has_nil else constrained).append(masks)
    if constrained:
        constrained.sort(key=len)
        common = set(constrained[0])
        for s in constrained[1:]:
            common &= s
            if not common:
                break
        raw = common
    else:
        raw = set().union(*free) if free else set()
        raw.add(-1)  # marker: every list picks "don't care" -> default affinity
    return {default if m == -1 else (m & default) for m in raw}


def _universe(lists: list[list[_IntHint]], default: int) -> int:
    """Nodes that can appear in a merged mask: intersection over lists of the union of their
    masks (a "don't care" hint stands for the default affinity)."""
    u = default
    for lst in lists:
        union = 0
        for m, _ in lst:
            union |= default if m is None else m
            if union & u == u:
                break
        u &= union
        if not u:
            break
    return u


def _achievable_by_counting(lists: list[list[_IntHint]], universe: int) -> list[int]:
    """Exact set of non-empty AND-results (as masks within ``universe``), by counting
    permutations per superset and Möbius inversion."""
    bits = bits_of(universe)
    k = len(bits)
    size = 1 << k
    full = size - 1
    pos = {b: i for i, b in enumerate(bits)}
    compress_cache: dict[int, int] = {}

    def compress(m: int) -> int:
        c = compress_cache.get(m)
        if c is None:
            c = 0
            for b in bits_of(m & universe):
                c |= 1 << pos[b]
            compress_cache[m] = c
        return c

    total = [1] * size
    for lst in lists:
        f = [0] * size
        for m, _ in lst:
            f[full if m is None else compress(m)] += 1
        # superset sums: f[Z] = number of hints containing Z
        step = 1
        while step < size:
            for base in range(0, size, step << 1):
                for z in range(base, base + step):
                    f[z] += f[z + step]
            step <<= 1
        for z in range(size):
            total[z] *= f[z]
    # Möbius inversion over supersets: total[Z] = permutations whose AND is exactly Z
    step = 1
    while step < size:
        for base in range(0, size, step << 1):
            for z in range(base, base + step):
                total[z] -= total[z + step]
        step <<= 1
    out = []
    for z in range(1, size):
        if total[z] > 0:
            m = 0
            for i in range(k):
                if z >> i & 1:
                    m |= 1 << bits[i]
            out.append(m)
    return out


def _achievable_by_propagation(lists: list[list[_IntHint]], universe: int) -> list[int]:
    """Exact set of non-empty AND-results by propagating the set of partial ANDs."""
    states = {universe}
    for lst in lists:
        masks = {universe if m is None else (m & universe) for m, _ in lst}
        states = {s & m for s in states for m in masks}
        states.discard(0)
        if not states:
            break
    return list(states)


def _achievable(lists: list[list[_IntHint]], universe: int) -> list[int]:
    k = universe.bit_count()
    counting_cost = (len(lists) + 1) * max(k, 1) * (1 << k)
    propagation_cost = 0
    states = 1
    for lst in lists:
        distinct = len({m for m, _ in lst})
        propagation_cost += states * distinct
        states = min(1 << k, states * distinct)
        if propagation_cost > counting_cost:
            break
    if propagation_cost <= counting_cost:
        return _achievable_by_propagation(lists, universe)
    return _achievable_by_counting(lists, universe)


def merge_filtered_hints(
    all_hints: Sequence[Sequence[TopologyHint]], numa_info: NUMAInfo, closest: bool
) -> TopologyHint:
    """The kubelet's HintMerger.Merge result for already filtered hint lists, computed without
    enumerating permutations (see module docstring).

    ``closest`` = use NUMAInfo.Closest (prefer-closest-numa-nodes and a policy other than
    single-numa-node). Returns the best merged hint; (default affinity, not preferred) when
    no permutation yields a non-empty mask.
    """
    default = numa_info.default_mask
    fallback = TopologyHint(nodes_of(default), False)
    if any(len(lst) == 0 for lst in all_hints if not isinstance(lst, MaskFamily)):
        return fallback  # no permutation at all
    if any(isinstance(lst, MaskFamily) for lst in all_hints):
        found = _merge_with_families(all_hints, numa_info, closest, default, fallback)
        if found is not None:
            return found
        all_hints = [list(lst) if isinstance(lst, MaskFamily) else lst for lst in all_hints]
    lists = _to_int_hints(all_hints)
    order = MaskOrder(numa_info, closest, max_of_min_affinity_counts(all_hints))

    preferred = [m for m in _preferred_candidates(lists, default) if m]
    if preferred:
        return TopologyHint(nodes_of(min(preferred, key=order.preferred_key)), True)

    universe = _universe(lists, default)
    if not universe:
        return fallback
    by_size: dict[int, list[int]] = {}
    for m in _achievable(lists, universe):
        by_size.setdefault(m.bit_count(), []).append(m)
    for size in order.size_order(universe.bit_count()):
        found = by_size.get(size)
        if found:
            return TopologyHint(nodes_of(min(found, key=order.fit_key)), False)
    return fallback


#: At most this many partial ANDs of the listed hint lists before a family is listed instead.
_FAMILY_STATES = 256


def _merge_with_families(
    all_hints: Sequence[Sequence[TopologyHint]],
    numa_info: NUMAInfo,
    closest: bool,
    default: int,
    fallback: TopologyHint,
) -> TopologyHint | None:
    """:func:`merge_filtered_hints` where some lists are :class:`MaskFamily` descriptions
    (up-closed: a superset of a member is a member), without listing them; ``None`` when the
    case is not covered here (the caller lists the families and merges as usual).

    Preferred: every permutation picking preferred hints that are "don't care" or one common
    mask M: the families' preferred members are tested for M, never listed when another
    list is shorter. Non-preferred (only with one family): with S the partial ANDs of the
    other lists (and the default affinity), a mask Z is achievable iff Z is a non-empty
    subset of some s in S and ``Z | (nodes - s)`` is a member (up-closed: the largest member
    meeting s in Z is as good as any); sizes are visited in the non-preferred rank order and
    the fittest achievable mask of the first size that has one wins, as in
    :func:`merge_filtered_hints`."""
    fams = [lst for lst in all_hints if isinstance(lst, MaskFamily)]
    explicit = _to_int_hints([lst for lst in all_hints if not isinstance(lst, MaskFamily)])
    order = MaskOrder(numa_info, closest, max_of_min_affinity_counts(all_hints))

    # preferred merged hints: families are always constrained (no "don't care" member)
    sets: list[set[int]] = []
    for lst in explicit:
        masks, has_nil = _preferred_masks(lst)
        if not has_nil:
            sets.append(masks)
    if sets:
        sets.sort(key=len)
        common = set(sets[0])
        for other in sets[1:]:
            common &= other
        tests = fams
    else:
        first = min(fams, key=lambda f: (not f.simple, _choose(len(f.free),
                                                               f.min_size - len(f.required))))
        common = set(first.preferred_masks())
        tests = [f for f in fams if f is not first]
    preferred = {
        m & default for m in common if all(f.is_preferred(m) for f in tests) and m & default
    }
    if preferred:
        return TopologyHint(nodes_of(min(preferred, key=order.preferred_key)), True)

    if len(fams) != 1:
        return None
    fam = fams[0]
    states = {default}
    for lst in explicit:
        masks = {default if m is None else (m & default) for m, _ in lst}
        states = {s & m for s in states for m in masks}
        states.discard(0)
        if not states:
            return fallback
        if len(states) > _FAMILY_STATES:
            return None
    nodes_mask = fam.nodes_mask
    for size in order.size_order(default.bit_count()):
        found: set[int] = set()
        for s in states:
            inside = s & nodes_mask
            if inside.bit_count() < size:
                continue
            if inside == nodes_mask:
                found.update(fam.masks_of_size(size))
                continue
            outside = nodes_mask & ~s
            for pick in itertools.combinations(bits_of(inside), size):
                z = mask_of(pick)
                if fam.qualifies(z | outside):
                    found.add(z)
        if found:
            return TopologyHint(nodes_of(min(found, key=order.fit_key)), False)
    return fallback


def _choose(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


# ---------------------------------------------------------------------------------------
# Literal kubelet algorithm (exponential), used as a test oracle only.


def compare_hints(
    current: TopologyHint | None,
    candidate: TopologyHint,
    numa_info: NUMAInfo,
    closest: bool,
    best_non_preferred: int,
) -> TopologyHint | None:
    """One step of the kubelet's fold (policy.go HintMerger.compare): returns ``current`` or
    ``candidate`` (the very object), ``None`` only when both are unusable."""

    def mask(h: TopologyHint) -> int:
        return mask_of(h.numa) if h.numa is not None else 0

    def fitter(cur: TopologyHint, cand: TopologyHint) -> TopologyHint:
        cm, dm = mask(cur), mask(cand)
        if cm == dm:
            return cur
        best = numa_info.closest(cm, dm) if closest else numa_info.narrowest(cm, dm)
        return cur if best == cm else cand

    cand_count = len(candidate.numa) if candidate.numa is not None else 0
    if cand_count == 0:
        return current
    if current is None:
        return candidate
    if not current.preferred and candidate.preferred:
        return candidate
    if current.preferred and not candidate.preferred:
        return current
    if current.preferred and candidate.preferred:
        return fitter(current, candidate)
    cur_count = len(current.numa) if current.numa is not None else 0
    b = best_non_preferred
    if cur_count > b:
        return fitter(current, candidate)
    if cur_count == b:
        return current if cand_count != b else fitter(current, candidate)
    if cand_count > b:
        return current
    if cand_count == b:
        return candidate
    if cand_count > cur_count:
        return candidate
    if cand_count < cur_count:
        return current
    return fitter(current, candidate)


def reference_merge(
    all_hints: Sequence[Sequence[TopologyHint]], numa_info: NUMAInfo, closest: bool
) -> TopologyHint:
    """The kubelet's merge as written: every permutation, in order (O(product of list
    lengths)). Same contract as :func:`merge_filtered_hints`; for tests only."""
    default = numa_info.default_mask
    b = max_of_min_affinity_counts(all_hints)
    best: TopologyHint | None = None

    def walk(i: int, masks: list[int], first: int | None, preferred: bool) -> None:
        nonlocal best
        if i == len(all_hints):
            merged = default
            for m in masks:
                merged &= m
            cand = TopologyHint(nodes_of(merged), preferred)
            best = compare_hints(best, cand, numa_info, closest, b)
            return
        for h in all_hints[i]:
            if h.numa is None:
                walk(i + 1, masks, first, preferred and h.preferred)
            else:
                m = mask_of(h.numa)
                f = m if first is None else first
                walk(i + 1, [*masks, m], f, preferred and h.preferred and m == f)

    walk(0, [], None, True)
    return best if best is not None else TopologyHint(nodes_of(default), False)
