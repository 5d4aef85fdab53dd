"""Pod-level resource managers container by container (the runtime's view), pure.

The kubelet admits a whole pod (AllocatePod); the runtime shows us one container at a time.
So, with ``PodLevelResources`` + ``PodLevelResourceManagers`` on and the static CPU policy:

``topologyManagerScope: pod``, Guaranteed pod whose pod-level CPU request is a whole number:

* the pod's first container creation takes the **bubble**: the Topology Manager merges the
  providers' pod hints for the pod's totals (``pod.linux.pod_resources``: CPUs from the
  shares, memory and hugepage limits) and the CPU and Memory managers allocate them, recorded
  under the pseudo container :data:`POD_ENTRY` of the pod (so the checkpoint, the state
  validation and the release on pod removal need nothing new);
* a container that qualifies (:func:`qualifies`) takes an exclusive **slice** of the bubble's
  free CPUs (bubble minus the live slices), packed by topology; no CFS quota;
* every other container runs on the **pod shared pool** = bubble minus the live slices,
  isolated from the node's shared pool; when a later slice shrinks it, the pod's shared
  containers are moved in the same reply (:attr:`Decision.pod_updates`), so a sidecar never
  runs on the main container's CPUs;
* a slice of an exited container (a finished init container) goes back to the bubble when
  the pod's next container is created (the kubelet's reusable init-container CPUs); the
  bubble goes back to the node only when the pod sandbox stops or is removed (the docs'
  "persistent pool");
* refusals: a shared container with an empty pod shared pool, or a slice that would empty
  it while the pod has live shared containers: ``EmptyPodSharedPoolError`` with the
  kubelet's text; a slice larger than the free part of the bubble: ``NotEnoughCPUsError``.
  The kubelet refuses such pods at admission; we can refuse only the container that shows
  it (the others already run).

``topologyManagerScope: container`` (the hybrid model): no bubble; a container of a
Guaranteed pod gets exclusive CPUs from the node only when it qualifies itself; the others
run on the node's shared pool.

Where the runtime does not pass ``pod_resources`` the plugin says so once in its log and the
container is handled as before (per-container rules).
"""

from __future__ import annotations

import logging

from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology
from nri_cpumgr.cm.cpumanager.errors import CPUManagerError, NotEnoughCPUsError
from nri_cpumgr.cm.podresources.host import ContainerManagerView
from nri_cpumgr.cm.podresources.policy import (
    EMPTY_POD_SHARED_POOL,
    TEXT_NO_CPUS_FOR_SHARED,
    EmptyPodSharedPoolError,
    enforce_smt,
    text_no_memory_for_shared,
    validate_pod_scope,
    validate_pod_scope_memory,
)
from nri_cpumgr.cm.records import (
    POD_ENTRY,
    AdmissionError,
    Decision,
    Tracked,
    admission_text,
    kubelet_admission_text,
    memory_unsatisfiable_text,
)
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from nri_cpumgr.podmodel.spec import PodSpecFacts, qualifies_for_slice

log = logging.getLogger(__name__)

#: The kubelet's text when its pod scope refuses a pod-level pod (topologymanager
#: scope_pod.go admitUsingPodResources, PodLevelTopologyAffinityError, v1.37.2).
POD_SCOPE_REFUSAL = ("Pod Scope pod with pod-level resources failed admission under "
                     "pod-scope topology manager")

def takes_pod_pool(info: ContainerInfo, scope: str, static: bool) -> bool:
    """Whether ``info``'s pod is given a pod pool (bubble) under the pod-level resource
    managers in ``scope`` (``topologyManagerScope``) and the static policy (``static``): a
    Guaranteed pod with pod resources from the runtime, a pod-level spec (when known) and a
    whole number of CPUs (the conditions of :meth:`PodLevelManager.admit`; kubelet
    cpumanager policy_static.go allocatePodForAdd, v1.37.2). Pure."""
    if info.qos is not QOSClass.GUARANTEED or info.pod_resources is None:
        return False
    if info.pod_spec is not None and not info.pod_spec.pod_level:
        return False
    return static and scope == "pod" and bool(info.pod_resources.integer_cpus)


