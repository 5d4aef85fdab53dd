"""The pod spec watch's first LIST made by a child process at the start (nri_cpumgr.early_list,
issue 34): against the loopback fake API server, the child's LIST is the watch's (one LIST,
the watch from its resourceVersion); a child started for other values, one that fails, one
that says nothing readable and one that takes too long leave the LIST to the watch; the
parts of a pod it hands over give the facts the whole pod gives; boot reads the config's
values as the config model does."""

from __future__ import annotations

import json
import marshal
import os
import socket
import time
import urllib.parse

import pytest

from nri_cpumgr import boot, early_list
from nri_cpumgr.config import parse_config
from nri_cpumgr.podmodel import spec
from nri_cpumgr.podsource import (
    MIRROR_ANNOTATION,
    APIServerPodSource,
    PodSpecStore,
    facts_parts,
    list_to,
)
from tests.e2e.harness.fakeapi import FakeAPIServer

from .test_podsource import G4, pod, until

NODE = "node-a"


def JOB(url: str, node: str):  # noqa: N802 - what boot gives early_list.start
    return lambda fd: list_to(fd, url, node)


@pytest.fixture
def api():
    with FakeAPIServer(NODE) as a:
        for i in range(5):
            a.add(pod(f"u{i}", containers=(("app", G4), ("side", None))))
        yield a


@pytest.fixture(autouse=True)
def _no_child_left():
    yield
    child, early_list._child = early_list._child, None
    if child is not None:
        early_list.discard(child[0], child[1])


def _lists(api: FakeAPIServer) -> list[dict[str, str]]:
    out = []
    for p in api.requests:
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(p).query))
        out.append(q)
    return out


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_childs_list_is_the_watchs_first(api: FakeAPIServer) -> None:
    assert early_list.start(api.url, NODE, JOB(api.url, NODE))
    pid = early_list._child[0]  # type: ignore[index]
    # the LIST is made at once, before anything asks the watch for facts
    assert until(lambda: len(api.requests) >= 1)
    store = PodSpecStore()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    try:
        assert early_list._child is None  # (taken)
        assert not store.needed.is_set()
        assert store.wait_synced(5)
        assert {store.get(f"u{i}").uid for i in range(5)} == {f"u{i}" for i in range(5)}
        assert store.get("u1").container("app").cpu_request_milli == 4000
        listed = str(api._rv)  # (the version the child's LIST was served at)
        api.add(pod("late"))  # the watch goes on from the child's LIST
        assert until(lambda: store.get("late") is not None)
        reqs = _lists(api)
        assert [q.get("watch") for q in reqs] == [None, "1"]  # one LIST: the child's
        assert reqs[1]["resourceVersion"] == listed
        assert _gone(pid)  # reaped
    finally:
        src.stop()


def test_a_child_started_for_other_values_is_stopped_and_the_watch_lists(
        api: FakeAPIServer) -> None:
    assert early_list.start(api.url, "another-node", JOB(api.url, "another-node"))
    pid = early_list._child[0]  # type: ignore[index]
    store = PodSpecStore()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    try:
        assert _gone(pid)
        assert store.wait_synced(5)
        assert store.get("u3") is not None
        assert any(q.get("fieldSelector") == f"spec.nodeName={NODE}" and "watch" not in q
                   for q in _lists(api))
    finally:
        src.stop()


def test_a_failed_childs_list_is_made_again_by_the_watch(api: FakeAPIServer) -> None:
    api.down = True  # (503 to the child)
    assert early_list.start(api.url, NODE, JOB(api.url, NODE))
    assert until(lambda: len(api.requests) >= 1)
    time.sleep(0.2)
    api.down = False
    store = PodSpecStore()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    try:
        assert store.wait_synced(5)
        assert store.get("u0") is not None
        assert [q.get("watch") for q in _lists(api)][:2] == [None, None]  # two LISTs
    finally:
        src.stop()


