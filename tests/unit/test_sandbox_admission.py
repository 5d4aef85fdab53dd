"""Whole-pod admission when the pod's sandbox starts (ContainerManager.admit_sandbox, the
plugin's RunPodSandbox): the kubelet admits a pod before it creates the sandbox, so pods are
admitted in sandbox order, whatever order their first containers come in (image pulls)."""

import pytest

from nri_cpumgr.cm.container_manager import AdmissionError, PodAdmission
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.spec import facts_from_pod
from tests.unit.test_whole_pod_admission import ORDER, POD, info, manager, spec

G = QOSClass.GUARANTEED


def sandbox(m, facts, qos=G):
    return m.admit_sandbox(facts.uid, facts.name, "ns", qos, facts)


def test_the_sandbox_admits_the_whole_pod_and_its_containers_get_the_record():
    m = manager()
    rec = sandbox(m, POD)
    assert rec is not None and rec.refused is None and rec.at_sandbox
    a = dict(m.state.assignments["p"])
    assert set(a) == {"init", "sidecar", "app1", "app2"} and a["app1"] == a["init"]
    pool = m.shared_pool()
    got = {n: m.admit(info(f"c-{n}", POD, n)) for n in ORDER}
    for n in ("init", "sidecar", "app1", "app2"):
        assert got[n].cpus == a[n] and got[n].exclusive
    assert got["shared"].cpus == pool and m.state.assignments["p"] == a
    # the same decisions as an admission at the pod's first container
    ref = manager()
    ref.admit(info("c-init", POD, "init"))
    assert ref.state.assignments["p"] == a


def test_pods_are_admitted_in_sandbox_order_not_first_container_order():
    """Pod a's sandbox starts first, but pod b's container comes first (a's image still
    pulling): a gets the CPUs the kubelet gives the pod it admitted first."""
    a, b = spec("a", [("app", "2")]), spec("b", [("app", "2")])
    in_order = manager()
    in_order.admit(info("ca", a, "app"))
    in_order.admit(info("cb", b, "app"))
    want = {u: in_order.state.assignments[u]["app"] for u in ("a", "b")}
    assert want["a"] != want["b"]

    m = manager()
    sandbox(m, a)
    sandbox(m, b)
    got_b = m.admit(info("cb", b, "app"))
    got_a = m.admit(info("ca", a, "app"))
    assert (got_a.cpus, got_b.cpus) == (want["a"], want["b"])
    # without the sandbox's admission the first container decides the order
    late = manager()
    late.admit(info("cb", b, "app"))
    assert late.state.assignments["b"]["app"] == want["a"]


@pytest.mark.parametrize("why", ["burstable", "device", "admitted", "held", "synchronizing"])
def test_pods_left_to_their_first_container(why):
    m = manager()
    facts, qos = POD, G
    if why == "burstable":
        qos = QOSClass.BURSTABLE
    elif why == "device":
        facts = facts_from_pod({"metadata": {"uid": "g", "name": "g", "namespace": "ns"},
                                "spec": {"containers": [{"name": "app", "resources": {
                                    "limits": {"cpu": "2", "memory": "64Mi",
                                               "vendor.example/gpu": "1"}}}]}})
    elif why == "admitted":
        m.admit(info("c-init", POD, "init"))
    elif why == "held":
        m.admit(info("c-x", spec("p", [("x", "1")]), "x"))
    else:
        m._synchronizing = True
    before = (dict(m.state.assignments), dict(m.admissions), m.shared_pool())
    assert sandbox(m, facts, qos) is None
    assert (dict(m.state.assignments), dict(m.admissions), m.shared_pool()) == before


def test_a_native_resource_in_a_domain_is_no_device():
    m = manager()
    facts = facts_from_pod({"metadata": {"uid": "n", "name": "n", "namespace": "ns"},
                            "spec": {"containers": [{"name": "app", "resources": {
                                "limits": {"cpu": "1", "memory": "64Mi",
                                           "ephemeral-storage": "1Gi",
                                           "example.kubernetes.io/thing": "1"}}}]}})
    assert sandbox(m, facts) is not None and "n" in m.state.assignments


def test_a_refusal_at_the_sandbox_is_the_first_containers_then_the_pod_is_admitted_again():
    m = manager("single-numa-node", "pod")
    big = spec("big", [("a", "4"), ("b", "4")])  # 8 CPUs: no NUMA node (6 CPUs) holds them
    pool = m.shared_pool()
    rec = sandbox(m, big)
    assert rec is not None and rec.refused.startswith("TopologyAffinityError")
    assert m.shared_pool() == pool and "big" not in m.state.assignments
    admitted: list[str] = []
    real = m._admit_pod

    def counted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        admitted.append(a[0])
        return real(*a, **kw)

    m._admit_pod = counted
    with pytest.raises(AdmissionError, match="TopologyAffinityError"):
        m.admit(info("x", big, "a"))
    assert admitted == []  # the sandbox's answer, not a second admission
    with pytest.raises(AdmissionError, match="TopologyAffinityError"):
        m.admit(info("y", big, "b"))
    assert admitted == ["big"]  # a retry admits the pod again


