#!/usr/bin/env python3
"""The plugin's cost per create cycle in instructions, not milliseconds: a figure the shared
machine's load does not move (issue 34: CreateContainer cost).

The plugin is launched as ``benchmarks/fake_runtime.py`` launches it (``python -m nri_cpumgr
run``, static policy, reservedSystemCPUs "0", the 256-CPU sysfs fixture, the fake runtime
introducing itself as containerd v2.4.2 so that ``sharedPoolUpdateMode: auto`` takes
``async``) under valgrind's callgrind, all threads counted together. Per launch: Configure, a
Synchronize of ``--shared`` BestEffort containers, then K cycles of fake_runtime.py's loop
(RUN_POD_SANDBOX of a new pod if subscribed, CreateContainer of a Guaranteed 1-CPU container
in it, POST_START_CONTAINER if
subscribed, StopContainer, REMOVE_CONTAINER, STOP_POD_SANDBOX and REMOVE_POD_SANDBOX if
subscribed), then SIGTERM; callgrind writes its counts at the exit. Two launches, K1 and K2
cycles, give the instructions (Ir, user space only: kernel time is not in them) per cycle:
(Ir(K2) - Ir(K1)) / (K2 - K1); the start, the Synchronize and the exit cancel out.
``--repeat R`` does R pairs (the plugin's coalescing timers fire by the wall clock, which
valgrind's slowness stretches: a few tenths of a per cent between pairs). ``--top N`` prints
the N functions (C level: the interpreter's own, CPython's builtins, protobuf's upb, ...)
with most self instructions per cycle, from the difference of the two launches' profiles
(callgrind_annotate).

``--pod-spec``: the Helm chart's default ``podSpecSource: apiServer`` too, the plugin
watching fake_runtime.py's fake API server, which holds each launch's pods before its
Synchronize (the created ones Guaranteed: admitted whole, with their pod's spec).

``--compare TREE`` (repeatable) adds the ``nri_cpumgr`` of another tree (``git archive REV
nri_cpumgr | tar -x -C TREE``). Needs ``valgrind``. Asserts nothing.

    .venv/bin/python benchmarks/create_instructions.py [--shared 1000] [--cycles 50 250]
        [--repeat 1] [--top 0] [--pod-spec] [--compare TREE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

import benchmarks.fake_runtime as fr  # noqa: E402
from benchmarks.report import find_valgrind  # noqa: E402
from nri_cpumgr.api import nri_pb2  # noqa: E402
from tests.unit.nri_peer import FakeRuntime, PeerConn  # noqa: E402

# under valgrind a call is ~50x slower than natively: deadlines to match
TIMEOUT = 60.0
#: seconds between the Synchronize's answer and the first create with --pod-spec: the watch's
#: LIST, ~50x slower under valgrind (in both launches of a pair: it cancels out)
API_SETTLE_S = 15.0


async def launch(tree: Path, work: Path, sysfs: Path, cfg: Path, n: int, cycles: int,
                 env: dict[str, str], valgrind: str, pace: float, api: Any = None) -> Path:
    """One launch under callgrind; returns its callgrind output file (``api``: the fake API
    server the plugin watches, given the launch's pods first)."""
    tag = work.name
    if api is not None:
        fr.api_pods(api, tag, n, cycles)
    sock = work / "nri.sock"
    out = work / "cg.out"
    argv = [valgrind, "--tool=callgrind", "-q", f"--callgrind-out-file={out}",
            sys.executable, "-m", "nri_cpumgr", "run", "--config", str(cfg), "--socket",
            str(sock), "--state-dir", str(work / "state"), "--sysfs-root", str(sysfs)]
    rt = FakeRuntime(sock)
    await rt.start()
    sub_env = dict(env, PYTHONPATH=str(tree))
    with open(work / "plugin.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tree, env=sub_env,
                                start_new_session=True)
        try:
            conn: PeerConn = await rt.next_conn(TIMEOUT)
            await asyncio.wait_for(asyncio.shield(conn.registered), TIMEOUT)
            cfgr = await fr.call(conn, "Configure", nri_pb2.ConfigureRequest(
                config="", runtime_name=fr.RUNTIME_NAME, runtime_version=fr.RUNTIME_VERSION),
                nri_pb2.ConfigureResponse, timeout=TIMEOUT)
            pods = [fr.pod(f"s{i}", "besteffort") for i in range(n)]
            ctrs = [fr.container(f"s{i}", 0) for i in range(n)]
            await fr.call(conn, "Synchronize",
                          nri_pb2.SynchronizeRequest(pods=pods, containers=ctrs),
                          nri_pb2.SynchronizeResponse, timeout=TIMEOUT * 5)
            if api is not None:
                await asyncio.sleep(API_SETTLE_S)
            remove_bit = 1 << (nri_pb2.REMOVE_CONTAINER - 1)
            post_start_bit = 1 << (nri_pb2.POST_START_CONTAINER - 1)
            for i in range(cycles):
                uid = f"g{tag}-{i}"
                p, c = fr.pod(uid, ""), fr.container(uid, 1000)
                if cfgr.events & 1 << (nri_pb2.RUN_POD_SANDBOX - 1):
                    await fr.call(conn, "StateChange", nri_pb2.StateChangeEvent(
                        event=nri_pb2.RUN_POD_SANDBOX, pod=p), nri_pb2.Empty, timeout=TIMEOUT)
                await fr.call(conn, "CreateContainer",
                              nri_pb2.CreateContainerRequest(pod=p, container=c),
                              nri_pb2.CreateContainerResponse, timeout=TIMEOUT)
                if cfgr.events & post_start_bit:
                    await fr.call(conn, "StateChange", nri_pb2.StateChangeEvent(
                        event=nri_pb2.POST_START_CONTAINER, pod=p, container=c), nri_pb2.Empty,
                        timeout=TIMEOUT)
                c.state = nri_pb2.CONTAINER_STOPPED
                await fr.call(conn, "StopContainer",
                              nri_pb2.StopContainerRequest(pod=p, container=c),
                              nri_pb2.StopContainerResponse, timeout=TIMEOUT)
                if cfgr.events & remove_bit:
                    await fr.call(conn, "StateChange", nri_pb2.StateChangeEvent(
                        event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c), nri_pb2.Empty,
                        timeout=TIMEOUT)
                for ev in fr.POD_GONE:
                    if cfgr.events & 1 << (ev - 1):
                        await fr.call(conn, "StateChange", nri_pb2.StateChangeEvent(
                            event=ev, pod=p), nri_pb2.Empty, timeout=TIMEOUT)
                while not conn.updates.empty():
                    conn.updates.get_nowait()
                if pace:
                    await asyncio.sleep(pace)
            if proc.poll() is not None:
                raise RuntimeError(f"the plugin exited with {proc.returncode}")
        finally:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            await rt.stop()
    if not out.is_file():
        raise RuntimeError(f"no callgrind output (plugin log: {work / 'plugin.log'})")
    return out


def total_ir(out: Path) -> int:
    """The ``summary:`` (or ``totals:``) Ir of a callgrind output file."""
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")


FN_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")


def self_ir(out: Path) -> dict[str, int]:
    """Self Ir per function (callgrind_annotate, no inclusive counts)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                           str(out)], capture_output=True, text=True, check=True).stdout
    fns: dict[str, int] = {}
    for line in text.splitlines():
        m = FN_LINE.match(line)
        if m and ":" in m.group(2):
            fns[m.group(2).strip()] = fns.get(m.group(2).strip(), 0) + int(
                m.group(1).replace(",", ""))
    return fns


async def main_async(args: argparse.Namespace) -> int:
    valgrind = find_valgrind()
    if valgrind is None:
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ir-create-", dir="/tmp"))
    api = None
    try:
        sysfs = fr.write_256_cpu_fixture(tmp)
        cfg = tmp / "config.yaml"
        if args.pod_spec:
            from tests.e2e.harness.fakeapi import FakeAPIServer

            api = FakeAPIServer(fr.API_NODE).__enter__()
            cfg.write_text(fr.CONFIG + f"podSpecSource: apiServer\napiServerURL: {api.url}\n"
                           f"nodeName: {fr.API_NODE}\n")
        else:
            cfg.write_text(fr.CONFIG)
        env = dict(os.environ)
        env.pop("NRI_PLUGIN_SOCKET", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        trees = [("nri-cpumgr", TOP)] + [(f"nri-cpumgr@{t}", Path(t)) for t in args.compare]
        k1, k2 = args.cycles
        for name, tree in trees:  # warm-up: the bytecode of each tree (PYTHONPYCACHEPREFIX)
            work = tmp / f"warm-{abs(hash(name))}"
            work.mkdir()
            await launch(tree, work, sysfs, cfg, 0, 1, env, valgrind, 0, api)
        print(f"create_instructions: Ir per create cycle (create, post-start, stop, remove) "
              f"of the plugin process, all threads; {args.shared} shared containers; "
              f"(Ir({k2}) - Ir({k1})) / {k2 - k1}; {args.pace} s between cycles; runtime "
              f"{fr.RUNTIME_NAME} {fr.RUNTIME_VERSION}"
              f"{'; pod spec watch (apiServer)' if api is not None else ''}")
        for r in range(args.repeat):
            for name, tree in trees:
                outs = []
                for k in (k1, k2):
                    work = tmp / f"w-{r}-{len(outs)}-{abs(hash(name))}"
                    work.mkdir()
                    outs.append(await launch(tree, work, sysfs, cfg, args.shared, k, env,
                                             valgrind, args.pace, api))
                a, b = total_ir(outs[0]), total_ir(outs[1])
                print(f"  {name:<40} {(b - a) / (k2 - k1) / 1e3:9.1f} k Ir per cycle "
                      f"(Ir {a / 1e6:.1f} M at {k1}, {b / 1e6:.1f} M at {k2})", flush=True)
                if args.top:
                    fa, fb = self_ir(outs[0]), self_ir(outs[1])
                    diff = {f: (fb.get(f, 0) - fa.get(f, 0)) / (k2 - k1) for f in fb}
                    for f, v in sorted(diff.items(), key=lambda kv: -kv[1])[:args.top]:
                        print(f"      {v / 1e3:8.1f} k  {f}")
    finally:
        if api is not None:
            api.close()
        if args.keep:
            print(f"work directory kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=int, default=1000,
                    help="BestEffort containers in the Synchronize")
    ap.add_argument("--cycles", type=int, nargs=2, default=[50, 250], metavar=("K1", "K2"))
    ap.add_argument("--pace", type=float, default=0.5,
                    help="seconds between cycles (default %(default)s; see the docstring)")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of launches per tree")
    ap.add_argument("--top", type=int, default=0, help="functions with most self Ir per cycle")
    ap.add_argument("--pod-spec", action="store_true",
                    help="podSpecSource: apiServer (the chart's default), a fake API server")
    ap.add_argument("--compare", action="append", default=[], metavar="TREE",
                    help="also measure the nri_cpumgr of TREE (a checkout or an export)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.cycles[1] <= args.cycles[0]:
        ap.error("--cycles K1 K2 needs K2 > K1")
    args.compare = [str(Path(t).resolve()) for t in args.compare]
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
