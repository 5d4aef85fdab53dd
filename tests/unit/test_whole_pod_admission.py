"""Whole-pod admission (nri_cpumgr.cm.container_manager, the pod's spec known): the kubelet's
admission of the whole pod at its first container, recorded decisions for the later ones,
refusals, and what the state, checkpoint, restart and deletion do with containers recorded but
not yet created."""

import dataclasses

import pytest

from nri_cpumgr.cm.container_manager import AdmissionError, ContainerManager
from nri_cpumgr.cm.cpumanager import CPUManagerState, StaticPolicy
from nri_cpumgr.cm.topologymanager import TopologyManager
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
from nri_cpumgr.podmodel.spec import facts_from_pod
from tests.conformance_data import topology

MI = 1 << 20


def spec(uid, containers, inits=()):
    def c(name, cpu, **kw):
        return {"name": name, "resources": {"limits": {"cpu": cpu, "memory": "64Mi"}}, **kw}
    return facts_from_pod({"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "spec": {
        "initContainers": [c(n, cpu, **kw) for n, cpu, kw in inits],
        "containers": [c(n, cpu) for n, cpu in containers]}})


def info(cid, facts, name):
    cs = facts.container(name)
    m = cs.limits["cpu"]
    return ContainerInfo(
        id=cid, pod_id="sb-" + facts.uid, pod_uid=facts.uid, pod_name=facts.name,
        namespace="ns", name=name, restart_count=0, qos=QOSClass.GUARANTEED,
        qos_source="cgroup-parent", resources=Resources(m * 1024 // 1000, m, m, 64 * MI, {}),
        cpus="", devices=(), pod_spec=facts)


def manager(policy="none", scope="container"):
    topo = topology("dual-socket-ht")  # 12 CPUs, 2 sockets = 2 NUMA nodes, SMT
    p = StaticPolicy(topo, 1, CPUSet({0}), {}, topology_manager_policy=policy)
    state = CPUManagerState()
    p.start(state)
    tm = TopologyManager(policy, scope, numa_nodes=sorted(topo.numa_nodes()))
    return ContainerManager(p, state, topology_manager=tm)


# an init container with exclusive CPUs, a sidecar, a shared container, two exclusive apps
POD = spec("p", [("shared", "500m"), ("app1", "2"), ("app2", "1")],
           inits=[("init", "2", {}), ("sidecar", "1", {"restartPolicy": "Always"})])
ORDER = ["init", "sidecar", "shared", "app1", "app2"]


def test_first_container_admits_the_whole_pod():
    m = manager()
    first = m.admit(info("c-init", POD, "init"))
    # every container of the pod is allocated at once, in the kubelet's order
    a = m.state.assignments["p"]
    assert set(a) == {"init", "sidecar", "app1", "app2"}
    assert first.cpus == a["init"] and first.exclusive
    # the app container reuses the finished init container's CPUs (cpusToReuse)
    assert a["app1"] == a["init"]
    pool = m.shared_pool()
    assert not pool & (a["sidecar"] | a["app1"] | a["app2"])
    m.stop("c-init")
    got = {n: m.admit(info(f"c-{n}", POD, n)) for n in ORDER[1:]}
    for n in ("sidecar", "app1", "app2"):
        assert got[n].cpus == a[n] and got[n].exclusive
    # the shared container gets the pool as it is after its own pod's admission
    assert got["shared"].cpus == pool and not got["shared"].exclusive
    assert m.shared_pool() == pool
    # the finished init container keeps its CPUs for the pod's life (the kubelet's state)
    assert m.state.assignments["p"]["init"] == a["init"]


def test_without_the_spec_container_by_container():
    m = manager()
    bare = [dataclasses.replace(info(f"c-{n}", POD, n), pod_spec=None) for n in ORDER]
    d = m.admit(bare[0])
    assert set(m.state.assignments["p"]) == {"init"} and "p" not in m.admissions
    m.stop(d.container_id)
    shared = m.admit(bare[2])  # before app1/app2: the pool of that moment
    assert shared.cpus == m.shared_pool()


def test_refused_pod_refuses_every_container_and_holds_nothing():
    m = manager("single-numa-node", "pod")
    big = spec("big", [("a", "4"), ("b", "4")])  # 8 CPUs: no NUMA node (6 CPUs) holds them
    pool = m.shared_pool()
    with pytest.raises(AdmissionError, match="TopologyAffinityError"):
        m.admit(info("x", big, "a"))
    assert m.shared_pool() == pool and "big" not in m.state.assignments
    with pytest.raises(AdmissionError, match="TopologyAffinityError"):
        m.admit(info("y", big, "b"))  # admitted again: the same refusal, nothing changed
    m.remove_pod("big")
    assert "big" not in m.admissions


def test_a_refused_pod_is_admitted_at_a_retry_once_its_cpus_are_free():
    """Under policy none the kubelet retries a refused CreateContainer every few seconds; a
    pod refused while another (a pod of the same name being deleted) held the CPUs gets them
    at the retry after that one's deletion (seen in the kubelet 1.37 cluster test: a refusal
    kept for good after the old pod had gone)."""
    m = manager()
    old = spec("old", [("a", "10")])  # 11 CPUs free after the reserved CPU 0
    m.admit(info("o", old, "a"))
    new = spec("new", [("a", "2")])
    with pytest.raises(AdmissionError, match="not enough cpus"):
        m.admit(info("n1", new, "a"))
    m.remove_pod("old")
    d = m.admit(info("n2", new, "a"))
    assert d.exclusive and len(d.cpus) == 2


def test_pod_scope_merges_the_whole_pod():
    # pod scope: one hint for the pod; 3 + 3 CPUs fit one NUMA node (5 free after CPU 0)
    m = manager("single-numa-node", "pod")
    two = spec("two", [("a", "2"), ("b", "3")])
    m.admit(info("a", two, "a"))
    a = m.state.assignments["two"]
    nodes = {m.policy.topology.details[c].numa for c in a["a"] | a["b"]}
    assert len(nodes) == 1


def test_pod_deleted_before_all_containers_were_created_releases_everything():
    m = manager()
    free = m.shared_pool()
    m.admit(info("c-init", POD, "init"))
    assert m.shared_pool() != free
    m.remove_pod("p")  # sidecar, shared, app1, app2 never created
    assert m.shared_pool() == free and m.state.assignments == {} and m.admissions == {}
    assert m.tm.scope.stored_affinities() == {}


def test_admitted_pods_section_is_the_encoding_of_the_records_and_each_is_encoded_once(
        monkeypatch):
    """checkpoint(encoded=True)'s admittedPods text (written before each release's reply)
    is the canonical JSON of the records as they are now, through admissions, refusals
    and removals, and a record is encoded once while it stays its pod's record."""
    import json

    from nri_cpumgr.cm import container_manager
    from nri_cpumgr.cm.container_manager import PodAdmission
    from nri_cpumgr.jsontext import canonical

    m = manager()
    encoded: list[object] = []
    real = container_manager.encode

    def counted(value):  # noqa: ANN001, ANN202
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(container_manager, "encode", counted)

    def section() -> bytes:
        body = m.checkpoint(encoded=True)
        plain = json.loads(canonical(body))["admittedPods"]
        assert plain == m.checkpoint()["admittedPods"]
        return bytes(body["admittedPods"])

    def same_as_dumps() -> None:
        want = json.dumps(m.checkpoint()["admittedPods"], sort_keys=True,
                          separators=(",", ":")).encode()
        assert section() == want

    m.admit(info("c-init", POD, "init"))
    two = spec("two", [("a", "1"), ("b", "1")])
    m.admit(info("a", two, "a"))
    m.admissions["z\u00e9"] = PodAdmission("UnexpectedAdmissionError: x", frozenset({"c"}))
    same_as_dumps()
    records = [v for v in encoded if isinstance(v, dict) and "containers" in v]
    assert len(records) == 3
    encoded.clear()
    same_as_dumps()  # (nothing changed: nothing encoded again)
    assert not [v for v in encoded if isinstance(v, dict) and "containers" in v]
    m.admissions["two"] = dataclasses.replace(m.admissions["two"], pinned=frozenset({"a"}))
    m.remove_pod("p")
    same_as_dumps()
    assert [v for v in encoded if isinstance(v, dict) and "containers" in v] == [
        {"containers": ["a", "b"], "pinned": ["a"]}]
    assert set(m._admission_text) == {"two", "z\u00e9"}


def test_checkpoint_and_restart_keep_recorded_decisions():
    m = manager()
    m.admit(info("c-init", POD, "init"))
    m.stop("c-init")
    body = m.checkpoint()
    assert body["admittedPods"]["p"]["containers"] == sorted(ORDER)
    assert set(body["entries"]["p"]) == {"init", "sidecar", "app1", "app2"}
    # a restarted plugin: the state from the checkpoint, the runtime lists the live pod
    from nri_cpumgr.managers import restore_state

    r = manager()
    r.state = restore_state(r.policy, body)
    r.cpu_provider.state = r.state
    r.restore_admissions(body)
    r.synchronize([], live_pods=["p"])
    assert r.state.assignments == m.state.assignments
    d = r.admit(info("c-app1", POD, "app1"))
    assert d.cpus == m.state.assignments["p"]["app1"]
    # a pod gone while the plugin was away: released, its record dropped
    r.synchronize([], live_pods=[])
    assert r.state.assignments == {} and r.admissions == {}


def test_a_restart_of_a_container_gets_its_recorded_cpus():
    m = manager()
    m.admit(info("c-init", POD, "init"))
    d1 = m.admit(info("c-app2", POD, "app2"))
    m.stop("c-app2")
    d2 = m.admit(info("c-app2b", POD, "app2"))  # same name, new id: a restart
    assert d2.cpus == d1.cpus and "c-app2" not in m.containers


def test_explain_follows_the_whole_pod_path():
    from nri_cpumgr.config import Config
    from nri_cpumgr.explain.explainer import Explainer, render

    m = manager("single-numa-node")
    ex = Explainer(m, Config.model_validate({"cpuManagerPolicy": "static",
                                             "reservedSystemCPUs": "0",
                                             "topologyManagerPolicy": "single-numa-node"}))
    ex.admit(info("c-init", POD, "init"))
    first = ex.live["c-init"]
    assert first["admission"].startswith("whole pod at its first container (5 containers")
    assert first["hints"]["cpu"]
    ex.admit(info("c-app1", POD, "app1"))
    later = ex.live["c-app1"]
    assert later["admission"].startswith("recorded at the pod's admission")
    assert "merged at the pod's admission" in later["affinity"]["note"]
    assert later["cpus"] == str(m.state.assignments["p"]["app1"])
    assert any(line.startswith("admission: recorded") for line in render(later))


def test_plugin_admits_a_known_pod_whole_and_its_deletion_releases_everything(workdir):
    """Through the real transport: with the pod's spec in the pod spec store, a shared
    container created before its pod's exclusive one starts on the pool as it is after the
    pod's admission (CPU 1 already the app's); the sandbox stopping before the app container
    was ever created gives CPU 1 back."""
    from nri_cpumgr.api import nri_pb2
    from nri_cpumgr.podsource import PodSpecStore
    from tests.unit.nri_peer import nri_container, nri_pod
    from tests.unit.test_runtime_plugin import run

    two = facts_from_pod({"metadata": {"uid": "p", "name": "p", "namespace": "ns"}, "spec": {
        "containers": [
            {"name": "side", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            {"name": "app", "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}}]}})
    store = PodSpecStore()
    store.replace([two])

    async def body(conn, plugin):
        await conn.handshake()
        plugin.pod_specs = store
        p = nri_pod("p")
        side = nri_container("p", 500, cid="c-side", name="side")
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=p, container=side), nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0"  # not 0-1: the app holds CPU 1
        assert plugin.manager.checkpoint()["admittedPods"]["p"]["pinned"] == ["app"]
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.STOP_POD_SANDBOX, pod=p), nri_pb2.Empty)
        assert plugin.manager.shared_pool() == CPUSet({0, 1})
        assert plugin.manager.admissions == {} and plugin.manager.state.assignments == {}

    run(workdir, body)
