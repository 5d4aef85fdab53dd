#!/usr/bin/env python3
"""Churn a real containerd with nri-cpumgr until a CRI call outlives its deadline (issue 21).

The churn that wedged containerd 1.7.24 in 86 s with ``sharedPoolUpdateMode: async``:

* a private containerd (tests/e2e/harness) and nri-cpumgr (static policy, CPU 0 reserved,
  ``sharedPoolShrinkDelay`` 100ms and ``sharedPoolGrowDelay`` 0s by default, so that a
  shrink and a grow pass follow every Guaranteed pod);
* ``--shared`` (20) BestEffort pods with one running container each (the shared pool);
* one thread creating, starting and deleting a Guaranteed 1-CPU pod in a loop;
* ``--churners`` (2) threads creating, starting, stopping and removing BestEffort pods as
  fast as containerd answers.

Every CRI call has a deadline (``--deadline``, 20 s). The run is bounded by ``--minutes`` and
``--max-cycles`` (pod cycles of all threads together). A call that outlives its deadline ends
the run as a hang: containerd gets SIGUSR1 and writes its goroutine dump (containerd 1.7.24
and 2.1.9 ``cmd/containerd/command/main.go`` ``dumpStacks``: to its log and to
``$TMPDIR/containerd.<pid>.stacks.log``; the daemon runs with ``TMPDIR`` = its work dir);
the dump, containerd's log and the plugin's log are copied to ``--out`` and the path is
printed. Then the hung containerd is SIGKILLed, started again without the plugin to remove
every pod, and stopped: the machine recovers on its own.

Exit status: 0 no hang, 1 hang (the dump's path on the last line), 2 setup error.

    .venv/bin/python tests/e2e/stress.py --version 1.7 --minutes 10          # shipped mode
    .venv/bin/python tests/e2e/stress.py --version 2.1 --minutes 5 --mode async
    .venv/bin/python tests/e2e/stress.py --version crio --minutes 4 --mode async  # CRI-O 1.36.3
    .venv/bin/python tests/e2e/stress.py --version 2.4 --minutes 10   # containerd 2.4.2 (async)

``--version crio`` churns the harness's CRI-O (:class:`~tests.e2e.harness.Crio`); its SIGUSR1
dump is ``$TMPDIR/crio-goroutine-stacks-<time>.log`` (CRI-O ``cmd/crio/main.go``), with
``TMPDIR`` in its work dir, found by name (CRI-O does not log the path).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[2]
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

import grpc  # noqa: E402

from tests.e2e.harness import Containerd, CRIClient, Crio  # noqa: E402
from tests.e2e.harness import cgroups as cg  # noqa: E402
from tests.e2e.plugin_run import start_plugin  # noqa: E402

G1 = {"cpu": "1", "memory": "64Mi"}
_DUMP_WRITTEN = re.compile(r"goroutine stack dump written to (\S+?)\\?\"?(?:\s|$)")


class StackDumpContainerd(Containerd):
    """A :class:`Containerd` whose ``TMPDIR`` is its work dir: its SIGUSR1 goroutine dump
    (``containerd.<pid>.stacks.log``) lands there, not in the machine's /tmp."""

    def start(self) -> Containerd:
        old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(self.workdir)
        try:
            return super().start()
        finally:
            if old is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = old


@dataclasses.dataclass
class Hang:
    """The first CRI call that outlived its deadline."""

    thread: str
    call: str
    after_s: float  # seconds from the start of the churn to the call's start
    error: str


@dataclasses.dataclass
class Result:
    """What a run did. ``hang`` is None when no call outlived its deadline."""

    version: str
    mode: str
    seconds: float
    cycles: dict[str, int]
    latencies: dict[str, list[float]]  # CRI method -> seconds, every call that returned
    passes: int  # shared-pool passes the plugin logged (own calls or replies)
    errors: list[str]  # calls that failed before their deadline (thread: call: error)
    hang: Hang | None = None
    dump: Path | None = None
    dump_summary: list[str] = dataclasses.field(default_factory=list)
    out: Path | None = None

    def lines(self) -> list[str]:
        """A human summary, one fact per line."""
        total = sum(v for k, v in self.cycles.items() if k != "UpdateContainerResources")
        what = "CRI-O" if self.version == "crio" else f"containerd {self.version}"
        out = [f"{what}, sharedPoolUpdateMode {self.mode}: "
               f"{self.seconds:.0f} s, {total} pod cycles "
               + ", ".join(f"{k} {v}" for k, v in sorted(self.cycles.items()))
               + f", {self.passes} shared-pool passes"]
        for call, vals in sorted(self.latencies.items()):
            if vals:
                vals = sorted(vals)
                p99 = vals[min(len(vals) - 1, int(len(vals) * 0.99))]
                out.append(f"  {call}: n={len(vals)} median {statistics.median(vals) * 1e3:.0f} ms "
                           f"p99 {p99 * 1e3:.0f} ms max {vals[-1] * 1e3:.0f} ms")
        if self.errors:
            out.append(f"  {len(self.errors)} calls failed before the deadline, first: "
                       f"{self.errors[0]}")
        if self.hang is None:
            out.append("no hang")
        else:
            h = self.hang
            out.append(f"HANG: {h.thread} {h.call} started {h.after_s:.1f} s into the churn "
                       f"outlived its deadline ({h.error})")
            out += [f"  {s}" for s in self.dump_summary]
            out.append(f"goroutine dump: {self.dump}" if self.dump else
                       "goroutine dump: not written (see containerd.log)")
        if self.out is not None:
            out.append(f"logs kept in {self.out}")
        return out


