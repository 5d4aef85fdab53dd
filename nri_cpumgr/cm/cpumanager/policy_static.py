"""The kubelet's ``static`` CPU manager policy (pkg/kubelet/cm/cpumanager/policy_static.go).

A container of a Guaranteed pod whose CPU request is a whole number of CPUs gets that many CPUs
exclusively; every other container runs on the shared pool (the state's default set).

CPU pools (all CPU ids):

* shared pool = ``state.default_set``: all CPUs minus the exclusive assignments (minus the
  reserved CPUs too under ``strict-cpu-reservation``);
* reserved = ``reserved_cpus``: never handed out exclusively; picked like an allocation
  (topology-aware packed take from all CPUs, lowest cores first) when only a count is given;
* available for exclusive allocation = shared pool minus reserved.

CPUs of finished (non-restartable) init containers are handed again to the pod's next
containers (the kubelet's ``cpusToReuse``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from nri_cpumgr.cm.cpumanager import cpu_assignment
from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology, take_by_topology_mask
from nri_cpumgr.cm.cpumanager.errors import (
    CPUManagerError,
    InvalidStateError,
    NotEnoughCPUsError,
    PolicyConfigError,
    SMTAlignmentError,
)
from nri_cpumgr.cm.cpumanager.policy_options import (
    StaticPolicyOptions,
    validate_static_policy_options,
)
from nri_cpumgr.cm.cpumanager.state import CPUManagerState
from nri_cpumgr.cm.topologymanager.family import MaskFamily
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import GUARANTEED, ContainerSpec, Pod
from nri_cpumgr.topology import CPUTopology

POLICY_STATIC = "static"
_NONE = CPUSet()  # (immutable: shared by every pod with nothing to reuse)
#: free sets whose takes StaticPolicy.take_ahead keeps (a few dicts of a few CPU sets)
AHEAD_KEPT = 4


def guaranteed_cpus(pod: Pod, container: ContainerSpec) -> int:
    """Exclusive CPUs for ``container``: its integer CPU request if the pod is Guaranteed,
    else 0 (kubelet policy_static.go, guaranteedCPUs)."""
    qos = pod.qos if pod.qos is not None else pod.qos_class()  # (one call less: the
    if qos is not GUARANTEED:  # class is set on the runtime's pods)
        return 0
    return container.guaranteed_cpus()


def pod_guaranteed_cpus(pod: Pod) -> int:
    """Exclusive CPUs the whole pod needs at its peak (kubelet podGuaranteedCPUs).

    max(sum over app containers + restartable init containers, the largest regular init
    container plus the restartable init containers started before it). Containers without a
    CPU request are skipped.
    """
    by_init = 0
    by_restartable = 0
    for c in pod.init_containers:
        if c.request("cpu") is None:
            continue
        n = guaranteed_cpus(pod, c)
        if c.restartable:
            by_restartable += n
        elif by_restartable + n > by_init:
            by_init = by_restartable + n
    by_app = sum(guaranteed_cpus(pod, c) for c in pod.containers if c.request("cpu") is not None)
    return max(by_init, by_app + by_restartable)


class StaticPolicy:
    """The static policy bound to one machine topology.

    ``num_reserved`` CPUs (kube-reserved + system-reserved, rounded up) are kept out of
    exclusive allocations; ``reserved`` gives them explicitly (``reservedSystemCPUs``),
    otherwise they are picked by a topology-aware take. ``options`` is a parsed
    :class:`StaticPolicyOptions` or the raw ``{name: "true"/"false"}`` map (checked against
    ``feature_gates``); ``topology_manager_policy`` is the topology manager policy name (used by
    option validation).

    Raises :class:`InvalidPolicyOptionError` for bad options and :class:`PolicyConfigError` for
    a bad reservation: a negative count, zero (the kubelet's manager refuses the static policy
    without reserved CPUs; pass ``allow_no_reservation=True`` to accept it as the kubelet's
    policy object itself does), an explicit list whose size differs from the count, or reserved
    CPUs absent from the topology.
    """

    name = POLICY_STATIC
    #: the Topology Manager affinity's NUMA node count is the floor of the distributed take
    #: (kubernetes PR #139456, merged for v1.38, fixing #139430); False: the kubelet
    #: v1.37.2's take, which may shrink the affinity (the differential's evidence that a
    #: difference is this fix's alone, tests/differential)
    affinity_floor: bool = True
    #: under strict-cpu-reservation a take that would leave the shared pool empty is refused
    #: (kubernetes #141196, as the open PR #141197 proposes); False: the kubelet v1.37.2's
    #: take, which gives the last CPU away (the differential's evidence, tests/differential)
    strict_keeps_last_cpu: bool = True

    def __init__(
        self,
        topology: CPUTopology,
        num_reserved: int,
        reserved: CPUSet | None = None,
        options: StaticPolicyOptions | Mapping[str, Any] | None = None,
        topology_manager_policy: str = "none",
        feature_gates: Mapping[str, bool] | None = None,
        *,
        allow_no_reservation: bool = False,
    ) -> None:
        if isinstance(options, StaticPolicyOptions):
            opts = options
        else:
            opts = StaticPolicyOptions.parse(options, feature_gates)
        validate_static_policy_options(opts, topology, topology_manager_policy)
        self.topology = topology
        self.options = opts
        self.topology_manager_policy = topology_manager_policy
        self.cpu_group_size = topology.cpus_per_core()
        self._cpus_to_reuse: dict[str, CPUSet] = {}
        # the takes prepared by take_ahead for the last AHEAD_KEPT free sets: (free CPUs'
        # mask, the socket-combo switch) -> {count: CPUs}, oldest first; and the last two
        # counts the mask path was asked for
        self._ahead: dict[tuple[int, bool], dict[int, CPUSet | None]] = {}
        self._recent_counts: tuple[int, ...] = ()

        if num_reserved < 0:
            raise PolicyConfigError(
                f"[cpumanager] negative number of reserved CPUs: {num_reserved}"
            )
        if num_reserved == 0 and not allow_no_reservation:
            raise PolicyConfigError(
                "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu "
                "to be greater than zero"
            )
        all_cpus = topology.cpus()
        if reserved is not None and len(reserved) > 0:
            chosen = CPUSet(reserved)
        else:
            # takeByTopology from all CPUs; like the kubelet, a failed take leaves nothing
            # reserved and the size check below reports it
            try:
                chosen = take_by_topology(topology, all_cpus, num_reserved, opts)
            except CPUManagerError:
                chosen = CPUSet()
        if len(chosen) != num_reserved:
            raise PolicyConfigError(
                f"[cpumanager] unable to reserve the required amount of CPUs "
                f"(size of {chosen} did not equal {num_reserved})"
            )
        outside = chosen - all_cpus
        if outside:
            raise PolicyConfigError(
                "[cpumanager] unable to build the reserved physical CPUs from the reserved set: "
                f"cpus {outside} are not in the topology"
            )
        physical: set[int] = set()
        for cpu in chosen:
            physical |= topology.cpus_in_cores([topology.details[cpu].core])
        self.reserved_cpus: CPUSet = chosen
        self.reserved_physical_cpus: CPUSet = CPUSet(physical)

    # ---- pools ------------------------------------------------------------------------------
    def allocatable_cpus(self) -> CPUSet:
        """All CPUs that may ever be allocated exclusively: topology minus reserved."""
        return self.topology.cpus() - self.reserved_cpus

    def available_cpus(self, state: CPUManagerState) -> CPUSet:
        """Free CPUs for exclusive allocation now: shared pool minus reserved."""
        return state.default_set - self.reserved_cpus

    def available_physical_cpus(self, state: CPUManagerState) -> CPUSet:
        """Shared pool minus the whole cores of the reserved CPUs (full-pcpus-only)."""
        return state.default_set - self.reserved_physical_cpus

    def shared_pool(self, state: CPUManagerState) -> CPUSet:
        """Where containers without exclusive CPUs run: the state's default set (it already
        excludes the reserved CPUs under strict-cpu-reservation)."""
        return state.default_set

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self, state: CPUManagerState) -> None:
        """Initialize an empty state (shared pool = all CPUs, minus reserved under
        strict-cpu-reservation) or validate a restored one (kubelet validateState).

        Raises :class:`InvalidStateError` when: the default set is empty but assignments exist;
        reserved CPUs are missing from the default set (or, under strict-cpu-reservation,
        present in it); an assignment overlaps the default set; or default set plus
        assignments differ from the topology's CPUs.
        """
        all_cpus = self.topology.cpus()
        if self.options.strict_cpu_reservation:
            all_cpus = all_cpus - self.reserved_cpus
        default = state.default_set
        if not default:
            if any(state.assignments.values()):
                raise InvalidStateError("default cpuset cannot be empty")
            state.default_set = all_cpus
            return
        if self.options.strict_cpu_reservation:
            inter = self.reserved_cpus & default
            if inter:
                raise InvalidStateError(
                    f'some of strictly reserved cpus: "{inter}" are present in '
                    f'defaultCpuSet: "{default}"'
                )
        elif (self.reserved_cpus & default) != self.reserved_cpus:
            raise InvalidStateError(
                f'not all reserved cpus: "{self.reserved_cpus}" are present in '
                f'defaultCpuSet: "{default}"'
            )
        for pod_uid, containers in state.assignments.items():
            for name, cpus in containers.items():
                if default & cpus:
                    raise InvalidStateError(
                        f'pod: {pod_uid}, container: {name} cpuset: "{cpus}" overlaps with '
                        f'default cpuset "{default}"'
                    )
        known = default | state.assigned_cpus()
        if known != all_cpus:
            raise InvalidStateError(
                f'current set of available CPUs "{all_cpus}" doesn\'t match with CPUs in '
                f'state "{known}"'
            )

    # ---- allocation -------------------------------------------------------------------------
    def _update_cpus_to_reuse(self, pod: Pod, container: ContainerSpec, cpus: CPUSet) -> None:
        for uid in list(self._cpus_to_reuse):
            if uid != pod.uid:
                del self._cpus_to_reuse[uid]
        current = self._cpus_to_reuse.get(pod.uid, _NONE)
        for init in pod.init_containers:
            if init.name == container.name:
                if init.restartable:
                    break
                self._cpus_to_reuse[pod.uid] = current | cpus
                return
        # (nothing to reuse minus anything is nothing: no set operation for most pods)
        self._cpus_to_reuse[pod.uid] = current - cpus if current else _NONE

    def reusable_cpus(self, pod_uid: str) -> CPUSet:
        """CPUs of the pod's finished init containers that its next containers may reuse."""
        return self._cpus_to_reuse.get(pod_uid, _NONE)

    def allocate(
        self,
        state: CPUManagerState,
        pod: Pod,
        container_name: str,
        hint: TopologyHint | None = None,
    ) -> CPUSet | None:
        """Give ``container_name`` of ``pod`` its exclusive CPUs, honouring the topology
        manager's ``hint`` (its NUMA nodes are tried first), and update ``state``.

        Returns the container's CPUs, or None when it gets none (not Guaranteed, non-integer
        request, unknown container). A container already in the state keeps its CPUs.
        Raises :class:`SMTAlignmentError` (full-pcpus-only) or :class:`NotEnoughCPUsError`;
        the state is unchanged on error.
        """
        container = pod.container(container_name)
        if container is None:
            return None
        num = guaranteed_cpus(pod, container)
        if num == 0:
            return None
        # a container already in the state (a restart of a crashed container, a plugin
        # restart) keeps its CPUs before any check of what is free: the kubelet admits a pod
        # once (kubernetes/kubernetes#129078 is the kubelet's own failure of this order)
        existing = state.get_cpuset(pod.uid, container_name)
        if existing is not None:
            self._update_cpus_to_reuse(pod, container, existing)
            return existing
        if self.options.full_pcpus_only:
            group = self.cpu_group_size
            if group and num % group != 0:
                raise SMTAlignmentError(num, group, 0, False)
            free_physical = len(self.available_physical_cpus(state))
            if num > free_physical:
                raise SMTAlignmentError(num, group, free_physical, True)
        numa = hint.numa if hint is not None else None
        cpus = self.allocate_cpus(state, num, numa, self._cpus_to_reuse.get(pod.uid, _NONE))
        state.take_from_default(cpus)
        state.set_cpuset(pod.uid, container_name, cpus)
        self._update_cpus_to_reuse(pod, container, cpus)
        return cpus

    def allocate_cpus(
        self,
        state: CPUManagerState,
        count: int,
        numa_affinity: Iterable[int] | None = None,
        reusable: CPUSet | None = None,
    ) -> CPUSet:
        """Pick ``count`` CPUs from the available CPUs plus ``reusable`` without changing the
        state (kubelet allocateCPUs): first as many as possible from the NUMA nodes of
        ``numa_affinity`` (whole sockets of those nodes under align-by-socket), the rest from
        everything left. Under distribute-cpus-across-numa the affinity's NUMA node count is
        the floor of the distributed take (kubernetes PR #139456).

        Raises :class:`NotEnoughCPUsError`, also (strict-cpu-reservation) when the take would
        leave the shared pool empty: the kubelet's own state validation refuses an empty
        default set with assignments ("default cpuset cannot be empty"), so such a state
        could be written but never restored (kubernetes #141196; the refusal is what the open
        PR #141197 proposes)."""
        if numa_affinity is None:
            # (the common case, no hint: the free CPUs as a mask, no set of them built)
            free = state.default_mask & ~self.reserved_cpus.mask
            if reusable:
                free |= reusable.mask
            result = self._take_mask(free, count) if count > 0 else CPUSet()
            if self.options.strict_cpu_reservation:  # (the only case it can refuse)
                self._keep_last_cpu(state, result, count, free.bit_count())
            return result
        allocatable = self.available_cpus(state)
        if reusable:
            allocatable = allocatable | reusable
        nodes = set(numa_affinity)
        aligned = self._aligned_cpus(nodes, allocatable)
        # the affinity's node count is the distributed take's floor (PR #139456)
        result = take_by_topology(
            self.topology, aligned, min(len(aligned), count), self.options,
            len(nodes) if self.affinity_floor else 0,
        )
        if count > len(result):
            rest = take_by_topology(  # (no copy of the free CPUs when none were taken)
                self.topology, allocatable - result if result else allocatable,
                count - len(result), self.options,
            )
            result = result | rest
        self._keep_last_cpu(state, result, count, len(allocatable))
        return result

    def _take_mask(self, free: int, count: int) -> CPUSet:
        """:func:`take_by_topology_mask` of the free CPUs' mask ``free`` (``count`` > 0), the
        answer :meth:`take_ahead` prepared when it was for these free CPUs and this count.
        Raises NotEnoughCPUsError as the take does."""
        recent = self._recent_counts
        if not recent or recent[0] != count:
            self._recent_counts = (count, *recent[:1])
        got = self._ahead.get((free, cpu_assignment.ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO))
        if got is not None:
            hit = got.get(count)
            if hit is not None:
                return hit
        return take_by_topology_mask(self.topology, free, count, self.options)

    def take_ahead(self, state: CPUManagerState) -> None:
        """Prepare the take of the next container without a NUMA affinity (every container
        under the Topology Manager's policy none, the shipped default): for the CPUs free now
        and each of the last two counts the mask path was asked for, the CPUs
        :meth:`allocate_cpus` would pick without reusable CPUs (a pure function of the free
        CPUs, the count and the options: kubelet cpu_assignment.go, takeByTopologyNUMAPacked
        / takeByTopologyNUMADistributed, v1.37.2). Called after an answer, before the next
        request is read: the next CreateContainer of such a size finds its take done (issue
        34: 5-10 us of a create of 1-4 CPUs on 256 CPUs, more for larger takes). Nothing is
        taken again while the free CPUs stay the same, nor for the last :data:`AHEAD_KEPT`
        free sets met (a pod deleted and one of its size created, the free CPUs of before
        come back); a count they cannot give is noted and left to the create, which raises
        the error. Changes no state."""
        free = state.default_mask & ~self.reserved_cpus.mask
        key = (free, cpu_assignment.ALIGN_BY_SOCKET_KEEPS_CHOSEN_COMBO)
        kept = self._ahead
        got = kept.get(key)
        if got is None:
            if len(kept) >= AHEAD_KEPT:
                del kept[next(iter(kept))]  # (the oldest)
            got = kept[key] = {}
        for count in self._recent_counts:
            if count in got:
                continue
            try:
                got[count] = take_by_topology_mask(self.topology, free, count, self.options)
            except CPUManagerError:
                got[count] = None  # (the create's own take raises it)

    def _keep_last_cpu(self, state: CPUManagerState, result: CPUSet, count: int,
                       available: int) -> None:
        """Under ``strict-cpu-reservation`` (with :attr:`strict_keeps_last_cpu`), refuse a
        ``result`` that would leave the default set empty. Raises NotEnoughCPUsError
        (requested ``count``, ``available - 1`` available)."""
        if (self.options.strict_cpu_reservation and self.strict_keeps_last_cpu
                and not state.default_mask & ~result.mask):
            raise NotEnoughCPUsError(count, max(0, available - 1))

    def _aligned_cpus(self, numa_affinity: Iterable[int], allocatable: CPUSet) -> CPUSet:
        nodes = set(numa_affinity)
        topo = self.topology
        if self.options.align_by_socket:
            sockets = {i.socket for i in topo.details.values() if i.numa in nodes}
            return allocatable & topo.cpus_in_sockets(sockets)
        return allocatable & topo.cpus_in_numa_nodes(nodes)

    def remove_container(self, state: CPUManagerState, pod_uid: str, container_name: str) -> None:
        """Release the container's exclusive CPUs to the shared pool, except those still used
        by another container of the same pod (reused init-container CPUs)."""
        cpus = state.get_cpuset(pod_uid, container_name)
        if cpus is None:
            return
        in_use: set[int] = set()
        for name, other in state.assignments.get(pod_uid, {}).items():
            if name != container_name:
                in_use |= other
        state.delete(pod_uid, container_name)
        state.give_to_default(cpus - in_use if in_use else cpus)

    # ---- topology hints ---------------------------------------------------------------------
    def get_topology_hints(
        self, state: CPUManagerState, pod: Pod, container_name: str
    ) -> list[TopologyHint] | None:
        """NUMA hints for one container (kubelet GetTopologyHints, resource "cpu").

        None = no preference (no exclusive CPUs requested); ``[]`` = cannot be satisfied
        (e.g. already allocated with a different size). An already allocated container gets
        the hints of its current CPUs.
        """
        container = pod.container(container_name)
        if container is None:
            return None
        requested = guaranteed_cpus(pod, container)
        if requested == 0:
            return None
        allocated = state.get_cpuset(pod.uid, container_name)
        if allocated is not None:
            if len(allocated) != requested:
                return []
            return self.generate_hints(allocated, CPUSet(), requested)
        return self.generate_hints(
            self.available_cpus(state), self.reusable_cpus(pod.uid), requested
        )

    def get_pod_topology_hints(self, state: CPUManagerState, pod: Pod) -> list[TopologyHint] | None:
        """NUMA hints for the whole pod (kubelet GetPodTopologyHints, pod scope)."""
        requested = pod_guaranteed_cpus(pod)
        if requested == 0:
            return None
        assigned: set[int] = set()
        for c in pod.init_containers + pod.containers:
            allocated = state.get_cpuset(pod.uid, c.name)
            if allocated is None:
                continue
            if len(allocated) != guaranteed_cpus(pod, c):
                return []
            assigned |= allocated
        if len(assigned) == requested:
            return self.generate_hints(CPUSet(assigned), CPUSet(), requested)
        reusable = self.reusable_cpus(pod.uid) | assigned
        return self.generate_hints(self.available_cpus(state), reusable, requested)

    def generate_hints(
        self, available: CPUSet, reusable: CPUSet, request: int
    ) -> list[TopologyHint] | MaskFamily:
        """One hint per NUMA node combination holding all ``reusable`` CPUs and at least
        ``request`` CPUs of ``reusable`` + ``available``; preferred are those of the minimal
        size that could hold the request on an empty machine (kubelet
        generateCPUTopologyHints), or, under align-by-socket, those spanning the minimal number
        of sockets. Order: by size, then node ids.

        The kubelet visits every combination (2**16 - 1 on a 16-node machine); here the
        minimal size comes from the nodes' sizes (a combination of k nodes can hold the
        request on an empty machine iff the k largest can), only combinations that hold the
        reusable CPUs' nodes are visited, and each hint is made once (issue 34: 768 CPUs, 16
        NUMA nodes). Same hints, same order: :meth:`_generate_hints_reference` is the
        literal loop, tests/unit/test_cpu_hints_fast.py compares them.

        The hints come as a :class:`MaskFamily` (a sequence of the same hints, listed on first
        use), so the Topology Manager's merge can work on the description (int bitmasks)
        instead of 65,535 hints; ``[]`` when no combination holds the request."""
        topo = self.topology
        nodes = sorted(topo.numa_nodes())
        per_node_total = {n: 0 for n in nodes}
        for info in topo.details.values():
            per_node_total[info.numa] += 1
        per_node_avail = {n: 0 for n in nodes}
        details = topo.details
        for c in available:
            info = details.get(c)
            if info is not None:
                per_node_avail[info.numa] += 1
        reusable_nodes = set()
        for c in reusable:
            info = details.get(c)
            reusable_nodes.add(info.numa if info is not None else None)

        min_size, reach = len(nodes), 0
        for k, total in enumerate(sorted(per_node_total.values(), reverse=True), 1):
            reach += total
            if reach >= request:
                min_size = min(k, min_size)
                break
        if not reusable_nodes <= per_node_avail.keys():
            return []  # a reusable CPU off every node (or on none listed): no combination
        # supersets of the required nodes, in the order of the full combinations: two sets
        # with the same required nodes compare as their other nodes do
        required = tuple(sorted(reusable_nodes))
        free = [n for n in nodes if n not in reusable_nodes]
        short = request - len(reusable) - sum(per_node_avail[n] for n in required)
        if not nodes or (short > 0 and sum(per_node_avail[n] for n in free) < short):
            return []  # not even every node together holds the request
        aligned = (functools.partial(self._socket_aligned, min_size=min_size)
                   if self.options.align_by_socket else None)
        return MaskFamily(nodes, required, per_node_avail, short, min_size, aligned)

    def _generate_hints_reference(
        self, available: CPUSet, reusable: CPUSet, request: int
    ) -> list[TopologyHint]:
        """:meth:`generate_hints` as the kubelet's loop reads (generateCPUTopologyHints): every
        combination visited. For the tests."""
        topo = self.topology
        nodes = sorted(topo.numa_nodes())
        per_node_total = {n: 0 for n in nodes}
        for info in topo.details.values():
            per_node_total[info.numa] += 1
        per_node_avail = {n: 0 for n in nodes}
        for c in available:
            info = topo.details.get(c)
            if info is not None:
                per_node_avail[info.numa] += 1
        reusable_nodes = set()
        for c in reusable:
            info = topo.details.get(c)
            reusable_nodes.add(info.numa if info is not None else None)

        min_size = len(nodes)
        hints: list[TopologyHint] = []
        for size in range(1, len(nodes) + 1):
            for combo in itertools.combinations(nodes, size):
                if sum(per_node_total[n] for n in combo) >= request and size < min_size:
                    min_size = size
                if not reusable_nodes <= set(combo):
                    continue
                matching = len(reusable) + sum(per_node_avail[n] for n in combo)
                if matching < request:
                    continue
                hints.append(TopologyHint(frozenset(combo), False))
        out: list[TopologyHint] = []
        for h in hints:
            assert h.numa is not None
            preferred = len(h.numa) == min_size
            if self.options.align_by_socket and self._socket_aligned(h.numa, min_size):
                preferred = True
            out.append(TopologyHint(h.numa, preferred))
        return out

    def _socket_aligned(self, numa: frozenset[int], min_size: int) -> bool:
        topo = self.topology
        if topo.num_sockets == 0:
            return False
        per_socket = topo.num_numa_nodes // topo.num_sockets
        if per_socket == 0:
            return False
        min_sockets = (min_size + per_socket - 1) // per_socket
        sockets = {i.socket for i in topo.details.values() if i.numa in numa}
        return len(sockets) == min_sockets
