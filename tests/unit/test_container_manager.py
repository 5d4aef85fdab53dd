"""The container manager's life cycle on a 2-CPU machine (this host's shape) and the
2-socket conformance topology."""

import pytest

from nri_cpumgr.cm.container_manager import AdmissionError, ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, NonePolicy, StaticPolicy
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from nri_cpumgr.topology import CPUInfo, CPUTopology
from tests.conformance_data import topology

TWO_CPUS = CPUTopology.from_details({0: CPUInfo(0, 0, 0), 1: CPUInfo(0, 0, 1)})


def info(cid, pod, name="c", qos=QOSClass.BESTEFFORT, cpus_m=None, limit_m=None, current=""):
    shares = None if cpus_m is None else cpus_m * 1024 // 1000
    return ContainerInfo(
        id=cid, pod_id="sb-" + pod, pod_uid=pod, pod_name=pod, namespace="ns", name=name,
        restart_count=0, qos=qos, qos_source="cgroup-parent",
        resources=Resources(shares, cpus_m, limit_m, 1 << 20 if limit_m else None, {}),
        cpus=current, devices=(),
    )


def guaranteed(cid, pod, n, name="c", current=""):
    return info(cid, pod, name, QOSClass.GUARANTEED, n * 1000, n * 1000, current)


def manager(topo=TWO_CPUS, reserved="0", **opts):
    policy = StaticPolicy(topo, len(CPUSet.parse(reserved)), CPUSet.parse(reserved), opts)
    state = CPUManagerState()
    policy.start(state)
    return ContainerManager(policy, state)


def test_docs_scenario_on_two_cpus():
    m = manager()
    be = m.admit(info("be", "p-be"))
    assert (be.cpus, be.exclusive) == (CPUSet({0, 1}), False)
    bu = m.admit(info("bu", "p-bu", qos=QOSClass.BURSTABLE, cpus_m=500))
    assert bu.cpus == CPUSet({0, 1})
    frac = m.admit(info("g15", "p-g15", qos=QOSClass.GUARANTEED, cpus_m=1500, limit_m=1500))
    assert (frac.cpus, frac.exclusive) == (CPUSet({0, 1}), False)
    g1 = m.admit(guaranteed("g1", "p-g1", 1))
    assert (g1.cpus, g1.exclusive) == (CPUSet({1}), True)
    # the shared pool shrinks; the shared containers follow it (poolsync), not the reply
    assert m.shared_pool() == CPUSet({0})
    assert sorted(m.shared_containers()) == ["be", "bu", "g15"]
    with pytest.raises(AdmissionError, match=r"requested=1, available=0"):
        m.admit(guaranteed("g2", "p-g2", 1))
    # a refused container leaves nothing behind
    m.remove("g2")
    assert m.shared_pool() == CPUSet({0})
    # stop keeps the CPUs (a restart may follow), removal releases them
    m.stop("g1")
    assert m.shared_pool() == CPUSet({0})
    m.remove("g1")
    assert m.shared_pool() == CPUSet({0, 1})
    assert {r["id"]: r["cpus"] for r in m.rows()} == {"be": "0-1", "bu": "0-1", "g15": "0-1"}
    g2 = m.admit(guaranteed("g2", "p-g2", 1))
    assert g2.cpus == CPUSet({1})


def test_restart_keeps_cpus_and_pod_removal_releases():
    m = manager()
    assert m.admit(guaranteed("a1", "p", 1)).cpus == CPUSet({1})
    m.stop("a1")
    again = m.admit(guaranteed("a2", "p", 1))  # same pod uid and name: a restart
    assert again.cpus == CPUSet({1})
    assert "a1" not in m.containers
    m.remove("a1")  # the old container's removal must not free the restarted one's CPUs
    assert m.state.assignments == {"p": {"c": CPUSet({1})}}
    m.admit(info("be", "q"))
    m.remove_pod("p")
    assert m.shared_pool() == CPUSet({0, 1}) and m.shared_containers() == ["be"]
    assert m.state.assignments == {}


def test_stopped_container_cpus_are_reused_by_the_same_pod():
    m = manager()
    m.admit(guaranteed("init", "p", 1, name="init"))
    m.stop("init")
    assert m.admit(guaranteed("app", "p", 1, name="app")).cpus == CPUSet({1})
    assert m.state.assignments == {"p": {"app": CPUSet({1})}}


