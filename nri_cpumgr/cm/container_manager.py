"""The container manager: the kubelet's ``cm.ContainerManager`` role, pure.

It sits between the runtime glue and the per-resource managers. In: containers as the
runtime reports them (:class:`~nri_cpumgr.podmodel.nri.ContainerInfo`) and life-cycle events.
Out: :class:`Decision` objects (the new container's cpus/mems, and the shared-pool containers
that must be updated). It never touches a socket or a file; the caller persists
:meth:`ContainerManager.checkpoint` and turns decisions into NRI messages.

Life cycle (kubelet semantics, cpu_manager.go and policy_static.go):

* A container of a Guaranteed pod with an integer CPU request gets exclusive CPUs; every other
  container runs on the shared pool. Exclusive containers get no CFS quota.
* A stopped container keeps its CPUs (it may be restarted under the same name; the kubelet
  keeps the assignment of terminated containers of active pods). They are released when the
  container is removed, when its pod sandbox is stopped or removed, or when another container of
  the same pod needs CPUs (the kubelet's reuse of finished init containers' CPUs).
* Whole-pod admission (the pod's spec known, :class:`~nri_cpumgr.podmodel.spec.PodSpecFacts`
  from a pod spec source): at the pod's first CreateContainer the Topology Manager admits the
  WHOLE pod as the kubelet does at pod admission (hints per scope; every init then app
  container allocated in order, init containers' CPUs and memory reused by the later ones),
  and every container's decision is recorded in the managers' states
  (:attr:`ContainerManager.admissions`); each later CreateContainer of the pod applies its
  recorded decision, and a refused pod has every container refused with the kubelet's error.
  A finished init container keeps its CPUs for the pod's life and gives its memory back when
  the pod's next container starts, as the kubelet's managers do. Without the spec, container
  by container (the NRI-alone path).
* The manager decides the shared pool; moving the running shared-pool containers onto it
  is not its business (nri_cpumgr.poolsync does that after the replies), so no event costs
  work over all tracked containers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cm.providers import CPUProvider, DeviceProvider, MemoryProvider
from nri_cpumgr.cm.records import (
    POD_ENTRY,
    AdmissionError,
    Decision,
    Tracked,
    admission_text,
    kubelet_admission_text,
    memory_unsatisfiable_text,
)
from nri_cpumgr.cm.topologymanager import (
    ERROR_TOPOLOGY_AFFINITY,
    POD_LEVEL_CONTAINER_SCOPE_REFUSAL,
    TopologyManager,
)
from nri_cpumgr.cpuset import CPUSet, format_mask, ids_to_mask
from nri_cpumgr.frozen import slot_init
from nri_cpumgr.jsontext import RawJSON, encode
from nri_cpumgr.podmodel import GUARANTEED, Pod, QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from nri_cpumgr.podmodel.spec import PodSpecFacts, qualifies_for_slice

if TYPE_CHECKING:  # (imported only when configured: the Memory Manager, pod-level managers)
    from nri_cpumgr.cm.memorymanager.manager import MemoryManager
    from nri_cpumgr.cm.memorymanager.state import Block
    from nri_cpumgr.cm.podresources.manager import PodLevelManager

# AdmissionError and Decision (nri_cpumgr.cm.records) are still importable from here
__all__ = ["AdmissionError", "ContainerManager", "Decision", "PodAdmission", "Tracked"]

log = logging.getLogger(__name__)


def mems_for(blocks: Iterable[Block] | None) -> CPUSet:
    """:func:`nri_cpumgr.cm.memorymanager.mems_for` (cpuset.mems of a container's memory
    blocks), its package imported at the first call: only with a Memory Manager
    (``memoryManagerPolicy: Static``) are there blocks (issue 34: ~4 ms of the start)."""
    from nri_cpumgr.cm.memorymanager.manager import mems_for as blocks_mems

    return blocks_mems(blocks)


@slot_init
@dataclasses.dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class PodAdmission:
    """The record of a whole-pod admission (:meth:`ContainerManager.admit` with the pod's
    spec). ``refused``: the kubelet's refusal text (``"<Reason>: <message>"``) every
    container of the pod gets, None when admitted; ``containers``: every init and app
    container's name; ``pinned``: those the admission gave exclusive CPUs or memory (their
    decisions are the managers' state entries); ``unsatisfiable``: for a refused pod, the
    containers (``""``: the pod, pod scope) whose memory no NUMA node set could hold under
    restricted / single-numa-node (the kubelet admits those without a memory preference and
    fails in Allocate: the plugin's explanation, beside the kubelet's text); ``at_sandbox``:
    the pod was admitted when its sandbox started (:meth:`ContainerManager.admit_sandbox`),
    not at its first container; a refusal made there is still to be given to that first
    container."""

    refused: str | None
    containers: frozenset[str]
    pinned: frozenset[str] = frozenset()
    unsatisfiable: tuple[str, ...] = ()
    at_sandbox: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"containers": sorted(self.containers)}
        if self.refused is not None:
            out["refused"] = self.refused
        if self.pinned:
            out["pinned"] = sorted(self.pinned)
        if self.unsatisfiable:
            out["memoryUnsatisfiable"] = list(self.unsatisfiable)
        if self.at_sandbox:
            out["atSandbox"] = True
        return out

    @classmethod
    def from_json(cls, doc: Any) -> PodAdmission:
        """Raises ValueError for another shape."""
        if not isinstance(doc, dict) or not isinstance(doc.get("containers"), list):
            raise ValueError("expected {containers: [...], refused?, pinned?}")
        refused = doc.get("refused")
        return cls(str(refused) if refused is not None else None,
                   frozenset(str(n) for n in doc["containers"]),
                   frozenset(str(n) for n in doc.get("pinned") or ()),
                   tuple(str(n) for n in doc.get("memoryUnsatisfiable") or ()),
                   doc.get("atSandbox") is True)


#: :meth:`ContainerManager.synchronize`'s ``plain`` containers: (container id, pod uid,
#: name, cpuset the runtime reports)
_PlainRows = Sequence[tuple[str, str, str, str]]


class ContainerManager:
    """Tracks containers and asks the managers for decisions.

    ``policy`` is the CPU manager's :class:`StaticPolicy` or :class:`NonePolicy`, ``state``
    its state (assignments per pod uid / container name, and the default set).
    ``topology_manager`` (default: policy ``none``) merges the hints of the CPU, memory and
    device providers and admits each container; ``memory`` is the Memory Manager (``None``
    for ``memoryManagerPolicy: None``); ``align_mems_with_cpus`` pins an exclusive
    container's ``cpuset.mems`` to the NUMA nodes of its CPUs when no Memory Manager decides
    them (as nri-plugins can); ``numa_nodes`` are the machine's NUMA node ids (device hints).

    Every event costs work proportional to the pod it concerns, not to the node: containers
    are indexed by pod, and shared-pool containers are not enumerated (they follow
    :meth:`shared_pool`; see nri_cpumgr.poolsync).
    """

    def __init__(
        self,
        policy: StaticPolicy | NonePolicy,
        state: CPUManagerState,
        *,
        topology_manager: TopologyManager | None = None,
        memory: MemoryManager | None = None,
        align_mems_with_cpus: bool = False,
        numa_nodes: tuple[int, ...] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        topology_manager_scope: str | None = None,
    ) -> None:
        self.policy = policy
        self.state = state
        self.containers: dict[str, Tracked] = {}
        self._by_pod: dict[str, set[str]] = {}  # pod uid -> container ids
        # the checkpoint's rows (rows_json): container id -> its row's JSON text, and the ids
        # whose row must be encoded again (tracked, or a field of their record changed)
        self._row_text: dict[str, bytes] = {}
        #: cpuset mask -> (cpulist, cpulist of its NUMA nodes), for the topology it was made
        #: for (see _cpuset_strings)
        self._strings: tuple[Any, dict[int, tuple[str, str]]] = (None, {})
        self._row_dirty: set[str] = set()
        self._rows_cached = True
        #: the ids of the rows in _row_text that are shared containers' (with the pool's
        #: markers) and of the others, each in tracking order
        self._shared_rows: dict[str, None] = {}
        self._own_rows: dict[str, None] = {}
        #: the shared rows joined (markers in), made again when one of them changes; and
        #: that text with the pool's strings filled in, by (cpulist, NUMA nodes)
        self._shared_block: bytes | None = None
        self._shared_filled: dict[tuple[str, str], bytes] = {}
        #: the checkpoint's admittedPods (admissions_json): pod uid -> (its record, the
        #: record's ``"uid":{...}`` text), kept while the pod's record is that object
        self._admission_text: dict[str, tuple[PodAdmission, bytes]] = {}
        #: (pod uid, name) -> id of the container that holds the entry's CPUs and memory
        self.owner: dict[tuple[str, str], str] = {}
        self.static = isinstance(policy, StaticPolicy)
        self.memory = memory
        self.align_mems_with_cpus = align_mems_with_cpus
        self.tm = topology_manager if topology_manager is not None else TopologyManager("none")
        self.cpu_provider = CPUProvider(policy, state, self.tm)
        self.tm.add_hint_provider(self.cpu_provider)
        self.memory_provider = MemoryProvider(memory, self.tm) if memory is not None else None
        if self.memory_provider is not None:
            self.tm.add_hint_provider(self.memory_provider)
        nodes = numa_nodes if numa_nodes is not None else tuple(policy.topology.numa_nodes())
        self.devices = DeviceProvider(nodes)
        self.tm.add_hint_provider(self.devices)
        self.managed = self.static or memory is not None
        # --- pod-level resource managers and in-place resize (nri_cpumgr.cm.podresources)
        # (their managers' modules only where the gates turn them on: issue 34, the start)
        from nri_cpumgr.cm.podresources.gates import pod_level_enabled
        from nri_cpumgr.cm.podresources.resizer import Resizer

        scope = topology_manager_scope or self.tm.scope_name
        self.pod_level: PodLevelManager | None = None
        if pod_level_enabled(feature_gates):
            from nri_cpumgr.cm.podresources.manager import PodLevelManager

            self.pod_level = PodLevelManager(self, scope)
        self.resizer = Resizer(self, feature_gates)
        #: pod uid -> its whole-pod admission (pods whose spec was known at their first
        #: container); see :meth:`admit`
        self.admissions: dict[str, PodAdmission] = {}
        #: admit a pod whole when its spec is known (False: container by container even
        #: then, the plugin's behaviour before whole-pod admission: the differential's
        #: ``nri-alone`` mode)
        self.whole_pod_admission = True
        self._synchronizing = False  # (a Synchronize admits no pod whole: it exists)

    # ------------------------------------------------------------------ queries
    def shared_pool(self) -> CPUSet:
        """CPUs the shared-pool containers run on now (never empty)."""
        pool = self.policy.shared_pool(self.state) if self.static else CPUSet()
        if not pool and self.static:
            pool = self.policy.reserved_cpus
        return pool

    def take_ahead(self) -> None:
        """Prepare the static policy's next exclusive take for the CPUs free now
        (``StaticPolicy.take_ahead``), in the time between an answer and the next request.
        Changes no state; nothing under another policy."""
        if self.static:
            self.policy.take_ahead(self.state)

    def is_shared(self, container_id: str) -> bool:
        """The container runs on the shared pool (static policy, not exclusive, running)."""
        t = self.containers.get(container_id)
        return self.static and t is not None and t.shared and not t.stopped

    def pod_container_ids(self, pod_uid: str) -> list[str]:
        """Ids of the tracked containers of a pod."""
        return list(self._by_pod.get(pod_uid, ()))

    def shared_containers(self) -> list[str]:
        """Ids of the running shared-pool containers (O(tracked): Synchronize, status)."""
        if not self.static:
            return []
        return [cid for cid, t in self.containers.items() if t.shared and not t.stopped]

    def rows(self) -> list[dict[str, Any]]:
        """One row per tracked container (for logs and the status command). O(tracked), with
        the strings of each distinct cpuset computed once (the shared pool's, mostly)."""
        pool = self.shared_pool() if self.static else None
        strings = self._cpuset_strings()
        out = []
        for cid, t in sorted(self.containers.items(), key=lambda kv: kv[1].info.key):
            cpus = t.applied if not t.shared else pool
            cpus_s, numa_s = strings(cpus) if cpus is not None else ("", "")
            out.append(_row(cid, t, cpus_s, numa_s))
        return out

    def _cpuset_strings(self) -> Callable[[CPUSet], tuple[str, str]]:
        """``cpus -> (cpulist, cpulist of its NUMA nodes)``, each distinct cpuset once."""
        details = self.policy.topology.details
        owner, text = self._strings
        if owner is not details or len(text) > 1024:  # (kept across checkpoints: the
            text = {}                                  # shared pool's, mostly)
            self._strings = (details, text)

        def strings(cpus: CPUSet) -> tuple[str, str]:
            key = cpus.mask if isinstance(cpus, CPUSet) else ids_to_mask(cpus)
            got = text.get(key)
            if got is None:
                numa = CPUSet({details[c].numa for c in cpus if c in details})
                got = text[key] = (str(cpus), str(numa))
            return got

        return strings

    def rows_json(self) -> RawJSON | None:
        """The rows of :meth:`rows` as canonical JSON text (a list of objects with sorted
        keys and no blanks, as ``json.dumps(rows, sort_keys=True, separators=(",", ":"))``),
        the rows of containers with their own cpuset first, then the shared pool's, each in
        the order the containers were tracked; or None when the rows carry pod-level or resize
        annotations (then use :meth:`rows`).

        A row is encoded when its container is tracked or changes, and kept; a shared
        container's row with markers where the shared pool's cpus and NUMA nodes go. The
        shared rows are joined once while none of them changes, and that text filled in with
        the pool's strings once per pool (the last few kept): a checkpoint of 1,000 shared
        containers after an exclusive container came or went (the removal's, written before
        its reply) joins a handful of rows and copies the rest once, instead of a join of
        1,000 and two replaces over it."""
        if self.pod_level is not None or self.resizer.resized:
            self._rows_cached = False  # (rows may change unseen here: all encoded again)
            return None
        texts, dirty, containers = self._row_text, self._row_dirty, self.containers
        shared, own = self._shared_rows, self._own_rows
        if not self._rows_cached:
            texts.clear()
            shared.clear()
            own.clear()
            self._shared_block = None
            dirty.update(containers)
            self._rows_cached = True
        strings = self._cpuset_strings()
        for cid in dirty:
            t = containers.get(cid)
            if t is None:
                continue
            text = _encode_row(cid, t, strings)
            if t.shared:
                if cid not in shared or texts[cid] != text:
                    self._shared_block = None
                    shared[cid] = None
                own.pop(cid, None)
            else:
                if shared.pop(cid, 0) is None:
                    self._shared_block = None
                own[cid] = None
            texts[cid] = text
        dirty.clear()
        parts = [b"[", b",".join([texts[c] for c in own])]
        if shared:
            cpus, numa = strings(self.shared_pool()) if self.static else ("", "")
            parts += [b"," if own else b"", self._filled_shared(cpus, numa)]
        parts.append(b"]")
        return RawJSON(*parts)

    def _filled_shared(self, cpus: str, numa: str) -> bytes:
        """The shared rows' text with the pool's ``cpus`` and ``numa`` strings in."""
        block = self._shared_block
        if block is None:
            texts = self._row_text
            block = self._shared_block = b",".join([texts[c] for c in self._shared_rows])
            self._shared_filled = {}
        filled = self._shared_filled.get((cpus, numa))
        if filled is None:
            if len(self._shared_filled) >= _SHARED_FILLED_KEPT:
                self._shared_filled.clear()
            filled = block.replace(_POOL_CPUS, encode(cpus)).replace(_POOL_NUMA, encode(numa))
            self._shared_filled[(cpus, numa)] = filled
        return filled

    # ------------------------------------------------------------------ tracking
    def track(self, cid: str, t: Tracked) -> None:
        """Track record ``t`` under container id ``cid`` (replacing any record of that id)."""
        self.containers[cid] = t
        self._row_dirty.add(cid)
        self._by_pod.setdefault(t.info.pod_uid, set()).add(cid)

    def row_changed(self, cid: str) -> None:
        """A field of the container's record changed (its checkpoint row is encoded again):
        whoever assigns to a tracked record's field calls this."""
        self._row_dirty.add(cid)

    def untrack(self, cid: str) -> Tracked | None:
        """Stop tracking container ``cid``: its record, or None when it was not tracked
        (what it holds is not released: the caller does that)."""
        t = self.containers.pop(cid, None)
        self._row_text.pop(cid, None)
        self._own_rows.pop(cid, None)
        if self._shared_rows.pop(cid, 0) is None:
            self._shared_block = None
        if t is not None:
            ids = self._by_pod.get(t.info.pod_uid)
            if ids is not None:
                ids.discard(cid)
                if not ids:
                    del self._by_pod[t.info.pod_uid]
        return t

    def pod_containers(self, pod_uid: str) -> list[tuple[str, Tracked]]:
        """``(container id, record)`` of the tracked containers of a pod."""
        return [(cid, self.containers[cid]) for cid in self._by_pod.get(pod_uid, ())]

    # ------------------------------------------------------------------ events
    def admit(self, info: ContainerInfo, device_numa: frozenset[int] = frozenset()) -> Decision:
        """Decide the cpuset (and mems) of a container being created: the Topology Manager
        merges the providers' hints and admits, then the CPU and memory managers allocate
        with the chosen affinity. ``device_numa``: NUMA nodes of the container's devices.
        A container whose (pod, name) already holds CPUs (a restart of a crashed container)
        gets them back. Raises :class:`AdmissionError` (TopologyAffinityError,
        SMTAlignmentError, NotEnoughCPUsError, memory errors); nothing changes then.
        The caller moves the shared-pool containers when :meth:`shared_pool` changed."""
        if not self.managed:
            self.track(info.id, Tracked(info, False, None))
            return Decision(info.id, None)
        rec = self.admissions.get(info.pod_uid)
        if rec is not None and rec.refused is not None:
            if rec.at_sandbox:
                # refused when its sandbox started: its first container gets that answer
                # (the kubelet's admission of the pod), the next one admits it again
                self.admissions[info.pod_uid] = dataclasses.replace(rec, at_sandbox=False)
            else:
                # a refused pod holds nothing: its next CreateContainer (the kubelet under
                # policy none retries it; the CPUs may be free by then: a pod of the same
                # name still being deleted) admits it again, the same answer while nothing
                # changed
                del self.admissions[info.pod_uid]
                rec = None
        if rec is None and info.pod_spec is not None and self._whole_pod(info):
            rec = self._admit_pod(info.pod_uid, info.pod_name, info.namespace, info.qos,
                                  info.pod_spec, info.key, device_numa)
        if rec is not None and info.name in rec.containers:
            d = self._apply_admission(info, rec)
            if d is not None:
                return d
        elif rec is None and info.pod_uid in self._by_pod:  # (a new pod: nothing to release)
            self._release_stopped_of_pod(info.pod_uid, keep=info.name)
        if self.pod_level is not None:
            d = self.pod_level.admit(info, device_numa)
            if d is not None:
                return d
        elif info.pod_spec is not None and info.pod_spec.pod_level:
            # a pod with .spec.resources without the pod-level gates: the kubelet's CPU and
            # Memory Managers skip the whole pod (cpumanager / memorymanager policy_static.go
            # Allocate, "pod is using pod-level resources but the PodLevelResourceManagers
            # feature gate is not enabled", v1.37.2): the node's shared pool
            self.track(info.id, Tracked(info, False, None))
            return Decision(info.id, self.shared_pool() if self.static else None)
        key = info.key
        if info.qos is not GUARANTEED and not info.devices:
            # no provider has a hint for it (CPU and memory managers only pin Guaranteed
            # pods, it has no devices): every Topology Manager policy admits it as is
            self.track(info.id, Tracked(info, False, None))
            pool = self.shared_pool() if self.static else None
            return Decision(info.id, pool)
        had_cpus = self.state.get_cpuset(*key) is not None
        had_mem = self.memory is not None and self.memory.get_memory(*key) is not None
        if device_numa:
            self.devices.current[key] = frozenset(device_numa)
        pod = self._admission_pod(info)
        result = self.tm.admit(pod)
        allocated = self.cpu_provider.allocated.get(key)
        self.cpu_provider.allocated.clear()
        if not result.admit:
            if self.static and not had_cpus:
                self.policy.remove_container(self.state, *key)
            if self.memory is not None and not had_mem:
                self.memory.policy.remove_container(self.memory.state, *key)
            self.devices.current.pop(key, None)
            if result.reason == ERROR_TOPOLOGY_AFFINITY or result.error is None:
                raise AdmissionError(self._refusal_text(pod, result.reason, result.message))
            raise AdmissionError(admission_text(result.error))
        self.tm.add_container(pod, info.name, info.id)
        if self.memory is not None:
            self.memory.container_map[info.id] = key
        return self._decide(info, key, _as_cpuset(allocated) if allocated else None)

    # ------------------------------------------------------------ whole-pod admission
    def _whole_pod(self, info: ContainerInfo) -> bool:
        """Whether ``info``'s pod is admitted whole now: its spec is known and names the
        container, it is Guaranteed (nothing else is pinned) and this is its first container
        (nothing of it is tracked or held: a pod the plugin met container by container, or
        before a restart without a record, stays on that path). A pod with
        ``.spec.resources`` only when the pod-level resource managers allocate it container
        by container (container scope, or Topology Manager policy none: each container's own
        resources); in pod scope its budget is nri_cpumgr.cm.podresources' business, and
        without the gates the kubelet's managers skip the pod."""
        spec = info.pod_spec
        if spec is None or spec.container(info.name) is None:
            return False
        return self._whole_pod_now(info.pod_uid, info.qos, spec)

    def _whole_pod_now(self, pod_uid: str, qos: QOSClass, spec: PodSpecFacts) -> bool:
        """:meth:`_whole_pod` without a container: whether the pod ``pod_uid`` of QoS class
        ``qos`` and spec ``spec`` is admitted whole now."""
        if qos is not GUARANTEED or not self.whole_pod_admission:
            return False
        if spec.pod_level and (self.pod_level is None or self.pod_level.scope == "pod"):
            return False
        if self._synchronizing or pod_uid in self._by_pod:
            return False
        if self.state.assignments.get(pod_uid):
            return False
        return not (self.memory is not None
                    and self.memory.state.get_memory_assignments().get(pod_uid))

    def admit_sandbox(self, pod_uid: str, pod_name: str, namespace: str, qos: QOSClass,
                      spec: PodSpecFacts) -> PodAdmission | None:
        """The kubelet's admission of a whole pod, made when its sandbox starts (NRI
        RunPodSandbox), as the kubelet admits a pod before it creates the sandbox
        (kubelet.go HandlePodAdditions, canAdmitPod, then the pod worker's SyncPod,
        v1.37.2): pods are admitted in the order their sandboxes start, not in the order
        their first containers come (after image pulls of any length). The pod's
        containers then get the recorded decisions (:meth:`admit`). Only for a pod
        :meth:`admit` would admit whole (Guaranteed, ``spec`` known, nothing of it tracked
        or held) whose containers request no other resource than cpu, memory,
        hugepages and ephemeral storage: a device's NUMA node is known only once its
        container comes. The admission record (:class:`PodAdmission`, ``at_sandbox``), a
        refusal included (its first container gets it); None when the pod is left to its
        first container. Raises nothing for a refusal."""
        if not self.managed or not self._whole_pod_now(pod_uid, qos, spec) \
                or pod_uid in self.admissions:
            return None
        if any(not _native_resource(r) for c in spec.containers.values() for r in c.requests):
            return None
        return self._admit_pod(pod_uid, pod_name, namespace, qos, spec, None, frozenset(),
                               at_sandbox=True)

    @contextlib.contextmanager
    def kubelet_memory_hints(self) -> Iterator[list[str]]:
        """Within: the Memory Manager's hints as the kubelet answers them (an empty map, "no
        preference", where no NUMA set holds a container's memory), as a pod admitted whole
        gets them; the list yielded names, once the block ends, those containers (``""``:
        the pod, pod scope). Outside: the container-by-container rule (refused at admission,
        :class:`~nri_cpumgr.cm.providers.MemoryProvider`)."""
        found: list[str] = []
        mp = self.memory_provider
        if mp is None:
            yield found
            return
        mp.refuse_unsatisfiable = False
        mp.unsatisfiable.clear()
        try:
            yield found
        finally:
            mp.refuse_unsatisfiable = True
            found.extend(dict.fromkeys(mp.unsatisfiable))
            mp.unsatisfiable.clear()

    def _refusal_text(self, pod: Pod, reason: str, message: str, whole: bool = True) -> str:
        """A Topology Manager refusal's text (``reason: message``, or the message alone
        when not ``whole``): under container scope, for a pod with pod-level resources and
        the pod-level resource managers on, the kubelet's pod-level message
        (scope_container.go Admit: PodLevelTopologyAffinityError, v1.37.2)."""
        if (reason == ERROR_TOPOLOGY_AFFINITY and self.pod_level is not None
                and pod.pod_level_resources and self.tm.scope_name == "container"):
            message = POD_LEVEL_CONTAINER_SCOPE_REFUSAL
        return f"{reason}: {message}" if whole else message

    def _spec_pod(self, info: ContainerInfo) -> Pod:
        """The whole pod as its spec gives it: init containers in order, then the app
        containers (the kubelet's admission order)."""
        spec = info.pod_spec
        assert spec is not None
        return _whole_spec_pod(info.pod_uid, info.pod_name, info.namespace, info.qos, spec)

    def _admit_pod(self, uid: str, pod_name: str, namespace: str, qos: QOSClass,
                   spec: PodSpecFacts, key: tuple[str, str] | None,
                   device_numa: frozenset[int], at_sandbox: bool = False) -> PodAdmission:
        """The kubelet's pod admission for the whole pod ``uid`` (topologymanager
        scope_container.go / scope_pod.go Admit, then each provider's Allocate per container
        in order: cpumanager policy_static.go Allocate with cpusToReuse, memorymanager
        policy_static.go Allocate with the init containers' reusable memory, v1.37.2),
        recorded in :attr:`admissions`. A refused pod's allocations are released (the
        kubelet's stale-state removal at its next admission). ``device_numa``: the NUMA
        nodes of the devices of the container ``key`` (the one being created; the other
        containers' are not known yet). ``at_sandbox``: made when the sandbox started."""
        pod = _whole_spec_pod(uid, pod_name, namespace, qos, spec)
        names = frozenset(spec.containers)  # (every init and app container's name)
        if device_numa and key is not None:
            self.devices.current[key] = frozenset(device_numa)
        # the pod is admitted or refused as one: the kubelet's answer where no NUMA set
        # holds a memory request (no preference, then the Allocate failure), not the
        # plugin's refusal at admission of the container-by-container path
        if self.memory_provider is None:  # (no Memory Manager: no memory hints to change)
            unsatisfiable: list[str] = []
            result = self.tm.admit(pod)
        else:
            with self.kubelet_memory_hints() as unsatisfiable:
                result = self.tm.admit(pod)
        self.cpu_provider.allocated.clear()
        if not result.admit:
            for n in names:
                self._release(uid, n)
            self.tm.scope.forget_pod(uid)
            # the kubelet's pod admission result as is (reason: message), an allocation
            # error without an admission type included (UnexpectedAdmissionError, "Allocate
            # failed due to <error>, which is unexpected": admission.GetPodAdmitResult)
            text = kubelet_admission_text(
                result.reason, self._refusal_text(pod, result.reason, result.message, False),
                result.error)
            rec = PodAdmission(text, names, unsatisfiable=tuple(unsatisfiable),
                               at_sandbox=at_sandbox)
            log.info("pod %s/%s refused at admission%s: %s", namespace, pod_name,
                     " (its sandbox)" if at_sandbox else "", text)
            if unsatisfiable:
                log.info("pod %s/%s: %s", namespace, pod_name,
                         memory_unsatisfiable_text(unsatisfiable, self.tm.policy_name))
        else:
            held = set(self.state.assignments.get(uid, ()))
            if self.memory is not None:
                held |= set(self.memory.state.get_memory_assignments().get(uid, ()))
            rec = PodAdmission(None, names, frozenset(held & names), at_sandbox=at_sandbox)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("pod %s/%s admitted whole%s: %s", namespace, pod_name,
                          " at its sandbox" if at_sandbox else "", {
                              n: str(self.state.get_cpuset(uid, n) or "shared")
                              for n in sorted(names)})
        self.admissions[uid] = rec
        return rec

    def _apply_admission(self, info: ContainerInfo, rec: PodAdmission) -> Decision | None:
        """A container of a pod admitted whole gets its recorded decision: its CPUs and
        memory from the managers' states (entries of the admission), else the shared pool as
        it is now; a refused pod's, the kubelet's error. None when a pinned container's entry
        is gone (released by a removal of the container): the per-container rules then."""
        if rec.refused is not None:
            raise AdmissionError(rec.refused)
        self._release_finished_init_memory(info)
        key = info.key
        cpus = self.state.get_cpuset(*key) if self.static else None
        mem = self.memory.get_memory(*key) if self.memory is not None else None
        if info.name in rec.pinned and cpus is None and mem is None:
            return None
        self.tm.add_container(Pod(info.pod_uid), info.name, info.id)
        if mem is not None and self.memory is not None:
            self.memory.container_map[info.id] = key
        return self._decide(info, key, _as_cpuset(cpus) if cpus is not None else None)

    def _decide(self, info: ContainerInfo, key: tuple[str, str],
                cpus: CPUSet | None) -> Decision:
        """The decision for an admitted container ``info`` (state ``key``) with exclusive
        ``cpus`` (None or empty: the shared pool), tracked; a restart's stopped predecessor
        is forgotten."""
        old = self.owner.get(key)
        if old is not None and old != info.id:
            self.untrack(old)  # a restart replaces the stopped container
        mems = self.mems(key, cpus) if self.memory is not None or self.align_mems_with_cpus \
            else None  # (what mems() answers without either)
        if cpus:
            self.owner[key] = info.id
            self.track(info.id, Tracked(info, True, cpus, False, mems))
            return Decision(info.id, cpus, True, mems)
        if mems is not None:
            self.owner[key] = info.id
        self.track(info.id, Tracked(info, False, None, mems=mems))
        pool = self.shared_pool() if self.static else None
        return Decision(info.id, pool, mems=mems, quota=_restored_quota(info))

    def _release_finished_init_memory(self, info: ContainerInfo) -> None:
        """A container of a pod admitted whole starts: the regular init containers listed
        before it have run to completion, and the Memory Manager gives their memory back
        for other pods (memorymanager memory_manager.go AddContainer, v1.37.2); their CPUs
        stay assigned (the CPU manager's AddContainer keeps them)."""
        spec = info.pod_spec
        if self.memory is None or spec is None:
            return
        uid = info.pod_uid
        for n in spec.init_containers:
            if n == info.name:
                break
            c = spec.container(n)
            if c is None or c.restartable or self.memory.get_memory(uid, n) is None:
                continue
            self.memory.policy.remove_container(self.memory.state, uid, n)
            for cid, ref in list(self.memory.container_map.items()):
                if ref == (uid, n):
                    del self.memory.container_map[cid]
            t = self.containers.get(self.owner.get((uid, n), ""))
            if t is not None and t.exclusive:
                continue  # (its CPUs keep it the owner)
            self.owner.pop((uid, n), None)

    def admission_path(self, info: ContainerInfo) -> tuple[str, Pod]:
        """How :meth:`admit` would decide ``info`` now, and the pod its admission sees:
        ``("whole-pod", the spec's whole pod)`` (its pod's first container, spec known),
        ``("recorded", the spec's whole pod)`` (its pod was admitted whole: the recorded
        decision) or ``("per-container", this container plus, in pod scope, the pod's live
        ones)``. For ``explain`` and ``plan``; changes nothing."""
        rec = self.admissions.get(info.pod_uid)
        if rec is not None and info.name in rec.containers and info.pod_spec is not None:
            return "recorded", self._spec_pod(info)
        if rec is None and self.managed and self._whole_pod(info):
            return "whole-pod", self._spec_pod(info)
        return "per-container", self._admission_pod(info)

    def restore_admissions(self, body: Mapping[str, Any] | None) -> None:
        """Take the whole-pod admissions back from a checkpoint body (its ``admittedPods``
        section): the later containers of a pod admitted before a restart keep their
        recorded decisions. Malformed records are skipped (logged)."""
        for uid, doc in ((body or {}).get("admittedPods") or {}).items():
            try:
                self.admissions[str(uid)] = PodAdmission.from_json(doc)
            except ValueError as e:
                log.warning("checkpoint: admitted pod %s skipped: %s", uid, e)

    def _admission_pod(self, info: ContainerInfo) -> Pod:
        """The pod as admission sees it: this container, plus (pod scope) the pod's other
        live containers the runtime has told us about."""
        own = info.own_spec if info.pod_spec is not None else None
        if self.pod_level is not None and own is not None and info.pod_spec is not None \
                and info.pod_spec.pod_level:
            # a container of a pod with .spec.resources asks for its own resources (the
            # kubelet's managers read the container's spec: memorymanager policy_static.go
            # getContainerRequestedResources, cpumanager guaranteedCPUs, v1.37.2); NRI shows
            # the pod's limits for one without its own (kuberuntime getCPULimit /
            # getMemoryLimit), which the pod spec source tells apart
            specs, pod_level = [own], True
        else:
            specs, pod_level = [info.spec()], False
        if self.tm.scope_name == "pod":
            specs += [
                t.info.spec()
                for _, t in self.pod_containers(info.pod_uid)
                if t.info.name != info.name and not t.stopped
            ]
        # (positional: uid, name, namespace, containers, init_containers, qos,
        # pod_level_resources; a frozen dataclass's keyword call costs more, once per create)
        return Pod(info.pod_uid, info.pod_name, info.namespace, tuple(specs), (), info.qos,
                   pod_level)

    def mems(self, key: tuple[str, str], cpus: CPUSet | None) -> CPUSet | None:
        """The cpuset.mems of entry ``key`` (pod uid, container name) given ``cpus``: the
        Memory Manager's NUMA nodes for it, else (``align_mems_with_cpus``) the NUMA nodes of
        ``cpus``, else None (left alone)."""
        if self.memory is not None:
            mems = mems_for(self.memory.get_memory(*key))
            if mems:
                return mems
        if self.align_mems_with_cpus and cpus:
            details = self.policy.topology.details
            return CPUSet(details[c].numa for c in cpus)
        return None

    def update(self, container_id: str, resources: Resources | None = None) -> Decision | None:
        """An UpdateContainer (CRI UpdateContainerResources) for a tracked container: the
        cpuset it must keep, so an update cannot silently drop the pinning. With the new
        ``resources`` of an in-place resize, a container with exclusive CPUs is resized
        (nri_cpumgr.cm.podresources.resize; raises its ResizeRefused, nothing changes)."""
        t = self.containers.get(container_id)
        if t is None:
            return None
        if resources is not None and self.resizer.resize(container_id, resources):
            t.info = dataclasses.replace(t.info, resources=resources)
            self.row_changed(container_id)
        cpus = self.shared_pool() if t.shared and self.static else t.applied
        if cpus is None and t.mems is None:
            return None
        return Decision(container_id, cpus, exclusive=t.exclusive, mems=t.mems)

    def stop(self, container_id: str) -> None:
        """A container stopped: it keeps its exclusive CPUs (for a restart) until removal."""
        t = self.containers.get(container_id)
        if t is not None:
            t.stopped = True
            self.row_changed(container_id)

    def remove(self, container_id: str) -> None:
        """A container was removed (or its creation failed): release its CPUs (the shared
        pool grows; the caller moves the shared containers)."""
        t = self.untrack(container_id)
        if t is None:
            return
        self.tm.remove_container(container_id)
        if self.owner.get(t.info.key) == container_id:
            del self.owner[t.info.key]
            self._release(t.info.pod_uid, t.info.name)
            self.resizer.forget(t.info.pod_uid, t.info.name)

    def remove_pod(self, pod_uid: str) -> None:
        """A pod sandbox stopped or was removed: release every container of the pod."""
        for cid, _ in self.pod_containers(pod_uid):
            t = self.untrack(cid)
            assert t is not None
            if self.owner.get(t.info.key) == cid:
                del self.owner[t.info.key]
            self.tm.remove_container(cid)
        if self.pod_level is not None:
            self.pod_level.pod_removed(pod_uid)
        if self.admissions.pop(pod_uid, None) is not None:
            self.tm.scope.forget_pod(pod_uid)  # hints of containers never created
        self.resizer.forget(pod_uid)
        names = set(self.state.assignments.get(pod_uid, {}))
        if self.memory is not None:
            names |= set(self.memory.state.get_memory_assignments().get(pod_uid, {}))
        for name in names:
            self._release(pod_uid, name)

    def plain_shared_possible(self) -> bool:
        """Whether :meth:`synchronize` takes ``plain`` containers (static policy, no pod-level
        manager): shared-pool containers it decides from their id, pod, name and cpuset."""
        return self.static and self.pod_level is None

    def pinned_pods(self) -> set[str]:
        """Uids of the pods holding exclusive CPUs or memory (their containers are never
        ``plain``)."""
        pods = set(self.state.assignments)
        if self.memory is not None:
            pods |= set(self.memory.state.get_memory_assignments())
        return pods

    def track_plain(self, infos: Iterable[ContainerInfo]) -> None:
        """Track the ``plain`` containers of the last :meth:`synchronize` (what it decided
        for them from four strings), now with their full records. Call it before any other
        event."""
        for i in infos:
            self.track(i.id, Tracked(i, False, None))

    def needs_pod_specs(self, infos: Iterable[ContainerInfo]) -> bool:
        """Whether a :meth:`synchronize` of ``infos`` (the live containers, before it) may
        decide one of them differently with its pod's spec facts: a Guaranteed container
        the state holds no CPUs or memory for (it is adopted or admitted, where the facts
        count: pod-level pods, whole-pod admission). A container the state knows gets its
        assignment back whatever the facts (:meth:`_restore_assignments`, a runtime resize
        included); the whole-pod admission records and the pod-level bubbles are read
        without them. Pure (no I/O); False when not managed."""
        if not self.managed:
            return False
        guaranteed = QOSClass.GUARANTEED
        return any(i.qos is guaranteed and not self._restorable(i) for i in infos)

    def attach_pod_specs(self, facts: Callable[[str], PodSpecFacts | None]) -> int:
        """Give the tracked Guaranteed containers without pod spec facts those of their
        pod (``facts``: pod uid -> facts or None), as a Synchronize with the facts would
        have tracked them (a later reconfiguration plans with them). Returns how many got
        them; decides nothing."""
        n = 0
        guaranteed = QOSClass.GUARANTEED
        for t in self.containers.values():
            i = t.info
            if i.qos is guaranteed and i.pod_spec is None:
                f = facts(i.pod_uid)
                if f is not None:
                    t.info = dataclasses.replace(i, pod_spec=f)
                    n += 1
        return n

    def _restorable(self, i: ContainerInfo) -> bool:
        """The state holds CPUs or memory for ``i``'s (pod, name): :meth:`synchronize`
        gives them back (``i`` is not ``pending`` in :meth:`_restore_assignments`)."""
        if self.state.assignments.get(i.pod_uid, {}).get(i.name) is not None:
            return True
        return self.memory is not None and self.memory.get_memory(*i.key) is not None

    def synchronize(
        self,
        infos: Iterable[ContainerInfo],
        device_numa: dict[str, frozenset[int]] | None = None,
        *,
        live_pods: Iterable[str] | None = None,
        stopped: Iterable[ContainerInfo] = (),
        plain: Sequence[tuple[str, str, str, str]] = (),
    ) -> dict[str, Decision]:
        """Reconcile with the runtime's list of existing containers (the runtime's truth wins).

        ``infos``: the live (created, running, paused) containers; ``live_pods``: uids of the
        pod sandboxes the runtime still has (``None``: the pods of ``infos``); ``stopped``:
        exited containers the runtime still lists; ``device_numa``: container id -> NUMA
        nodes of its devices. ``plain`` (only when :meth:`plain_shared_possible`, else
        ValueError): live containers that can only be in the shared pool (Burstable or
        BestEffort by their pod's cgroup, no devices, pod not in :meth:`pinned_pods`), as
        ``(container id, pod uid, name, cpuset the runtime reports)``, decided without a
        :class:`ContainerInfo` and tracked by :meth:`track_plain` afterwards (the caller
        builds their records after its reply: most of a node's containers, and the runtime
        holds its lock until the reply). Returns the updates to send (container id ->
        decision: cpus, exclusive, mems, and a CFS quota to restore for a container that
        lost its exclusive CPUs).

        The state is the checkpoint's, which may predate the runtime's last changes (written
        after the replies, lost in a crash): where the runtime shows a newer decision whose
        CPUs are free, the runtime wins (docs/concepts/crash-after-a-change.md). The phases
        run in this order, each settling what the next relies on; their docstrings say what
        each decides and from what.
        """
        if plain and not self.plain_shared_possible():
            raise ValueError("plain containers need the static policy without pod-level "
                             "resource managers")
        infos = list(infos)
        self._forget_tracking()
        if not self.managed:
            for i in infos:
                self.track(i.id, Tracked(i, False, None))
            return {}
        pods = _live_pod_uids(infos, live_pods, plain)
        self._forget_gone_pods(pods)
        live_keys = {i.key for i in infos}
        live_keys.update((uid, name) for _, uid, name, _ in plain)
        self._keep_stopped(stopped, live_keys, pods)
        updates: dict[str, Decision] = {}
        pending, resized = self._restore_assignments(infos, plain, updates)
        self._adopt_runtime_resizes(resized, updates)
        self._release_reused_cpus(pending, live_keys)
        if self.pod_level is not None:
            self.pod_level.adopt(pending)
        rest = self._adopt_applied_cpusets(pending)
        self._synchronizing = True
        try:
            self._admit_rest(rest, device_numa or {}, updates)
        finally:
            self._synchronizing = False
        if self.pod_level is not None:
            self.pod_level.after_synchronize(updates)
        if self.static:
            self._update_shared_containers(updates, plain)
        return updates

    # ------------------------------------------------------- synchronize phases
    def _forget_tracking(self) -> None:
        """Synchronize, first: drop every record of the containers (rows, pod index,
        owners, the Memory Manager's container ids), which the runtime's list rebuilds. The
        state (the checkpoint's assignments) is kept: the phases below judge it."""
        self.containers.clear()
        self._row_text.clear()
        self._row_dirty.clear()
        self._shared_rows.clear()
        self._own_rows.clear()
        self._shared_block = None
        self._by_pod.clear()
        self.owner.clear()
        if self.memory is not None:
            self.memory.container_map.clear()

    def _forget_gone_pods(self, pods: set[str]) -> None:
        """Release the CPU and memory assignments of the pods not in ``pods`` (the pod
        sandboxes the runtime still has): a pod deleted while the plugin was away."""
        for uid in [u for u in self.admissions if u not in pods]:
            del self.admissions[uid]
        for uid in list(self.state.assignments):
            if uid not in pods:
                for name in list(self.state.assignments[uid]):
                    self.policy.remove_container(self.state, uid, name)
        if self.memory is not None:
            for uid, conts in list(self.memory.state.get_memory_assignments().items()):
                if uid not in pods:
                    for name in list(conts):
                        self.memory.policy.remove_container(self.memory.state, uid, name)

    def _keep_stopped(
        self, stopped: Iterable[ContainerInfo], live_keys: set[tuple[str, str]],
        pods: set[str],
    ) -> None:
        """Track the exited containers the runtime lists (``stopped``) that hold CPUs or
        memory in the state, their pod alive (in ``pods``) and no live container of their
        (pod, name) in ``live_keys``: they keep what they hold for their restart (the
        kubelet keeps the assignments of every container of an active pod)."""
        for i in stopped:
            if i.key in live_keys or i.pod_uid not in pods:
                continue
            cpus = self.state.assignments.get(i.pod_uid, {}).get(i.name)
            mem = self.memory.get_memory(*i.key) if self.memory is not None else None
            if cpus is None and mem is None:
                continue
            self.owner[i.key] = i.id
            self.track(i.id, Tracked(i, cpus is not None, CPUSet(cpus) if cpus else None,
                                     stopped=True, mems=mems_for(mem) if mem else None))

    def _restore_assignments(
        self, infos: list[ContainerInfo], plain: _PlainRows,
        updates: dict[str, Decision],
    ) -> tuple[list[ContainerInfo], list[tuple[ContainerInfo, Tracked, CPUSet]]]:
        """The live containers against the state (the checkpoint): a container of a pod
        holding nothing that asks for nothing (not Guaranteed, no devices; ``plain`` ones
        alike) is shared, its pod's exited pinned containers released; one the state has
        CPUs or memory for gets them back, with an update where the runtime reports another
        cpuset, unless that cpuset looks like a resize the checkpoint missed (returned in
        ``resized``: container, record, the runtime's cpuset). Returns ``(pending,
        resized)``: ``pending`` are the live containers the state knows nothing of."""
        pending: list[ContainerInfo] = []
        resized: list[tuple[ContainerInfo, Tracked, CPUSet]] = []
        assignments = self.state.assignments
        memory = self.memory
        memory_pods = memory.state.get_memory_assignments() if memory is not None else {}
        by_pod = self._by_pod
        guaranteed = QOSClass.GUARANTEED
        for _, uid, name, _ in plain:  # what the fast path below does, minus the tracking
            if uid in by_pod:
                self._release_stopped_of_pod(uid, keep=name)
        for i in infos:
            uid = i.pod_uid
            if (uid not in assignments and uid not in memory_pods and i.qos is not guaranteed
                    and not i.devices):
                # a plain shared-pool container (most of a node): nothing to restore, adopt or
                # admit; what _admit_rest does for it, minus the checks
                if uid in by_pod:
                    self._release_stopped_of_pod(uid, keep=i.name)
                self.track(i.id, Tracked(i, False, None))
                continue
            # (what _restorable says, the values kept: needs_pod_specs relies on it)
            assigned = assignments.get(uid, {}).get(i.name)
            mems = None
            if memory is not None and memory.get_memory(*i.key) is not None:
                mems = mems_for(memory.get_memory(*i.key))
                memory.container_map[i.id] = i.key
            if assigned is not None or mems is not None:
                self.owner[i.key] = i.id
                cpus = CPUSet(assigned) if assigned is not None else None
                t = Tracked(i, cpus is not None, cpus, mems=mems)
                self.track(i.id, t)
                if cpus is not None and (cur := CPUSet.parse(i.cpus)) != cpus:
                    if self._resized_by_runtime(i, cpus, cur):
                        resized.append((i, t, cur))  # decided by _adopt_runtime_resizes
                    else:
                        updates[i.id] = Decision(i.id, cpus, exclusive=True, mems=mems)
            else:
                pending.append(i)
        return pending, resized

    def _adopt_runtime_resizes(
        self, resized: list[tuple[ContainerInfo, Tracked, CPUSet]],
        updates: dict[str, Decision],
    ) -> None:
        """Resizes the runtime applied after the checkpoint was written (from
        :meth:`_restore_assignments`): the runtime's cpuset where the CPUs it adds are free,
        else an update back to the checkpoint's. Shrinks first: a shrink frees CPUs a grow
        may have taken."""
        resized.sort(key=lambda r: len(r[2]) - len(r[1].applied or ()))
        for i, t, cur in resized:
            if not self._adopt_resize(i, t, cur):
                updates[i.id] = Decision(i.id, t.applied, exclusive=True, mems=t.mems)

    def _release_reused_cpus(
        self, pending: list[ContainerInfo], live_keys: set[tuple[str, str]]
    ) -> None:
        """Before any adoption, whatever order the runtime lists them in: a Guaranteed
        container the state does not know (``pending``) that was admitted after the
        checkpoint was written released its pod's exited containers' CPUs first (admit: the
        kubelet's reuse of init containers' CPUs); release them again here, the tracked
        exited ones and those the runtime no longer lists (not in ``live_keys``)."""
        for i in pending:
            if i.qos is QOSClass.GUARANTEED:
                self._release_stopped_of_pod(i.pod_uid, keep=i.name)
                self._release_reused(i, live_keys)

    def _adopt_applied_cpusets(self, pending: list[ContainerInfo]) -> list[ContainerInfo]:
        """Before admitting anybody, so that an admission never takes the CPUs a running
        container holds: adopt the exclusive cpuset the runtime reports for a Guaranteed
        container of ``pending`` when it has the requested size and its CPUs are free and
        not reserved (never a pod-level pod's pool, which is not the container's own).
        Returns the containers left to admit."""
        rest: list[ContainerInfo] = []
        for i in pending:
            want = i.spec().guaranteed_cpus() if i.qos is QOSClass.GUARANTEED else 0
            if want and i.pod_spec is not None and i.pod_spec.pod_level and (
                    self.pod_level is None or i.own_spec is None
                    or not qualifies_for_slice(i.own_spec)):
                want = 0  # its cpuset is a pool (the node's or its pod's), not its own
            current = CPUSet.parse(i.cpus) if want and i.cpus else CPUSet()
            if self.static and want and len(current) == want and self._adopt(i, current):
                self.owner[i.key] = i.id
                self.track(i.id, Tracked(i, True, current, mems=self.mems(i.key, current)))
            else:
                rest.append(i)
        return rest

    def _admit_rest(
        self, rest: list[ContainerInfo], device_numa: Mapping[str, frozenset[int]],
        updates: dict[str, Decision],
    ) -> None:
        """Admit what no earlier phase settled (``rest``), Guaranteed containers first (a
        shared container's cpuset is only known once every exclusive one is settled), with
        their devices' NUMA nodes (``device_numa``, by container id). An update where the
        decision differs from what the runtime reports; a container refused stays shared,
        its CFS quota restored (see :func:`_restored_quota`)."""
        rest.sort(key=lambda i: 0 if i.qos is QOSClass.GUARANTEED else 1)
        for i in rest:
            if i.qos is not QOSClass.GUARANTEED and not i.devices:
                # what admit does for it (no provider has a hint), minus the Decision we
                # would drop: _update_shared_containers settles its cpuset
                self._release_stopped_of_pod(i.pod_uid, keep=i.name)
                self.track(i.id, Tracked(i, False, None))
                continue
            current = CPUSet.parse(i.cpus) if i.cpus else CPUSet()
            try:
                d = self.admit(i, device_numa.get(i.id, frozenset()))
            except AdmissionError as e:
                log.warning("synchronize: cannot pin %s/%s: %s", i.pod_name, i.name, e)
                self.track(i.id, Tracked(i, False, None))
                q = _restored_quota(i)
                if self.static and q is not None:
                    updates[i.id] = Decision(i.id, None, quota=q)
                continue
            if d.exclusive and d.cpus != current:
                updates[i.id] = d
            elif not d.exclusive and d.quota is not None:
                updates[i.id] = d

    def _update_shared_containers(
        self, updates: dict[str, Decision], plain: _PlainRows
    ) -> None:
        """Last, the static policy's shared pool being final: every live shared container
        (tracked, and ``plain``) whose reported cpuset is not the pool gets an update to it
        (keeping a quota an earlier phase restores); one already on it loses any earlier,
        staler update."""
        pool = self.shared_pool()
        pool_text = str(pool)  # the runtime mostly reports it as we wrote it: no set compare
        for cid, t in self.containers.items():
            if t.shared and not t.stopped:
                prev = updates.get(cid)
                cur = t.info.cpus
                if (cur != pool_text and CPUSet.parse(cur) != pool) or (
                    prev is not None and prev.quota
                ):
                    updates[cid] = Decision(cid, pool, mems=t.mems,
                                            quota=prev.quota if prev is not None else None)
                else:
                    updates.pop(cid, None)  # already right: drop any earlier, staler update
        for cid, _, _, cur in plain:
            if cur != pool_text and CPUSet.parse(cur) != pool:
                updates[cid] = Decision(cid, pool)

    # ------------------------------------------------------------------ helpers
    def _release(self, pod_uid: str, name: str) -> None:
        """Give a container's CPUs and memory back."""
        if self.static:
            self.policy.remove_container(self.state, pod_uid, name)
        if self.memory is not None:
            self.memory.policy.remove_container(self.memory.state, pod_uid, name)
            for cid, ref in list(self.memory.container_map.items()):
                if ref == (pod_uid, name):
                    del self.memory.container_map[cid]
        self.devices.current.pop((pod_uid, name), None)

    def _adopt(self, i: ContainerInfo, cpus: CPUSet) -> bool:
        """Take over an exclusive cpuset the runtime reports for a container the state does
        not know (created while the state was lost), if those CPUs are free and not
        reserved."""
        if not cpus <= self.policy.available_cpus(self.state):
            return False
        self.state.set_cpuset(i.pod_uid, i.name, cpus)
        self.state.default_set = self.state.default_set - cpus
        return True

    def _release_reused(self, i: ContainerInfo, live: set[tuple[str, str]]) -> None:
        """At Synchronize, for a live container the state has no assignment for: where its
        cpuset (of the size it asks for) is held by other containers of its pod that the
        runtime does not list (exited: containerd lists no exited container), it reused
        their CPUs when it was admitted after the checkpoint (the kubelet's reuse of
        finished init containers' CPUs; :meth:`admit` released them): release them so the
        cpuset is adopted. A pod-level pod's slices are left to its manager."""
        if not self.static or not i.cpus:
            return
        uid = i.pod_uid
        conts = self.state.assignments.get(uid, {})
        if not conts or POD_ENTRY in conts or uid in self.admissions:
            return
        cur = CPUSet.parse(i.cpus)
        if len(cur) != i.spec().guaranteed_cpus():
            return
        free = self.policy.available_cpus(self.state)
        if cur <= free:
            return
        gone = [name for name, cpus in conts.items()
                if name != i.name and (uid, name) not in live and cpus & cur]
        held = CPUSet()
        for name in gone:
            held = held | conts[name]
        if not gone or not cur <= free | held:
            return
        for name in gone:
            log.info("synchronize: pod %s/%s container %s reuses the CPUs of %s, which has "
                     "exited: released", i.namespace, i.pod_name, i.name, name)
            self._release(uid, name)
            self.resizer.forget(uid, name)

    def _resized_by_runtime(self, i: ContainerInfo, cpus: CPUSet, cur: CPUSet) -> bool:
        """The runtime reports a live container with exclusive CPUs ``cpus`` (checkpoint) on
        ``cur``, with resources that ask for ``len(cur)`` CPUs, not ``len(cpus)``: an in-place
        resize the plugin answered (the runtime applies the new resources and our cpuset in
        one update) after the checkpoint was written. Only with the resize gate on (off,
        every resize is refused), never for a slice of a pod-level budget (not resized)."""
        if not (self.static and self.resizer.cpus_gate and cur and i.qos is QOSClass.GUARANTEED):
            return False
        if self.state.get_cpuset(i.pod_uid, POD_ENTRY) is not None:
            return False
        want = i.spec().guaranteed_cpus()
        return want == len(cur) != len(cpus)

    def _adopt_resize(self, i: ContainerInfo, t: Tracked, cur: CPUSet) -> bool:
        """Take the runtime's ``cur`` as the container's exclusive CPUs (a resize the
        checkpoint missed) if the CPUs it adds are free and not reserved; the CPUs it gave up
        go back to the shared pool (unless another container of the pod holds them).
        False: nothing changed."""
        old = t.applied
        assert old is not None
        if not (cur - old) <= self.policy.available_cpus(self.state):
            return False
        uid, name = i.key
        in_use = CPUSet()
        for other, cpus in self.state.assignments.get(uid, {}).items():
            if other != name:
                in_use = in_use | cpus
        self.state.set_cpuset(uid, name, cur)
        self.state.default_set = (self.state.default_set | ((old - cur) - in_use)) - cur
        t.applied = cur
        self.row_changed(i.id)
        self.resizer.adopted(i.key, old, cur)
        log.info("synchronize: pod %s/%s container %s was resized after the last checkpoint: "
                 "keeps the runtime's cpus=%s (checkpoint %s)", i.namespace, i.pod_name, i.name,
                 cur, old)
        return True

    def _release_stopped_of_pod(self, pod_uid: str, keep: str) -> None:
        """NRI alone (no record of a whole-pod admission): the pod's stopped pinned
        containers other than ``keep`` release what they hold (the runtime does not say
        which are finished init containers). A pod admitted whole keeps them, as the
        kubelet does for the pod's life."""
        if pod_uid in self.admissions:
            return
        for cid, t in self.pod_containers(pod_uid):
            i = t.info
            pinned = t.exclusive or t.mems is not None
            if t.stopped and pinned and i.name != keep:
                self.untrack(cid)
                if self.owner.get(i.key) == cid:
                    del self.owner[i.key]
                    self._release(pod_uid, i.name)

    def checkpoint(self, encoded: bool = False) -> dict[str, Any]:
        """The state to persist: the kubelet's cpu_manager_state keys plus container rows.
        ``encoded``: the rows as :class:`~nri_cpumgr.jsontext.RawJSON` (their
        canonical text from :meth:`rows_json`, kept per container) where that applies."""
        text = self.rows_json() if encoded else None
        return {
            "policyName": "static" if self.static else "none",
            "defaultCpuSet": format_mask(self.state.default_mask),  # (no set built for it)
            "reservedCpuSet": str(self.policy.reserved_cpus) if self.static else "",
            "entries": {
                uid: {name: str(cpus) for name, cpus in conts.items()}
                for uid, conts in self.state.assignments.items()
                if conts
            },
            "containers": text if text is not None else self._annotated(self.rows()),
            **self._pod_level_sections(encoded),
        }

    def _annotated(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows with the container's pool (pod-level resource managers) and last resize."""
        if self.pod_level is None and not self.resizer.resized:
            return rows
        resized = self.resizer.rows()
        for r in rows:
            if self.pod_level is not None:
                r["pool"] = self.pod_level.role(r["id"])
            if f"{r['podUID']}/{r['container']}" in resized:
                r["resized"] = resized[f"{r['podUID']}/{r['container']}"]
        return rows

    def _pod_level_sections(self, encoded: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.pod_level is not None:
            out["podPools"] = self.pod_level.pools()
        if self.resizer.resized:
            out["resized"] = self.resizer.rows()
        if self.admissions:
            out["admittedPods"] = self.admissions_json() if encoded else {
                uid: r.to_json() for uid, r in self.admissions.items()}
        return out

    def admissions_json(self) -> RawJSON:
        """The checkpoint's ``admittedPods`` section (pod uid -> :meth:`PodAdmission.to_json`)
        as canonical JSON text, as ``json.dumps(..., sort_keys=True, separators=(",", ":"))``
        gives it. A record is encoded once (it is immutable) and its text kept while the
        pod's record is that object: the checkpoint written before each release's reply
        (the chart's default watches pod specs, so every pod of the node has a record)
        sorts and joins the texts instead of encoding every record again."""
        texts, admissions = self._admission_text, self.admissions
        parts: list[bytes] = []
        for uid in sorted(admissions):
            rec = admissions[uid]
            hit = texts.get(uid)
            if hit is None or hit[0] is not rec:
                hit = texts[uid] = (rec, encode(uid) + b":" + encode(rec.to_json()))
            parts.append(hit[1])
        if len(texts) > len(admissions):  # (pods gone: their texts too)
            for uid in [u for u in texts if u not in admissions]:
                del texts[uid]
        return RawJSON(b"{" + b",".join(parts) + b"}")


def _row(cid: str, t: Tracked, cpus: str, numa: str) -> dict[str, Any]:
    i = t.info
    return {
        "id": cid,
        "pod": f"{i.namespace}/{i.pod_name}",
        "podUID": i.pod_uid,
        "container": i.name,
        "qos": str(i.qos),
        "exclusive": t.exclusive,
        "cpus": cpus,
        "mems": str(t.mems) if t.mems is not None else "",
        "numa": numa,
        "stopped": t.stopped,
    }


# where a shared row's cpus and NUMA nodes go: encoded JSON never holds a raw control
# character (one in a string is escaped), so the markers cannot occur in the text around
# them; one byte each, as bytes.replace is several times faster for a single byte
_POOL_CPUS, _POOL_NUMA = b"\x00", b"\x01"
#: how many fillings of the shared rows (one per pool) are kept
_SHARED_FILLED_KEPT = 4
_CPUS_KEY, _NUMA_KEY = b'"cpus":', b'"numa":'


def _encode_row(
    cid: str, t: Tracked, strings: Callable[[CPUSet], tuple[str, str]]
) -> bytes:
    """A row's canonical JSON; for a shared container (its cpus are the shared pool's) with
    :data:`_POOL_CPUS` and :data:`_POOL_NUMA` instead of the two values."""
    if not t.shared:
        cpus_s, numa_s = strings(t.applied) if t.applied is not None else ("", "")
        return encode(_row(cid, t, cpus_s, numa_s))
    text = encode(_row(cid, t, "", ""))
    i = text.index(_CPUS_KEY + b'""') + len(_CPUS_KEY)
    j = text.index(_NUMA_KEY + b'""', i) + len(_NUMA_KEY)
    return text[:i] + _POOL_CPUS + text[i + 2:j] + _POOL_NUMA + text[j + 2:]


def _live_pod_uids(
    infos: list[ContainerInfo], live_pods: Iterable[str] | None,
    plain: _PlainRows,
) -> set[str]:
    """Synchronize: the uids of the live pods: the pod sandboxes the runtime lists
    (``live_pods``; ``None``: it did not say) and the pods of the live containers
    (``infos``, ``plain``)."""
    pods = set(live_pods) if live_pods is not None else {i.pod_uid for i in infos}
    pods |= {i.pod_uid for i in infos}
    pods.update(uid for _, uid, _, _ in plain)
    return pods


def _restored_quota(info: ContainerInfo) -> int | None:
    """The CFS quota (microseconds per period) a container that is not exclusive must get
    back when the runtime reports it unlimited (``-1``, as we set it for exclusive CPUs):
    its CPU limit x period, the kubelet's MilliCPUToQuota (kubelet cm/helpers_linux.go;
    minimum 1000 us). For a Guaranteed container the limit equals the request, which the
    runtime still reports through cpu.shares. ``None``: nothing to restore."""
    r = info.resources
    if r.cpu_quota is None or r.cpu_quota >= 0 or info.qos is not GUARANTEED:
        return None
    milli = r.cpu_limit_milli or (r.integer_cpus * 1000) or r.cpu_request_milli
    if not milli:
        return None
    period = r.cpu_period or 100000
    return max(1000, milli * period // 1000)


def _as_cpuset(cpus: Iterable[int]) -> CPUSet:
    """``cpus`` as a :class:`CPUSet`: itself when it is one (a copy would lose the bitmask
    its string form is written from)."""
    return cpus if type(cpus) is CPUSet else CPUSet(cpus)


def _whole_spec_pod(uid: str, name: str, namespace: str, qos: QOSClass,
                    spec: PodSpecFacts) -> Pod:
    """The whole pod as its spec gives it: init containers in order, then the app containers
    (the kubelet's admission order)."""
    inits = spec.init_containers
    # (positional: uid, name, namespace, containers, init_containers, qos,
    # pod_level_resources; a frozen dataclass's keyword call costs more, once per pod)
    return Pod(uid, name, namespace,
               tuple(c for n, c in spec.containers.items() if n not in inits)
               if inits else tuple(spec.containers.values()),
               tuple(spec.containers[n] for n in inits), qos, spec.pod_level)


def _native_resource(name: str) -> bool:
    """A resource no device plugin serves: a name without a domain (cpu, memory,
    hugepages-<size>, ephemeral-storage) or one in a ``kubernetes.io/`` domain (kubernetes
    pkg/apis/core/v1/helper IsNativeResource, v1.37.2); an extended resource
    (``vendor.example/gpu``) may be a device with a NUMA node."""
    return "/" not in name or "kubernetes.io/" in name
