#!/usr/bin/env python3
"""nri-cpumgr against a minimal Go NRI plugin on the fake runtime (issue 9 item 4, part (c)).

The runtime side is tests/unit/nri_peer.py's FakeRuntime (the ttrpc mux of containerd's NRI
socket, in this process). Each plugin runs as a subprocess dialling it: nri-cpumgr (static
policy, reservedSystemCPUs "0", topology from a generated 256-CPU sysfs tree: 2 sockets x 64
cores x 2 threads, one NUMA node per socket, 4 L3 caches per socket) and the Go floor
``$GO_PEER`` (default ``.runtime/go-peer``; build it with ``OUT="$PWD/.runtime/go-peer" bash
../shared/tools/go-peer/build.sh``, an absolute path; the whole comparison is skipped with one
line, exit 0, when absent). The two alternate in rounds within one run (A B, B A, ...), so that
a phase of a shared machine falls on both: many short rounds (``--rounds 10 --creates 200``)
give steadier ratios, the p99 above all, than a few long ones. Per round and N: Configure,
Synchronize of N running BestEffort containers (timed), then ``--creates`` times:
RUN_POD_SANDBOX of a new pod (timed apart, if subscribed: a runtime sends it when the pod's
sandbox has started, before the pod's containers come), CreateContainer of a Guaranteed 1-CPU
container in it (timed), POST_START_CONTAINER (untimed, if subscribed), StopContainer of it
(timed), REMOVE_CONTAINER, STOP_POD_SANDBOX and REMOVE_POD_SANDBOX state changes (untimed, each
if subscribed). The plugin's own UpdateContainers calls are answered at once.

nri-cpumgr runs on the image's interpreter, Debian's ``python3`` in the virtualenv ``make
image-venv`` makes (``.runtime/image-venv``), when it exists, as ``footprint.py`` runs it
(``--python``: another; else the interpreter running this benchmark): the developers'
``.venv`` runs pyenv's CPython, whose every request costs 10-25 % more.

``--pod-spec``: nri-cpumgr runs the Helm chart's default ``podSpecSource: apiServer`` too,
watching a loopback fake API server (tests/e2e/harness/fakeapi.py) in this process that holds
each round's pods (the shared ones BestEffort, the created ones Guaranteed, 1 CPU and 256 MiB)
before the round's first create, as a node's API server holds a pod before the kubelet
creates its containers; a Guaranteed container is then admitted with its whole pod's spec.

Prints a markdown table: median and p99 in ms per plugin and the ratio nri-cpumgr/Go.

    .venv/bin/python benchmarks/fake_runtime.py --quick   # N=1000, 1 round of 200 creates
    .venv/bin/python benchmarks/fake_runtime.py           # N=100 and 1000, 3 rounds of 500
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.footprint import IMAGE_PYTHON, describe_python, interpreter_path  # noqa: E402
from benchmarks.report import print_table  # noqa: E402
from nri_cpumgr.api import nri_pb2  # noqa: E402
from tests.unit.nri_peer import FakeRuntime, PeerConn  # noqa: E402

GO_PEER = Path(os.environ.get("GO_PEER", TOP / ".runtime/go-peer"))
# containerd's ttrpc writes through a 4 KiB buffer, so each mux frame carries at most 4 KiB; the
# Go mux (nri pkg/net/multiplex/mux.go conn.Read) fails a larger frame with ENOMEM
FRAME_PAYLOAD = 4096
TTRPC_HEADER = 10


async def call(conn: PeerConn, method: str, req, resp_cls, **kw: object):
    """conn.call with the message cut into frames of FRAME_PAYLOAD bytes as containerd does."""
    size = TTRPC_HEADER + req.ByteSize()
    return await conn.call(method, req, resp_cls,
                           sizes=[FRAME_PAYLOAD] * ((size - 1) // FRAME_PAYLOAD), **kw)
# the shipped default (sharedPoolUpdateMode auto); the fake runtime introduces itself as
# containerd 2.4.2 (the newest containerd, the modern node's), where auto takes async as on a
# real node: the fake has no NRI locks, as 2.4 has no lock-order inversion. An older version
# (--runtime-version v1.7.24) takes reply there (no CRI socket in the fake: the unmounted
# socket's degraded path, not what the chart deploys)
CONFIG = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
RUNTIME_NAME, RUNTIME_VERSION = "containerd", "v2.4.2"
#: the StateChange events of a pod's deletion, sent after its container's removal to a plugin
#: that subscribed to them (nri-cpumgr does: a pod admitted whole is forgotten then)
POD_GONE = (nri_pb2.STOP_POD_SANDBOX, nri_pb2.REMOVE_POD_SANDBOX)
API_NODE = "bench-node"
# seconds between the Synchronize's answer and the first create: the watch's LIST
API_SETTLE_S = 1.0
ALL_CPUS = "0-255"


def go_peer_skip(path: Path) -> str:
    """The one line said when the Go comparison plugin is absent."""
    return (f"skipped (no Go comparison plugin at {path}): build it with "
            f"`OUT={path} bash ../shared/tools/go-peer/build.sh` (that script is in "
            "../shared, the project's shared tools beside this checkout, not in a plain clone), "
            "or set "
            "GO_PEER=PATH to a built one")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between closest ranks."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def write_256_cpu_fixture(out: Path) -> Path:
    """A sysfs tree (scripts/make_sysfs_fixtures.py formats) of 256 CPUs; returns its root."""
    spec = importlib.util.spec_from_file_location("mkfix", TOP / "scripts/make_sysfs_fixtures.py")
    assert spec is not None and spec.loader is not None
    mk = importlib.util.module_from_spec(spec)
    sys.modules["mkfix"] = mk
    spec.loader.exec_module(mk)
    cpus = []
    for cpu in range(256):
        thread, rest = divmod(cpu, 128)  # CPU n and n+128 are SMT siblings
        pkg, core = divmod(rest, 64)
        cpus.append(mk.CPUSpec(cpu=cpu, package=pkg, die=0, core_id=core, node=pkg,
                               llc=pkg * 4 + core // 16))
    gib_kb = 1024 * 1024
    nodes = (mk.NodeSpec(0, 64 * gib_kb, {2048: 0}, (10, 21)),
             mk.NodeSpec(1, 64 * gib_kb, {2048: 0}, (21, 10)))
    m = mk.MachineSpec(name="bench-256", cpus=tuple(cpus), nodes=nodes, nr_cpu_ids=256)
    return mk.write_machine(m, out)


def pod(uid: str, qos: str) -> nri_pb2.PodSandbox:
    p = nri_pb2.PodSandbox(id="sb-" + uid, name=uid, uid=uid, namespace="bench")
    p.linux.cgroup_parent = f"/kubepods/{qos + '/' if qos else ''}pod{uid}"
    return p


def container(uid: str, milli: int) -> nri_pb2.Container:
    c = nri_pb2.Container(id="c-" + uid, pod_sandbox_id="sb-" + uid, name="app",
                          state=nri_pb2.CONTAINER_RUNNING)
    c.labels["io.kubernetes.container.name"] = "app"
    c.labels["io.kubernetes.pod.uid"] = uid
    r = c.linux.resources
    r.cpu.shares.value = max(2, milli * 1024 // 1000)
    r.cpu.cpus = ALL_CPUS
    if milli:
        r.cpu.quota.value = milli * 100
        r.cpu.period.value = 100000
        r.memory.limit.value = 256 << 20
    return c


async def run_burst(conn: PeerConn, events: int, burst: int, tag: str,
                    shared: set[str]) -> list[float]:
    """``burst`` Guaranteed 1-CPU creates (each followed by its POST_START_CONTAINER) back to
    back, then 2 s for the plugin's coalesced UpdateContainers; returns, per shared container,
    how many updates (in replies or UpdateContainers) named it. The pods are then removed."""
    while not conn.updates.empty():
        conn.updates.get_nowait()
    seen: dict[str, int] = dict.fromkeys(shared, 0)

    def note(updates) -> None:
        for u in updates:
            if u.container_id in seen:
                seen[u.container_id] += 1

    post_start_bit = 1 << (nri_pb2.POST_START_CONTAINER - 1)
    made = []
    for j in range(burst):
        uid = f"b{tag}-{j}"
        p, c = pod(uid, ""), container(uid, 1000)
        if events & 1 << (nri_pb2.RUN_POD_SANDBOX - 1):
            await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                event=nri_pb2.RUN_POD_SANDBOX, pod=p), nri_pb2.Empty)
        resp = await call(conn, "CreateContainer",
                          nri_pb2.CreateContainerRequest(pod=p, container=c),
                          nri_pb2.CreateContainerResponse)
        note(resp.update)
        if events & post_start_bit:
            await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                event=nri_pb2.POST_START_CONTAINER, pod=p, container=c), nri_pb2.Empty)
        made.append((p, c))
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            req = await asyncio.wait_for(conn.updates.get(), deadline - time.monotonic())
        except TimeoutError:
            break
        note(req.update)
    for p, c in made:
        c.state = nri_pb2.CONTAINER_STOPPED
        await call(conn, "StopContainer", nri_pb2.StopContainerRequest(pod=p, container=c),
                   nri_pb2.StopContainerResponse)
        if events & (1 << (nri_pb2.REMOVE_CONTAINER - 1)):
            await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c), nri_pb2.Empty)
    return [float(v) for v in seen.values()]


def cpu_ms(pid: int) -> float:
    """The plugin process's time on a CPU so far, ms, all threads (/proc/<pid>/task/*/schedstat):
    per call, the plugin's own cost, which a loaded machine's waiting does not inflate."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e6