def qualifies(r: Resources) -> bool:
    """The container would be Guaranteed on its own: a whole CPU request equal to its CPU
    limit and a memory limit (NRI passes limits only; the kubelet sets a Guaranteed
    container's memory request equal to its limit) (kubelet cm/qos
    IsContainerEquivalentQOSGuaranteed, policy_static.go guaranteedCPUs)."""
    n = r.integer_cpus
    return bool(n) and r.cpu_limit_milli == n * 1000 and r.memory_limit is not None


def container_qualifies(info: ContainerInfo) -> bool:
    """:func:`qualifies` from the container's own spec when the pod spec is known (a
    container without its own resources receives the pod's limits from the kubelet, which
    NRI cannot tell from its own: nri_cpumgr.podmodel.spec), else from NRI's resources."""
    own = info.own_spec
    if own is not None:
        return qualifies_for_slice(own)
    return qualifies(info.resources)


def slice_size(info: ContainerInfo) -> int:
    """Whole CPUs of a qualifying container's slice (its own request when known)."""
    own = info.own_spec
    if own is not None:
        return (own.requests.get("cpu") or 0) // 1000
    return info.resources.integer_cpus


def _had_slice(r: Resources) -> bool:
    """As the runtime reports a container we gave a slice: it :func:`qualifies`, or (its
    CFS quota cleared, -1, as we clear it for exclusive CPUs) whole CPUs by its request
    and a memory limit."""
    if qualifies(r):
        return True
    return (r.cpu_quota is not None and r.cpu_quota < 0 and bool(r.integer_cpus)
            and r.memory_limit is not None)


def budget_spec(r: Resources) -> ContainerSpec:
    """The pod's totals as one pseudo container (:data:`POD_ENTRY`): whole CPUs, memory and
    hugepage limits as requests and limits."""
    req: dict[str, int] = {"cpu": r.integer_cpus * 1000}
    if r.memory_limit is not None:
        req["memory"] = r.memory_limit
    req.update(r.hugepages)
    return ContainerSpec(POD_ENTRY, requests=dict(req), limits=dict(req))


