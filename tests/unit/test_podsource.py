"""The pod spec source (nri_cpumgr.podsource) against the loopback fake API server: LIST,
WATCH, deletes, mirror pods, a slow and an unreachable API server (bounded waits, fallback,
recovery), and the spec facts of nri_cpumgr.podmodel.spec."""

from __future__ import annotations

import socket
import time

import pytest

from nri_cpumgr.podmodel.spec import facts_from_pod, qualifies_for_slice
from nri_cpumgr.podsource import APIServerPodSource, PodSpecStore
from tests.e2e.harness.fakeapi import FakeAPIServer

NODE = "node-a"


def pod(uid: str, *, pod_res: dict | None = None, containers=(("app", None),),
        init=(), annotations: dict | None = None) -> dict:
    def c(name, res, restart=None):
        d = {"name": name, "resources": res or {}}
        if restart:
            d["restartPolicy"] = restart
        return d

    spec = {"containers": [c(n, r) for n, r in containers],
            "initContainers": [c(n, r, rp) for n, r, rp in init]}
    if pod_res is not None:
        spec["resources"] = pod_res
    return {"metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "ns",
                         "annotations": annotations or {}}, "spec": spec}


G4 = {"requests": {"cpu": "4", "memory": "256Mi"}, "limits": {"cpu": "4", "memory": "256Mi"}}


def until(fn, timeout=5.0):
    end = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def api():
    with FakeAPIServer(NODE) as a:
        yield a


def start(api, *, needed: bool = True, **kw):
    """A started source and its store; ``needed``: facts asked for at once (the first LIST
    does not wait for its gate)."""
    store = PodSpecStore()
    if needed:
        store.needed.set()
    src = APIServerPodSource(store, api.url, NODE, token_file="/nonexistent", **kw)
    src.start()
    return store, src


def test_facts_of_the_look_alike_pods():
    a = facts_from_pod(pod("a", pod_res=G4))
    b = facts_from_pod(pod("b", containers=(("app", G4),)))
    assert a.pod_level and not b.pod_level
    assert a.pod_requests == {"cpu": 4000, "memory": 256 * 2**20}
    assert not qualifies_for_slice(a.container("app"))
    assert qualifies_for_slice(b.container("app"))
    side = facts_from_pod(pod("c", pod_res=G4, init=(("side", None, "Always"),
                                                     ("setup", None, None))))
    assert side.init_containers == ("side", "setup")
    assert side.container("side").restartable and not side.container("setup").restartable
    # limits alone imply requests (API-server defaulting), a fractional CPU never qualifies
    lim = facts_from_pod(pod("d", containers=(("app", {"limits": {"cpu": "1500m",
                                                                  "memory": "1Gi"}}),)))
    assert lim.container("app").requests == {"cpu": 1500, "memory": 2**30}
    assert not qualifies_for_slice(lim.container("app"))


def test_malformed_pod_is_named():
    with pytest.raises(ValueError, match=r"spec.containers\[0\].resources.limits.cpu"):
        facts_from_pod(pod("x", containers=(("app", {"limits": {"cpu": "lots"}}),)))


def test_list_then_watch_adds_and_deletes(api):
    api.add(pod("u1", pod_res=G4))
    api.add(pod("other", pod_res=G4), node="node-b")
    store, src = start(api)
    try:
        assert until(lambda: store.connected)
        assert store.get("u1").pod_level and store.get("other") is None
        api.add(pod("u2", containers=(("app", G4),)))
        assert store.wait("u2", 2.0) is not None
        api.delete("u1")
        assert until(lambda: store.get("u1") is None)
        q = api.requests[0]
        assert "fieldSelector=spec.nodeName%3Dnode-a" in q and "limit=500" in q
        assert any("watch=1" in r and "allowWatchBookmarks=true" in r for r in api.requests)
    finally:
        src.stop()


def test_mirror_pod_is_found_by_its_static_pod_uid(api):
    api.add(pod("mirror-uid", pod_res=G4,
                annotations={"kubernetes.io/config.mirror": "static-hash"}))
    store, src = start(api)
    try:
        assert until(lambda: store.connected)
        assert store.get("static-hash").uid == "mirror-uid"
    finally:
        src.stop()