def test_a_child_that_takes_too_long_is_given_up() -> None:
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # (connects, never answers: the child's request waits for 2 s)
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        assert early_list.start(url, NODE, JOB(url, NODE))
        pid, fd = early_list.take(url, NODE)  # type: ignore[misc]
        t = time.monotonic()
        assert early_list.read(pid, fd, deadline=0.3) == (None, 0.0)
        assert time.monotonic() - t < 1.5
        assert _gone(pid)
    finally:
        hung.close()


def _child_saying(data: bytes) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, data)
        os._exit(0)
    os.close(w)
    return pid, r


@pytest.mark.parametrize("data", [
    b"", b"not marshal", b"\xff\x00", marshal.dumps([1, 2]), marshal.dumps({"items": []}),
    marshal.dumps({"items": {}, "resourceVersion": "1"}), marshal.dumps({"error": 3})])
def test_an_unreadable_answer_is_none(data: bytes) -> None:
    pid, fd = _child_saying(data)
    doc, _ = early_list.read(pid, fd)
    assert doc is None
    assert _gone(pid)


def test_what_the_child_says() -> None:
    doc, ms = early_list.read(*_child_saying(marshal.dumps({"items": [],
                                                           "resourceVersion": "7"})))
    assert (doc, ms) == ({"items": [], "resourceVersion": "7"}, 0.0)
    doc, ms = early_list.read(*_child_saying(marshal.dumps(
        {"items": [], "resourceVersion": "7", "cpu_ms": 21.5})))
    assert (doc, ms) == ({"items": [], "resourceVersion": "7"}, 21.5)
    doc, ms = early_list.read(*_child_saying(marshal.dumps(
        {"error": "OSError: HTTP 403", "cpu_ms": 3})))
    assert (doc, ms) == ({"error": "OSError: HTTP 403"}, 3.0)
    for bad in ("12", -1.0, None, True, float("inf"), float("nan"), 10**400,
                86_400_000):  # (a CPU time that is none is 0)
        doc, ms = early_list.read(*_child_saying(marshal.dumps(
            {"items": [], "resourceVersion": "7", "cpu_ms": bad})))
        assert (doc, ms) == ({"items": [], "resourceVersion": "7"}, 0.0)


def test_the_childs_cpu_comes_with_its_list_and_reading_it_imports_no_library(
        api: FakeAPIServer) -> None:
    """The child says its CPU time with its LIST, and the plugin reaps it with
    ``waitpid``: ``os.wait4``'s usage would import ``resource`` (a shared library) on the
    first Synchronize's path (issue 34)."""
    got = _python(
        "import sys\nfrom nri_cpumgr import early_list\n"
        "from nri_cpumgr.podsource import list_to\n"
        f"url, node = {api.url!r}, {NODE!r}\n"
        "assert early_list.start(url, node, lambda fd: list_to(fd, url, node))\n"
        "doc, ms = early_list.read(*early_list.take(url, node))\n"
        "print(sorted(p['metadata']['uid'] for p in doc['items']), 'cpu_ms' in doc,"
        " 0 < ms < 60000, 'resource' in sys.modules)\n")
    assert got == "['u0', 'u1', 'u2', 'u3', 'u4'] False True False"


def test_an_unread_child_is_stopped_with_the_source(api: FakeAPIServer) -> None:
    assert early_list.start(api.url, NODE, JOB(api.url, NODE))
    pid = early_list._child[0]  # type: ignore[index]
    store = PodSpecStore()  # (nothing asks for facts: the thread waits for its gate)
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    src.stop(timeout=0.2)
    assert until(lambda: _gone(pid), 3)


def test_the_stream_opens_once_the_first_synchronize_is_answered(api: FakeAPIServer) -> None:
    store = PodSpecStore()
    store.answered.clear()  # (a plugin before its first Synchronize's answer)
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    try:
        assert store.wait_synced(5)
        time.sleep(0.3)
        assert [q.get("watch") for q in _lists(api)] == [None]  # the LIST, no stream yet
        store.answered.set()
        assert until(lambda: [q.get("watch") for q in _lists(api)] == [None, "1"])
    finally:
        src.stop()


