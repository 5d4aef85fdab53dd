"""The CPU manager state: exclusive assignments and the shared (default) CPU set.

Mirrors the kubelet's cpumanager ``state.State`` (in-memory ``stateMemory``): ``assignments``
maps pod uid -> container name -> the container's exclusive CPUs, ``default_set`` is the shared
pool. :meth:`CPUManagerState.to_dict` uses the kubelet checkpoint's key names
(``defaultCpuSet``, ``entries``) with cpulist strings, so it is plain JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nri_cpumgr.cpuset import CPUSet

_EMPTY = CPUSet()


#: The shared pools built last (mask -> set), newest last: a node's pool goes back and forth
#: between a few values as pods come and go (an allocation takes CPUs, the removal gives
#: them back), and building a 254-CPU set costs ~45 k instructions, a lookup a hundredth
_POOLS: dict[int, CPUSet] = {}
_POOLS_KEPT = 8


def _pool(base: CPUSet, mask: int) -> CPUSet:
    """The set of ``mask``: a recent pool's, else ``base`` with the CPUs it lacks added and
    those ``mask`` lacks removed (set operations on the few CPUs that differ, not a set
    built from the bits of a mask one by one)."""
    d = _POOLS.pop(mask, None)
    if d is None:
        bm = base.mask
        d = base
        if bm & ~mask:
            d = d - CPUSet.from_mask(bm & ~mask)
        if mask & ~bm:
            d = d | CPUSet.from_mask(mask & ~bm)
        if len(_POOLS) >= _POOLS_KEPT:
            del _POOLS[next(iter(_POOLS))]
    _POOLS[mask] = d
    return d


class CPUManagerState:
    """Mutable CPU manager state (pure data; persistence is someone else's job).

    ``default_set`` is kept as a bitmask after :meth:`take_from_default` and
    :meth:`give_to_default`, and its set is built when next read (or found among the last
    pools built): an allocation on a 256-CPU node does not build the 254-CPU shared pool
    while the runtime waits for the answer (issue 34), but when the pool is next needed."""

    __slots__ = ("assignments", "_default", "_default_mask", "_base")

    def __init__(self, assignments: dict[str, dict[str, CPUSet]] | None = None,
                 default_set: CPUSet | None = None) -> None:
        self.assignments: dict[str, dict[str, CPUSet]] = {} if assignments is None \
            else assignments
        self._default: CPUSet | None = CPUSet() if default_set is None else default_set
        self._default_mask = 0
        #: while the set is not built: the last one built (``_default_mask`` is the pool's)
        self._base: CPUSet = _EMPTY

    @property
    def default_set(self) -> CPUSet:
        """The shared (default) CPU set."""
        d = self._default
        if d is None:
            d = self._default = _pool(self._base, self._default_mask)
            self._base = _EMPTY
        return d

    @default_set.setter
    def default_set(self, cpus: Iterable[int]) -> None:
        self._default = cpus if type(cpus) is CPUSet else CPUSet(cpus)
        self._base = _EMPTY

    @property
    def default_mask(self) -> int:
        """``default_set.mask`` (bit *i* = CPU *i*), without building the set."""
        d = self._default
        return self._default_mask if d is None else d.mask

    def take_from_default(self, cpus: CPUSet) -> None:
        """``default_set -= cpus``, as a bitmask until the set is next read."""
        self._lazy()
        self._default_mask &= ~cpus.mask

    def give_to_default(self, cpus: CPUSet) -> None:
        """``default_set |= cpus``, as a bitmask until the set is next read."""
        self._lazy()
        self._default_mask |= cpus.mask

    def _lazy(self) -> None:
        d = self._default
        if d is not None:
            self._base, self._default_mask = d, d.mask
            self._default = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CPUManagerState):
            return NotImplemented
        return self.assignments == other.assignments and self.default_mask == other.default_mask

    __hash__ = None  # type: ignore[assignment]  # (mutable, as the dataclass was)

    def __repr__(self) -> str:
        return (f"CPUManagerState(assignments={self.assignments!r}, "
                f"default_set={self.default_set!r})")

    def get_cpuset(self, pod_uid: str, container_name: str) -> CPUSet | None:
        """The container's exclusive CPUs, or None when it has none."""
        return self.assignments.get(pod_uid, {}).get(container_name)

    def get_cpuset_or_default(self, pod_uid: str, container_name: str) -> CPUSet:
        """The container's exclusive CPUs, else the shared pool."""
        cpus = self.get_cpuset(pod_uid, container_name)
        return cpus if cpus is not None else self.default_set

    def set_cpuset(self, pod_uid: str, container_name: str, cpus: Iterable[int]) -> None:
        if not isinstance(cpus, CPUSet):  # (a CPUSet is immutable: kept as is, with its mask)
            cpus = CPUSet(cpus)
        self.assignments.setdefault(pod_uid, {})[container_name] = cpus

    def delete(self, pod_uid: str, container_name: str) -> None:
        """Forget one container's assignment (and the pod entry once it is empty)."""
        pod = self.assignments.get(pod_uid)
        if pod is None:
            return
        pod.pop(container_name, None)
        if not pod:
            del self.assignments[pod_uid]

    def assigned_cpus(self) -> CPUSet:
        """Union of all exclusive assignments."""
        out: set[int] = set()
        for containers in self.assignments.values():
            for cpus in containers.values():
                out |= cpus
        return CPUSet(out)

    def assigned_count(self) -> int:
        """How many CPUs are assigned exclusively (``len(assigned_cpus())``, from the sets'
        masks, which each CPUSet keeps: no set built, per create)."""
        m = 0
        for containers in self.assignments.values():
            for cpus in containers.values():
                m |= cpus.mask
        return m.bit_count()

    def copy(self) -> CPUManagerState:
        return CPUManagerState(
            assignments={p: dict(cs) for p, cs in self.assignments.items()},
            default_set=self.default_set,
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"defaultCpuSet": "0-3", "entries": {pod uid: {container: "4-5"}}}``."""
        return {
            "defaultCpuSet": str(self.default_set),
            "entries": {
                pod: {name: str(cpus) for name, cpus in sorted(containers.items())}
                for pod, containers in sorted(self.assignments.items())
            },
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CPUManagerState:
        """Inverse of :meth:`to_dict` (also accepts ``default_set`` / ``assignments`` keys).

        Raises ``CPUSetError`` (a ValueError) on a malformed cpulist.
        """
        default = doc.get("defaultCpuSet", doc.get("default_set", ""))
        entries = doc.get("entries", doc.get("assignments", {})) or {}
        return cls(
            assignments={
                str(pod): {str(name): CPUSet.parse(str(cpus)) for name, cpus in cs.items()}
                for pod, cs in entries.items()
            },
            default_set=CPUSet.parse(str(default or "")),
        )