def test_wait_is_bounded_for_a_pod_never_shown(api):
    store, src = start(api)
    try:
        assert until(lambda: store.connected)
        t0 = time.monotonic()
        assert store.wait("never", 0.3) is None
        assert 0.25 <= time.monotonic() - t0 < 1.0
        assert store.misses == 1 and store.waits == 1
    finally:
        src.stop()


def test_unreachable_api_server_never_waits_and_recovers(api):
    api.down = True
    store, src = start(api)
    try:
        time.sleep(0.3)
        assert not store.connected
        t0 = time.monotonic()
        assert store.wait("any", 5.0) is None  # not connected: no wait at all
        assert time.monotonic() - t0 < 0.05
        api.add(pod("late", pod_res=G4))
        api.down = False
        assert until(lambda: store.get("late") is not None, timeout=10)
    finally:
        src.stop()


def test_slow_api_server_hits_the_2s_deadline(api):
    api.delay = 3.0
    store, src = start(api, request_timeout=0.5)
    try:
        time.sleep(1.0)
        assert not store.connected and store.get("x") is None
        api.delay = 0.0
        api.add(pod("x", pod_res=G4))
        assert until(lambda: store.get("x") is not None, timeout=10)
    finally:
        src.stop()


def test_a_closed_port_is_a_connection_error_not_a_hang():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    store = PodSpecStore()
    src = APIServerPodSource(store, f"http://127.0.0.1:{port}", NODE, token_file="/none")
    src.start()
    try:
        time.sleep(0.2)
        assert not store.connected
    finally:
        t0 = time.monotonic()
        src.stop()
        assert time.monotonic() - t0 < 1.5


def test_no_url_or_node_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST"):
        APIServerPodSource(PodSpecStore(), "", NODE)
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(ValueError, match="NODE_NAME"):
        APIServerPodSource(PodSpecStore(), "http://127.0.0.1:1", "")


def test_https_with_the_service_account_ca_and_token(tmp_path):
    """The in-cluster path: https verified against the CA file, the token as a bearer."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not found")
    cert, key = tmp_path / "ca.crt", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    (tmp_path / "token").write_text("s3cret\n")
    with FakeAPIServer(NODE, tls=(str(cert), str(key)), token="s3cret") as api:
        api.add(pod("tls", pod_res=G4))
        store = PodSpecStore()
        src = APIServerPodSource(store, api.url, NODE, token_file=str(tmp_path / "token"),
                                 ca_file=str(cert))
        src.start()
        try:
            assert until(lambda: store.get("tls") is not None)
        finally:
            src.stop()
        # a wrong token: 401, never connected
        (tmp_path / "token").write_text("wrong")
        store = PodSpecStore()
        src = APIServerPodSource(store, api.url, NODE, token_file=str(tmp_path / "token"),
                                 ca_file=str(cert))
        src.start()
        try:
            time.sleep(0.5)
            assert not store.connected and store.get("tls") is None
        finally:
            src.stop()


def test_the_first_list_waits_until_facts_are_needed(api):
    api.add(pod("u1", pod_res=G4))
    store, src = start(api, needed=False)
    try:
        time.sleep(0.4)
        assert api.requests == [] and store.starting and not store.connected
        store.needed.set()  # (what the plugin does once its first Synchronize is answered)
        assert until(lambda: store.connected)
        assert store.get("u1").pod_level and not store.starting
    finally:
        src.stop()


def test_a_wait_before_the_first_list_asks_for_it_and_waits(api):
    api.add(pod("u1", pod_res=G4))
    store, src = start(api, needed=False)
    try:
        t0 = time.monotonic()
        f = store.wait("u1", 1.5)  # (before the 2 s gate would open by itself)
        assert f is not None and f.pod_level
        assert time.monotonic() - t0 < 1.5 and store.waits == 1 and store.misses == 0
    finally:
        src.stop()


def test_the_gate_opens_by_itself_and_stop_ends_a_gated_thread(api, monkeypatch):
    import nri_cpumgr.podsource as podsource

    store, src = start(api, needed=False)
    t0 = time.monotonic()
    src.stop(timeout=1.0)  # before its first LIST: no request, the thread ends at once
    assert not src._thread.is_alive() and time.monotonic() - t0 < 0.5
    assert api.requests == []
    monkeypatch.setattr(podsource, "START_GATE", 0.2)
    store, src = start(api, needed=False)
    try:
        assert until(lambda: store.connected, 2.0) and not store.needed.is_set()
    finally:
        src.stop()

