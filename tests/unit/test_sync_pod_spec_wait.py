"""A restarted plugin's Synchronize and the pod spec source's first LIST
(nri_cpumgr.runtime.plugin Plugin._with_pod_specs, ContainerManager.needs_pod_specs): no wait
when the checkpoint gives every Guaranteed container its assignment back; a container it does
not know still waits for its pod's facts."""

from __future__ import annotations

import copy
import json
import threading

from nri_cpumgr.podmodel.spec import facts_from_pod
from nri_cpumgr.podsource import PodSpecStore
from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME
from tests.unit.test_pod_level import GI, POD4, docs_pod_scope, manager, res
from tests.unit.test_pod_level import ctr as pl_ctr
from tests.unit.test_runtime_plugin import cpus_of, ctr, pod, run


class CountingStore(PodSpecStore):
    """A pod spec store that counts the waits for its first LIST; ``lists``: the facts its
    first LIST brings when a wait begins (after 50 ms), None: it never lists."""

    def __init__(self, lists=None) -> None:
        super().__init__()
        self.waits = 0
        self._lists = lists

    def wait_synced(self, timeout: float) -> bool:
        self.waits += 1
        if self._lists is not None:
            threading.Timer(0.05, self.replace, (self._lists,)).start()
        return super().wait_synced(timeout)


def pinned_first(workdir):
    async def body(conn, plugin):
        await conn.handshake()
        from nri_cpumgr.api import nri_pb2

        req = nri_pb2.CreateContainerRequest(pod=pod("g"), container=ctr("g", 1000))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert plugin._writer is not None and plugin._writer.flush()

    run(workdir, body)
    saved = json.loads((workdir / "state" / CHECKPOINT_NAME).read_text())["data"]
    assert saved["entries"] == {"g": {"app": "1"}}


def test_restart_with_every_guaranteed_container_known_does_not_wait(workdir):
    pinned_first(workdir)
    store = CountingStore()  # never lists
    facts = facts_from_pod({"metadata": {"uid": "g", "name": "g", "namespace": "ns"},
                            "spec": {"containers": [{"name": "app", "resources": {
                                "limits": {"cpu": "1", "memory": "256Mi"}}}]}})

    async def again(conn, plugin):
        plugin.pod_specs = store
        # the runtime moved it to 0-1 meanwhile: the checkpoint's CPU 1 comes back
        _, sync = await conn.handshake(pods=[pod("g")], containers=[ctr("g", 1000, "0-1")])
        assert cpus_of(sync.update) == {"c-g": "1"}
        assert store.waits == 0
        # the watch's first LIST was asked for once the answer was out, not before it
        assert store.needed.is_set()
        assert plugin.manager.state.assignments == {"g": {"app": {1}}}
        # the first LIST comes later: the record gets the facts at the next event
        assert plugin.manager.containers["c-g"].info.pod_spec is None
        store.replace([facts])
        plugin.attach_owed_pod_specs()
        assert plugin.manager.containers["c-g"].info.pod_spec == facts

    run(workdir, again)


def test_a_guaranteed_container_the_checkpoint_does_not_know_waits_for_its_facts(workdir):
    """A pod with .spec.resources (gates off: the kubelet's managers skip it) whose container
    NRI shows with the pod's 1-CPU limits: with the facts it stays shared; without them it
    would be admitted on CPU 1 (the checkpoint's pod g is gone: CPU 1 is free)."""
    pinned_first(workdir)
    pl = facts_from_pod({"metadata": {"uid": "p", "name": "p", "namespace": "ns"}, "spec": {
        "resources": {"limits": {"cpu": "1", "memory": "256Mi"}},
        "containers": [{"name": "app"}]}})
    store = CountingStore(lists=[pl])

    async def again(conn, plugin):
        plugin.pod_specs = store
        _, sync = await conn.handshake(
            pods=[pod("p")], containers=[ctr("p", 1000, "0-1")])
        assert store.waits == 1
        assert cpus_of(sync.update) == {}
        assert plugin.manager.state.assignments == {}
        assert not plugin.manager.containers["c-p"].exclusive
        assert plugin.manager.containers["c-p"].info.pod_spec == pl

    run(workdir, again)


def test_pod_level_pod_known_to_the_checkpoint():
    """Pod scope, gates on: a restarted manager has the bubble and main-app's slice, not the
    sidecars (pod-shared, no entry of their own): they are admitted again at Synchronize,
    with the facts, so a Synchronize with them waits; one with main-app alone does not."""
    m = manager()
    _, _, main = docs_pod_scope(m)
    pool = m.pod_level.pod_pool("p")
    again = manager(state=copy.deepcopy(m.state))
    sidecars = [pl_ctr(cid, "p", n, res(), POD4, current=str(pool))
                for cid, n in (("metrics", "metrics-sidecar"), ("logging", "logging-sidecar"))]
    app = pl_ctr("main", "p", "main-app", res(2, 2 * GI), POD4, current=str(main.cpus))
    assert again.needs_pod_specs([app]) is False
    assert again.needs_pod_specs([app, *sidecars]) is True
    assert again.needs_pod_specs([]) is False
    # and a Synchronize of them all restores the slice and keeps the sidecars on the pool
    assert again.synchronize([app, *sidecars]) == {}
    assert again.containers["main"].exclusive and again.containers["main"].applied == main.cpus
    assert again.containers["metrics"].applied == pool


def test_the_watch_streams_once_the_first_synchronize_is_answered(workdir):
    """A store the plugin started before its first Synchronize (``answered`` cleared, as
    _start_pod_source leaves it): the answer sets ``answered`` (the watch opens its stream
    then) and ``needed``."""
    store = CountingStore()
    store.answered.clear()

    async def body(conn, plugin):
        plugin.pod_specs = store
        await conn.handshake()
        assert store.answered.is_set()
        assert store.needed.is_set()

    run(workdir, body)
