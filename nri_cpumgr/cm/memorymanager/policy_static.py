"""The ``Static`` Memory Manager policy (kubelet pkg/kubelet/cm/memorymanager/policy_static.go).

Guaranteed pods get their ``memory`` and every ``hugepages-<size>`` request from the
smallest set of NUMA nodes that can hold all of it; the set becomes the container's
``cpuset.mems``. Rules, as the kubelet applies them:

* **Machine state.** Per NUMA node and memory type: total, system reserved (from the
  kubelet's reservedMemory), allocatable = total - system reserved (for ``memory`` also
  minus the node's hugepages), reserved and free.
* **Hints** (:meth:`StaticPolicy.calculate_hints`). Every non-empty subset of NUMA nodes is
  tried, smallest first, ascending ids within a size (bitmask.IterateBitMasks). A set whose
  *allocatable* sum covers the request counts toward the minimum set size even when it is
  not usable now; a set is a hint when its *free* sum (plus memory the pod's finished init
  containers left behind on exactly that set) covers every requested type and the group
  rule allows it. Preferred = of the minimum size.
* **Group rule.** A NUMA node serves either single-node allocations or one multi-node group:
  a node already grouped with others cannot be used alone, and a used node can only join
  a multi-node allocation with exactly its current group.
* **Allocate.** Take the Topology Manager's hint; without affinity compute the default hint
  (best of the calculated hints); when the affinity cannot hold the request extend it to
  the best calculated hint containing it; a preferred hint from the Topology Manager must
  stay preferred. Reserve from the nodes of the affinity in ascending id order, spilling
  over to the next node when one runs out. Every node of the affinity counts one more
  assignment per memory type and gets the affinity as its group.
* **Init containers.** A regular (non-restartable) init container's memory is reusable by
  the containers that start after it in the same pod on the same NUMA set: later
  containers only reserve what exceeds it, and the init container's blocks are shrunk by
  what was reused (possibly to size 0). Restartable (sidecar) init containers are never
  reused.

Quantities: requests are taken from :class:`nri_cpumgr.podmodel.ContainerSpec` in bytes
(``ContainerSpec.request``: the request, else the limit). NRI only hands the runtime glue the
memory *limit* and the hugepage limits, not the requests; for Guaranteed pods (the only pods
this policy assigns) requests equal limits, so the glue builds containers from the limits.
Not modelled: in-place resize (AllocatedResources) and pod-level resources (alpha).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

from nri_cpumgr.cm.memorymanager.errors import (
    DefaultHintError,
    DefaultHintNotPreferredError,
    EmptyMachineStateError,
    ExtendedHintNotPreferredError,
    ExtendHintError,
    MachineStateMismatchError,
    NoSystemReservedMemoryError,
    NUMAAllocationViolationError,
    UnknownAssignmentNUMANodeError,
    UnknownAssignmentResourceError,
)
from nri_cpumgr.cm.memorymanager.policy import Hints
from nri_cpumgr.cm.memorymanager.quantity import hugepage_resource_name, is_memory_resource
from nri_cpumgr.cm.memorymanager.state import (
    Block,
    MemoryState,
    MemoryTable,
    NUMANodeMap,
    NUMANodeState,
    machine_states_equal,
)
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass
from nri_cpumgr.topology import Machine, NUMANodeInfo

POLICY_STATIC = "Static"
MEMORY = "memory"

SystemReservedMemory = dict[int, dict[str, int]]
"""NUMA node id -> memory type -> bytes reserved for the system on that node."""

ReusableMemory = dict[str, dict[tuple[int, ...], dict[str, int]]]
"""pod uid -> NUMA set (ascending ids) -> memory type -> bytes reusable from init containers."""

MachineInput = Machine | Mapping[int, NUMANodeInfo] | Iterable[NUMANodeInfo] | None


def numa_nodes_of(machine: MachineInput) -> tuple[NUMANodeInfo, ...]:
    """The NUMA nodes of a :class:`Machine`, a mapping id -> NUMANodeInfo or an iterable of
    NUMANodeInfo, in the given order; ``None`` = no nodes."""
    if machine is None:
        return ()
    if isinstance(machine, Machine):
        return tuple(machine.numa_nodes.values())
    if isinstance(machine, Mapping):
        return tuple(machine.values())
    return tuple(machine)


def container_requested_resources(container: ContainerSpec) -> dict[str, int]:
    """The container's ``memory`` and ``hugepages-*`` requests in bytes
    (policy_static.go getRequestedResources). A resource appears when it has a request or
    a limit (a limit alone implies an equal request)."""
    out: dict[str, int] = {}
    for name in itertools.chain(container.requests, container.limits):
        if name in out or not is_memory_resource(name):
            continue
        value = container.request(name)
        if value is not None:
            out[name] = int(value)
    return out


def own_requested_resources(pod: Pod, container: ContainerSpec) -> dict[str, int]:
    """:func:`container_requested_resources`, except that a container of a pod with
    ``.spec.resources`` (``pod.pod_level_resources``) asks for nothing unless its own
    requests equal its own limits (policy_static.go getContainerRequestedResources with
    PodLevelResourceManagers, v1.37.2: "container is not eligible")."""
    if pod.pod_level_resources and not container.equivalent_guaranteed():
        return {}
    return container_requested_resources(container)


def pod_requested_resources(pod: Pod) -> dict[str, int]:
    """The pod's memory request per type, in bytes (policy_static.go getPodRequestedResources).

    Per type: the larger of (sum over app containers + sum over restartable init containers)
    and the init-container peak, where a regular init container counts together with the
    restartable init containers started before it. Only types requested by some app
    container appear.
    """
    init_peak: dict[str, int] = {}
    restartable_sum: dict[str, int] = {}
    for c in pod.init_containers:
        for name, qty in container_requested_resources(c).items():
            init_peak.setdefault(name, 0)
            if c.restartable:
                restartable_sum[name] = restartable_sum.get(name, 0) + qty
            elif restartable_sum.get(name, 0) + qty > init_peak[name]:
                init_peak[name] = restartable_sum.get(name, 0) + qty
    app_sum: dict[str, int] = {}
    for c in pod.containers:
        for name, qty in container_requested_resources(c).items():
            app_sum[name] = app_sum.get(name, 0) + qty
    return {
        name: max(total + restartable_sum.get(name, 0), init_peak.get(name, 0))
        for name, total in app_sum.items()
    }


def _ordered(resources: Iterable[str]) -> list[str]:
    """``memory`` first, then hugepage types by name (the kubelet iterates a Go map)."""
    return sorted(resources, key=lambda r: (r != MEMORY, r))


def _is_narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """bitmask.IsNarrowerThan: fewer nodes, or as many and a numerically smaller mask."""
    if len(a) != len(b):
        return len(a) < len(b)
    return sum(1 << n for n in a) < sum(1 << n for n in b)


def find_best_hint(hints: Sequence[TopologyHint]) -> TopologyHint | None:
    """The best hint: preferred before not preferred, then the narrowest (findBestHint);
    ``None`` for no hints."""
    best: TopologyHint | None = None
    for h in hints:
        if best is None or best.numa is None:
            best = h
            continue
        if h.preferred and not best.preferred:
            best = h
        elif (
            h.preferred == best.preferred and h.numa is not None and _is_narrower(h.numa, best.numa)
        ):
            best = h
    return best


def _free(ms: NUMANodeMap, node: int, resource: str) -> int:
    st = ms.get(node)
    table = st.memory_map.get(resource) if st is not None else None
    return table.free if table is not None else 0


def _allocatable(ms: NUMANodeMap, node: int, resource: str) -> int:
    st = ms.get(node)
    table = st.memory_map.get(resource) if st is not None else None
    return table.allocatable if table is not None else 0


def is_affinity_satisfying_request(
    ms: NUMANodeMap, numa: Iterable[int], requested: Mapping[str, int]
) -> bool:
    """True when the free bytes of ``numa`` cover every requested type
    (isAffinitySatisfyRequest)."""
    nodes = list(numa)
    return all(sum(_free(ms, n, r) for n in nodes) >= size for r, size in requested.items())


def is_affinity_violating_numa_allocations(ms: NUMANodeMap, numa: Iterable[int]) -> bool:
    """True when a multi-node affinity contains a used node that serves single-node
    allocations or another group (isAffinityViolatingNUMAAllocations)."""
    bits = sorted(numa)
    if len(bits) == 1:
        return False
    for n in bits:
        st = ms.get(n)
        if st is None or st.number_of_assignments == 0:
            continue
        if len(st.cells) == 1 or sorted(st.cells) != bits:
            return True
    return False


class StaticPolicy:
    """Memory Manager policy ``Static``.

    ``machine``: the NUMA nodes (memory in bytes, hugepages as page size in bytes -> page
    count); may be ``None`` for operations that do not need it. ``system_reserved``: bytes
    reserved per NUMA node and memory type (config.get_system_reserved_memory).

    Raises :class:`NoSystemReservedMemoryError` when no node reserves any ``memory``
    (NewPolicyStatic).
    """

    def __init__(
        self,
        machine: MachineInput,
        system_reserved: Mapping[int, Mapping[str, int]] | None,
    ) -> None:
        reserved = {int(n): dict(r) for n, r in (system_reserved or {}).items()}
        if sum(r.get(MEMORY, 0) for r in reserved.values()) <= 0:
            raise NoSystemReservedMemoryError()
        self.numa_nodes: tuple[NUMANodeInfo, ...] = numa_nodes_of(machine)
        self.system_reserved: SystemReservedMemory = reserved
        self.init_containers_reusable_memory: ReusableMemory = {}

    @property
    def name(self) -> str:
        return POLICY_STATIC

    # --- state -------------------------------------------------------------------------

    def system_reserved_for(self, node: int, resource: str) -> int:
        """Bytes of ``resource`` reserved for the system on ``node`` (0 if none)."""
        return self.system_reserved.get(node, {}).get(resource, 0)

    def default_machine_state(self) -> NUMANodeMap:
        """The machine state of an empty node (getDefaultMachineState): per node, each
        hugepage size with total = pages x size, and ``memory`` with allocatable = total -
        system reserved - the node's hugepages; nothing reserved; each node its own group."""
        ms: NUMANodeMap = {}
        for node in self.numa_nodes:
            st = NUMANodeState(number_of_assignments=0, memory_map={}, cells=[node.id])
            hugepages_total = 0
            for page_size, pages in node.hugepages.items():
                name = hugepage_resource_name(page_size)
                total = page_size * pages
                reserved = self.system_reserved_for(node.id, name)
                st.memory_map[name] = MemoryTable(
                    total_mem_size=total,
                    system_reserved=reserved,
                    allocatable=total - reserved,
                    reserved=0,
                    free=total - reserved,
                )
                hugepages_total += total
            reserved = self.system_reserved_for(node.id, MEMORY)
            allocatable = node.memory_bytes - reserved - hugepages_total
            st.memory_map[MEMORY] = MemoryTable(
                total_mem_size=node.memory_bytes,
                system_reserved=reserved,
                allocatable=allocatable,
                reserved=0,
                free=allocatable,
            )
            ms[node.id] = st
        return ms

    def start(self, state: MemoryState) -> None:
        """Validate a restored state, or fill an empty one with the default machine state
        (validateState).

        Raises :class:`EmptyMachineStateError` (no machine state but assignments),
        :class:`UnknownAssignmentNUMANodeError` / :class:`UnknownAssignmentResourceError`
        (a block names a node / memory type the machine lacks), or
        :class:`MachineStateMismatchError` (the state differs from the default state with
        all restored blocks re-reserved; free/reserved compared as sums over groups).
        """
        ms = state.get_machine_state()
        assignments = state.get_memory_assignments()
        if not ms:
            if assignments:
                raise EmptyMachineStateError()
            state.set_machine_state(self.default_machine_state())
            return
        expected = self.default_machine_state()
        for pod_uid, containers in assignments.items():
            for name, blocks in containers.items():
                for b in blocks:
                    remaining = b.size
                    for n in b.numa_affinity:
                        st = expected.get(n)
                        if st is None:
                            raise UnknownAssignmentNUMANodeError(pod_uid, name)
                        st.number_of_assignments += 1
                        st.cells = list(b.numa_affinity)
                        table = st.memory_map.get(b.type)
                        if table is None:
                            raise UnknownAssignmentResourceError(pod_uid, name)
                        remaining = _reserve_on(table, remaining)
        if not machine_states_equal(ms, expected):
            raise MachineStateMismatchError()

    def get_allocatable_memory(self, state: MemoryState) -> list[Block]:
        """One single-node block per NUMA node and memory type with non-zero allocatable
        bytes (GetAllocatableMemory)."""
        out: list[Block] = []
        for n, st in sorted(state.get_machine_state().items()):
            for r in _ordered(st.memory_map):
                if st.memory_map[r].allocatable:
                    out.append(Block((n,), r, st.memory_map[r].allocatable))
        return out

    # --- hints -------------------------------------------------------------------------

    def calculate_hints(self, ms: NUMANodeMap, pod: Pod, requested: Mapping[str, int]) -> Hints:
        """Hints for ``requested`` bytes per memory type on machine state ``ms``
        (calculateHints, see the module doc). Each type gets the same NUMA sets, in
        IterateBitMasks order (size 1 first, ascending ids). An empty dict when no set
        fits."""
        nodes = sorted(ms)
        min_size = len(nodes)
        masks: list[tuple[int, ...]] = []
        for size in range(1, len(nodes) + 1):
            for mask in itertools.combinations(nodes, size):
                if any(
                    sum(_allocatable(ms, n, r) for n in mask) < req for r, req in requested.items()
                ):
                    continue
                min_size = min(min_size, size)
                if size == 1 and len(ms[mask[0]].cells) > 1:
                    continue
                if size > 1 and any(
                    ms[n].number_of_assignments > 0
                    and (len(ms[n].cells) == 1 or sorted(ms[n].cells) != list(mask))
                    for n in mask
                ):
                    continue
                if any(
                    sum(_free(ms, n, r) for n in mask) + self._reusable(pod.uid, mask, r) < req
                    for r, req in requested.items()
                ):
                    continue
                masks.append(mask)
        hints: Hints = {}
        for r in requested:
            if masks:
                hints[r] = [TopologyHint(frozenset(m), len(m) == min_size) for m in masks]
        return hints

    def get_default_hint(
        self, ms: NUMANodeMap, pod: Pod, requested: Mapping[str, int]
    ) -> TopologyHint:
        """The best calculated hint (getDefaultHint). Raises :class:`DefaultHintError` when
        no NUMA set fits."""
        hints = self.calculate_hints(ms, pod, requested)
        best = find_best_hint(hints.get(MEMORY, [])) if hints else None
        if best is None:
            raise DefaultHintError()
        return best

    def extend_topology_manager_hint(
        self, ms: NUMANodeMap, pod: Pod, requested: Mapping[str, int], numa: frozenset[int]
    ) -> TopologyHint:
        """The best calculated hint whose NUMA set contains ``numa``
        (extendTopologyManagerHint). Raises :class:`ExtendHintError` when there is none."""
        candidates = [
            h
            for h in self.calculate_hints(ms, pod, requested).get(MEMORY, [])
            if h.numa is not None and numa <= h.numa
        ]
        best = find_best_hint(candidates)
        if best is None:
            raise ExtendHintError()
        return best

    def get_topology_hints(
        self, state: MemoryState, pod: Pod, container: ContainerSpec
    ) -> Hints | None:
        """Hints for one container (GetTopologyHints): ``None`` for non-Guaranteed pods and
        for a container that asks for no memory of its own (:func:`own_requested_resources`);
        for a container that already has blocks, its blocks' NUMA sets as preferred hints
        (``None`` if the blocks no longer match the request); else :meth:`calculate_hints`."""
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return None
        requested = own_requested_resources(pod, container)
        if not requested:  # no memory of its own to pin: no preference (v1.37.2)
            return None
        blocks = state.get_memory_blocks(pod.uid, container.name)
        if blocks is not None:
            return regenerate_hints(blocks, requested)
        return self.calculate_hints(state.get_machine_state(), pod, requested)

    def get_pod_topology_hints(self, state: MemoryState, pod: Pod) -> Hints | None:
        """Hints for the whole pod, from :func:`pod_requested_resources`
        (GetPodTopologyHints): ``None`` for non-Guaranteed pods; regenerated from the first
        container (init containers first) that already has blocks; else calculated."""
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return None
        requested = pod_requested_resources(pod)
        for c in pod.init_containers + pod.containers:
            blocks = state.get_memory_blocks(pod.uid, c.name)
            if blocks is not None:
                return regenerate_hints(blocks, requested)
        return self.calculate_hints(state.get_machine_state(), pod, requested)

    # --- allocation --------------------------------------------------------------------

    def allocate(
        self,
        state: MemoryState,
        pod: Pod,
        container: ContainerSpec,
        hint: TopologyHint | None = None,
    ) -> None:
        """Assign memory to ``container`` (Allocate; idempotent). ``hint`` is the Topology
        Manager's hint for the container (``None`` = no affinity, not preferred).

        Non-Guaranteed pods and containers that already have blocks are left alone. Raises
        :class:`DefaultHintError`, :class:`DefaultHintNotPreferredError`,
        :class:`ExtendHintError`, :class:`ExtendedHintNotPreferredError` or
        :class:`NUMAAllocationViolationError`; on error ``state`` is unchanged.
        """
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return
        existing = state.get_memory_blocks(pod.uid, container.name)
        if existing is not None:
            self._update_pod_reusable_memory(pod, container, existing)
            return
        tm_hint = hint if hint is not None else TopologyHint(None, False)
        requested = own_requested_resources(pod, container)
        if not requested:
            # "container requests no memory resources" (policy_static.go Allocate, v1.37.2):
            # a container of a Guaranteed pod-level pod without its own resources, or whose
            # own requests are not its limits
            return
        ms = state.get_machine_state()

        best = tm_hint
        if best.numa is None:
            default = self.get_default_hint(ms, pod, requested)
            if not default.preferred and best.preferred:
                raise DefaultHintNotPreferredError()
            best = default
        assert best.numa is not None
        if not is_affinity_satisfying_request(ms, best.numa, requested):
            extended = self.extend_topology_manager_hint(ms, pod, requested, best.numa)
            if not extended.preferred and best.preferred:
                raise ExtendedHintNotPreferredError()
            best = extended
        assert best.numa is not None
        if is_affinity_violating_numa_allocations(ms, best.numa):
            raise NUMAAllocationViolationError()

        affinity = tuple(sorted(best.numa))
        blocks: list[Block] = []
        for r in _ordered(requested):
            size = requested[r]
            blocks.append(Block(affinity, r, size))
            to_reserve = max(0, size - self._reusable(pod.uid, affinity, r))
            _update_machine_state(ms, affinity, r, to_reserve)

        self._update_pod_reusable_memory(pod, container, blocks)
        state.set_machine_state(ms)
        state.set_memory_blocks(pod.uid, container.name, blocks)
        self._update_init_containers_memory_blocks(state, pod, container, blocks)

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        """Release a container's blocks (RemoveContainer; idempotent): each block's bytes go
        back to free on its nodes in ascending order, as far as they hold reserved bytes;
        every node of the block counts one assignment less and becomes its own group again
        when it has none left."""
        blocks = state.get_memory_blocks(pod_uid, container_name)
        if blocks is None:
            return
        state.delete(pod_uid, container_name)
        ms = state.get_machine_state()
        for b in blocks:
            released = b.size
            for n in b.numa_affinity:
                st = ms.get(n)
                if st is None:
                    continue
                st.number_of_assignments -= 1
                if st.number_of_assignments == 0:
                    st.cells = [n]
                if released == 0:
                    continue
                table = st.memory_map.get(b.type)
                if table is None or table.reserved == 0:
                    continue
                back = min(table.reserved, released)
                table.reserved -= back
                table.free += back
                released -= back
        state.set_machine_state(ms)

    # --- init container memory reuse ---------------------------------------------------

    def _reusable(self, pod_uid: str, numa: Iterable[int], resource: str) -> int:
        """Bytes of ``resource`` the pod's init containers left reusable on exactly the NUMA
        set ``numa`` (getPodReusableMemory)."""
        return (
            self.init_containers_reusable_memory.get(pod_uid, {})
            .get(tuple(sorted(numa)), {})
            .get(resource, 0)
        )

    def _update_pod_reusable_memory(
        self, pod: Pod, container: ContainerSpec, blocks: Iterable[Block]
    ) -> None:
        """updatePodReusableMemory: forget other pods; a regular init container raises the
        reusable amount of its NUMA set to its block size; any other container consumes
        reusable bytes on its NUMA set."""
        for uid in list(self.init_containers_reusable_memory):
            if uid != pod.uid:
                del self.init_containers_reusable_memory[uid]
        if _is_regular_init_container(pod, container.name):
            per_pod = self.init_containers_reusable_memory.setdefault(pod.uid, {})
            for b in blocks:
                per_set = per_pod.setdefault(tuple(sorted(b.numa_affinity)), {})
                if b.size > per_set.get(b.type, 0):
                    per_set[b.type] = b.size
            return
        for b in blocks:
            reusable = self._reusable(pod.uid, b.numa_affinity, b.type)
            if reusable:
                per_set = self.init_containers_reusable_memory[pod.uid][
                    tuple(sorted(b.numa_affinity))
                ]
                per_set[b.type] = 0 if b.size >= reusable else reusable - b.size

    def _update_init_containers_memory_blocks(
        self, state: MemoryState, pod: Pod, container: ContainerSpec, blocks: Iterable[Block]
    ) -> None:
        """updateInitContainersMemoryBlocks: shrink the blocks of the regular init containers
        started before ``container`` by the bytes ``container`` reused from them (same type,
        same NUMA set), so that the pod's block sizes add up to what it really reserved."""
        for cb in blocks:
            left = cb.size
            for init in pod.init_containers:
                if init.name == container.name or left == 0:
                    break
                if init.restartable:
                    continue
                init_blocks = state.get_memory_blocks(pod.uid, init.name)
                if not init_blocks:
                    continue
                for i, ib in enumerate(init_blocks):
                    if ib.size == 0 or ib.type != cb.type:
                        continue
                    if set(ib.numa_affinity) != set(cb.numa_affinity):
                        continue
                    if ib.size > left:
                        init_blocks[i] = Block(ib.numa_affinity, ib.type, ib.size - left)
                        left = 0
                    else:
                        left -= ib.size
                        init_blocks[i] = Block(ib.numa_affinity, ib.type, 0)
                state.set_memory_blocks(pod.uid, init.name, init_blocks)


