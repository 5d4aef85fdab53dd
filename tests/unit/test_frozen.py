"""nri_cpumgr.frozen.slot_init: a frozen slots dataclass's __init__ through its slots'
descriptors (issue 34), and the create's one ContainerInfo with its pod's spec facts."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import InitVar, dataclass, field
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.cm.container_manager import PodAdmission
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.config import parse_config
from nri_cpumgr.frozen import slot_init
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, container_info
from nri_cpumgr.podmodel.spec import PodSpecFacts, facts_from_pod
from nri_cpumgr.podsource import PodSpecStore
from nri_cpumgr.runtime.plugin import Plugin
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine
from tests.unit.test_runtime_plugin import ctr, pod


def _twins(**params):
    """The same fields as a plain frozen slots dataclass and as one with slot_init."""

    def make():
        @dataclass(frozen=True, slots=True, **params)
        class Rec:
            a: int
            b: dict = field(default_factory=dict)
            c: str = "c"
            d: tuple = field(default=(), kw_only=True)

        return Rec

    return make(), slot_init(make())


def test_same_instances_as_the_dataclass_init():
    plain, fast = _twins()
    for args, kw in [((1,), {}), ((1, {"x": 1}, "z"), {"d": (2,)}), ((), {"a": 3, "c": "k"})]:
        p, f = plain(*args, **kw), fast(*args, **kw)
        assert [getattr(f, n.name) for n in dataclasses.fields(f)] == \
            [getattr(p, n.name) for n in dataclasses.fields(p)]
        assert repr(f).replace("Rec", "") == repr(p).replace("Rec", "")
    assert fast(1).b is not fast(1).b  # (a fresh default from the factory each time)
    assert fast(1) == fast(1) and fast(1, c="x") != fast(1)
    assert dataclasses.replace(fast(1), c="y") == fast(1, c="y")
    for bad in [lambda: fast(), lambda: fast(1, {}, "c", ()), lambda: fast(1, e=2)]:
        with pytest.raises(TypeError):
            bad()


def test_still_frozen():
    _, fast = _twins()
    r = fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.c
    assert fast.__init__.__qualname__.endswith("Rec.__init__")


def test_refuses_what_it_does_not_cover():
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        k: InitVar[int] = 0

    @dataclass(frozen=True, slots=True)
    class NotInInit:
        a: int
        b: int = field(default=0, init=False)

    for cls in (Mutable, NoSlots, PostInit, WithInitVar, NotInInit, int):
        with pytest.raises(TypeError):
            slot_init(cls)


@pytest.mark.parametrize("cls", [ContainerInfo, Pod, ContainerSpec, PodAdmission,
                                 TopologyHint, PodSpecFacts])
def test_the_hot_records_store_through_their_slots(cls):
    """Their __init__ is slot_init's (setters as free variables), not object.__setattr__."""
    code = cls.__init__.__code__
    assert "__dataclass_builtins_object__" not in code.co_freevars
    assert {f"_set_{f.name}" for f in dataclasses.fields(cls)} <= set(code.co_freevars)


def test_container_info_asks_for_the_facts_once_it_knows_uid_and_qos():
    asked = []
    facts = object()

    def spec_facts(uid, qos):
        asked.append((uid, qos))
        return facts

    info = container_info(pod("u1"), ctr("u1", 1000), spec_facts)
    assert asked == [("u1", QOSClass.GUARANTEED)] and info.pod_spec is facts
    assert container_info(pod("u2", "burstable"), ctr("u2", 500), lambda u, q: None).pod_spec \
        is None
    assert container_info(pod("u3"), ctr("u3", 1000)).pod_spec is None


FOUR_CPUS = Machine(CPUTopology.from_details({c: CPUInfo(0, 0, c) for c in range(4)}))


def _plugin(tmp: Path) -> Plugin:
    cfg = parse_config(f'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                       f'stateDirectory: {tmp}/state\n')
    plugin = Plugin(cfg, FOUR_CPUS)
    plugin.configure(nri_pb2.ConfigureRequest(runtime_name="containerd",
                                              runtime_version="v2.4.2"))
    plugin.synchronize([], [])
    plugin.pod_specs = PodSpecStore()
    return plugin


def test_a_create_builds_one_container_info_with_its_pods_facts(monkeypatch, caplog):
    built = []
    real = ContainerInfo.__init__

    def counting(self, *a, **kw):
        built.append(a[0] if a else kw.get("id"))
        real(self, *a, **kw)

    monkeypatch.setattr(ContainerInfo, "__init__", counting)
    with tempfile.TemporaryDirectory() as tmp:
        plugin = _plugin(Path(tmp))
        facts = facts_from_pod({
            "metadata": {"uid": "g1", "name": "g1", "namespace": "ns"},
            "spec": {"containers": [{"name": "app", "resources": {
                "limits": {"cpu": "1", "memory": "256Mi"}}}]}})
        plugin.pod_specs.replace([facts])
        plugin.create_container(nri_pb2.CreateContainerRequest(pod=pod("g1"),
                                                               container=ctr("g1", 1000)))
        assert built == ["c-g1"]
        assert plugin.manager.containers["c-g1"].info.pod_spec is facts
        assert "g1" in plugin.manager.admissions  # (admitted whole, with the facts)
        # a pod the source does not show: decided from NRI alone, said once per pod
        with caplog.at_level(logging.WARNING, "nri_cpumgr.plugin"):
            for cid in ("a", "b"):
                plugin.create_container(nri_pb2.CreateContainerRequest(
                    pod=pod("g2"), container=ctr("g2", 1000, cid=cid)))
        said = [r.getMessage() for r in caplog.records if "no pod spec" in r.getMessage()]
        assert said == ["pod ns/g2: no pod spec from the none source (not shown within "
                        "500ms); deciding from NRI alone"], said
        assert plugin.manager.containers["b"].info.pod_spec is None
        assert "g2" not in plugin.manager.admissions
        plugin.close()
