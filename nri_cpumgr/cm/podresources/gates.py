"""Feature gates of pod-level resource managers and in-place resize of exclusive resources.

Names and defaults as the kubelet has them (pkg/features/kube_features.go): all four are off
by default (``PodLevelResources`` is beta and on in the kubelet since 1.34, but pod-level
resource managers need ``PodLevelResourceManagers`` too, which is off by default in 1.37; we
keep both off so that an empty ``featureGates`` means today's behaviour exactly).
"""

from __future__ import annotations

from collections.abc import Mapping

POD_LEVEL_RESOURCES = "PodLevelResources"
POD_LEVEL_RESOURCE_MANAGERS = "PodLevelResourceManagers"
RESIZE_EXCLUSIVE_CPUS = "InPlacePodVerticalScalingExclusiveCPUs"
RESIZE_EXCLUSIVE_MEMORY = "InPlacePodVerticalScalingExclusiveMemory"

#: The gates this package reads (added to the config's known feature gates).
GATES = frozenset(
    {POD_LEVEL_RESOURCES, POD_LEVEL_RESOURCE_MANAGERS, RESIZE_EXCLUSIVE_CPUS,
     RESIZE_EXCLUSIVE_MEMORY}
)


def pod_level_enabled(gates: Mapping[str, bool] | None) -> bool:
    """Both ``PodLevelResources`` and ``PodLevelResourceManagers`` are on (the kubelet needs
    both: policy_static.go Allocate / GetTopologyHints check the two together)."""
    g = gates or {}
    return bool(g.get(POD_LEVEL_RESOURCES)) and bool(g.get(POD_LEVEL_RESOURCE_MANAGERS))


def resize_cpus_enabled(gates: Mapping[str, bool] | None) -> bool:
    return bool((gates or {}).get(RESIZE_EXCLUSIVE_CPUS))


def resize_memory_enabled(gates: Mapping[str, bool] | None) -> bool:
    return bool((gates or {}).get(RESIZE_EXCLUSIVE_MEMORY))
