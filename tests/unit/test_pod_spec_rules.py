"""The container manager with pod spec facts (nri_cpumgr.podmodel.spec): containers sent as
a kubelet with PodLevelResources sends them (a resource-less container of a pod with
.spec.resources gets the pod's limits), gates off and on, the look-alike pods, a restart's
Synchronize. dual-socket-ht (NUMA node 0 = even CPUs, node 1 = odd; CPU 0 reserved)."""

from __future__ import annotations

import dataclasses

import pytest

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.spec import facts_from_pod
from tests.unit.test_pod_level import ON, ctr, manager, res

MI = 1 << 20
ALL = CPUSet(range(12))
G4 = {"cpu": "4", "memory": "256Mi"}
POD4 = res(4, 256 * MI)  # the sandbox's totals, the same for both look-alikes


def facts(uid, containers, pod_res=None):
    spec = {"containers": [{"name": n, "resources": r or {}} for n, r in containers]}
    if pod_res:
        spec["resources"] = pod_res
    return facts_from_pod({"metadata": {"uid": uid}, "spec": spec})


def with_facts(info, f):
    return dataclasses.replace(info, pod_spec=f)


TWO = facts("two", [("a", None), ("b", None)], {"requests": G4, "limits": G4})
LOOK_POD = facts("lp", [("app", None)], {"requests": G4, "limits": G4})
LOOK_CTR = facts("lc", [("app", {"requests": G4, "limits": G4})])


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_gates_off_pod_with_spec_resources_is_shared(scope):
    m = manager(scope, gates={})
    for cid, name in (("c-a", "a"), ("c-b", "b")):
        # the kubelet sends each the pod's limits: 4 CPUs' shares and quota, 256Mi
        d = m.admit(with_facts(ctr(cid, "two", name, POD4, POD4), TWO))
        assert not d.exclusive and d.cpus == ALL
    assert m.state.assignments == {}


def test_without_facts_the_same_requests_take_8_cpus():
    """What the facts fix: NRI alone takes each for a 4-CPU Guaranteed container."""
    m = manager("container", gates={})
    got = [m.admit(ctr(c, "two", n, POD4, POD4)) for c, n in (("c-a", "a"), ("c-b", "b"))]
    assert all(d.exclusive for d in got) and len(got[0].cpus | got[1].cpus) == 8


def test_gates_on_pod_scope_one_bubble_of_4_shared_by_both():
    m = manager("pod", gates=ON)
    da = m.admit(with_facts(ctr("c-a", "two", "a", POD4, POD4), TWO))
    db = m.admit(with_facts(ctr("c-b", "two", "b", POD4, POD4), TWO))
    assert not da.exclusive and not db.exclusive
    assert da.cpus == db.cpus and len(da.cpus) == 4
    assert m.shared_pool() == ALL - da.cpus


@pytest.mark.parametrize("gates", [{}, ON], ids=["off", "on"])
def test_look_alikes(gates):
    m = manager("pod", gates=gates)
    own = m.admit(with_facts(ctr("c-lc", "lc", "app", POD4, POD4), LOOK_CTR))
    assert own.exclusive and len(own.cpus) == 4
    pl = m.admit(with_facts(ctr("c-lp", "lp", "app", POD4, POD4), LOOK_POD))
    assert not pl.exclusive
    if gates:
        assert len(pl.cpus) == 4 and not pl.cpus & own.cpus  # its pod's bubble
    else:
        assert pl.cpus == ALL - own.cpus  # the node's shared pool


def test_restart_synchronize_does_not_adopt_a_pool_as_exclusive():
    """A restarted plugin sees the containers running on the 4-CPU pool of their pod's
    bubble (gates on) or the node's pool (gates off): with the facts neither is adopted or
    admitted as exclusive."""
    m = manager("pod", gates={})
    infos = [with_facts(ctr("c-a", "two", "a", POD4, POD4, current=str(ALL)), TWO),
             with_facts(ctr("c-b", "two", "b", POD4, POD4, current=str(ALL)), TWO)]
    m.synchronize(infos)
    assert m.state.assignments == {}
    assert m.shared_pool() == ALL