def test_a_pod_removed_before_its_containers_releases_everything():
    m = manager()
    free = m.shared_pool()
    sandbox(m, POD)
    assert m.shared_pool() != free
    m.remove_pod("p")
    assert m.shared_pool() == free and m.state.assignments == {} and m.admissions == {}
    assert m.tm.scope.stored_affinities() == {}


def test_the_record_keeps_where_it_was_made_through_a_checkpoint():
    m = manager()
    sandbox(m, POD)
    doc = m.checkpoint()["admittedPods"]["p"]
    assert doc["atSandbox"] is True
    assert PodAdmission.from_json(doc).at_sandbox
    m2 = manager()
    m2.admit(info("c-init", POD, "init"))
    assert "atSandbox" not in m2.checkpoint()["admittedPods"]["p"]


def test_explain_says_the_admission_was_the_sandboxs():
    from nri_cpumgr.config import Config
    from nri_cpumgr.explain.explainer import Explainer

    m = manager()
    ex = Explainer(m, Config.model_validate({"cpuManagerPolicy": "static",
                                             "reservedSystemCPUs": "0"}))
    sandbox(m, POD)
    ex.admit(info("c-init", POD, "init"))
    assert ex.live["c-init"]["admission"] == "recorded at the pod's admission (its sandbox)"


def test_plugin_admits_at_run_pod_sandbox_through_the_transport(workdir):
    """Through the real transport: RUN_POD_SANDBOX of a Guaranteed pod whose spec the store
    has takes its CPUs at once (the shared pool shrinks before any of its containers);
    the container then gets them; a pod without a known spec is left to its container."""
    from nri_cpumgr.api import nri_pb2
    from nri_cpumgr.podsource import PodSpecStore
    from tests.unit.nri_peer import nri_container, nri_pod
    from tests.unit.test_runtime_plugin import run

    one = facts_from_pod({"metadata": {"uid": "p", "name": "p", "namespace": "ns"}, "spec": {
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "1",
                                                                "memory": "256Mi"}}}]}})
    store = PodSpecStore()
    store.replace([one])

    async def body(conn, plugin):
        await conn.handshake()
        plugin.pod_specs = store
        free = plugin.manager.shared_pool()
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.RUN_POD_SANDBOX, pod=nri_pod("unknown")), nri_pb2.Empty)
        assert plugin.manager.shared_pool() == free and plugin.manager.admissions == {}
        p = nri_pod("p")
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.RUN_POD_SANDBOX, pod=p), nri_pb2.Empty)
        held = plugin.manager.state.assignments["p"]["app"]
        assert plugin.manager.admissions["p"].at_sandbox
        assert plugin.manager.shared_pool() == free - held
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=p, container=nri_container("p", 1000, cid="c-app", name="app")),
            nri_pb2.CreateContainerResponse)
        assert CPUSet.parse(resp.adjust.linux.resources.cpu.cpus) == held

    run(workdir, body)


def test_the_plugins_explanation_of_a_pod_admitted_at_its_sandbox_has_its_hints(workdir):
    """Through the transport, with explanations on: the container of a pod admitted at its
    RunPodSandbox is explained with the hints of that admission."""
    from nri_cpumgr.api import nri_pb2
    from tests.unit.nri_peer import nri_container, nri_pod
    from tests.unit.test_runtime_plugin import STATIC, run

    async def body(conn, plugin):
        await conn.handshake()
        plugin.pod_specs = _store_with("p")
        p = nri_pod("p")
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.RUN_POD_SANDBOX, pod=p), nri_pb2.Empty)
        assert plugin.manager.admissions["p"].at_sandbox
        await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=p, container=nri_container("p", 1000, cid="c-app", name="app")),
            nri_pb2.CreateContainerResponse)
        rec = plugin.explainer.live["c-app"]
        assert rec["admission"] == "recorded at the pod's admission (its sandbox)"
        assert rec["hints"]["cpu"] == {"cpu": [{"numa": "0", "preferred": True}]}
        assert rec["affinity"]["numa"] == "0"

    run(workdir, body, config=STATIC + "topologyManagerPolicy: best-effort\n"
                                       "explainDecisions: true\n")


def _store_with(uid: str):
    from nri_cpumgr.podsource import PodSpecStore

    store = PodSpecStore()
    store.replace([facts_from_pod({"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
                                   "spec": {"containers": [{"name": "app", "resources": {
                                       "limits": {"cpu": "1", "memory": "256Mi"}}}]}})])
    return store


ASYNC = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n' \
        "sharedPoolShrinkDelay: 2s\nsharedPoolUpdateMode: async\n"