def api_pods(api: Any, tag: str, n: int, creates: int) -> None:
    """The pods of a round (``n`` shared, ``creates`` created) into the fake API server."""
    guaranteed = {"requests": {"cpu": "1", "memory": "256Mi"},
                  "limits": {"cpu": "1", "memory": "256Mi"}}
    for uid, res in [(f"s{i}", {}) for i in range(n)] + [
            (f"g{tag}-{i}", guaranteed) for i in range(creates)]:
        api.add({"metadata": {"uid": uid, "name": uid, "namespace": "bench"},
                 "spec": {"containers": [{"name": "app", "resources": res}]}})


async def one_round(kind: str, argv: list[str], sock: Path, n: int, creates: int,
                    tag: str, cwd: Path = TOP, burst: int = 0,
                    api: Any = None) -> dict[str, list[float]]:
    """One plugin, one N: Synchronize ms, CreateContainer and StopContainer ms (``api``:
    the fake API server the plugin watches, given the round's pods first)."""
    if api is not None:
        api_pods(api, tag, n, creates)
    out: dict[str, list[float]] = {"Synchronize": [], "CreateContainer": [], "StopContainer": [],
                                   "CreateContainer, plugin on a CPU": [],
                                   "RunPodSandbox (StateChange)": []}
    rt = FakeRuntime(sock)
    await rt.start()
    log = open(sock.parent / f"{kind}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            cwd=cwd, start_new_session=True)
    try:
        conn: PeerConn = await rt.next_conn(30)
        await asyncio.wait_for(asyncio.shield(conn.registered), 30)
        cfg = await call(conn, "Configure", nri_pb2.ConfigureRequest(
            config="", runtime_name=RUNTIME_NAME, runtime_version=RUNTIME_VERSION),
            nri_pb2.ConfigureResponse)
        pods = [pod(f"s{i}", "besteffort") for i in range(n)]
        ctrs = [container(f"s{i}", 0) for i in range(n)]
        t = time.perf_counter()
        await call(conn, "Synchronize", nri_pb2.SynchronizeRequest(pods=pods, containers=ctrs),
                        nri_pb2.SynchronizeResponse, timeout=60)
        out["Synchronize"].append((time.perf_counter() - t) * 1000)
        if api is not None:  # (the watch's LIST, as on a node that has been running)
            await asyncio.sleep(API_SETTLE_S)
        if burst:
            out["burst updates/shared"] = await run_burst(conn, cfg.events, burst, tag,
                                                          {c.id for c in ctrs})
        remove_bit = 1 << (nri_pb2.REMOVE_CONTAINER - 1)
        post_start_bit = 1 << (nri_pb2.POST_START_CONTAINER - 1)
        run_pod_bit = 1 << (nri_pb2.RUN_POD_SANDBOX - 1)
        for i in range(creates):
            uid = f"g{tag}-{i}"
            p, c = pod(uid, ""), container(uid, 1000)
            if cfg.events & run_pod_bit:  # (the pod's sandbox, before its containers)
                t = time.perf_counter()
                await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                    event=nri_pb2.RUN_POD_SANDBOX, pod=p), nri_pb2.Empty)
                out["RunPodSandbox (StateChange)"].append((time.perf_counter() - t) * 1000)
            cpu0 = cpu_ms(proc.pid)
            t = time.perf_counter()
            await call(conn, "CreateContainer", nri_pb2.CreateContainerRequest(pod=p, container=c),
                            nri_pb2.CreateContainerResponse)
            out["CreateContainer"].append((time.perf_counter() - t) * 1000)
            out["CreateContainer, plugin on a CPU"].append(cpu_ms(proc.pid) - cpu0)
            if cfg.events & post_start_bit:
                await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                    event=nri_pb2.POST_START_CONTAINER, pod=p, container=c), nri_pb2.Empty)
            c.state = nri_pb2.CONTAINER_STOPPED
            t = time.perf_counter()
            await call(conn, "StopContainer", nri_pb2.StopContainerRequest(pod=p, container=c),
                            nri_pb2.StopContainerResponse)
            out["StopContainer"].append((time.perf_counter() - t) * 1000)
            if cfg.events & remove_bit:
                await call(conn, "StateChange", nri_pb2.StateChangeEvent(
                    event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c), nri_pb2.Empty)
            for ev in POD_GONE:  # (the pod's sandbox goes as the kubelet deletes it)
                if cfg.events & 1 << (ev - 1):
                    await call(conn, "StateChange", nri_pb2.StateChangeEvent(event=ev, pod=p),
                               nri_pb2.Empty)
            while not conn.updates.empty():
                conn.updates.get_nowait()
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}")
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        await rt.stop()
    return out


