"""cm/devicemanager: the NUMA hints of a container's devices (pure; the NUMA nodes come from
sysfs beforehand). Rule: kubelet devicemanager topology_hints.go generateDeviceTopologyHints
(v1.37.2) for a fixed device set: every mask holding the devices, preferred when it is as
narrow as they allow."""

from __future__ import annotations

from nri_cpumgr.cm import providers
from nri_cpumgr.cm.devicemanager import DeviceProvider, device_hints
from nri_cpumgr.cm.topologymanager import TopologyHint
from nri_cpumgr.podmodel import ContainerSpec, Pod


def _hint(nodes: set[int], preferred: bool) -> TopologyHint:
    return TopologyHint(frozenset(nodes), preferred)


def test_device_on_one_node_of_three() -> None:
    assert device_hints([1], [0, 1, 2]) == [
        _hint({1}, True), _hint({0, 1}, False), _hint({1, 2}, False), _hint({0, 1, 2}, False)]


def test_devices_on_two_nodes_prefer_exactly_those() -> None:
    hints = device_hints([0, 2], [0, 1, 2, 3])
    assert [h for h in hints if h.preferred] == [_hint({0, 2}, True)]
    assert {h.numa for h in hints} == {frozenset({0, 2}), frozenset({0, 1, 2}),
                                      frozenset({0, 2, 3}), frozenset({0, 1, 2, 3})}


def test_provider_per_container_and_per_pod() -> None:
    p = DeviceProvider([0, 1])
    pod = Pod(uid="u", containers=(ContainerSpec("gpu", {}, {}), ContainerSpec("nic", {}, {}),
                                   ContainerSpec("plain", {}, {})))
    p.current[("u", "gpu")] = frozenset({1})
    p.current[("u", "nic")] = frozenset({0})
    p.current[("other", "x")] = frozenset({0})
    assert p.get_topology_hints(pod, "gpu") == {"devices": [_hint({1}, True),
                                                            _hint({0, 1}, False)]}
    assert p.get_topology_hints(pod, "plain") is None  # no devices: no preference
    assert p.get_pod_topology_hints(pod) == {"devices": [_hint({0, 1}, True)]}


def test_providers_keeps_its_names() -> None:
    assert providers.DeviceProvider is DeviceProvider
    assert providers.device_hints is device_hints