# ------------------------------------------------------------------ the parts of a pod
MIRROR = {MIRROR_ANNOTATION: "static-uid", "big": "x" * 5000}
PODS = [
    pod("a", containers=(("app", G4),)),
    pod("b", pod_res={"limits": {"cpu": "2"}}, containers=(("app", None), ("s", G4)),
        init=(("i", G4, "Always"), ("j", None, None))),
    pod("m", annotations=MIRROR),
    pod("n", annotations={"other": "1"}),
    {**pod("c"), "status": {"phase": "Running"}, "kind": "Pod"},
    {"metadata": {"uid": "d", "annotations": "not a map"}, "spec": {"containers": []}},
    {"metadata": {"uid": "e", "managedFields": [{"x": 1}]},
     "spec": {"containers": [{"name": "a", "image": "busybox", "env": [],
                              "resources": {"requests": {"cpu": "500m"}}}],
              "nodeName": NODE, "volumes": []}},
    # malformed: the same error either way
    {"metadata": {"uid": "f"}, "spec": {"containers": [{"resources": {}}]}},
    {"metadata": {"uid": "g"}, "spec": {"containers": ["x"]}},
    {"metadata": {"uid": "h"}, "spec": {"resources": "x"}},
    {"metadata": {"uid": "i"}, "spec": {"containers": [
        {"name": "a", "resources": {"limits": {"cpu": "lots"}}}]}},
    {"metadata": "x", "spec": {}},
    {"metadata": {}, "spec": {}},
    {"metadata": {"uid": "j"}, "spec": "x"},
    {"metadata": {"uid": "k"}},
    "not a pod",
    {"metadata": {"uid": "l"}, "spec": {"initContainers": [
        {"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}],
        "containers": "x"}},
]


def _facts_or_error(obj: object) -> object:
    try:
        return spec.facts_from_pod(obj)
    except ValueError as e:
        return f"ValueError: {e}"


@pytest.mark.parametrize("obj", PODS)
def test_the_parts_of_a_pod_give_its_facts(obj: object) -> None:
    parts = json.loads(json.dumps(facts_parts(obj)))  # (as handed over: JSON)
    assert _facts_or_error(parts) == _facts_or_error(obj)


def test_the_parts_leave_the_rest_out() -> None:
    full = PODS[6]
    parts = facts_parts({**full, "metadata": {**full["metadata"], "annotations": MIRROR}})
    assert parts == {"metadata": {"uid": "e", "annotations": {MIRROR_ANNOTATION: "static-uid"}},
                     "spec": {"containers": [{"name": "a",
                                              "resources": {"requests": {"cpu": "500m"}}}]}}
    assert MIRROR_ANNOTATION == spec.MIRROR_ANNOTATION


# ------------------------------------------------------------------ what boot reads
SOURCE_DOCS = [
    "podSpecSource: apiServer\n",
    "podSpecSource: apiServer\napiServerURL: http://127.0.0.1:6443\nnodeName: node-a\n",
    "podSpecSource: \"apiServer\"\napiServerURL: 'https://[fd00::1]:6443'  # c\n"
    "nodeName: n1.example.com\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\npodSpecSource: apiServer\n"
    "featureGates:\n  PodLevelResources: true\napiServerURL: https://10.0.0.1\n",
]


@pytest.mark.parametrize("text", SOURCE_DOCS)
def test_pod_source_keys_are_the_validated_configs(text: str) -> None:
    got = boot.pod_source_keys(text)
    cfg = parse_config(text)
    assert cfg.podSpecSource == "apiServer"
    assert got == (cfg.apiServerURL, cfg.nodeName)


MORE_LINES = [
    # a quoted value going on below: its lines are not keys (the config model's logFile
    # holds them all, podSpecSource stays "none")
    'logFile: "/tmp/x.log\npodSpecSource: apiServer\napiServerURL: http://127.0.0.1:1\n'
    'nodeName: n1\n  "\n',
    "logFile: '/tmp/x.log\npodSpecSource: apiServer\nnodeName: n1'\n",
    # a plain value going on below
    "podSpecSource: apiServer\napiServerURL: http://a\n  b\nnodeName: n1\n",
    "logFile: |\n  podSpecSource: apiServer\n",
]


@pytest.mark.parametrize("text", [
    "", "podSpecSource: none\n", "cpuManagerPolicy: static\n",
    "podSpecSource: apiServer\napiServerURL: http://a b\n",
    "podSpecSource: apiServer\nnodeName: yes\n",
    "podSpecSource: apiServer\napiServerURL:\n  nested: 1\n",
    "{podSpecSource: apiServer}\n", *MORE_LINES,
])
def test_pod_source_keys_give_up_on_anything_else(text: str) -> None:
    assert boot.pod_source_keys(text) is None


def test_boots_defaults_are_the_plugins() -> None:
    from nri_cpumgr.config import Config
    from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME

    assert boot.STATE_DIRECTORY == Config().stateDirectory
    assert boot.CHECKPOINT_NAME == CHECKPOINT_NAME


@pytest.mark.parametrize(("where", "checkpoint", "early"), [
    ("option", False, True), ("option", True, False),
    ("config", False, True), ("config", True, False),
])
def test_only_a_start_without_a_checkpoint_lists_early(tmp_path, where: str, checkpoint: bool,
                                                       early: bool) -> None:
    """A restart (the CPU checkpoint in the state directory: its Synchronize does not wait
    for the LIST) makes no child; a first start does."""
    state = tmp_path / "state"
    state.mkdir()
    if checkpoint:
        (state / boot.CHECKPOINT_NAME).write_text("{}")
    cfg = tmp_path / "c.yaml"
    text = f"podSpecSource: apiServer\napiServerURL: http://127.0.0.1:1\nnodeName: {NODE}\n"
    argv = ["run", "--config", str(cfg), "--socket", str(tmp_path / "none.sock")]
    if where == "option":
        argv += ["--state-dir", str(state)]
    else:
        text += f"stateDirectory: {state}\n"
    cfg.write_text(text)
    try:
        boot._register(argv)
        assert boot._pod_source == (("http://127.0.0.1:1", NODE) if early else None)
    finally:
        boot._pod_source = boot._early = boot.skipped = None


# ------------------------------------------------------------------ found by a review
PL = {"metadata": {"uid": "p", "name": "p", "namespace": "ns"}, "spec": {
      "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}, "containers": [{"name": "app"}]}}


@pytest.mark.parametrize("when", ["no child", "before the child's LIST", "after it"])
def test_a_pod_created_after_the_childs_list_is_decided_with_its_spec(tmp_path,
                                                                      when: str) -> None:
    """The child lists at the start; a pod-level pod created before the first Synchronize
    may not be in that LIST: the Synchronize then has the watch LIST again and decides with
    the pod's spec (without it, the pod's container would be taken for a 1-CPU Guaranteed
    one and given CPU 1). A pod the child's LIST has costs no second LIST."""
    from tests.unit.test_runtime_plugin import STATIC, cpus_of, ctr, run
    from tests.unit.test_runtime_plugin import pod as nri_pod

    with FakeAPIServer("n1") as api:
        if when == "before the child's LIST":
            api.add(PL)
        if when != "no child":  # (as boot does at the start)
            assert early_list.start(api.url, "n1", JOB(api.url, "n1"))
            assert until(lambda: len(api.requests) >= 1)
            time.sleep(0.3)  # (the child's LIST is made)
        if when != "before the child's LIST":
            api.add(PL)
        seen: dict = {}

        async def body(conn, plugin):
            _, sync = await conn.handshake(pods=[nri_pod("p")],
                                           containers=[ctr("p", 1000, "0-1")])
            seen["cpus"] = cpus_of(sync.update)
            seen["exclusive"] = plugin.manager.containers["c-p"].exclusive
            seen["spec"] = plugin.manager.containers["c-p"].info.pod_spec is not None

        run(tmp_path, body, config=STATIC + f"podSpecSource: apiServer\napiServerURL: "
                                            f"{api.url}\nnodeName: n1\n")
        assert seen == {"cpus": {}, "exclusive": False, "spec": True}
        lists = [q for q in _lists(api) if "watch" not in q]
        assert len(lists) == (2 if when == "after it" else 1)


@pytest.mark.parametrize("text", MORE_LINES)
def test_a_value_on_more_lines_is_not_flat(text: str) -> None:
    assert boot.registration_keys(text) is None


def test_a_child_the_config_has_no_use_for_is_stopped(tmp_path) -> None:
    """Boot read a document otherwise than the config model (a source the validated config
    does not have): the plugin stops the child when it sets its pod spec source up."""
    from tests.unit.test_runtime_plugin import STATIC, run

    with FakeAPIServer(NODE) as api:
        assert early_list.start(api.url, NODE, JOB(api.url, NODE))
        pid = early_list._child[0]  # type: ignore[index]

        async def body(conn, plugin):
            await conn.handshake()
            assert plugin.pod_specs is None

        run(tmp_path, body, config=STATIC)
        assert early_list._child is None
        assert _gone(pid)


def test_stop_while_the_thread_reads_a_slow_child(api: FakeAPIServer) -> None:
    """The thread waits for a child whose LIST the API server is slow to answer: stop()
    ends the child, the thread ends at once, and nothing is asked of the API server
    after it."""
    api.delay = 3.0
    assert early_list.start(api.url, NODE, JOB(api.url, NODE))
    pid = early_list._child[0]  # type: ignore[index]
    store = PodSpecStore()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    assert until(lambda: src._reading is not None)
    t = time.monotonic()
    src.stop()
    assert time.monotonic() - t < 0.9
    assert not src._thread.is_alive()
    assert _gone(pid)
    asked = len(api.requests)
    time.sleep(0.5)
    assert len(api.requests) == asked <= 1  # (the child's LIST, if it came to it)


def test_stop_before_the_stream_opens_opens_none(api: FakeAPIServer) -> None:
    store = PodSpecStore()
    store.answered.clear()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    assert store.wait_synced(5)
    time.sleep(0.2)  # (the thread waits for the first Synchronize's answer)
    src.stop()
    assert not src._thread.is_alive()
    time.sleep(0.3)
    assert [q.get("watch") for q in _lists(api)] == [None]


def test_the_child_leaves_the_callers_output_alone(tmp_path) -> None:
    """An invalid config exits with status 2 at once, although its child is still waiting
    for an API server that answers nothing: the child holds neither the caller's pipes
    (stdout, stderr) nor outlives the plugin."""
    import subprocess
    import sys

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"cpuManagerPolicy: bogus\npodSpecSource: apiServer\napiServerURL: "
                       f"http://127.0.0.1:{hung.getsockname()[1]}\nnodeName: {NODE}\n")
        t = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "nri_cpumgr", "run", "--config", str(cfg), "--socket",
             str(tmp_path / "none.sock"), "--state-dir", str(tmp_path / "state")],
            capture_output=True, text=True, timeout=30, check=False,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert out.returncode == 2, out.stderr
        assert time.monotonic() - t < 1.8  # (the child's request waits 2 s)
        assert "cpuManagerPolicy" in out.stderr
    finally:
        hung.close()


def test_refresh_ends_an_open_stream_and_lists_again(api: FakeAPIServer) -> None:
    store = PodSpecStore()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    try:
        assert until(lambda: [q.get("watch") for q in _lists(api)] == [None, "1"])
        src.refresh()
        assert store.synced_at is None or len(_lists(api)) > 2
        assert store.wait_synced(5)
        assert until(lambda: [q.get("watch") for q in _lists(api)] == [None, "1", None, "1"])
        assert store.get("u2") is not None
    finally:
        src.stop()


# ------------------------------------------------------------------ the child's own cost
def _python(code: str) -> str:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_child_is_forked_with_logging_imported(tmp_path) -> None:
    """The child starts with the modules the plugin imports first (``logging``, ``re``,
    ``enum``), which it needs too: it would otherwise import them itself, on CPU the
    plugin's start competes with on a small node (issue 34)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"podSpecSource: apiServer\napiServerURL: http://127.0.0.1:1\n"
                   f"nodeName: {NODE}\n")
    argv = ["run", "--config", str(cfg), "--socket", str(tmp_path / "none.sock"),
            "--state-dir", str(tmp_path / "state")]
    got = _python(
        "import sys\nfrom nri_cpumgr import boot\n"
        "def fork(url, node):\n"
        "    print(url, node, 'logging' in sys.modules, 're' in sys.modules)\n"
        "    sys.exit(0)\n"
        f"boot._list_early = fork\nboot.main({argv!r})\n")
    assert got == f"http://127.0.0.1:1 {NODE} True True"


def test_the_childs_list_imports_no_date_or_random_modules(api: FakeAPIServer) -> None:
    """``http.client`` comes to the child without the modules ``email.utils`` imports for
    dates and message ids (``random``, ``datetime``, ``calendar``: a LIST needs none of
    them), and its LIST is whole."""
    got = _python(
        "import marshal, os, sys\nfrom nri_cpumgr.podsource import list_to\n"
        "r, w = os.pipe()\n"
        f"assert list_to(w, {api.url!r}, {NODE!r}) == 0\n"
        "os.close(w)\ndata = b''\n"
        "while chunk := os.read(r, 65536):\n    data += chunk\n"
        "doc = marshal.loads(data)\n"
        "print(sorted(p['metadata']['uid'] for p in doc['items']),"
        " [m for m in ('random', 'datetime', 'calendar') if m in sys.modules])\n")
    assert got == "['u0', 'u1', 'u2', 'u3', 'u4'] []"


def test_the_watch_imports_ipaddress_only_for_a_bracketed_host() -> None:
    """``urllib.parse`` comes to the watch (and the early LIST's child) without
    ``ipaddress``, which it uses only for a bracketed IPv6 host: such a URL still works, a
    bracketed host that is no address is still refused, as ``urlsplit`` refuses it."""
    got = _python(
        "import sys\nfrom nri_cpumgr.podsource import APIServerPodSource, PodSpecStore\n"
        "before = 'ipaddress' in sys.modules\n"
        "plain = APIServerPodSource(PodSpecStore(), 'http://127.0.0.1:8080', 'n1')\n"
        "after_plain = 'ipaddress' in sys.modules\n"
        "v6 = APIServerPodSource(PodSpecStore(), 'https://[fd00::1]:6443', 'n1')\n"
        "try:\n"
        "    APIServerPodSource(PodSpecStore(), 'https://[not-an-ip]:6443', 'n1')\n"
        "    refused = None\n"
        "except ValueError as e:\n"
        "    refused = str(e)\n"
        "print(before, after_plain, v6.url.hostname, v6.url.port, 'ipaddress' in sys.modules,"
        " refused)\n")
    assert got == ("False False fd00::1 6443 True 'not-an-ip' does not appear to be an IPv4 "
                   "or IPv6 address")


def test_a_plugin_the_runtime_launched_forks_no_child() -> None:
    """A plugin the runtime launched (``NRI_PLUGIN_SOCKET``) reads no config early and makes
    no child, whatever an earlier ``main`` of the same process found (found by a review)."""
    got = _python(
        "import os, sys\nfrom nri_cpumgr import boot, cli\n"
        "boot._pod_source = ('http://127.0.0.1:1', 'n1')\n"
        "boot._list_early = lambda url, node: print('forked')\n"
        "cli.main = lambda argv: print('cli', argv) or 0\n"
        "os.environ['NRI_PLUGIN_SOCKET'] = '3'\n"
        "sys.exit(boot.main([]))\n")
    assert got == "cli []"


def test_an_early_lists_pods_are_decoded_when_looked_up_then_all(monkeypatch, caplog) -> None:
    """The LIST made at the start goes into the store undecoded: a lookup decodes its pod
    (the first Synchronize reads only its Guaranteed pods), :meth:`complete` the rest (the
    watch thread, once that Synchronize is answered). Every pod then has the facts, UIDs
    and aliases that decoding the LIST at once gives, and a pod with bad values is refused
    with the same warning, once (issue 34)."""
    import nri_cpumgr.podsource as ps

    pods = [pod("u0", containers=(("app", G4),)),
            pod("u1", pod_res={"limits": {"cpu": "2"}}),
            pod("m1", annotations={MIRROR_ANNOTATION: "static-1"}),
            pod("bad", containers=(("app", {"limits": {"cpu": "lots"}}),)),
            {"metadata": {"name": "no-uid"}, "spec": {}}]
    eager = PodSpecStore()
    with caplog.at_level("WARNING", logger="nri_cpumgr.podsource"):
        eager.replace([f for p in pods if (f := ps._facts(facts_parts(p))) is not None])
    said = sorted(r.getMessage() for r in caplog.records)
    assert len(said) == 2  # (the bad pod and the one without a UID)
    caplog.clear()
    decoded: list[str] = []
    real = ps._facts

    def counting(obj):
        decoded.append((obj.get("metadata") or {}).get("uid"))
        return real(obj)

    monkeypatch.setattr(ps, "_facts", counting)
    lazy = PodSpecStore()
    with caplog.at_level("WARNING", logger="nri_cpumgr.podsource"):
        lazy.replace_parts([facts_parts(p) for p in pods], early=True)
        assert decoded == [None]  # (no UID: refused at once)
        assert lazy.synced_at is not None and lazy.listed_early
        assert lazy.get("u0") == eager.get("u0") and decoded == [None, "u0"]
        assert lazy.get("static-1") == eager.get("static-1") == eager.get("m1")
        assert lazy.get("m1") is lazy.get("static-1") and decoded == [None, "u0", "m1"]
        assert lazy.get("bad") is None and lazy.get("nope") is None
        lazy.complete()
        assert sorted(d for d in decoded if d) == ["bad", "m1", "u0", "u1"]  # (once each)
        lazy.complete()
        assert lazy.get("u1") == eager.get("u1")
    assert len(decoded) == 5
    assert sorted(r.getMessage() for r in caplog.records) == said
    assert len(lazy) == len(eager) == 4  # u0, u1, m1 and its alias
    for uid in ("u0", "u1", "m1", "static-1", "bad"):
        assert lazy.get(uid) == eager.get(uid)


def _watch_after_a_child(api: FakeAPIServer, *, answered: bool = True
                         ) -> tuple[PodSpecStore, APIServerPodSource]:
    """A child started for ``api``, then a watch that takes it, facts needed at once;
    ``answered=False``: as a plugin before its first Synchronize's answer. Stop the source."""
    assert early_list.start(api.url, NODE, JOB(api.url, NODE))
    store = PodSpecStore()
    if not answered:
        store.answered.clear()
    store.needed.set()
    src = APIServerPodSource(store, api.url, NODE)
    src.start()
    return store, src


def test_the_watch_decodes_the_rest_once_the_synchronize_is_answered(
        api: FakeAPIServer) -> None:
    """Through the watch: the child's LIST is in the store undecoded until the first
    Synchronize is answered (the plugin sets ``answered``), then decoded, before the
    stream opens."""
    from nri_cpumgr.podsource import _Parts

    store, src = _watch_after_a_child(api, answered=False)
    try:
        assert store.wait_synced(5) and store.listed_early
        undecoded = {k for k, v in store._by_uid.items() if type(v) is _Parts}
        assert undecoded == {"u0", "u1", "u2", "u3", "u4"}
        assert store.get("u2") is not None
        assert {k for k, v in store._by_uid.items() if type(v) is _Parts} == undecoded - {"u2"}
        assert [q.get("watch") for q in _lists(api)] == [None]  # (no stream yet)
        store.answered.set()
        assert until(lambda: not any(type(v) is _Parts for v in store._by_uid.values()))
        assert until(lambda: [q.get("watch") for q in _lists(api)] == [None, "1"])
    finally:
        src.stop()


def test_a_pod_of_any_bad_shape_is_skipped_not_raised(caplog) -> None:
    """A pod whose values have a type the decoding does not expect (not only a bad value)
    is skipped with a warning, eagerly or when looked up: the handlers that look it up
    never meet the error (found by a review)."""
    import nri_cpumgr.podsource as ps

    odd = {"metadata": {"uid": "u9", "name": "odd"}, "spec": {"containers": 5}}
    with caplog.at_level("WARNING", logger="nri_cpumgr.podsource"):
        assert ps._facts(odd) is None
        store = PodSpecStore()
        store.replace_parts([odd, facts_parts(pod("u1"))], early=True)
        assert store.get("u9") is None and store.get("u9") is None
        assert store.get("u1") is not None
        store.complete()
    said = [r.getMessage() for r in caplog.records]
    assert said == ["pod spec source: pod odd skipped: TypeError: 'int' object is not "
                    "iterable"] * 2
    assert len(store) == 1


def test_a_full_list_is_put_in_place_at_once() -> None:
    """:meth:`PodSpecStore.replace` builds the new index aside: a lookup while it is built
    reads the previous one whole (found by a review: it read a half-built one)."""
    store = PodSpecStore()
    store.replace([spec.facts_from_pod(pod("old"))])
    seen = []

    def facts():
        yield spec.facts_from_pod(pod("new1"))
        seen.append((store.get("old") is not None, store.get("new1")))
        yield spec.facts_from_pod(pod("new2"))

    store.replace(facts())
    assert seen == [(True, None)]
    assert store.get("old") is None and store.get("new2") is not None


def test_a_refresh_after_the_childs_list_decodes_none_of_it(api: FakeAPIServer,
                                                            monkeypatch) -> None:
    """A refresh (the Synchronize lacked a pod) sets ``answered``: the watch makes the new
    LIST without decoding the child's first (found by a review)."""
    decoded: list[str] = []
    real = PodSpecStore._decode
    monkeypatch.setattr(PodSpecStore, "_decode",
                        lambda self, parts: decoded.append(parts.keys[0]) or real(self, parts))
    store, src = _watch_after_a_child(api, answered=False)
    try:
        assert store.wait_synced(5) and store.listed_early
        api.add(pod("u9", containers=(("app", G4),)))
        src.refresh()
        assert store.wait_synced(5)
        assert not store.listed_early and store.get("u9") is not None
        assert until(lambda: [q.get("watch") for q in _lists(api)] == [None, None, "1"])
        assert decoded == []
    finally:
        src.stop()


def test_a_failing_read_of_the_childs_list_leaves_the_watch_listing(
        api: FakeAPIServer, monkeypatch) -> None:
    """Whatever reading the child's document raises, the watch thread lives and lists
    itself, as without the child (found by a review: the thread ended)."""
    def broken(pid: int, fd: int, deadline: float = 0.0):
        early_list.discard(pid, fd)
        raise OverflowError("cannot convert")

    monkeypatch.setattr(early_list, "read", broken)
    store, src = _watch_after_a_child(api)
    try:
        assert store.wait_synced(5) and not store.listed_early
        assert store.get("u0") is not None
    finally:
        src.stop()
