"""The reconfiguration plan: every running container's cpuset and mems under a new config.

Pure (no I/O): in, the machine, the old and the new :class:`~nri_cpumgr.config.Config` and
the running containers as the plugin tracks them (container id ->
:class:`~nri_cpumgr.cm.records.Tracked`, in the order they were admitted); out, a
:class:`ReconfigurationPlan`. The managers are the plugin's own, built for the new config by
:mod:`nri_cpumgr.managers` on a fresh state, and driven as the plugin's Synchronize drives
them (container by container, in admission order), with one rule added, the **minimal
move**:

1. an exclusive container keeps its CPUs when they are still valid under the new config:
   none of them reserved (``reservedSystemCPUs`` / ``strict-cpu-reservation``), the new
   options' rules hold (``full-pcpus-only``: whole physical cores, none shared with a
   reserved CPU), the request is still that many CPUs, and the new Topology Manager admits
   the container on them (its CPU hints are then those of the CPUs it holds, as the
   kubelet's GetTopologyHints gives for an existing assignment: ``single-numa-node`` refuses
   CPUs over two NUMA nodes when one would do). Preference options
   (``distribute-cpus-across-numa``, ``align-by-socket``, ``prefer-align-cpus-by-uncorecache``,
   ``distribute-cpus-across-cores``) move nothing: they steer new allocations only;
2. then every other container is admitted in the order it was first admitted: an exclusive
   container that must move gets the CPUs the kubelet's take
   (kubelet cpu_assignment.go takeByTopology, v1.37.2) gives it under the Topology
   Manager's hint, from what is free; a Guaranteed container under ``none -> static`` gets
   its exclusive CPUs the same way; every shared container follows the new shared pool;
3. a container the new config would refuse (not enough CPUs, SMT alignment, topology
   affinity, memory) keeps running on the shared pool and is listed in
   :attr:`ReconfigurationPlan.refused` with the kubelet's error text: the kubelet itself
   would not start with the new config until the node is drained and its state files
   removed, and would then reject the pod at admission with that error.

When no exclusive CPUs are kept (``none -> static``, or every exclusive container had to
move), the plan is what a fresh plugin under the new config decides for the same running
containers in the same order: the property test tests/unit/test_reconfigure.py checks it over
the differential's scenario generator.

:meth:`ReconfigurationPlan.steps` orders the updates so that no CPU is used by two
containers that must not share it while they are applied: shared containers first shrink to
what the old and the new shared pool have in common, exclusive containers move (one whose
new CPUs another still holds waits for it), then shared containers take the new pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_cpumgr.cm.container_manager import AdmissionError, ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.memorymanager.state import MemoryState
from nri_cpumgr.cm.podresources.gates import pod_level_enabled
from nri_cpumgr.cm.podresources.manager import POD_ENTRY, takes_pod_pool
from nri_cpumgr.cm.records import Tracked
from nri_cpumgr.config import Config
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.managers import (
    build_container_manager,
    build_memory_manager,
    build_policy,
    build_topology_manager,
)
from nri_cpumgr.topology import Machine

#: the config keys that change decisions (KubeletConfiguration names); a change of any other
#: key needs no plan
DECISION_KEYS = (
    "cpuManagerPolicy", "cpuManagerPolicyOptions", "reservedSystemCPUs", "kubeReserved",
    "systemReserved", "evictionHard", "featureGates", "topologyManagerPolicy",
    "topologyManagerScope", "topologyManagerPolicyOptions", "memoryManagerPolicy",
    "reservedMemory", "alignMemoryWithExclusiveCPUs",
)

#: what the kubelet does with a changed CPU or memory manager config (kubelet
#: cpumanager state_checkpoint.go / memorymanager: "configured policy ... differs from state
#: checkpoint ... please drain this node and delete the CPU manager checkpoint file")
KUBELET_WOULD = (
    "the kubelet would not start with this config until the node is drained and "
    "cpu_manager_state/memory_manager_state are deleted; it would then reject the pod at "
    "admission with this error")

# actions
KEEP, MOVE, SHARED, UNPIN, REFUSED = "keep", "move", "shared", "unpin", "refused"
POD_POOL = "pod-pool"


@dataclass(frozen=True, slots=True)
class ContainerMove:
    """One running container under the plan. ``action``: ``keep`` (exclusive CPUs kept),
    ``move`` (exclusive CPUs elsewhere, or newly exclusive), ``shared`` (follows the shared
    pool), ``pod-pool`` (follows its pod's pool: pod-level resource managers), ``unpin``
    (no pinning under the new config: every CPU), ``refused`` (the new
    config would refuse it: it runs on the shared pool). ``cpus_before`` of a container
    that was not pinned (policy none) is every CPU; ``mems_*`` None: left alone."""

    id: str
    pod: str
    pod_uid: str
    container: str
    qos: str
    action: str
    exclusive_before: bool
    exclusive_after: bool
    cpus_before: CPUSet | None
    cpus_after: CPUSet
    mems_before: CPUSet | None
    mems_after: CPUSet | None
    reason: str = ""
    #: the CFS quota to set (microseconds per period): ``-1`` for a container that becomes
    #: exclusive (no quota on exclusive CPUs), its limit's quota for one that stops being
    #: exclusive (kubelet cm/helpers_linux.go MilliCPUToQuota); None: left alone
    quota_after: int | None = None

    @property
    def changed(self) -> bool:
        """The container's cpuset, mems or CFS quota must be updated."""
        return self.cpus_before != self.cpus_after or self.quota_after is not None or (
            self.mems_after is not None and self.mems_before != self.mems_after)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "pod": self.pod, "podUID": self.pod_uid,
            "container": self.container, "qos": self.qos, "action": self.action,
            "changed": self.changed,
            "exclusiveBefore": self.exclusive_before, "exclusiveAfter": self.exclusive_after,
            "cpusBefore": _text(self.cpus_before), "cpusAfter": str(self.cpus_after),
            "memsBefore": _text(self.mems_before), "memsAfter": _text(self.mems_after),
            "reason": self.reason, "quotaAfter": self.quota_after,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ContainerMove:
        """Raises ValueError (KeyError, TypeError) for another shape."""
        return cls(
            str(doc["id"]), str(doc["pod"]), str(doc["podUID"]), str(doc["container"]),
            str(doc["qos"]), str(doc["action"]), bool(doc["exclusiveBefore"]),
            bool(doc["exclusiveAfter"]), _parse(doc["cpusBefore"]),
            CPUSet.parse(doc["cpusAfter"]), _parse(doc["memsBefore"]),
            _parse(doc["memsAfter"]), str(doc.get("reason", "")),
            None if doc.get("quotaAfter") is None else int(doc["quotaAfter"]))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A running container the new config would refuse: ``error`` is the kubelet's
    admission text (``"<Reason>: <message>"``); it keeps running on the shared pool."""

    id: str
    pod: str
    container: str
    error: str
    kubelet: str = KUBELET_WOULD

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pod": self.pod, "container": self.container,
                "error": self.error, "kubelet": self.kubelet}


@dataclass(slots=True)
class ReconfigurationPlan:
    """The plan (see the module docstring). ``changes``: config key -> (old, new) values;
    ``manager``: the new config's container manager holding the planned state (the daemon
    serves with it once the plan is applied)."""

    changes: dict[str, tuple[Any, Any]]
    policy_before: str
    policy_after: str
    reserved_before: CPUSet
    reserved_after: CPUSet
    shared_pool_before: CPUSet | None
    shared_pool_after: CPUSet
    containers: list[ContainerMove]
    refused: list[Refusal]
    manager: ContainerManager | None = field(default=None, repr=False)

    @property
    def moved(self) -> list[ContainerMove]:
        """The containers whose cpuset or mems change."""
        return [c for c in self.containers if c.changed]

    def steps(self) -> list[tuple[str, ContainerMove, CPUSet]]:
        """The updates in a safe order: ``(phase, container, cpus to set)``, phases
        ``shrink`` (shared containers onto the old and the new pool's common CPUs, when
        the pool loses CPUs), ``exclusive`` (exclusive CPUs kept elsewhere or given up; a
        container whose new CPUs another container still holds comes after it; in a cycle,
        the first of it goes first), ``pool`` (shared containers onto the new pool)."""
        moved = self.moved
        out: list[tuple[str, ContainerMove, CPUSet]] = []
        # (a container on its pod's pool goes there after the exclusive moves, never
        # through the node's shared pool)
        shared = [c for c in moved if not c.exclusive_after and c.action != POD_POOL]
        pod_pool = [c for c in moved if not c.exclusive_after and c.action == POD_POOL]
        exclusive = [c for c in moved if c.exclusive_after]
        before = self.shared_pool_before
        if before is None and exclusive:
            # unpinned before (policy none: every CPU): straight onto the new pool, first
            out += [("shrink", c, c.cpus_after) for c in shared]
            shared = []
        elif before is not None and exclusive:
            common = before & self.shared_pool_after
            if common and common != before:
                out += [("shrink", c, common) for c in shared
                        if c.cpus_before is not None and c.cpus_before - common]
        waiting = list(exclusive)
        held = {c.id: c.cpus_before or CPUSet() for c in moved if c.exclusive_before}
        while waiting:
            free = (i for i, c in enumerate(waiting)
                    if not any(c.cpus_after & cpus for cid, cpus in held.items() if cid != c.id))
            c = waiting.pop(next(free, 0))  # (in a cycle, the first goes first)
            held.pop(c.id, None)
            out.append(("exclusive", c, c.cpus_after))
        out += [("pool", c, c.cpus_after) for c in shared + pod_pool]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "changes": {k: {"old": o, "new": n} for k, (o, n) in self.changes.items()},
            "policyBefore": self.policy_before, "policyAfter": self.policy_after,
            "reservedBefore": str(self.reserved_before),
            "reservedAfter": str(self.reserved_after),
            "sharedPoolBefore": _text(self.shared_pool_before),
            "sharedPoolAfter": str(self.shared_pool_after),
            "containers": [c.to_json() for c in self.containers],
            "refused": [r.to_json() for r in self.refused],
            "summary": self.summary(),
        }

    def summary(self) -> dict[str, int]:
        """``containers``, ``changed``, ``refused`` (the containers the new config would
        refuse, each once), then the number of containers per other action (``keep``,
        ``move``, ``shared``, ``unpin``): the counts the text, ``--json`` and the daemon's
        reconfiguration log line print."""
        counts: dict[str, int] = {"containers": len(self.containers),
                                  "changed": len(self.moved), "refused": len(self.refused)}
        for c in self.containers:
            if c.action != REFUSED:  # (each is a Refusal, counted above)
                counts[c.action] = counts.get(c.action, 0) + 1
        return counts


def _text(c: CPUSet | None) -> str | None:
    return None if c is None else str(c)


def _parse(v: Any) -> CPUSet | None:
    return None if v is None else CPUSet.parse(str(v))


def config_changes(old: Config, new: Config) -> dict[str, tuple[Any, Any]]:
    """The decision keys (:data:`DECISION_KEYS`) whose value differs, old and new values as
    plain data."""
    a, b = decision_values(old), decision_values(new)
    return {k: (a[k], b[k]) for k in DECISION_KEYS if a[k] != b[k]}


def decision_values(config: Config) -> dict[str, Any]:
    """The decision keys (:data:`DECISION_KEYS`) of ``config`` as plain (JSON-able) data."""
    return {k: _plain(getattr(config, k)) for k in DECISION_KEYS}


def _plain(v: Any) -> Any:
    """A config value as JSON-able data (reservedMemory's entries are dataclasses)."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _plain(dataclasses.asdict(v))
    return v


def invalid_cpus(policy: StaticPolicy, state: CPUManagerState, cpus: CPUSet,
                 requested: int) -> str | None:
    """Why exclusive ``cpus`` (``requested`` CPUs) cannot be kept under ``policy`` given
    what ``state`` has left, or None when they can (the rules of the module docstring, step
    1, but the Topology Manager's). Raises nothing."""
    if requested and requested != len(cpus):
        return f"holds {len(cpus)} CPU(s) but requests {requested}"
    reserved = cpus & policy.reserved_cpus
    if reserved:
        return f"CPU(s) {reserved} became reserved (reservedSystemCPUs)"
    outside = cpus - policy.topology.cpus()
    if outside:
        return f"CPU(s) {outside} are not on this machine"
    taken = cpus - policy.available_cpus(state)
    if taken:
        return f"CPU(s) {taken} are kept by another container"
    if policy.options.full_pcpus_only:
        topo = policy.topology
        cores = {topo.details[c].core for c in cpus}
        whole = topo.cpus_in_cores(cores)
        if whole != cpus:
            return (f"CPUs {cpus} are not whole physical cores (full-pcpus-only: cores "
                    f"{whole})")
        shared = cpus & policy.reserved_physical_cpus
        if shared:
            return f"CPU(s) {shared} share a physical core with reserved CPUs (full-pcpus-only)"
    return None


def pod_pools_of(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, CPUSet]:
    """The pod-level pods' pools (bubbles) of a CPU manager state's ``entries`` (pod uid ->
    container name -> CPUs, as CPUSet or cpulist text): pod uid -> the bubble's CPUs, recorded
    under the pod's pseudo entry (nri_cpumgr.cm.podresources.POD_ENTRY). Raises ValueError
    on a malformed cpulist."""
    out: dict[str, CPUSet] = {}
    for uid, conts in entries.items():
        cpus = conts.get(POD_ENTRY)
        if cpus:
            out[uid] = cpus if isinstance(cpus, CPUSet) else CPUSet.parse(cpus)
    return out


def _keeps_pod_pools(old: Config, new: Config) -> bool:
    """Whether a pod-level pod's pool may stay where it is under ``new``: the pod-level
    resource managers still on in pod scope and the Topology Manager deciding as before (a
    kept pool is not admitted again through the Topology Manager)."""
    same_tm = all(getattr(old, k) == getattr(new, k) for k in (
        "topologyManagerPolicy", "topologyManagerScope", "topologyManagerPolicyOptions"))
    return (same_tm and new.topologyManagerScope == "pod"
            and pod_level_enabled(dict(new.featureGates)))


def plan_reconfiguration(
    machine: Machine,
    old: Config,
    new: Config,
    containers: Mapping[str, Tracked],
    shared_pool_before: CPUSet | None = None,
    reserved_before: CPUSet | None = None,
    memory_state: Mapping[str, Any] | None = None,
    pod_pools: Mapping[str, CPUSet] | None = None,
) -> ReconfigurationPlan:
    """The plan from ``old`` to ``new`` for ``containers`` (container id -> tracked record,
    in admission order; stopped ones are left out of the plan: their held CPUs are given up
    as a restart under the new config would re-admit them). ``shared_pool_before``: the old
    shared pool (None under policy none); ``reserved_before``: the old reserved CPUs;
    ``memory_state``: the old Memory Manager's state (its checkpoint body; None under
    ``memoryManagerPolicy: None``): under Static -> Static a container keeps its memory
    blocks with its CPUs (when the old state fits the new reservations). ``pod_pools``: the
    pod-level pods' pools (pod uid -> CPUs, :func:`pod_pools_of`): a pool whose CPUs stay
    valid is kept with its pod's slices inside it (the pod-level managers on, the Topology
    Manager unchanged); else the pod is admitted again, pool and slices.

    Raises :class:`~nri_cpumgr.config.ConfigError` when ``new`` cannot be used on this
    machine (the same checks as at start-up)."""
    policy = build_policy(new, machine)
    tm = build_topology_manager(new, machine)
    memory = build_memory_manager(new, machine)
    state = CPUManagerState(assignments={}, default_set=CPUSet())
    policy.start(state)
    if memory is not None:
        try:
            memory.start(MemoryState.from_dict(memory_state) if memory_state
                         else MemoryState())
        except Exception:  # (the new reservations do not fit the old state: fresh)
            memory.start(MemoryState())
    static = isinstance(policy, StaticPolicy)
    running = [(cid, t) for cid, t in containers.items() if not t.stopped]
    reasons: dict[str, str] = {}
    seeded: list[tuple[str, Tracked]] = []
    # 0. the pod-level pods' pools that stay valid, before the containers' CPUs
    kept_pools: dict[str, CPUSet] = {}
    moved_pools: dict[str, str] = {}
    live_pods = {t.info.pod_uid for _, t in running}
    for uid, cpus in (pod_pools or {}).items():
        if uid not in live_pods or not cpus:
            continue
        if not static:
            moved_pools[uid] = "policy none: no pod pools"
            continue
        assert isinstance(policy, StaticPolicy)
        why = (invalid_cpus(policy, state, cpus, 0) if _keeps_pod_pools(old, new) else
               "the pod-level resource managers or the Topology Manager change")
        if why is not None:
            moved_pools[uid] = f"its pod's pool {cpus} is admitted again: {why}"
            continue
        state.set_cpuset(uid, POD_ENTRY, cpus)
        state.default_set = state.default_set - cpus
        kept_pools[uid] = cpus
    in_pool: dict[str, CPUSet] = {}  # pod uid -> its slices seeded so far
    pod_level = pod_level_enabled(dict(new.featureGates))
    # 1. the exclusive CPUs that stay valid are seeded into the new state
    for cid, t in running:
        if not (t.exclusive and t.applied):
            continue
        if not static:
            reasons[cid] = "policy none: no exclusive CPUs"
            continue
        assert isinstance(policy, StaticPolicy)
        uid = t.info.pod_uid
        if uid in moved_pools:
            reasons[cid] = moved_pools[uid]
            continue
        if uid in kept_pools:  # a slice of a kept pool stays when it is one
            taken = in_pool.get(uid, CPUSet())
            requested = t.info.resources.integer_cpus
            if (t.applied <= kept_pools[uid] and not (t.applied & taken)
                    and (not requested or requested == len(t.applied))):
                state.set_cpuset(uid, t.info.name, t.applied)
                in_pool[uid] = taken | t.applied
                seeded.append((cid, t))
            else:
                reasons[cid] = f"not a slice of its pod's pool {kept_pools[uid]}"
            continue
        if pod_level and takes_pod_pool(t.info, new.topologyManagerScope, static):
            reasons[cid] = "its pod takes a pod pool under the new config (pod-level resources)"
            continue
        why = invalid_cpus(policy, state, t.applied, t.info.resources.integer_cpus)
        if why is not None:
            reasons[cid] = why
            continue
        state.set_cpuset(t.info.pod_uid, t.info.name, t.applied)
        state.default_set = state.default_set - t.applied
        seeded.append((cid, t))
    if memory is not None:  # memory blocks stay with the CPUs that stay (and the shared)
        keep = {t.info.key for cid, t in running
                if not (t.exclusive and t.applied) or (cid, t) in seeded}
        keep |= {(uid, POD_ENTRY) for uid in kept_pools}
        for uid, conts in list(memory.state.get_memory_assignments().items()):
            for name in list(conts):
                if (uid, name) not in keep:
                    memory.policy.remove_container(memory.state, uid, name)
    m = build_container_manager(new, policy, state, tm, memory)
    m.whole_pod_admission = False  # the running pods exist: container by container
    # 2. the seeded are admitted first: the Topology Manager may refuse their CPUs
    decided: dict[str, str | None] = {}  # id -> None (admitted) or the refusal text
    for cid, t in seeded:
        try:
            m.admit(t.info)
            decided[cid] = None
        except AdmissionError as e:
            policy.remove_container(state, t.info.pod_uid, t.info.name)
            if memory is not None:
                memory.policy.remove_container(memory.state, *t.info.key)
            reasons[cid] = (f"the Topology Manager ({new.topologyManagerPolicy}, "
                            f"{new.topologyManagerScope} scope) refuses its CPUs: {e}")
            continue
        nt = m.containers.get(cid)
        if nt is None or not nt.exclusive:  # not exclusive under the new rules: its seeded
            # CPUs go back before the others are admitted
            if state.get_cpuset(t.info.pod_uid, t.info.name) is not None:
                policy.remove_container(state, t.info.pod_uid, t.info.name)
    # 3. everything else in admission order, as a fresh plugin would admit it
    for cid, t in running:
        if cid in decided:
            continue
        try:
            m.admit(t.info)
            decided[cid] = None
        except AdmissionError as e:
            decided[cid] = str(e)
            if memory is not None:  # (blocks it kept from the old state)
                memory.policy.remove_container(memory.state, *t.info.key)
    pool = m.shared_pool() if m.static else machine.topology.cpus()
    every_cpu = machine.topology.cpus()
    every_node = machine.topology.numa_nodes()
    moves: list[ContainerMove] = []
    refused: list[Refusal] = []
    for cid, t in running:
        info = t.info
        before = t.applied if t.exclusive or (t.applied is not None and pod_pools
                                              and info.pod_uid in pod_pools) else (
            shared_pool_before if shared_pool_before is not None else every_cpu)
        err = decided[cid]
        nt = m.containers.get(cid)
        mems_after: CPUSet | None = None
        if err is not None or nt is None:
            refused.append(Refusal(cid, f"{info.namespace}/{info.pod_name}", info.name,
                                   err or "not admitted"))
            action, excl, after = REFUSED, False, pool
            reason = "the new config refuses it: it runs on the shared pool"
        elif nt.exclusive and nt.applied:
            excl, after = True, nt.applied
            mems_after = nt.mems
            if t.exclusive and t.applied == after:
                action, reason = KEEP, ""
            else:
                action = MOVE
                reason = reasons.get(cid) or (
                    "exclusive CPUs under the static policy" if not t.exclusive else "")
        else:
            excl = False
            mems_after = nt.mems
            after = pool if (m.static and nt.shared) else (
                nt.applied if nt.applied is not None else every_cpu)
            action = SHARED if m.static and nt.shared else UNPIN
            if m.static and not nt.shared and m.pod_level is not None \
                    and m.pod_level.bubble(info.pod_uid) is not None:
                action = POD_POOL
            reason = reasons.get(cid, "")
            if t.exclusive and not reason:
                reason = "no exclusive CPUs under the new config"
        if mems_after is None and t.mems is not None:
            mems_after = every_node  # was pinned, is not any more
        quota = None
        if excl and not t.exclusive:
            quota = -1
        elif t.exclusive and not excl:
            quota = limit_quota(info)
        moves.append(ContainerMove(
            cid, f"{info.namespace}/{info.pod_name}", info.pod_uid, info.name, str(info.qos),
            action, bool(t.exclusive), excl, before, after, t.mems, mems_after, reason,
            quota))
    return ReconfigurationPlan(
        changes=config_changes(old, new),
        policy_before=old.cpuManagerPolicy,
        policy_after=new.cpuManagerPolicy,
        reserved_before=reserved_before if reserved_before is not None else CPUSet(),
        reserved_after=getattr(policy, "reserved_cpus", CPUSet()),
        shared_pool_before=shared_pool_before,
        shared_pool_after=pool,
        containers=moves,
        refused=refused,
        manager=m,
    )


def limit_quota(info: Any) -> int | None:
    """The CFS quota of a container's CPU limit (microseconds per period; the kubelet's
    MilliCPUToQuota, cm/helpers_linux.go v1.37.2: limit x period / 1000, at least 1000), for
    a container leaving exclusive CPUs; None without a CPU limit."""
    r = info.resources
    milli = r.cpu_limit_milli or (r.integer_cpus * 1000)
    if not milli:
        return None
    period = r.cpu_period or 100000
    return max(1000, milli * period // 1000)


def format_reconfiguration(plan: ReconfigurationPlan) -> str:
    """The plan as text: what changes in the config, then one row per container (the
    changed ones first), then the refusals and the order of the updates."""
    lines = []
    if plan.changes:
        lines.append("config changes:")
        lines += [f"  {k}: {o!r} -> {n!r}" for k, (o, n) in plan.changes.items()]
    else:
        lines.append("config changes: none that change a decision")
    lines.append(f"cpuManagerPolicy {plan.policy_before} -> {plan.policy_after}; reserved "
                 f"{plan.reserved_before or '-'} -> {plan.reserved_after or '-'}; shared pool "
                 f"{_text(plan.shared_pool_before) or 'all CPUs'} -> {plan.shared_pool_after}")
    s = plan.summary()
    lines.append(", ".join(f"{k} {v}" for k, v in s.items()))
    lines.append("")
    hdr = ("POD", "CONTAINER", "ACTION", "CPUS BEFORE", "CPUS AFTER", "MEMS BEFORE",
           "MEMS AFTER")
    rows: list[tuple[str, ...] | str] = [hdr]
    for c in sorted(plan.containers, key=lambda c: (not c.changed, c.pod, c.container)):
        rows.append((c.pod, c.container, c.action + ("" if c.changed else " (unchanged)"),
                     _text(c.cpus_before) or "all", str(c.cpus_after),
                     _text(c.mems_before) or "-", _text(c.mems_after) or "-"))
        if c.reason:
            rows.append(f"    {c.reason}")
    table = [r for r in rows if isinstance(r, tuple)]
    widths = [max(len(r[i]) for r in table) for i in range(len(hdr))]
    for r in rows:
        lines.append(r if isinstance(r, str) else
                     "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    if plan.refused:
        lines += ["", "refused by the new config (they keep running on the shared pool):"]
        for r in plan.refused:
            lines.append(f"  {r.pod} {r.container}: {r.error}")
        lines.append(f"  ({KUBELET_WOULD})")
    steps = plan.steps()
    if steps:
        lines += ["", "updates, in order:"]
        lines += [f"  {n}. [{phase}] {c.pod} {c.container} -> cpus {cpus}"
                  + (f" mems {c.mems_after}" if c.mems_after is not None else "")
                  for n, (phase, c, cpus) in enumerate(steps, 1)]
    return "\n".join(lines) + "\n"
