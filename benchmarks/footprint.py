#!/usr/bin/env python3
"""Start-up time and memory of nri-cpumgr, side by side with a minimal Go NRI plugin.

Each launch: a fake NRI runtime (tests/unit/nri_peer.py) listens on a fresh unix socket, the
plugin is exec'd with that socket, and the benchmark measures

* launch -> registered: wall clock, ms, from just before the exec to the runtime receiving
  the plugin's RegisterPlugin request; and of it, the plugin's time on a CPU and its time
  runnable but waiting for one (/proc/<pid>/task/*/schedstat: the second is the machine's
  load, not the plugin);
* launch -> synchronized: wall clock, ms, from the exec to the plugin's answer to a
  Synchronize of N containers, Configure before it (the plugin registers first and loads its
  managers after: this is when the runtime's containers are under its control);
* VmRSS (MiB, /proc/<pid>/status) once the runtime has sent Configure and a Synchronize of
  N containers (N = 0, 100, 1000: one launch each, Synchronize comes once per connection) and
  the plugin has settled for ``--settle`` seconds.

Rounds alternate the order of the two plugins (A B, B A, ...) so drift on a shared machine
hits both. Prints median / min / max per plugin; asserts nothing.

The Go plugin is ``../shared/tools/go-peer`` built into ``$GO_PEER`` (default ``.runtime/go-peer``;
``--go-peer``; skipped when absent).
nri-cpumgr runs as the image runs it: its ``nri-cpumgr`` command (the Dockerfile's
ENTRYPOINT, the console script beside the ``--python`` interpreter, when that imports this
tree; else ``python -c`` with ``PYTHONPATH`` on this tree; ``--python-m``: ``python -m
nri_cpumgr`` instead, which adds ``runpy``), bytecode compiled at build time: the benchmark
points PYTHONPYCACHEPREFIX at a private directory and discards one warm-up launch so that
the bytecode exists; ``--cold-bytecode`` measures with no bytecode cache at all instead.

The plugin's interpreter (``--python``, repeatable: side by side) is by default the image's:
Debian's ``python3`` (the Dockerfile installs its package), in the virtualenv ``make
image-venv`` makes (``.runtime/image-venv``: the plugin's dependencies, this tree installed
editable, no setuptools, as the image has none), when it exists; else the interpreter running
this benchmark. The two differ: the developers' ``.venv`` runs pyenv's CPython 3.11.7, built
with a shared libpython and no profile-guided optimization, whose start executes ~15 % more
instructions and runs them slower (docs/performance.md).

``--compare TREE`` (repeatable) adds the ``nri_cpumgr`` of another tree (a checkout, or an
export of a revision: ``git archive REV nri_cpumgr | tar -x -C TREE``), launched as the
console script does (``from nri_cpumgr.boot import main``) with ``PYTHONPATH=TREE``, in the
same alternating rounds: a before/after of the plugin's own CPU time on a shared machine.

``--pod-spec-pods N`` adds a third subject, nri-cpumgr with ``podSpecSource: apiServer``
watching a loopback fake API server (tests/e2e/harness/fakeapi.py) that holds N pods of this
node (the watch's cost: its imports, its thread, N pods' facts); with ``--compare``, each
compared tree with the watch too.

``--restart``: each subject's launches after its first keep the state directory of its
previous launch (a restart, as a DaemonSet rollout or a crash: the checkpoint of the previous
run; the Guaranteed container is known to it unless that run synchronized 0 containers).

    make image-venv   # once: the image's interpreter
    .venv/bin/python benchmarks/footprint.py [--rounds 5] [--go-peer .runtime/go-peer]
        [--python .runtime/image-venv/bin/python --python .venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from nri_cpumgr.api import nri_pb2  # noqa: E402
from tests.unit.nri_peer import FakeRuntime  # noqa: E402

# the shipped default (sharedPoolUpdateMode auto); the fake runtime introduces itself as
# containerd 2.4.2 (the newest containerd, the modern node's), where auto takes async as on a
# real node: the fake has no NRI locks, as 2.4 has no lock-order inversion. An older version
# (--runtime-version v1.7.24) takes reply there (no CRI socket in the fake: the unmounted
# socket's degraded path, not what the chart deploys)
CONFIG = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
RUNTIME_NAME, RUNTIME_VERSION = "containerd", "v2.4.2"
SIZES = (0, 100, 1000)
#: what the ``nri-cpumgr`` console script runs (``--compare``: the same, from another tree)
BOOT = "import sys; from nri_cpumgr.boot import main; sys.exit(main())"
FRAME_CHUNK = 4000
#: the image's interpreter (``make image-venv``), the plugin's by default when it exists
IMAGE_PYTHON = TOP / ".runtime" / "image-venv" / "bin" / "python"


def sync_objects(n: int) -> tuple[list[nri_pb2.PodSandbox], list[nri_pb2.Container]]:
    """``n`` running containers in ``n`` pods as a kubelet node has them: one Guaranteed
    container with 1 CPU (pinned to CPU 1), the rest Burstable (250m request, 1 CPU limit,
    256 MiB)."""
    pods: list[nri_pb2.PodSandbox] = []
    ctrs: list[nri_pb2.Container] = []
    for i in range(n):
        uid = f"0000-{i:08d}"
        qos = "" if i == 0 else "burstable"
        p = nri_pb2.PodSandbox(id=f"sb-{i}", name=f"pod-{i}", uid=uid, namespace="bench")
        p.linux.cgroup_parent = f"/kubepods/{qos + '/' if qos else ''}pod{uid}"
        pods.append(p)
        c = nri_pb2.Container(id=f"c-{i:08d}", pod_sandbox_id=f"sb-{i}", name="app",
                              state=nri_pb2.CONTAINER_RUNNING)
        c.labels["io.kubernetes.container.name"] = "app"
        c.labels["io.kubernetes.pod.name"] = f"pod-{i}"
        c.labels["io.kubernetes.pod.namespace"] = "bench"
        r = c.linux.resources
        r.cpu.period.value = 100000
        r.memory.limit.value = 1 << 28
        if i == 0:
            r.cpu.shares.value = 1024
            r.cpu.quota.value = 100000
            r.cpu.cpus = "1"
        else:
            r.cpu.shares.value = 256
            r.cpu.quota.value = 100000
            r.cpu.cpus = "0-1"
        ctrs.append(c)
    return pods, ctrs


def fake_api_server(n: int) -> tuple[Any, str]:
    """A loopback fake API server (tests/e2e/harness/fakeapi.py, entered: ``close()`` it)
    holding ``n`` pods of node ``fp-node``: the Synchronize's Guaranteed pod (as on a node,
    where a running pod is in the API server) and ``n - 1`` others (every other one with
    pod-level resources, two containers each); and the config lines that watch it
    (``podSpecSource: apiServer``)."""
    from tests.e2e.harness.fakeapi import FakeAPIServer

    api = FakeAPIServer("fp-node").__enter__()
    one = {"cpu": "1", "memory": "256Mi"}
    api.add({"metadata": {"uid": "0000-00000000", "name": "pod-0", "namespace": "bench"},
             "spec": {"containers": [{"name": "app",
                                      "resources": {"requests": one, "limits": one}}]}})
    for i in range(1, n):
        res = {"requests": {"cpu": "250m", "memory": "256Mi"},
               "limits": {"cpu": "1", "memory": "256Mi"}}
        api.add({"metadata": {"uid": f"fp-{i}", "name": f"p{i}", "namespace": "ns"},
                 "spec": {"resources": res if i % 2 else None, "containers": [
                     {"name": "app", "resources": res},
                     {"name": "side", "resources": {}}]}})
    return api, f"podSpecSource: apiServer\napiServerURL: {api.url}\nnodeName: fp-node\n"


def vm_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) / 1024
    return out


class Subject:
    """One plugin under test: how to start it against a socket."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.reg_ms: list[float] = []
        self.synced_ms: dict[int, list[float]] = {n: [] for n in SIZES}
        self.synced_cpu_ms: dict[int, list[float]] = {n: [] for n in SIZES}
        self.reg_cpu_ms: list[float] = []
        self.reg_wait_ms: list[float] = []
        self.rss: dict[int, list[float]] = {n: [] for n in SIZES}
        #: the state directory every launch keeps (``--restart``), else None: a fresh one
        self.state_dir: Path | None = None

    def command(self, sock: Path, work: Path) -> list[str]:
        state = self.state_dir if self.state_dir is not None else work / "state"
        return [a.format(socket=sock, work=work, state=state) for a in self.argv]


