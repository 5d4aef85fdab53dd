"""Building the resource managers from a config and a machine, and restoring their state.

One place for the plugin (nri_cpumgr.runtime.plugin) and the dry-run planner
(nri_cpumgr.planner): both get the same CPU policy, Topology Manager and Memory Manager, so a
plan is the plugin's answer. No transport here; the only I/O is reading a checkpoint in
:func:`restore_memory_state`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
from nri_cpumgr.cm.container_manager import ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cm.cpumanager.errors import InvalidPolicyOptionError
from nri_cpumgr.cm.cpumanager.policy_options import (
    ALL_OPTIONS,
    STRICT_CPU_RESERVATION,
    parse_bool,
)
from nri_cpumgr.cm.topologymanager import TopologyManager
from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.config.model import did_you_mean
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.topology import Machine

if TYPE_CHECKING:  # (imported where a Memory Manager is built: memoryManagerPolicy Static)
    from nri_cpumgr.cm.memorymanager.manager import MemoryManager

# the plugin's logger: these lines were always the plugin's
log = logging.getLogger("nri_cpumgr.plugin")


def check_reserved_cpus(config: Config, machine: Machine) -> None:
    """reservedSystemCPUs must name CPUs of this machine, and a reservation may not exceed
    the machine (the kubelet fails both, the second when the static policy is built:
    "unable to reserve the required amount of CPUs"; here the error names the key, for the
    start-up config and the runtime's alike).

    A reservation of every CPU is the kubelet's to decide (policy_static.go NewStaticPolicy
    and validateState, v1.37.2): it starts, the shared pool is every CPU (the reserved
    ones), every container runs there and each container asking for exclusive CPUs is
    refused by the CPU manager (not enough CPUs, or the Topology Manager's or SMT
    alignment's error first); so does the plugin, with a warning. Except under
    ``strict-cpu-reservation``: the kubelet's shared pool is then empty from the start, a
    state it cannot enforce (a shared container gets no cpuset at all and runs on the
    reserved CPUs; kubernetes #141196, open): refused here.
    Raises :class:`ConfigError`."""
    if config.cpuManagerPolicy != "static":
        return
    online = machine.topology.cpus()
    reserved = config.reserved_cpus()
    outside = reserved - online
    if outside:
        raise ConfigError(
            f"invalid config: reservedSystemCPUs {config.reservedSystemCPUs!r}: CPU(s) "
            f"{outside} not on this machine (CPUs {online})")
    count = len(reserved) if reserved else config.reserved_cpu_count()
    if count > len(online):
        raise ConfigError(
            f"invalid config: kubeReserved/systemReserved reserve {count} CPUs, the machine "
            f"has {len(online)}; reserve fewer")
    if count < len(online):
        return
    try:
        strict = parse_bool(config.cpuManagerPolicyOptions.get(STRICT_CPU_RESERVATION, "false"))
    except ValueError:
        return  # (the option's own check says so)
    if strict:
        raise ConfigError(
            f"invalid config: reservedSystemCPUs/kubeReserved/systemReserved reserve all "
            f"{len(online)} CPUs under strict-cpu-reservation: the shared pool would be "
            "empty (the kubelet then gives shared containers no cpuset at all, kubernetes "
            "#141196); reserve fewer")
    log.warning(
        "reservedSystemCPUs/kubeReserved/systemReserved reserve all %d CPUs: every container "
        "runs on them and every container asking for exclusive CPUs is refused, as the "
        "kubelet's static policy does", len(online))


def build_policy(config: Config, machine: Machine) -> StaticPolicy | NonePolicy:
    """The CPU policy the config names. Raises :class:`ConfigError` (one line) when the
    none policy is given options (kubelet NewNonePolicy) or the static policy cannot be
    built (no reservation, reserved CPUs not on this machine or all of them, bad option,
    reserved list vs count...)."""
    check_reserved_cpus(config, machine)
    if config.cpuManagerPolicy == "none":
        if config.cpuManagerPolicyOptions:
            # kubelet cpumanager policy_none.go NewNonePolicy, v1.37.2: options are refused
            opts = ", ".join(f"{k}: {v}" for k, v in sorted(
                config.cpuManagerPolicyOptions.items()))
            raise ConfigError(
                "invalid config: cpuManagerPolicyOptions: the none policy takes no options "
                f"(received unsupported options {opts}; the kubelet refuses them too)")
        return NonePolicy(machine.topology)
    reserved = config.reserved_cpus()
    count = config.reserved_cpu_count()
    try:
        return StaticPolicy(
            machine.topology,
            count,
            reserved if reserved else None,
            config.cpuManagerPolicyOptions,
            topology_manager_policy=config.topologyManagerPolicy,
            feature_gates=dict(config.featureGates),
        )
    except InvalidPolicyOptionError as e:
        hint = "" if e.option in ALL_OPTIONS else did_you_mean(e.option, ALL_OPTIONS)
        raise ConfigError(f"invalid config: cpuManagerPolicyOptions.{e.option}: {e}{hint}") \
            from None
    except Exception as e:
        raise ConfigError(f"invalid config: cpuManagerPolicy static: {e}") from None


def build_topology_manager(config: Config, machine: Machine) -> TopologyManager:
    """The Topology Manager the config names. Raises :class:`ConfigError`."""
    nodes = sorted(machine.numa_nodes) or sorted(machine.topology.numa_nodes())
    distances: dict[int, list[int]] = {}
    for n in nodes:
        info = machine.numa_nodes.get(n)
        if info is not None and info.distances:
            distances[n] = [info.distances.get(j, 0) for j in range(max(nodes) + 1)]
    try:
        return TopologyManager(
            config.topologyManagerPolicy,
            config.topologyManagerScope,
            config.topologyManagerPolicyOptions,
            numa_nodes=nodes,
            distances=distances or None,
            feature_gates=dict(config.featureGates),
        )
    except Exception as e:
        raise ConfigError(f"invalid config: topologyManagerPolicy: {e}") from None


def build_memory_manager(config: Config, machine: Machine) -> MemoryManager | None:
    """The Memory Manager for ``memoryManagerPolicy: Static`` (None for ``None``).
    Raises :class:`ConfigError` (reservedMemory must match the node's reserved memory)."""
    if config.memoryManagerPolicy == "None":
        return None
    from nri_cpumgr.cm.memorymanager.config import MemoryReservation, new_manager

    reserved = [MemoryReservation(r.numaNode, dict(r.limits)) for r in config.reservedMemory]
    # (the node's memory: a percentage evictionHard threshold is a share of it)
    capacity = sum(n.memory_bytes for n in machine.numa_nodes.values())
    try:
        node_reserved = config.node_allocatable_memory_reservation(capacity)
    except ValueError as e:
        raise ConfigError(f"invalid config: {e}") from None
    try:
        return new_manager("Static", machine, node_reserved, reserved)
    except Exception as e:
        from nri_cpumgr.cm.memorymanager.errors import (
            NoSystemReservedMemoryError,
            ReservedMemoryMismatchError,
        )

        hint = ""
        if isinstance(e, ReservedMemoryMismatchError | NoSystemReservedMemoryError):
            hint = ("; set reservedMemory (per NUMA node) so that, per resource, it adds up to "
                    "kubeReserved + systemReserved + evictionHard memory.available (here "
                    f"{node_reserved or 'none'}), as the "
                    "kubelet's own config must")
        raise ConfigError(f"invalid config: memoryManagerPolicy Static: {e}{hint}") from None


def restore_state(
    policy: StaticPolicy | NonePolicy, body: dict[str, Any] | None, path: Any = "",
    *, strict: bool = False,
) -> CPUManagerState:
    """CPU manager state from a checkpoint body (``None``: fresh), validated by the policy.

    Raises :class:`ConfigError` when the checkpoint was written by another policy: like the
    kubelet ("configured policy differs from state checkpoint"), the plugin refuses to start
    rather than silently drop the node's assignments. A state the policy rejects (it does
    not fit the topology or the reservation) is logged and rebuilt from Synchronize; with
    ``strict`` (``nri-cpumgr plan``, where there is no runtime to rebuild it from) it raises
    :class:`ConfigError` instead, naming ``path``.
    """
    state = CPUManagerState(assignments={}, default_set=CPUSet())
    name = "static" if isinstance(policy, StaticPolicy) else "none"
    if body and body.get("policyName") not in (None, name):
        raise ConfigError(
            f"checkpoint {path} was written by cpuManagerPolicy {body.get('policyName')!r} but "
            f"the config says {name!r}: start it with the checkpoint's policy and change the "
            f"policy in its config file while it runs (`nri-cpumgr plan --reconfigure NEW.yaml` "
            f"shows the moves first), or drain the node and remove the checkpoint (the kubelet "
            f"refuses the same and knows only the drain)"
        )
    if body:
        state.default_set = CPUSet.parse(body.get("defaultCpuSet", ""))
        state.assignments = {
            uid: {n: CPUSet.parse(c) for n, c in conts.items()}
            for uid, conts in body.get("entries", {}).items()
        }
    try:
        policy.start(state)
    except Exception as e:
        if strict:
            raise ConfigError(f"state {path} does not fit this machine and config: {e}") from None
        log.warning("checkpoint %s: state rejected by the policy (%s): rebuilding from the "
                    "runtime", path, e)
        state = CPUManagerState(assignments={}, default_set=CPUSet())
        policy.start(state)
    return state




def restore_memory_state(memory: MemoryManager, checkpoint: Checkpoint) -> None:
    """Start the Memory Manager on its checkpointed state, or fresh when there is none or
    it is corrupt or does not fit the machine."""
    from nri_cpumgr.cm.memorymanager.state import MemoryState

    try:
        body = checkpoint.load()
    except CheckpointError as e:
        log.error("%s; rebuilding the memory state from the runtime", e)
        body = None
    if body:
        try:
            memory.start(MemoryState.from_dict(body))
            return
        except Exception as e:
            log.warning("memory checkpoint rejected (%s): starting fresh", e)
    memory.start(MemoryState())


def build_container_manager(config: Config, policy: StaticPolicy | NonePolicy,
                            state: CPUManagerState, topology_manager: TopologyManager | None,
                            memory: MemoryManager | None) -> ContainerManager:
    """The container manager over the built managers, with the config's memory alignment,
    feature gates (pod-level resource managers, in-place resize) and Topology Manager scope:
    the one construction the plugin and the planner share."""
    return ContainerManager(
        policy,
        state,
        topology_manager=topology_manager,
        memory=memory,
        align_mems_with_cpus=config.alignMemoryWithExclusiveCPUs,
        feature_gates=dict(config.featureGates),
        topology_manager_scope=pod_level_scope(config),
    )


def pod_level_scope(config: Config) -> str:
    """The scope the pod-level resource managers follow: ``topologyManagerScope``, except
    under ``topologyManagerPolicy: none``, where the kubelet allocates container by container
    whatever the scope (topologymanager NewManager: "when policy is none, the scope is not
    relevant"; scope.go admitPolicyNone calls Allocate per container, never AllocatePod,
    v1.37.2): there a pod-level pod gets no pod-wide CPUs, its qualifying containers
    exclusive CPUs from the node (the container-scope rules)."""
    if config.topologyManagerPolicy == "none":
        return "container"
    return config.topologyManagerScope