async def run(args: argparse.Namespace) -> list[list[str]]:
    work = Path(tempfile.mkdtemp(prefix="bench-fr-", dir="/tmp"))
    rows: list[list[str]] = []
    api = None
    try:
        sysfs = write_256_cpu_fixture(work)
        cfg = work / "cpumgr.yaml"
        if args.pod_spec:
            from tests.e2e.harness.fakeapi import FakeAPIServer

            api = FakeAPIServer(API_NODE).__enter__()
            cfg.write_text(CONFIG + f"podSpecSource: apiServer\napiServerURL: {api.url}\n"
                           f"nodeName: {API_NODE}\n")
        else:
            cfg.write_text(CONFIG)
        for n in args.shared:
            res: dict[str, dict[str, list[float]]] = {"ours": {}, "go": {}}
            for r in range(args.rounds):
                for kind in ("ours", "go") if r % 2 == 0 else ("go", "ours"):
                    sock = work / f"nri-{kind}-{n}-{r}.sock"
                    state = work / f"state-{kind}-{n}-{r}"
                    if kind == "ours":
                        argv = [args.python, "-m", "nri_cpumgr", "run", "--config", str(cfg),
                                "--socket", str(sock), "--state-dir", str(state),
                                "--sysfs-root", str(sysfs)]
                    else:
                        argv = [str(GO_PEER), "-socket", str(sock)]
                    got = await one_round(kind, argv, sock, n, args.creates, f"{n}-{r}",
                                          args.plugin_src or TOP,
                                          args.burst if kind == "ours" else 0,
                                          api if kind == "ours" else None)
                    for k, v in got.items():
                        res[kind].setdefault(k, []).extend(v)
            for metric in ("CreateContainer", "CreateContainer, plugin on a CPU", "StopContainer",
                           "Synchronize", "RunPodSandbox (StateChange)"):
                a, b = res["ours"][metric], res["go"][metric]
                if not a:  # (an event nri-cpumgr does not subscribe to)
                    continue
                ma, pa = statistics.median(a), percentile(a, 0.99)
                if not b:  # (the Go plugin does not subscribe to it: no such call there)
                    rows.append([str(n), metric, f"{ma:.2f}", f"{pa:.2f}", "-", "-", "-", "-",
                                 str(len(a))])
                    continue
                mb, pb = statistics.median(b), percentile(b, 0.99)
                rows.append([str(n), metric, f"{ma:.2f}", f"{pa:.2f}", f"{mb:.2f}", f"{pb:.2f}",
                             f"{ma / mb:.2f}" if mb else "-", f"{pa / pb:.2f}" if pb else "-",
                             str(len(a))])
            b = res["ours"].get("burst updates/shared")
            if b:
                rows.append([str(n), f"burst of {args.burst}: updates per shared container",
                             f"{statistics.median(b):.0f}", f"max {max(b):.0f}", "-", "-", "-",
                             "-", str(len(b))])
    finally:
        if api is not None:
            api.close()
        if args.keep:
            print(f"work directory kept (plugin logs, state): {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    global RUNTIME_VERSION
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", action="append", type=int,
                    help="running BestEffort containers at Synchronize (default 100, 1000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations nri-cpumgr / Go")
    ap.add_argument("--creates", type=int, default=500, help="create+stop per round")
    ap.add_argument("--plugin-src", type=Path,
                    help="run nri_cpumgr from this source tree instead of this checkout")
    ap.add_argument("--burst", type=int, default=10,
                    help="Guaranteed creates back to back, nri-cpumgr only: updates counted per "
                         "shared container (0: skip)")
    ap.add_argument("--pod-spec", action="store_true",
                    help="nri-cpumgr with the chart's podSpecSource apiServer, watching a fake "
                         "API server that holds the pods")
    ap.add_argument("--python", metavar="PYTHON",
                    help="nri-cpumgr's interpreter, a virtualenv's python with the plugin's "
                         "dependencies (default: the image's, "
                         f"{IMAGE_PYTHON.relative_to(TOP)} from `make image-venv`, when it "
                         "exists, else this interpreter)")
    ap.add_argument("--quick", action="store_true", help="N=1000, 1 round of 200")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (plugin logs)")
    ap.add_argument("--runtime-version", default=RUNTIME_VERSION,
                    help="containerd version the fake runtime reports in Configure (default "
                         "%(default)s: sharedPoolUpdateMode auto takes async; below v2.4.0 it "
                         "takes reply, the fake having no CRI socket)")
    args = ap.parse_args(argv)
    RUNTIME_VERSION = args.runtime_version
    if args.quick:
        args.shared = args.shared or [1000]
        args.rounds, args.creates = 1, 200
    args.shared = args.shared or [100, 1000]
    args.python = interpreter_path(args.python) if args.python else (
        str(IMAGE_PYTHON) if IMAGE_PYTHON.is_file() else sys.executable)
    if not GO_PEER.is_file():
        print(go_peer_skip(GO_PEER))
        return 0
    print(f"nri-cpumgr on {args.python} ({describe_python(args.python)})")
    rows = asyncio.run(run(args))
    watch = "; nri-cpumgr with the pod spec watch (podSpecSource apiServer)" if args.pod_spec \
        else ""
    print(f"\nFake runtime (containerd {RUNTIME_VERSION}){watch}, 256-CPU topology: {args.rounds} "
          f"alternating rounds x {args.creates} creates; ms; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print_table(["N shared", "call", "nri-cpumgr median", "p99", "Go median", "p99",
                 "ratio median", "ratio p99", "n"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