def sched_ms(pid: int) -> tuple[float, float]:
    """(ms on a CPU, ms runnable but waiting for one) of every thread of ``pid`` so far
    (/proc/<pid>/task/*/schedstat, ns): on a busy machine launch -> registered is mostly the
    second, which the plugin does not control."""
    cpu = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            on, waited, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        cpu += int(on)
        wait += int(waited)
    return cpu / 1e6, wait / 1e6


async def launch(subject: Subject, n: int, settle: float, keep: bool = True,
                 keep_work: list[Path] | None = None,
                 marks: dict[str, float] | None = None) -> None:
    """One launch of ``subject`` with a Synchronize of ``n`` containers. ``marks``: gets
    the ``time.perf_counter()`` at which the runtime had the plugin's ``registered``,
    ``configured`` and ``synchronized`` answers."""
    if marks is None:
        marks = {}
    work = Path(tempfile.mkdtemp(prefix="fp-", dir="/tmp"))
    if keep_work is not None:
        keep_work.append(work)
    sock = work / "nri.sock"
    pods, ctrs = sync_objects(n)
    rt = FakeRuntime(sock)
    await rt.start()
    proc = None
    try:
        with open(work / "plugin.log", "wb") as logf:
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *subject.command(sock, work), stdin=asyncio.subprocess.DEVNULL,
                stdout=logf, stderr=logf, env=subject.env)
            conn = await rt.next_conn(timeout=30)
            await asyncio.wait_for(asyncio.shield(conn.registered), 30)
            marks["registered"] = time.perf_counter()
            reg_ms = (marks["registered"] - t0) * 1000
            cpu_ms, wait_ms = sched_ms(proc.pid)
            await conn.call("Configure", nri_pb2.ConfigureRequest(
                runtime_name=RUNTIME_NAME, runtime_version=RUNTIME_VERSION),
                nri_pb2.ConfigureResponse, timeout=30)
            marks["configured"] = time.perf_counter()
            req = nri_pb2.SynchronizeRequest(pods=pods, containers=ctrs)
            # the Go stub reads a frame into a 4 KiB buffer (ttrpc bufio; ENOMEM if larger):
            # full frames of FRAME_CHUNK, the remainder (< FRAME_CHUNK + ttrpc header) last
            frames = [FRAME_CHUNK] * (len(req.SerializeToString()) // FRAME_CHUNK)
            await conn.call("Synchronize", req, nri_pb2.SynchronizeResponse, sizes=frames,
                            timeout=60)
            marks["synchronized"] = time.perf_counter()
            synced_ms = (marks["synchronized"] - t0) * 1000
            synced_cpu_ms, _ = sched_ms(proc.pid)
            await asyncio.sleep(settle)
            if proc.returncode is not None:
                raise RuntimeError(f"{subject.name} exited: {(work / 'plugin.log').read_text()}")
            rss = vm_status(proc.pid)["VmRSS"]
        if keep:
            subject.reg_ms.append(reg_ms)
            subject.synced_ms[n].append(synced_ms)
            subject.synced_cpu_ms[n].append(synced_cpu_ms)
            subject.reg_cpu_ms.append(cpu_ms)
            subject.reg_wait_ms.append(wait_ms)
            subject.rss[n].append(rss)
    finally:
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await rt.stop()
        if keep_work is None:
            shutil.rmtree(work, ignore_errors=True)


def cpu_probe_ms() -> float:
    """Wall-clock ms of a fixed piece of pure-Python work in this process (~2 ms on this
    project's 2-CPU VM when it is quiet, on the developers' ``.venv``), taken before each
    launch while nothing else of the benchmark runs: the machine's speed at the time. The
    VM's CPU has slow phases (1.5-5x longer for the same work, with a load average of 0
    and no steal time shown), in which every figure of both plugins grows with it: the
    probe tells such a run from a quiet one (docs/performance.md)."""
    t = time.perf_counter()
    x = 0
    for i in range(40_000):
        x += i * i % 7
    return (time.perf_counter() - t) * 1000


def line(label: str, values: list[float], unit: str) -> str:
    if not values:
        return f"  {label:<28} -"
    return (f"  {label:<28} median {statistics.median(values):7.1f} {unit}   "
            f"min {min(values):7.1f}   max {max(values):7.1f}   (n={len(values)})")


def _installed_tree(python: str, env: dict[str, str]) -> Path | None:
    """The checkout whose ``nri_cpumgr`` interpreter ``python`` imports outside it (its
    virtualenv's install), or None."""
    out = subprocess.run([python, "-c", "import nri_cpumgr; print(nri_cpumgr.__file__)"],
                         cwd="/", env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return Path(out.stdout.strip()).resolve().parent.parent


def interpreter_path(python: str) -> str:
    """``--python``'s value as the interpreter's own path (a command name looked up on
    PATH; a wrapper such as pyenv's shim replaced by the interpreter it runs, which
    ``sys.executable`` names; a virtualenv's python kept as it is: a symlink to its base
    interpreter). Exits with a message when there is no such interpreter, or when it cannot
    import the plugin's NRI schema (this tree on ``PYTHONPATH``: its dependencies, protobuf
    above all, are not installed for it)."""
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise SystemExit(f"--python {python}: no such interpreter")
    out = subprocess.run(
        [found, "-c", "import sys, nri_cpumgr.api.nri_pb2; print(sys.executable)"],
        cwd="/", env=dict(os.environ, PYTHONPATH=str(TOP)), capture_output=True, text=True,
        check=False)
    if out.returncode != 0 or not out.stdout.strip():
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise SystemExit(f"--python {python}: it cannot run the plugin ({why}): give a "
                         "virtualenv's python with the plugin's dependencies (`make "
                         "image-venv` makes the image's, `make setup` the developers')")
    return os.path.abspath(out.stdout.strip().splitlines()[-1])


def describe_python(python: str) -> str:
    """``CPython 3.11.2 at /usr`` (version and base prefix) of interpreter ``python``."""
    out = subprocess.run([python, "-c", "import platform, sys; print(platform."
                          "python_implementation(), platform.python_version(), 'at', "
                          "sys.base_prefix)"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or f"{python}: {out.stderr.strip()}"


async def main_async(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="fp-cfg-", dir="/tmp"))
    try:
        cfg = tmp / "config.yaml"
        cfg.write_text(CONFIG)
        env = dict(os.environ)
        env.pop("NRI_PLUGIN_SOCKET", None)
        if args.cold_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env.pop("PYTHONPYCACHEPREFIX", None)
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        api = None
        cfg2 = None
        if args.pod_spec_pods:
            api, extra = fake_api_server(args.pod_spec_pods)
            cfg2 = tmp / "config-podspec.yaml"
            cfg2.write_text(CONFIG + extra)
        subjects: list[Subject] = []
        for python in args.python:
            plugin = [python, "-m", "nri_cpumgr"] if args.python_m else [python, "-c", BOOT]
            env1 = dict(env, PYTHONPATH=str(TOP))  # (this tree, whatever python has installed)
            script = Path(python).parent / "nri-cpumgr"
            if not args.python_m and script.is_file():
                if _installed_tree(python, env) == TOP:
                    plugin, env1 = [str(script)], env
                else:  # (a virtualenv installing another checkout: this tree all the same)
                    print(f"({script} runs another tree than {TOP}: python -c with "
                          "PYTHONPATH instead)")
                    plugin = [python, "-c", BOOT]
            label = "" if len(args.python) == 1 else f" [{python}]"
            print(f"nri-cpumgr{label} launched as: {' '.join(plugin)} "
                  f"({describe_python(python)})")
            for name, c in (("nri-cpumgr", cfg), ("nri-cpumgr+podspec", cfg2)):
                if c is not None:
                    subjects.append(Subject(name + label, [
                        *plugin, "run", "--config", str(c),
                        "--socket", "{socket}", "--state-dir", "{state}"], env1))
        on = "" if len(args.python) == 1 else f" [{args.python[0]}]"
        for tree in args.compare:  # another checkout or export, launched as the image does
            root = Path(tree)
            if not (root / "nri_cpumgr" / "boot.py").is_file():
                raise SystemExit(f"--compare {tree}: no nri_cpumgr/boot.py there")
            env2 = dict(env, PYTHONPATH=str(root))
            subjects.append(Subject(f"nri-cpumgr@{tree}{on}", [
                args.python[0], "-c", BOOT, "run", "--config", str(cfg),
                "--socket", "{socket}", "--state-dir", "{state}"], env2))
            if cfg2 is not None:  # (and its watch, against the same fake API server)
                subjects.append(Subject(f"nri-cpumgr+podspec@{tree}{on}", [
                    args.python[0], "-c", BOOT, "run", "--config", str(cfg2),
                    "--socket", "{socket}", "--state-dir", "{state}"], env2))
        go = Path(args.go_peer)
        if go.is_file():
            subjects.append(Subject("go-peer", [str(go), "-socket", "{socket}",
                                                "-name", "go-peer", "-idx", "10"], env))
        else:
            print(f"(no {go}: nri-cpumgr alone; the Go column is skipped: build it with "
                  f"`OUT={go} bash ../shared/tools/go-peer/build.sh` (../shared: the project's "
                  "shared tools beside this checkout, not in a plain clone), or set "
                  "GO_PEER=PATH)")
        if args.restart:
            for k, s in enumerate(subjects):
                s.state_dir = tmp / f"state-{k}"
        for s in subjects:  # warm-up: bytecode, page cache
            await launch(s, 0, 0.0, keep=False)
        load = [os.getloadavg()]
        probe: list[float] = []
        for r in range(args.rounds):
            order = subjects if r % 2 == 0 else subjects[::-1]
            for n in SIZES:
                for s in order:
                    probe.append(cpu_probe_ms())
                    await launch(s, n, args.settle)
        load.append(os.getloadavg())
        print(f"footprint: {args.rounds} rounds, {os.cpu_count()} CPUs, settle {args.settle}s, "
              f"bytecode {'none' if args.cold_bytecode else 'cached'}; config: "
              + CONFIG.strip().replace("\n", ", ") + f"; runtime {RUNTIME_NAME} {RUNTIME_VERSION}"
              + ("; restarts: each launch keeps the state directory (checkpoint) of the "
                 "subject's previous launch" if args.restart else "; fresh state per launch"))
        print("load average (1, 5, 15 min) before / after: "
              + " / ".join(" ".join(f"{x:.1f}" for x in la) for la in load))
        print(line("CPU probe before each launch", probe, "ms")
              + "  (fixed work: the machine's speed; cpu_probe_ms)")
        for s in subjects:
            print(s.name)
            print(line("launch -> registered", s.reg_ms, "ms"))
            print(line("  of it on a CPU", s.reg_cpu_ms, "ms"))
            print(line("  of it waiting for a CPU", s.reg_wait_ms, "ms"))
            for n in SIZES:
                print(line(f"launch -> synchronized, {n}", s.synced_ms[n], "ms"))
                print(line("  of it on a CPU", s.synced_cpu_ms[n], "ms"))
            for n in SIZES:
                print(line(f"VmRSS after sync of {n}", s.rss[n], "MiB"))
        if api is not None:
            print(f"(nri-cpumgr+podspec: watching {args.pod_spec_pods} pods)")
            api.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    global RUNTIME_VERSION
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds between the Synchronize reply and reading VmRSS")
    ap.add_argument("--go-peer", default=os.environ.get(
        "GO_PEER", str(Path(__file__).resolve().parents[1] / ".runtime/go-peer")))
    ap.add_argument("--pod-spec-pods", type=int, default=0,
                    help="also run with podSpecSource apiServer over a fake API server "
                         "holding this many pods")
    ap.add_argument("--restart", action="store_true",
                    help="each launch of a subject after its first keeps the state directory "
                         "of its previous launch (a restart with its checkpoint)")
    ap.add_argument("--python-m", action="store_true",
                    help="launch the plugin as `python -m nri_cpumgr` (before: what the "
                         "benchmark did until 2026-12-06), not the image's `nri-cpumgr` command")
    ap.add_argument("--python", action="append", default=[], metavar="PYTHON",
                    help="the plugin's interpreter: a virtualenv's python with the plugin's "
                         "dependencies (repeatable: side by side; default: the image's, "
                         f"{IMAGE_PYTHON.relative_to(TOP)} from `make image-venv`, when it "
                         "exists, else this interpreter); --compare trees run on the first")
    ap.add_argument("--cold-bytecode", action="store_true",
                    help="no bytecode cache (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--compare", action="append", default=[], metavar="TREE",
                    help="also measure the nri_cpumgr of TREE (another checkout, or a `git "
                         "archive REV nri_cpumgr | tar -x -C TREE` export), launched as the "
                         "console script does, alternating with this tree (repeatable)")
    ap.add_argument("--runtime-version", default=RUNTIME_VERSION,
                    help="containerd version the fake runtime reports in Configure (default "
                         "%(default)s: sharedPoolUpdateMode auto takes async; below v2.4.0 it "
                         "takes reply, the fake having no CRI socket)")
    args = ap.parse_args()
    RUNTIME_VERSION = args.runtime_version
    args.go_peer = str(Path(args.go_peer).resolve())
    args.compare = [str(Path(t).resolve()) for t in args.compare]
    if not args.python:
        args.python = [str(IMAGE_PYTHON) if IMAGE_PYTHON.is_file() else sys.executable]
        if not IMAGE_PYTHON.is_file():
            print(f"(no {IMAGE_PYTHON.relative_to(TOP)}: the plugin runs on this interpreter, "
                  "not the image's; `make image-venv` makes it)")
    args.python = list(dict.fromkeys(interpreter_path(p) for p in args.python))
    # a `-c` launch puts its working directory first on sys.path: away from any tree
    os.chdir(tempfile.gettempdir())
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130


if __name__ == "__main__":
    raise SystemExit(main())
