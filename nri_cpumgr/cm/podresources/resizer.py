"""UpdateContainer with new resources for a tracked container (see :mod:`.resize`), pure.

:class:`Resizer` keeps, per (pod uid, container), the CPUs the container was admitted with
("promised", taken at its first resize) and the last resize (for the status command and the
decision log).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_cpumgr.cm.podresources.gates import resize_cpus_enabled, resize_memory_enabled
from nri_cpumgr.cm.podresources.host import ContainerManagerView
from nri_cpumgr.cm.podresources.resize import (
    REASON_INFEASIBLE,
    TEXT_INFEASIBLE_GATE_OFF,
    ResizeRefused,
    resize_exclusive,
)
from nri_cpumgr.cm.records import POD_ENTRY
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.nri import Resources

TEXT_MEMORY_GATE_OFF = (
    'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'
)


class Resizer:
    """Resize decisions for a container manager (:class:`ContainerManagerView`;
    ``feature_gates``: the config's)."""

    def __init__(self, cm: ContainerManagerView, feature_gates: Mapping[str, bool] | None) -> None:
        self.cm = cm
        self.cpus_gate = resize_cpus_enabled(feature_gates)
        self.memory_gate = resize_memory_enabled(feature_gates)
        self.promised: dict[tuple[str, str], CPUSet] = {}
        #: (pod uid, container) -> {"from", "to", "promised"} of its last resize
        self.resized: dict[tuple[str, str], dict[str, str]] = {}

    def resize(self, container_id: str, new: Resources) -> tuple[CPUSet, CPUSet] | None:
        """Apply the CPU part of an UpdateContainer carrying ``new`` resources to a tracked
        container with exclusive CPUs: ``(old, new)`` cpusets when they changed, None when
        there is nothing to resize (not exclusive, same count, no CPU information). Raises
        :class:`ResizeRefused` (gate off, shrink below promised, not enough CPUs, ...)."""
        cm = self.cm
        t = cm.containers.get(container_id)
        if t is None or not cm.static or not t.exclusive or t.applied is None:
            return None
        self._check_memory(t.info.resources, new, t.mems is not None)
        if new.shares is None:
            return None  # no CPU information in the update
        count = new.integer_cpus
        old = t.applied
        if count == len(old):
            return None
        key = t.info.key
        if cm.state.get_cpuset(key[0], POD_ENTRY) is not None:
            raise ResizeRefused(
                f"{REASON_INFEASIBLE}: resize of an exclusive slice of a pod-level budget is "
                "not supported (the pod's budget is fixed at admission)")
        if not self.cpus_gate:
            raise ResizeRefused(f"{REASON_INFEASIBLE}: {TEXT_INFEASIBLE_GATE_OFF}")
        promised = self.promised.setdefault(key, old)
        cpus = resize_exclusive(cm.policy, cm.state, key[0], key[1], count, promised)
        t.applied = cpus
        cm.row_changed(t.info.id)
        self.resized[key] = {"from": str(old), "to": str(cpus), "promised": str(promised)}
        return old, cpus

    def adopted(self, key: tuple[str, str], old: CPUSet, new: CPUSet) -> None:
        """A resize from ``old`` to ``new`` the runtime applied and the checkpoint missed
        (taken over at Synchronize): recorded as if answered now. The promised CPUs are the
        restored ones, else the smaller of the two (the admitted ones for a first grow)."""
        promised = self.promised.get(key)
        if promised is None:
            promised = self.promised[key] = old if len(old) <= len(new) else new
        self.resized[key] = {"from": str(old), "to": str(new), "promised": str(promised)}

    def _check_memory(self, old: Resources, new: Resources, pinned: bool) -> None:
        """A memory resize of a container whose memory the Memory Manager pinned: refused
        with the gate off (the kubelet's InPlacePodVerticalScalingExclusiveMemory); with the
        gate on the new limit is applied by the runtime and the NUMA nodes stay."""
        if self.cm.memory is None or not pinned or new.memory_limit is None:
            return
        if new.memory_limit != old.memory_limit and not self.memory_gate:
            raise ResizeRefused(f"{REASON_INFEASIBLE}: {TEXT_MEMORY_GATE_OFF}")

    def forget(self, pod_uid: str, name: str | None = None) -> None:
        for d in (self.promised, self.resized):
            for key in [k for k in d if k[0] == pod_uid and (name is None or k[1] == name)]:
                del d[key]

    def rows(self) -> dict[str, dict[str, Any]]:
        """The last resize of each container that still holds exclusive CPUs."""
        return {f"{uid}/{name}": dict(v) for (uid, name), v in self.resized.items()
                if self.cm.state.get_cpuset(uid, name) is not None}

    def restore(self, body: Mapping[str, Any] | None) -> None:
        """Take the promised CPUs and last resizes back from a checkpoint body (its
        ``resized`` section), so a shrink after a plugin restart still keeps the CPUs the
        container was admitted with. Entries of containers without CPUs are ignored."""
        for key, r in ((body or {}).get("resized") or {}).items():
            uid, _, name = str(key).partition("/")
            try:
                promised = CPUSet.parse(r["promised"])
            except (KeyError, TypeError, ValueError):
                continue
            if self.cm.state.get_cpuset(uid, name) is None:
                continue
            self.promised[(uid, name)] = promised
            self.resized[(uid, name)] = {k: str(r.get(k, "")) for k in ("from", "to", "promised")}