class Churn:
    """The churn threads and their shared bookkeeping."""

    def __init__(self, c: Containerd, deadline: float, max_cycles: int) -> None:
        self.c = c
        self.deadline = deadline
        self.max_cycles = max_cycles
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.cycles: dict[str, int] = {}
        self.latencies: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.hang: Hang | None = None
        self.t0 = time.monotonic()
        self.clients: list[CRIClient] = []

    def client(self) -> CRIClient:
        cri = self.c.cri_client(timeout=self.deadline)
        with self.lock:
            self.clients.append(cri)
        return cri

    def call(self, thread: str, name: str, fn: Any, *args: Any, **kw: Any) -> Any:
        """Run one CRI call; a deadline overrun records the hang and stops every thread."""
        t = time.monotonic()
        try:
            out = fn(*args, **kw)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and not self.stop.is_set():
                with self.lock:
                    if self.hang is None:
                        self.hang = Hang(thread, name, t - self.t0,
                                         f"{code.name} after {time.monotonic() - t:.1f} s")
                self.stop.set()
            elif not self.stop.is_set():
                with self.lock:
                    self.errors.append(f"{thread}: {name}: {code} "
                                       f"{e.details() if hasattr(e, 'details') else e}")
            raise
        with self.lock:
            self.latencies.setdefault(name, []).append(time.monotonic() - t)
        return out

    def count(self, kind: str) -> None:
        with self.lock:
            self.cycles[kind] = self.cycles.get(kind, 0) + 1
            if sum(self.cycles.values()) >= self.max_cycles:
                self.stop.set()

    def pod_cycle(self, thread: str, cri: CRIClient, qos: str, n: int) -> None:
        """RunPodSandbox, CreateContainer, StartContainer, StopContainer, RemoveContainer,
        StopPodSandbox, RemovePodSandbox: the kubelet's order for one pod."""
        res = G1 if qos == "Guaranteed" else None
        pod = self.call(thread, "RunPodSandbox", cri.run_pod, f"{thread}-{n}", qos)
        try:
            cid = self.call(thread, "CreateContainer", cri.create_container, pod, "c",
                            requests=res, limits=res)
            self.call(thread, "StartContainer", cri.start_container, cid)
            self.call(thread, "StopContainer", cri.stop_container, cid)
            self.call(thread, "RemoveContainer", cri.remove_container, cid)
        finally:
            if self.hang is None:
                self.call(thread, "StopPodSandbox", cri.stop_pod, pod)
                self.call(thread, "RemovePodSandbox", cri.remove_pod, pod)

    def storm(self, thread: str, ids: list[str]) -> None:
        """A second client's UpdateContainerResources on the shared containers, one after the
        other as fast as the runtime answers, each with the container's own (BestEffort)
        resources: the kubelet-like storm that triggered containerd/containerd#13733."""
        cri = self.client()
        n = 0
        while not self.stop.is_set():
            cid = ids[n % len(ids)]
            n += 1
            try:
                self.call(thread, "UpdateContainerResources", cri.update_container_resources,
                          cid, None, None, "BestEffort")
            except grpc.RpcError:
                if self.hang is not None:
                    return
                time.sleep(0.1)
                continue
            self.count("UpdateContainerResources")

    def loop(self, thread: str, qos: str) -> None:
        cri = self.client()
        n = 0
        while not self.stop.is_set():
            try:
                self.pod_cycle(thread, cri, qos, n)
            except grpc.RpcError:
                if self.hang is not None:
                    return
                time.sleep(0.1)  # a refused call (logged in errors): go on churning
                continue
            n += 1
            self.count(qos)