def _is_regular_init_container(pod: Pod, name: str) -> bool:
    for c in pod.init_containers:
        if c.name == name:
            return not c.restartable
    return False


def _reserve_on(table: MemoryTable, size: int) -> int:
    """Reserve up to ``size`` bytes from ``table``'s free bytes; returns what is left."""
    if size == 0 or table.free <= 0:
        return size
    take = min(table.free, size)
    table.free -= take
    table.reserved += take
    return size - take


def _update_machine_state(
    ms: NUMANodeMap, affinity: tuple[int, ...], resource: str, size: int
) -> None:
    """updateMachineState: count one assignment and set the group on every node of
    ``affinity``; reserve ``size`` bytes node by node in ascending order."""
    for n in affinity:
        st = ms[n]
        st.number_of_assignments += 1
        st.cells = list(affinity)
        table = st.memory_map.get(resource)
        if table is not None:
            size = _reserve_on(table, size)


def regenerate_hints(blocks: Sequence[Block], requested: Mapping[str, int]) -> Hints | None:
    """Preferred hints from a container's existing blocks (regenerateHints): one hint per
    block under its type. ``None`` when the blocks do not match the request (other number
    of types, an unrequested type, another size) or name a NUMA id outside 0..63."""
    hints: Hints = {r: [] for r in requested}
    if len(blocks) != len(requested):
        return None
    for b in blocks:
        if b.type not in requested or b.size != requested[b.type]:
            return None
        if any(n < 0 or n >= 64 for n in b.numa_affinity):
            return None
        hints[b.type].append(TopologyHint(frozenset(b.numa_affinity), True))
    return hints