def test_topology_first_on_dual_socket_ht():
    topo = topology("dual-socket-ht")  # 2 sockets x 3 cores x 2 threads
    m = manager(topo, reserved="0")
    d = m.admit(guaranteed("g", "p", 2))
    # a whole free core, the fullest socket's first
    assert len(d.cpus) == 2 and len({topo.details[c].core for c in d.cpus}) == 1
    big = m.admit(guaranteed("g6", "p6", 6))
    assert len({topo.details[c].socket for c in big.cpus}) == 1  # a whole socket


def test_full_pcpus_only_refusal_names_smt_alignment_error():
    m = manager(topology("dual-socket-ht"), reserved="0", **{"full-pcpus-only": "true"})
    with pytest.raises(AdmissionError, match="SMTAlignmentError"):
        m.admit(guaranteed("g", "p", 3))


def test_synchronize_adopts_forgets_and_fixes():
    m = manager()
    m.admit(guaranteed("gone", "old", 1))
    assert m.state.assignments == {"old": {"c": CPUSet({1})}}
    # after a restart the runtime reports: a Guaranteed container already on CPU 1 (not in
    # our state), a BestEffort container on the wrong cpuset; "gone" no longer exists
    ups = m.synchronize([guaranteed("g", "p", 1, current="1"), info("be", "q", current="0-1")])
    assert m.state.assignments == {"p": {"c": CPUSet({1})}}
    assert {c: d.cpus for c, d in ups.items()} == {"be": CPUSet({0})}
    # a Guaranteed container created while we were away on the shared pool gets CPUs
    m2 = manager()
    ups2 = m2.synchronize([guaranteed("g", "p", 1, current="0-1"), info("be", "q", current="")])
    assert {c: d.cpus for c, d in ups2.items()} == {"g": CPUSet({1}), "be": CPUSet({0})}
    assert ups2["g"].exclusive and not ups2["be"].exclusive


def test_none_policy_makes_no_adjustment():
    m = ContainerManager(NonePolicy(TWO_CPUS), CPUManagerState())
    d = m.admit(guaranteed("g", "p", 1))
    assert d.cpus is None and d.quota is None
    assert m.synchronize([guaranteed("g", "p", 1)]) == {}


def test_update_keeps_pinning():
    m = manager()
    m.admit(guaranteed("g", "p", 1))
    d = m.update("g")
    assert (d.cpus, d.exclusive) == (CPUSet({1}), True)
    assert m.update("unknown") is None


@pytest.mark.parametrize("order", ["shared-first", "guaranteed-first"])
def test_synchronize_without_state_never_overlaps_exclusive_cpus(order):
    """The runtime's order must not matter: a shared container listed before the Guaranteed
    one whose exclusive cpuset is adopted must not be sent the whole pool (found by a user
    restarting the plugin without its checkpoint)."""
    m = manager()
    be = info("be", "q", current="0")
    g = guaranteed("g", "p", 1, current="1")
    infos = [be, g] if order == "shared-first" else [g, be]
    assert m.synchronize(infos) == {}
    assert m.state.assignments == {"p": {"c": CPUSet({1})}}
    assert m.is_shared("be") and m.shared_pool() == CPUSet({0})
    # and a shared container on the wrong set is still fixed
    m2 = manager()
    ups = m2.synchronize([info("be", "q", current="0-1"), guaranteed("g", "p", 1, current="1")])
    assert {c: d.cpus for c, d in ups.items()} == {"be": CPUSet({0})}


def test_pod_level_managers_module_loaded_only_with_their_gates():
    """Issue 34 (the start): with the pod-level gates off (the default) the container
    manager, a Guaranteed admission and a Synchronize's reuse check load no
    nri_cpumgr.cm.podresources.manager (nor its policy); with both gates on it is built."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tests.unit.test_container_manager import guaranteed, manager, TWO_CPUS\n"
        "from nri_cpumgr.cm.container_manager import ContainerManager\n"
        "from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy\n"
        "from nri_cpumgr.cpuset import CPUSet\n"
        "m = manager()\n"
        "d = m.admit(guaranteed('c1', 'p1', 1))\n"
        "m._release_reused(guaranteed('c2', 'p2', 1, current='1'), set())\n"
        "off = [n for n in ('nri_cpumgr.cm.podresources.manager',\n"
        "                   'nri_cpumgr.cm.podresources.policy') if n in sys.modules]\n"
        "print(m.pod_level is None, str(d.cpus), off)\n"
        "p = StaticPolicy(TWO_CPUS, 1, CPUSet.parse('0'), {})\n"
        "s = CPUManagerState()\n"
        "p.start(s)\n"
        "gates = {'PodLevelResources': True, 'PodLevelResourceManagers': True}\n"
        "on = ContainerManager(p, s, feature_gates=gates)\n"
        "print(type(on.pod_level).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "True 1 []"
    assert out[1] == "PodLevelManager"
