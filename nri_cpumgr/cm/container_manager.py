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
* When the shared pool changes, every running shared-pool container is updated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import Pod
from nri_cpumgr.podmodel.nri import ContainerInfo

log = logging.getLogger(__name__)


class AdmissionError(Exception):
    """A container cannot be admitted. ``str()`` carries the kubelet's error name
    (SMTAlignmentError, TopologyAffinityError, ...) and the numbers."""


@dataclass(slots=True)
class Decision:
    """What to do for one new (or re-synchronized) container.

    ``cpus``: the container's cpuset (never empty; ``None`` = leave it alone, as the ``none``
    policy does). ``exclusive``: the CPUs are the container's alone (clear its CFS quota).
    ``updates``: other containers' new cpusets (container id -> cpus), because the shared pool
    changed.
    """

    container_id: str
    cpus: CPUSet | None
    exclusive: bool = False
    mems: CPUSet | None = None
    updates: dict[str, CPUSet] = field(default_factory=dict)


@dataclass(slots=True)
class _Tracked:
    info: ContainerInfo
    exclusive: bool
    applied: CPUSet | None  # the cpuset we last gave it (None: we never set one)
    stopped: bool = False


class ContainerManager:
    """Tracks containers and asks the CPU policy for decisions.

    ``policy`` is a :class:`StaticPolicy` or :class:`NonePolicy`; ``state`` the CPU manager
    state (assignments per pod uid / container name, and the default set).
    """

    def __init__(self, policy: StaticPolicy | NonePolicy, state: CPUManagerState) -> None:
        self.policy = policy
        self.state = state
        self.containers: dict[str, _Tracked] = {}
        self._owner: dict[tuple[str, str], str] = {}  # (pod uid, name) -> container id
        self.static = isinstance(policy, StaticPolicy)

    # ------------------------------------------------------------------ queries
    def shared_pool(self) -> CPUSet:
        """CPUs the shared-pool containers run on now (never empty)."""
        pool = self.policy.shared_pool(self.state) if self.static else CPUSet()
        if not pool and self.static:
            pool = self.policy.reserved_cpus
        return pool

    def exclusive_cpus(self) -> CPUSet:
        out: set[int] = set()
        for conts in self.state.assignments.values():
            for cpus in conts.values():
                out |= cpus
        return CPUSet(out)

    def rows(self) -> list[dict[str, Any]]:
        """One row per tracked container (for logs and the status command)."""
        out = []
        for cid, t in sorted(self.containers.items(), key=lambda kv: kv[1].info.key):
            i = t.info
            out.append(
                {
                    "id": cid,
                    "pod": f"{i.namespace}/{i.pod_name}",
                    "podUID": i.pod_uid,
                    "container": i.name,
                    "qos": str(i.qos),
                    "exclusive": t.exclusive,
                    "cpus": str(t.applied) if t.applied is not None else "",
                    "stopped": t.stopped,
                }
            )
        return out

    # ------------------------------------------------------------------ events
    def admit(self, info: ContainerInfo) -> Decision:
        """Decide the cpuset of a container being created. Raises :class:`AdmissionError`
        (nothing changes then)."""
        if not self.static:
            self.containers[info.id] = _Tracked(info, False, None)
            return Decision(info.id, None)
        before = self.shared_pool()
        self._release_stopped_of_pod(info.pod_uid, keep=info.name)
        pod = Pod(
            uid=info.pod_uid,
            name=info.pod_name,
            namespace=info.namespace,
            containers=(info.spec(),),
            qos=info.qos,
        )
        try:
            cpus = self.policy.allocate(self.state, pod, info.name)
        except Exception as e:  # typed policy errors carry the kubelet's names
            raise AdmissionError(_admission_text(e)) from e
        old = self._owner.get(info.key)
        if old is not None and old != info.id:
            self.containers.pop(old, None)  # a restart replaces the stopped container
        if cpus:
            self._owner[info.key] = info.id
            self.containers[info.id] = _Tracked(info, True, CPUSet(cpus))
            updates = self._shared_updates(before)
            return Decision(info.id, CPUSet(cpus), exclusive=True, updates=updates)
        pool = self.shared_pool()
        self.containers[info.id] = _Tracked(info, False, pool)
        return Decision(info.id, pool, updates=self._shared_updates(before, skip=info.id))

    def update(self, container_id: str) -> Decision | None:
        """An UpdateContainer (CRI UpdateContainerResources) for a tracked container: the
        cpuset it must keep, so an update cannot silently drop the pinning."""
        t = self.containers.get(container_id)
        if t is None or t.applied is None:
            return None
        return Decision(container_id, t.applied, exclusive=t.exclusive)

    def stop(self, container_id: str) -> dict[str, CPUSet]:
        """A container stopped: it keeps its exclusive CPUs (for a restart) until removal."""
        t = self.containers.get(container_id)
        if t is not None:
            t.stopped = True
        return {}

    def remove(self, container_id: str) -> dict[str, CPUSet]:
        """A container was removed (or its creation failed): release its CPUs. Returns the
        shared-pool updates."""
        t = self.containers.pop(container_id, None)
        if t is None:
            return {}
        before = self.shared_pool()
        if self._owner.get(t.info.key) == container_id:
            del self._owner[t.info.key]
            if self.static:
                self.policy.remove_container(self.state, t.info.pod_uid, t.info.name)
        return self._shared_updates(before)

    def remove_pod(self, pod_uid: str) -> dict[str, CPUSet]:
        """A pod sandbox stopped or was removed: release every container of the pod."""
        before = self.shared_pool()
        for cid in [c for c, t in self.containers.items() if t.info.pod_uid == pod_uid]:
            t = self.containers.pop(cid)
            if self._owner.get(t.info.key) == cid:
                del self._owner[t.info.key]
        if self.static:
            for name in list(self.state.assignments.get(pod_uid, {})):
                self.policy.remove_container(self.state, pod_uid, name)
        return self._shared_updates(before)

    def synchronize(self, infos: Iterable[ContainerInfo]) -> dict[str, CPUSet]:
        """Reconcile with the runtime's list of existing containers (the runtime's truth wins).

        Exclusive assignments of the restored state whose containers still exist are kept;
        a Guaranteed container running on an exclusive-looking cpuset that the state does not
        know is adopted when those CPUs are free; assignments of vanished containers are
        forgotten; Guaranteed containers without CPUs get them now; every shared container is
        set to the shared pool. Returns the updates to send (container id -> cpus).
        """
        infos = [i for i in infos]
        self.containers.clear()
        self._owner.clear()
        if not self.static:
            for i in infos:
                self.containers[i.id] = _Tracked(i, False, None)
            return {}
        live = {i.key for i in infos}
        for uid in list(self.state.assignments):
            for name in list(self.state.assignments[uid]):
                if (uid, name) not in live:
                    self.policy.remove_container(self.state, uid, name)
        updates: dict[str, CPUSet] = {}
        pending: list[ContainerInfo] = []
        for i in infos:
            assigned = self.state.assignments.get(i.pod_uid, {}).get(i.name)
            if assigned is not None:
                self._owner[i.key] = i.id
                self.containers[i.id] = _Tracked(i, True, CPUSet(assigned))
                if CPUSet.parse(i.cpus) != assigned:
                    updates[i.id] = CPUSet(assigned)
            else:
                pending.append(i)
        for i in pending:
            want = i.spec().guaranteed_cpus() if str(i.qos) == "Guaranteed" else 0
            current = CPUSet.parse(i.cpus) if i.cpus else CPUSet()
            if want and len(current) == want and self._adopt(i, current):
                self._owner[i.key] = i.id
                self.containers[i.id] = _Tracked(i, True, current)
                continue
            try:
                d = self.admit(i)
            except AdmissionError as e:
                log.warning("synchronize: cannot pin %s/%s: %s", i.pod_name, i.name, e)
                self.containers[i.id] = _Tracked(i, False, None)
                continue
            if d.cpus is not None and d.cpus != current:
                updates[i.id] = d.cpus
        pool = self.shared_pool()
        for cid, t in self.containers.items():
            if not t.exclusive:
                t.applied = pool
                if CPUSet.parse(t.info.cpus) != pool:
                    updates[cid] = pool
        return updates

    # ------------------------------------------------------------------ helpers
    def _adopt(self, i: ContainerInfo, cpus: CPUSet) -> bool:
        """Take over an exclusive cpuset the runtime reports for a container the state does
        not know (created while the state was lost), if those CPUs are free and not
        reserved."""
        free = self.state.default_set - self.policy.reserved_cpus
        if not cpus <= free:
            return False
        self.state.assignments.setdefault(i.pod_uid, {})[i.name] = cpus
        self.state.default_set = self.state.default_set - cpus
        return True

    def _release_stopped_of_pod(self, pod_uid: str, keep: str) -> None:
        for cid, t in list(self.containers.items()):
            i = t.info
            if i.pod_uid == pod_uid and t.stopped and t.exclusive and i.name != keep:
                self.containers.pop(cid)
                if self._owner.get(i.key) == cid:
                    del self._owner[i.key]
                    self.policy.remove_container(self.state, pod_uid, i.name)

    def _shared_updates(self, before: CPUSet, skip: str | None = None) -> dict[str, CPUSet]:
        pool = self.shared_pool()
        if pool == before:
            return {}
        out: dict[str, CPUSet] = {}
        for cid, t in self.containers.items():
            if not t.exclusive and not t.stopped and cid != skip:
                t.applied = pool
                out[cid] = pool
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The state to persist: the kubelet's cpu_manager_state keys plus container rows."""
        return {
            "policyName": "static" if self.static else "none",
            "defaultCpuSet": str(self.state.default_set),
            "entries": {
                uid: {name: str(cpus) for name, cpus in conts.items()}
                for uid, conts in self.state.assignments.items()
                if conts
            },
            "containers": self.rows(),
        }


def _admission_text(e: Exception) -> str:
    name = type(e).__name__
    text = str(e)
    return text if name in text else f"{name}: {text}"