class PodLevelManager:
    """The pod-level rules for a container manager (:class:`ContainerManagerView`; it calls
    :meth:`admit` first for every container when the gates are on, and :meth:`pod_removed` /
    :meth:`after_synchronize`)."""

    def __init__(self, cm: ContainerManagerView, scope: str) -> None:
        self.cm = cm
        self.scope = scope  # the configured topologyManagerScope
        self._said_missing = False
        #: pod uid -> names of its regular (not restartable) init containers, for the pods
        #: whose spec a pod spec source gave
        self._regular_inits: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ queries
    def bubble(self, pod_uid: str) -> CPUSet | None:
        return self.cm.state.get_cpuset(pod_uid, POD_ENTRY)

    def slices(self, pod_uid: str, *, but: str = "", long_running: bool = False) -> CPUSet:
        """The pod's slices (``long_running``: not those of its regular init containers,
        when its spec is known)."""
        skip = self._regular_inits.get(pod_uid, frozenset()) if long_running else frozenset()
        out: set[int] = set()
        for name, cpus in self.cm.state.assignments.get(pod_uid, {}).items():
            if name not in (POD_ENTRY, but) and name not in skip:
                out |= cpus
        return CPUSet(out)

    def pod_pool(self, pod_uid: str) -> CPUSet:
        """The pod shared pool: bubble minus the live slices (empty without a bubble). With
        the pod's spec known, minus the slices of its long-running containers only (app
        containers, sidecars): the kubelet partitions the bubble so, a regular init
        container's slice overlapping the pool it runs before (cpumanager policy_static.go
        allocatePodForAdd, podSharedPool, v1.37.2)."""
        b = self.bubble(pod_uid)
        return b - self.slices(pod_uid, long_running=True) if b is not None else CPUSet()

    def pod_mems(self, pod_uid: str, bubble: CPUSet) -> CPUSet | None:
        """The bubble's mems: the container manager's rule for the pod's pseudo entry."""
        return self.cm.mems((pod_uid, POD_ENTRY), bubble)

    def role(self, container_id: str) -> str:
        """``pod-exclusive`` / ``pod-shared`` for containers of a pod with a bubble,
        ``exclusive`` / ``shared`` otherwise (status rows)."""
        t = self.cm.containers.get(container_id)
        if t is None:
            return ""
        pooled = self.bubble(t.info.pod_uid) is not None
        if t.exclusive:
            return "pod-exclusive" if pooled else "exclusive"
        if pooled and t.applied is not None:
            return "pod-shared"
        return "shared"

    def pools(self) -> dict[str, dict[str, str]]:
        """pod uid -> {"bubble", "podSharedPool", "mems"} for every pod with a bubble."""
        out = {}
        for uid, conts in self.cm.state.assignments.items():
            b = conts.get(POD_ENTRY)
            if b is None:
                continue
            mems = self.pod_mems(uid, b)
            out[uid] = {"bubble": str(b), "podSharedPool": str(self.pod_pool(uid)),
                        "mems": str(mems) if mems else ""}
        return out

    # ------------------------------------------------------------------ events
    def admit(self, info: ContainerInfo, device_numa: frozenset[int]) -> Decision | None:
        """The decision for ``info`` under the pod-level rules, or None when they do not apply
        (the caller goes on with the per-container rules). Raises AdmissionError."""
        cm = self.cm
        if info.qos is not QOSClass.GUARANTEED:  # (called only when a manager is on)
            return None
        if info.pod_resources is None:
            if not self._said_missing:
                self._said_missing = True
                log.warning(
                    "pod-level resource managers: the runtime passes no pod resources "
                    "(pod.linux.pod_resources) for pod %s/%s; containers are pinned by the "
                    "per-container rules (said once)", info.namespace, info.pod_name)
            return None
        if info.pod_spec is not None and not info.pod_spec.pod_level:
            return None  # no .spec.resources: the per-container rules, as the kubelet's
        pod_cpus = info.pod_resources.integer_cpus
        if not cm.static:
            # cpuManagerPolicy none, memoryManagerPolicy Static: in pod scope the Topology
            # Manager admits the pod's totals and the Memory Manager's AllocatePod pins the
            # pod's memory, which every container of it gets; the CPUs are left alone
            # (topologymanager scope_pod.go admitUsingPodResources, memorymanager
            # policy_static.go AllocatePod, v1.37.2; differential seed 62726). In container
            # scope the per-container rules (its own memory when its requests equal its
            # limits).
            if self.scope == "pod":
                return self._node_shared_pod_memory(info, device_numa)
            return None
        if self.scope == "pod":
            if pod_cpus:
                return self._admit_pod_scope(info, device_numa)
            # a budget that is no whole number of CPUs: the pod belongs in the node's shared
            # pool, every container of it (kubelet cpumanager policy_static.go
            # allocatePodForAdd: podGuaranteedCPUs 0, "pod belongs in the shared pool"; the
            # pod scope calls AllocatePod only, no container's Allocate, v1.37.2); the
            # Memory Manager still pins the pod's memory (its AllocatePod)
            return self._node_shared_pod_memory(info, device_numa)
        # container scope (or no whole-CPU pod budget): the hybrid model
        if container_qualifies(info):
            return None  # exclusive from the node, as for any Guaranteed container
        return self._node_shared(info)

    def _node_shared(self, info: ContainerInfo) -> Decision:
        self.cm.track(info.id, Tracked(info, False, None))
        return Decision(info.id, self.cm.shared_pool())

    def _node_shared_pod_memory(self, info: ContainerInfo,
                                device_numa: frozenset[int]) -> Decision:
        """A container of a pod-scope pod-level pod whose budget is no whole number of CPUs:
        the node's shared pool, with the pod's memory NUMA nodes when the Memory Manager
        pins it (admitted once, at the pod's first container, as the pod's totals)."""
        cm = self.cm
        if cm.memory is None:
            return self._node_shared(info)
        key = (info.pod_uid, POD_ENTRY)
        if cm.memory.get_memory(*key) is None:
            self._take_bubble(info, device_numa)
        mems = cm.mems(key, None)
        cm.track(info.id, Tracked(info, False, None, mems=mems))
        return Decision(info.id, cm.shared_pool() if cm.static else None, mems=mems)

    def _admit_pod_scope(self, info: ContainerInfo, device_numa: frozenset[int]) -> Decision:
        cm = self.cm
        uid, name = info.pod_uid, info.name
        facts = info.pod_spec
        regular_init = False
        if facts is not None and facts.pod_level:
            inits = frozenset(n for n in facts.init_containers
                              if (c := facts.container(n)) is not None and not c.restartable)
            self._regular_inits[uid] = inits
            regular_init = name in inits
        bubble = self.bubble(uid)
        if bubble is None:
            bubble = self._take_bubble(info, device_numa)
            if (bubble and cm.static and facts is not None and facts.pod_level
                    and cm.whole_pod_admission):
                self._partition(info, bubble)
        mems = self.pod_mems(uid, bubble)
        existing = cm.state.get_cpuset(uid, name)
        live_shared = [
            cid for cid, t in cm.pod_containers(uid)
            if t.info.name != name and not t.stopped and not t.exclusive
            and t.applied is not None
        ]
        free = bubble - self.slices(uid, but=name)
        cpus: CPUSet
        if existing is not None:
            cpus, exclusive = existing, True  # a restart keeps its slice
        elif container_qualifies(info):
            n = slice_size(info)
            if n > len(free):
                raise AdmissionError(f"NotEnoughCPUsError: {NotEnoughCPUsError(n, len(free))}")
            if live_shared and n == len(free) and not regular_init:
                # (a regular init container's slice may cover the pod's shared pool while
                # it runs: the kubelet's partition checks long-running containers only,
                # validatePodScopeResources)
                raise AdmissionError(f"{EMPTY_POD_SHARED_POOL}: {TEXT_NO_CPUS_FOR_SHARED}")
            self._check_memory(info, live_shared)
            cpus = take_by_topology(cm.policy.topology, free, n, cm.policy.options)
            cm.state.set_cpuset(uid, name, cpus)
            exclusive = True
        else:
            if facts is not None and facts.pod_level and name in self._regular_inits.get(
                    uid, ()):
                # a regular init container without a slice: the bubble minus the sidecars'
                # slices started before it (allocatePodForAdd's runnablePool)
                free = bubble - self._sidecars_before(uid, facts, name)
            elif facts is not None and facts.pod_level:
                free = self.pod_pool(uid)  # (a running init container's slice overlaps it)
            if not free:
                raise AdmissionError(f"{EMPTY_POD_SHARED_POOL}: {TEXT_NO_CPUS_FOR_SHARED}")
            cpus, exclusive = free, False
        old = cm.owner.get(info.key)
        if old is not None and old != info.id:
            cm.untrack(old)  # a restart replaces the stopped container
        cm.owner[info.key] = info.id
        cm.track(info.id, Tracked(info, exclusive, cpus, mems=mems))
        d = Decision(info.id, cpus, exclusive=exclusive, mems=mems)
        pool = self.pod_pool(uid)
        for cid in live_shared:
            t = cm.containers[cid]
            if t.applied != pool:
                t.applied = pool
                cm.row_changed(cid)
                d.pod_updates.append(Decision(cid, pool, mems=t.mems))
        return d

    def _partition(self, info: ContainerInfo, bubble: CPUSet) -> None:
        """With the pod's spec known, the kubelet's partition of the whole bubble at the
        pod's first container (cpumanager policy_static.go allocatePodForAdd, step 5,
        v1.37.2): each qualifying init container's slice from the bubble minus the sidecars'
        slices so far, then each qualifying app container's from the pod shared pool, which
        it leaves smaller; recorded as the containers' entries, which their CreateContainer
        then applies, so a pod-shared container created before an exclusive one starts on
        the final pod shared pool, as the kubelet's. A take that fails refuses the pod
        (everything it took released). Without the spec, slices are carved as containers
        come."""
        cm = self.cm
        facts = info.pod_spec
        assert facts is not None
        uid = info.pod_uid
        topo, opts = cm.policy.topology, cm.policy.options
        taken: list[str] = []
        sidecars = CPUSet()
        try:
            for n in facts.init_containers:
                c = facts.container(n)
                if c is None or not qualifies_for_slice(c):
                    continue
                cpus = take_by_topology(topo, bubble - sidecars, c.requests["cpu"] // 1000,
                                        opts)
                cm.state.set_cpuset(uid, n, cpus)
                taken.append(n)
                if c.restartable:
                    sidecars = sidecars | cpus
            pool = bubble - sidecars
            for n, c in facts.containers.items():
                if n in facts.init_containers or not qualifies_for_slice(c):
                    continue
                cpus = take_by_topology(topo, pool, c.requests["cpu"] // 1000, opts)
                cm.state.set_cpuset(uid, n, cpus)
                taken.append(n)
                pool = pool - cpus
        except Exception as e:
            for n in taken:
                cm.state.delete(uid, n)
            cm.policy.remove_container(cm.state, uid, POD_ENTRY)
            if cm.memory is not None:
                cm.memory.policy.remove_container(cm.memory.state, uid, POD_ENTRY)
            cm.tm.remove_container(_bubble_id(uid))
            raise AdmissionError(kubelet_admission_text(
                "UnexpectedAdmissionError", f"Allocate failed due to {e}, which is unexpected",
                e)) from None

    def _sidecars_before(self, uid: str, facts: PodSpecFacts, name: str) -> CPUSet:
        """The slices of the pod's sidecars listed before init container ``name``."""
        out = CPUSet()
        for n in facts.init_containers:
            if n == name:
                break
            c = facts.container(n)
            cpus = self.cm.state.get_cpuset(uid, n)
            if c is not None and c.restartable and cpus is not None:
                out = out | cpus
        return out

    def _take_bubble(self, info: ContainerInfo, device_numa: frozenset[int]) -> CPUSet:
        """Admit the pod's totals through the Topology Manager (pod hints of the CPU, memory
        and device providers) and let the managers allocate them to :data:`POD_ENTRY`.
        The CPUs taken (none for a budget of no whole CPUs, or with cpuManagerPolicy none:
        then only its memory)."""
        cm = self.cm
        assert info.pod_resources is not None
        uid = info.pod_uid
        spec = budget_spec(info.pod_resources)
        pod = Pod(uid=uid, name=info.pod_name, namespace=info.namespace, containers=(spec,),
                  qos=QOSClass.GUARANTEED)
        mem_error = self._memory_partition_error(info)
        if not cm.static:  # cpuManagerPolicy none: the memory (and devices) alone
            if mem_error is not None:
                self._refuse_by_pod_hints()
            return self._admit_pod_totals(info, pod, device_numa, None, mem_error)
        self._validate_partition(info, spec.guaranteed_cpus(), mem_error is not None)
        # the kubelet checks SMT alignment in AllocatePod (allocatePodForAdd:
        # enforceSMTAlignment), after the Topology Manager merged the pod's hints: a pod
        # the hints refuse gets the Topology Manager's error, one they admit the SMT error.
        # Checked here on the free CPUs before anything is taken, reported in that order.
        smt_error: Exception | None = None
        try:
            enforce_smt(cm.policy, cm.state, spec.guaranteed_cpus())
        except Exception as e:  # noqa: BLE001 - reported below, after the hints
            smt_error = e
        return self._admit_pod_totals(info, pod, device_numa, smt_error, mem_error)

    def _admit_pod_totals(self, info: ContainerInfo, pod: Pod, device_numa: frozenset[int],
                          smt_error: Exception | None, mem_error: str | None = None) -> CPUSet:
        """The Topology Manager's admission of the pod's totals ``pod`` and the managers'
        allocation to :data:`POD_ENTRY`; everything undone and AdmissionError raised when
        it refuses (its error first, then ``smt_error``, the CPU manager's allocation error,
        then ``mem_error``: the Memory Manager's empty-pod-shared-pool text, which its
        AllocatePod checks first; the kubelet's order, the CPU manager allocating first)."""
        from nri_cpumgr.cm.topologymanager import ERROR_TOPOLOGY_AFFINITY

        cm = self.cm
        uid = info.pod_uid
        key = (uid, POD_ENTRY)
        if device_numa:
            cm.devices.current[key] = frozenset(device_numa)
        unsatisfiable: list[str] = []
        if info.pod_spec is not None and cm.whole_pod_admission:
            # the pod's spec known, its totals admitted as one (nothing half admitted): the
            # kubelet's answer where no NUMA set holds the pod's memory (no preference, then
            # the Allocate failure), as for a pod admitted whole
            with cm.kubelet_memory_hints() as unsatisfiable:
                result = cm.tm.admit(pod)
        else:
            result = cm.tm.admit(pod)
        allocated = cm.cpu_provider.allocated.get(key)
        cm.cpu_provider.allocated.clear()
        if not result.admit or smt_error is not None or mem_error is not None:
            cm.policy.remove_container(cm.state, uid, POD_ENTRY)
            if cm.memory is not None:
                cm.memory.policy.remove_container(cm.memory.state, uid, POD_ENTRY)
            cm.devices.current.pop(key, None)
            if unsatisfiable:
                log.info("pod %s/%s: %s", info.namespace, info.pod_name,
                         memory_unsatisfiable_text(unsatisfiable, cm.tm.policy_name))
            if not result.admit and result.reason == ERROR_TOPOLOGY_AFFINITY:
                # the kubelet's PodLevelTopologyAffinityError texts (scope_pod.go
                # admitUsingPodResources, scope_container.go Admit, v1.37.2)
                from nri_cpumgr.cm.topologymanager import POD_LEVEL_CONTAINER_SCOPE_REFUSAL

                text = POD_SCOPE_REFUSAL if cm.tm.scope_name == "pod" \
                    else POD_LEVEL_CONTAINER_SCOPE_REFUSAL
                raise AdmissionError(f"{ERROR_TOPOLOGY_AFFINITY}: {text}")
            if not result.admit and result.error is None:
                raise AdmissionError(f"{result.reason}: {result.message}")
            if smt_error is not None:
                raise AdmissionError(admission_text(smt_error))
            if mem_error is not None and (result.admit or not isinstance(
                    result.error, CPUManagerError)):
                raise AdmissionError(f"{EMPTY_POD_SHARED_POOL}: {mem_error}")
            assert result.error is not None
            if info.pod_spec is not None and cm.whole_pod_admission:
                # the pod admitted whole: the kubelet's text
                raise AdmissionError(kubelet_admission_text(
                    result.reason, result.message, result.error))
            raise AdmissionError(admission_text(result.error))
        cm.tm.add_container(pod, POD_ENTRY, _bubble_id(uid))
        if not allocated:
            return CPUSet()  # (a budget of no whole CPUs: its memory only)
        log.info("pod %s/%s: pod-level bubble cpus=%s (pod budget %d cpus)",
                 info.namespace, info.pod_name, allocated, len(allocated))
        return CPUSet(allocated)

    def _memory_partition_error(self, info: ContainerInfo) -> str | None:
        """With the pod's spec known, the Memory Manager's check of the
        whole pod's partition (memorymanager policy_static.go validatePodScopeResources, in
        its GetPodTopologyHints and again in its AllocatePod, v1.37.2): the kubelet's text
        when the long-running containers' own memory takes a whole pod budget and some
        container has none of its own; else None. Without the spec, :meth:`_check_memory`
        finds it container by container."""
        facts = info.pod_spec
        if self.cm.memory is None or facts is None or not facts.pod_level:
            return None
        inits = tuple(c for n in facts.init_containers if (c := facts.container(n)))
        apps = tuple(c for n, c in facts.containers.items() if n not in facts.init_containers)
        pod = Pod(uid=info.pod_uid, name=info.pod_name, namespace=info.namespace,
                  containers=apps, init_containers=inits, qos=QOSClass.GUARANTEED)
        return validate_pod_scope_memory(facts.pod_requests, pod)

    def _refuse_by_pod_hints(self) -> None:
        """A pod whose partition a manager's pod hints refuse (they answer no hint: the
        CPU manager's getPodTopologyHintsForAdd, the Memory Manager's GetPodTopologyHints):
        restricted and single-numa-node refuse it first, with the pod scope's text
        (scope_pod.go admitUsingPodResources, v1.37.2); other policies go on."""
        from nri_cpumgr.cm.topologymanager import ERROR_TOPOLOGY_AFFINITY
        from nri_cpumgr.cm.topologymanager.policy import (
            POLICY_RESTRICTED,
            POLICY_SINGLE_NUMA_NODE,
        )

        if self.cm.tm.policy_name in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE):
            raise AdmissionError(f"{ERROR_TOPOLOGY_AFFINITY}: {POD_SCOPE_REFUSAL}")

    def _validate_partition(self, info: ContainerInfo, budget: int,
                            memory_refused: bool = False) -> None:
        """With the pod's spec known (a pod spec source), the kubelet's check of the whole
        pod's partition before its bubble is allocated (cpumanager policy_static.go
        allocatePodForAdd: validatePodScopeResources, then the SMT alignment check, then the
        allocation, v1.37.2): exclusive containers that leave no CPU for the shared ones
        refuse the pod at its first container, with the kubelet's EmptyPodSharedPoolError
        text, whatever else would fail first. Without the spec, the per-container checks
        of :meth:`_admit_pod_scope` find it when the container that shows it comes."""
        if memory_refused:  # the Memory Manager's pod hints answered none
            self._refuse_by_pod_hints()
        facts = info.pod_spec
        if not budget or facts is None or not facts.pod_level:
            return
        inits = tuple(c for n in facts.init_containers if (c := facts.container(n)))
        apps = tuple(c for n, c in facts.containers.items() if n not in facts.init_containers)
        pod = Pod(uid=info.pod_uid, name=info.pod_name, namespace=info.namespace,
                  containers=apps, init_containers=inits, qos=QOSClass.GUARANTEED)
        try:
            validate_pod_scope(pod, budget)
        except EmptyPodSharedPoolError as e:
            # the CPU manager's pod hints make the same check and answer no hint
            # (getPodTopologyHintsForAdd): restricted and single-numa-node refuse first
            self._refuse_by_pod_hints()
            raise AdmissionError(f"{EMPTY_POD_SHARED_POOL}: {e}") from None

    def _check_memory(self, info: ContainerInfo, live_shared: list[str]) -> None:
        """The Memory Manager's empty-pod-shared-pool check for a new slice."""
        pr = info.pod_resources
        if self.cm.memory is None or pr is None or pr.memory_limit is None or not live_shared:
            return
        used = info.resources.memory_limit or 0
        for _, t in self.cm.pod_containers(info.pod_uid):
            if t.exclusive and not t.stopped and t.info.name != info.name:
                used += t.info.resources.memory_limit or 0
        if used >= pr.memory_limit:
            raise AdmissionError(f"{EMPTY_POD_SHARED_POOL}: {text_no_memory_for_shared('memory')}")

    def log_decision(self, info: ContainerInfo, d: Decision) -> None:
        """One decision-log line for a container of a pod with a bubble."""
        b = self.bubble(info.pod_uid)
        if b is None or not log.isEnabledFor(logging.INFO):
            return
        log.info("pod-level pod=%s/%s container=%s pool=%s cpus=%s bubble=%s "
                 "pod-shared-pool=%s moved=%d", info.namespace, info.pod_name, info.name,
                 self.role(d.container_id), d.cpus, b, self.pod_pool(info.pod_uid),
                 len(d.pod_updates))

    def pod_removed(self, pod_uid: str) -> None:
        """The pod sandbox went away (its bubble was released with the pod's entries)."""
        self.cm.tm.remove_container(_bubble_id(pod_uid))
        self._regular_inits.pop(pod_uid, None)
        self.cm.devices.current.pop((pod_uid, POD_ENTRY), None)

    def adopt(self, pending: list[ContainerInfo]) -> None:
        """At Synchronize, before any admission: pod-scope bubbles and slices the runtime
        applied after the checkpoint was written (``pending``: the live containers the
        state has no assignment for). A pod without a bubble gets back the one its
        containers' cpusets make up together (pod shared pool + slices) when that is its
        whole budget and free; then each qualifying container whose cpuset is a free part
        of the bubble of its size keeps it as its slice. What cannot be taken back this
        way is admitted as before."""
        cm = self.cm
        if self.scope != "pod" or not cm.static:
            return
        pods: dict[str, list[ContainerInfo]] = {}
        for i in pending:
            if (i.qos is QOSClass.GUARANTEED and i.pod_resources is not None
                    and i.pod_resources.integer_cpus and i.cpus):
                pods.setdefault(i.pod_uid, []).append(i)
        for uid, infos in pods.items():
            bubble = self.bubble(uid)
            if bubble is None:
                seen = CPUSet()
                for i in infos:
                    seen = seen | CPUSet.parse(i.cpus)
                budget = infos[0].pod_resources.integer_cpus  # type: ignore[union-attr]
                if len(seen) != budget or not seen <= cm.policy.available_cpus(cm.state):
                    continue
                bubble = seen
                cm.state.set_cpuset(uid, POD_ENTRY, bubble)
                cm.state.default_set = cm.state.default_set - bubble
                log.info("synchronize: pod %s/%s: pod-level bubble cpus=%s taken back from "
                         "its containers' cpusets", infos[0].namespace, infos[0].pod_name,
                         bubble)
            free = bubble - self.slices(uid)
            for i in infos:
                cur = CPUSet.parse(i.cpus)
                if (_had_slice(i.resources) and cm.state.get_cpuset(uid, i.name) is None
                        and len(cur) == i.resources.integer_cpus and cur <= free):
                    cm.state.set_cpuset(uid, i.name, cur)
                    free = free - cur

    def after_synchronize(self, updates: dict[str, Decision]) -> None:
        """Pod shared containers whose reported cpuset differs from their pod's pool."""
        for cid, t in self.cm.containers.items():
            if t.exclusive or t.stopped or t.applied is None:
                continue
            if self.bubble(t.info.pod_uid) is None:
                continue
            pool = self.pod_pool(t.info.pod_uid)
            t.applied = pool
            self.cm.row_changed(cid)
            if CPUSet.parse(t.info.cpus) != pool:
                updates[cid] = Decision(cid, pool, mems=t.mems)


def _bubble_id(pod_uid: str) -> str:
    return f"{POD_ENTRY}/{pod_uid}"