def test_the_shrink_waits_for_a_pod_admitted_at_its_sandbox_as_for_a_start(workdir):
    """The pool shrinks at the sandbox, but the shared containers move only once the pod's
    container has started (a quiet moment after), not while its creation may hold the
    runtime's lock; a sandbox that goes first lets the pool be as it was, nothing sent."""
    import asyncio
    import time

    from nri_cpumgr.api import nri_pb2
    from tests.unit.test_runtime_plugin import cpus_of, ctr, pod, run

    async def body(conn, plugin):
        await conn.handshake(pods=[pod("be", "besteffort")], containers=[ctr("be", 0, "0-1")])
        plugin.pod_specs = _store_with("g")
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.RUN_POD_SANDBOX, pod=pod("g")), nri_pb2.Empty)
        assert plugin.manager.shared_pool() == CPUSet({0})
        await asyncio.sleep(0.8)  # past the quiet moment (0.25 s): still waiting
        assert conn.updates.empty()
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod("g"), container=ctr("g", 1000)), nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        t0 = time.monotonic()
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.POST_START_CONTAINER, pod=pod("g"), container=ctr("g")),
            nri_pb2.Empty)
        upd = await asyncio.wait_for(conn.updates.get(), 5)
        assert time.monotonic() - t0 < 1.0  # the quiet moment after the start
        assert cpus_of(upd.update) == {"c-be": "0"}
        assert not plugin._sandbox_pending

        for ev in (nri_pb2.STOP_POD_SANDBOX, nri_pb2.REMOVE_POD_SANDBOX):  # (g's CPU back)
            await conn.call("StateChange", nri_pb2.StateChangeEvent(event=ev, pod=pod("g")),
                            nri_pb2.Empty)
        plugin.pod_specs = _store_with("h")
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.RUN_POD_SANDBOX, pod=pod("h")), nri_pb2.Empty)
        held = plugin.manager.state.assignments["h"]["app"]
        await conn.call("StateChange", nri_pb2.StateChangeEvent(
            event=nri_pb2.STOP_POD_SANDBOX, pod=pod("h")), nri_pb2.Empty)
        assert "h" not in plugin.manager.state.assignments and not plugin._sandbox_pending
        assert held <= plugin.manager.shared_pool()

    run(workdir, body, ASYNC)


@pytest.mark.parametrize(("policy", "scope"), [("best-effort", "container"),
                                               ("single-numa-node", "pod"),
                                               ("restricted", "container")])
def test_explain_shows_the_hints_the_sandboxs_admission_saw(policy, scope):
    """Each container of a pod admitted at its sandbox gets, in its record, the providers'
    hints that admission saw: for the pod's first container, those an admission at that
    container shows (the same pod on the same node); for the others too, which an
    admission at the first container leaves with the merged affinity alone."""
    from nri_cpumgr.config import Config
    from nri_cpumgr.explain.explainer import Explainer

    cfg = Config.model_validate({"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"})
    m = manager(policy, scope)
    ex = Explainer(m, cfg)
    rec = ex.admit_sandbox(POD.uid, POD.name, "ns", G, POD)
    assert rec is not None and rec.at_sandbox and rec.refused is None
    for n in ORDER:
        ex.admit(info(f"c-{n}", POD, n))
    ref_m = manager(policy, scope)
    ref = Explainer(ref_m, cfg)
    for n in ORDER:  # (the whole pod at its first container, "init")
        ref.admit(info(f"c-{n}", POD, n))
    got, want = ex.live["c-init"], ref.live["c-init"]
    assert got["hints"] == want["hints"] and got["hints"]["cpu"] != "no preference"
    assert got["affinity"]["numa"] == want["affinity"]["numa"]
    assert m.state.assignments["p"] == ref_m.state.assignments["p"]
    for n in ("sidecar", "app1", "app2"):  # (exclusive: hints of their own)
        assert ex.live[f"c-{n}"]["hints"]["cpu"] != "no preference"
        assert "hints" not in ref.live[f"c-{n}"]
    for n in ORDER:  # the hints the admission merged into the affinity it stored
        assert ex._sandbox_hints["p"][n][1]["numa"] == ex.live[f"c-{n}"]["affinity"]["numa"]
    ex.forget_pod(POD.uid)
    assert POD.uid not in ex._sandbox_hints


def test_explain_keeps_no_hints_for_a_pod_left_to_its_first_container():
    """A pod the sandbox does not admit (not Guaranteed) keeps nothing in the explainer."""
    from nri_cpumgr.config import Config
    from nri_cpumgr.explain.explainer import Explainer

    m = manager("best-effort")
    ex = Explainer(m, Config.model_validate({"cpuManagerPolicy": "static",
                                             "reservedSystemCPUs": "0"}))
    assert ex.admit_sandbox(POD.uid, POD.name, "ns", QOSClass.BURSTABLE, POD) is None
    assert ex._sandbox_hints == {} and m.admissions == {}