def _summarize_dump(text: str) -> list[str]:
    """Where the goroutines of a containerd dump wait for a mutex: the frame that called
    ``sync.(*Mutex).Lock``, as ``pkg.(*Type).Method file.go:line``, counted, for the frames in
    NRI code (containerd's ``nri`` package or NRI's ``adaptation``); the most frequent first."""
    counts: dict[str, int] = {}
    frame = re.compile(r"^(\S+)\(.*\)\n\t(\S+):(\d+)", re.MULTILINE)
    for g in text.split("\n\n"):
        if "[sync.Mutex.Lock" not in g and "[sync.RWMutex" not in g:
            continue
        frames = frame.findall(g)
        for i, (fn, _path, _line) in enumerate(frames):
            if fn.startswith("sync.(*") and i + 1 < len(frames):
                caller, path, line = frames[i + 1]
                if "/nri" in path:
                    key = f"{caller.rsplit('/', 1)[-1]} {path.rsplit('/', 1)[-1]}:{line}"
                    counts[key] = counts.get(key, 0) + 1
                break
    return [f"{n} goroutine(s) waiting for a lock in {k}"
            for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _dump_stacks(c: Containerd, since: int, out: Path) -> tuple[Path | None, list[str]]:
    """SIGUSR1 to containerd; the dump file copied to ``out``; its mutex summary."""
    if not c.running or c.pid is None:
        return None, []
    os.kill(c.pid, signal.SIGUSR1)
    if isinstance(c, Crio):
        found: list[Path] = []
        end = time.monotonic() + 15.0
        while not found and time.monotonic() < end:
            time.sleep(0.5)
            found = sorted((c.workdir / "tmp").glob("crio-goroutine-stacks-*.log"))
        if not found:
            return None, []
        time.sleep(1.0)  # written in one go, but give it the time to finish
        src = found[-1]
    else:
        try:
            m = c.wait_for_log(_DUMP_WRITTEN, timeout=15.0, since=since)
        except Exception:  # noqa: BLE001 - the log holds the dump all the same
            return None, []
        src = Path(m.group(1))
    dst = out / f"{'crio' if isinstance(c, Crio) else 'containerd'}-{c.version}.stacks.log"
    with contextlib.suppress(OSError):
        shutil.copyfile(src, dst)
        return dst, _summarize_dump(dst.read_text(errors="replace"))
    return None, []


def run(version: str, *, minutes: float, mode: str | None, shared: int = 20,
        churners: int = 2, storm: int = 0, deadline: float = 20.0, max_cycles: int = 1_000_000,
        shrink_delay: str = "100ms", grow_delay: str = "0s", out: Path | None = None,
        log: Any = None) -> Result:
    """One bounded churn (see the module docstring); ``mode`` None = the shipped default
    (no ``sharedPoolUpdateMode`` in the config); ``storm``: threads of a second client
    sending UpdateContainerResources to the shared containers (:meth:`Churn.storm`). ``out``:
    where the logs and the dump of a
    hang are kept (a fresh /tmp directory when None). Raises what the setup raises
    (containerd or the plugin not starting); a hang is a :class:`Result`, not an error."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    workdir = Path(tempfile.mkdtemp(prefix=f"st{version}-", dir="/tmp"))
    out = out or Path(tempfile.mkdtemp(prefix=f"nri-stress-{version}-", dir="/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    c: Containerd = Crio(version, workdir) if version == "crio" else \
        StackDumpContainerd(version, workdir)
    keys: dict[str, Any] = {"sharedPoolShrinkDelay": shrink_delay,
                            "sharedPoolGrowDelay": grow_delay}
    if mode is not None:
        keys["sharedPoolUpdateMode"] = mode
    plugin = None
    churn = Churn(c, deadline, max_cycles)
    threads: list[threading.Thread] = []
    hung = False
    try:
        c.start()
        plugin = start_plugin(c, workdir, **keys)
        setup = c.cri_client(timeout=deadline)
        churn.clients.append(setup)
        shared_ids = []
        for i in range(shared):
            pod = setup.run_pod(f"shared-{i}", "BestEffort")
            shared_ids.append(setup.create_container(pod, "c"))
            setup.start_container(shared_ids[-1])
        m = re.search(r"shared pool update mode (\S+)", plugin.log_text())
        effective = m.group(1) if m else (mode or "default")
        say(f"{'CRI-O' if version == 'crio' else 'containerd ' + version}: {shared} shared "
            f"containers running; churn for "
            f"{minutes:g} min (mode {effective}, shrink {shrink_delay}, grow {grow_delay}, "
            f"deadline {deadline:g} s" + (f", {storm} UpdateContainerResources storm "
                                           "thread(s)" if storm else "") + ")")
        churn.t0 = time.monotonic()
        threads = [threading.Thread(target=churn.loop, args=("guaranteed", "Guaranteed"),
                                    daemon=True)]
        threads += [threading.Thread(target=churn.loop, args=(f"besteffort{i}", "BestEffort"),
                                     daemon=True) for i in range(churners)]
        threads += [threading.Thread(target=churn.storm, args=(f"storm{i}", shared_ids),
                                     daemon=True) for i in range(storm)]
        for t in threads:
            t.start()
        end = churn.t0 + minutes * 60
        next_note = churn.t0 + 60
        while not churn.stop.is_set() and time.monotonic() < end:
            churn.stop.wait(1.0)
            if plugin is not None and not plugin.running:
                churn.errors.append(f"plugin exited: {plugin.log_text()[-500:]}")
                break
            if time.monotonic() >= next_note:
                next_note += 60
                say(f"  {time.monotonic() - churn.t0:.0f} s: {dict(churn.cycles)}")
        seconds = time.monotonic() - churn.t0
        churn.stop.set()
        if churn.hang is None:
            for t in threads:
                t.join(deadline + 5)
            if churn.hang is None and any(t.is_alive() for t in threads):
                churn.hang = Hang("?", "?", seconds, "a churn thread did not finish")
        hung = churn.hang is not None
        dump, summary = (None, [])
        if hung:
            dump, summary = _dump_stacks(c, 0, out)
        passes = len(re.findall(r"shared pool: \d+ containers moved", plugin.log_text()))
        mode_name = effective
        return Result(version, mode_name, seconds, dict(churn.cycles), churn.latencies,
                      passes, churn.errors, churn.hang, dump, summary, out)
    finally:
        if plugin is not None:
            plugin.stop()
        if hung:
            # the NRI locks are held for good: the daemon is killed, started again (no
            # plugin: nothing to deadlock with) to remove every pod, and stopped
            c.kill(signal.SIGKILL)
            for t in threads:
                t.join(deadline + 5)
            with contextlib.suppress(Exception):
                c.start()
        for cri in churn.clients:
            with contextlib.suppress(Exception):
                cri.close()
        problems = c.stop()
        parents = [p for cri in churn.clients for p in cri.cgroup_parents]
        left = cg.remove_pod_cgroups(parents)
        if problems or left:
            say(f"cleanup problems: {problems + [f'cgroup left: {p}' for p in left[:5]]}")
        for name in (c.log_path.name, "plugin.log"):
            with contextlib.suppress(OSError):
                if hung or (workdir / name).stat().st_size < 50_000_000:
                    shutil.copyfile(workdir / name, out / name)
        if not c.shim_processes():
            shutil.rmtree(workdir, ignore_errors=True)
        cg.remove_empty_kubepods()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="append", choices=["1.7", "2.1", "2.4", "crio"],
                    help="containerd version (2.4: the modern build's), or crio (repeatable; "
                         "default 1.7 and 2.1)")
    ap.add_argument("--minutes", type=float, default=10.0, help="churn time per version")
    ap.add_argument("--mode", choices=["auto", "async", "cri", "reply"],
                    help="sharedPoolUpdateMode (default: none in the config, the shipped one)")
    ap.add_argument("--shared", type=int, default=20, help="running BestEffort containers")
    ap.add_argument("--churners", type=int, default=2, help="BestEffort churn threads")
    ap.add_argument("--storm", type=int, default=0,
                    help="threads of a second client sending UpdateContainerResources to the "
                         "shared containers, kubelet-like (containerd/containerd#13733)")
    ap.add_argument("--deadline", type=float, default=20.0, help="seconds per CRI call")
    ap.add_argument("--max-cycles", type=int, default=1_000_000,
                    help="stop after this many pod cycles (all threads)")
    ap.add_argument("--shrink-delay", default="100ms")
    ap.add_argument("--grow-delay", default="0s")
    ap.add_argument("--out", type=Path, help="where logs and a hang's dump are kept")
    args = ap.parse_args(argv)
    from tests.e2e.harness import e2e_missing

    status = 0
    for v in args.version or ["1.7", "2.1"]:
        missing = e2e_missing(v)
        if missing:
            print(f"containerd {v} cannot run here: {'; '.join(missing)}", file=sys.stderr)
            return 2
        out = args.out / v if args.out else None
        r = run(v, minutes=args.minutes, mode=args.mode, shared=args.shared,
                churners=args.churners, storm=args.storm, deadline=args.deadline,
                max_cycles=args.max_cycles,
                shrink_delay=args.shrink_delay, grow_delay=args.grow_delay, out=out)
        print("\n".join(r.lines()), flush=True)
        if r.hang is not None:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
