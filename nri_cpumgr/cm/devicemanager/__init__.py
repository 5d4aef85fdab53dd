"""cm/devicemanager: the NUMA hints of a container's devices for the Topology Manager
(pure; the devices' NUMA nodes are read from sysfs by ``nri_cpumgr.sysfs.device_numa_node``
before admission)."""

from nri_cpumgr.cm.devicemanager.manager import DeviceProvider, device_hints

__all__ = ["DeviceProvider", "device_hints"]
