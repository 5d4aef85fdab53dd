#!/usr/bin/env python3
"""CRI CreateContainer latency on a real containerd, with no NRI plugin or with one.

For each containerd version: start a private daemon (tests/e2e/harness), run one pod, then N
times create a container (not started) and remove it, timing only the CreateContainer call
(wall clock, ms). Prints median and p90 (and min/mean/max) per version and mode.

``--plugin-cmd`` runs an external NRI plugin against the daemon's NRI socket for a second
measurement. It is split like a shell command after substituting ``{nri_socket}``,
``{workdir}`` (the daemon's work dir), ``{python}`` (this interpreter) and ``{version}``; the
benchmark waits until containerd logs the plugin as connected (``--plugin-name``, optional
``--plugin-index``). Example with the project's plugin (its config file must name the
socket)::

    .venv/bin/python benchmarks/cri_create.py --plugin-name nri-cpumgr \\
        --plugin-cmd "{python} -m nri_cpumgr run --config /tmp/cfg.yaml"

or with the harness's do-nothing plugin (the bare NRI round-trip cost)::

    .venv/bin/python benchmarks/cri_create.py --plugin-name null \\
        --plugin-cmd "{python} -m tests.e2e.harness.nullplugin --socket {nri_socket}"

Needs root and the binaries of scripts/fetch-runtime.sh.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.report import runtimes_missing  # noqa: E402
from tests.e2e.harness import Containerd, PluginProcess  # noqa: E402
from tests.e2e.harness import cgroups as cg  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between closest ranks."""
    s = sorted(values)
    if not s:
        raise ValueError("no samples")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def measure(c: Containerd, n: int, warmup: int, qos: str, cpu: str, memory: str) -> list[float]:
    """Latencies in ms of ``n`` CreateContainer calls (each container removed right after)."""
    samples: list[float] = []
    with c.cri_client() as cri:
        pod = cri.run_pod(f"bench-{qos.lower()}", qos)
        res = {} if qos == "BestEffort" else {"cpu": cpu, "memory": memory}
        requests = res
        limits = res if qos == "Guaranteed" else {}
        try:
            for i in range(warmup + n):
                t0 = time.perf_counter()
                cid = cri.create_container(pod, f"c{i}", requests=requests, limits=limits)
                dt = (time.perf_counter() - t0) * 1000
                cri.remove_container(cid)
                if i >= warmup:
                    samples.append(dt)
        finally:
            problems = cri.cleanup()
            if problems:
                print(f"  cleanup problems: {problems}", file=sys.stderr)
    return samples


def report(label: str, samples: list[float]) -> str:
    return (f"{label:<32} n={len(samples):<3} median={statistics.median(samples):7.2f} ms  "
            f"p90={percentile(samples, 0.9):7.2f} ms  min={min(samples):6.2f}  "
            f"mean={statistics.fmean(samples):6.2f}  max={max(samples):7.2f}")


def run_version(version: str, args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-ctrd{version}-", dir="/tmp"))
    c = Containerd(version, workdir)
    plugin: PluginProcess | None = None
    try:
        c.start()
        rounds = max(1, args.rounds) if args.plugin_cmd else 1
        per = max(1, args.n // rounds)
        without: list[float] = []
        with_plugin: list[float] = []
        diffs: list[float] = []
        for r in range(rounds):
            a = measure(c, per, args.warmup if r == 0 else 1, args.qos, args.cpu, args.memory)
            without += a
            if not args.plugin_cmd:
                break
            cmd = args.plugin_cmd.format(nri_socket=c.nri_socket, workdir=workdir,
                                         python=sys.executable, version=version)
            since = c.log_offset()
            plugin = PluginProcess(shlex.split(cmd), workdir / "plugin.log", cwd=TOP).start()
            c.wait_plugin_ready(args.plugin_name, args.plugin_index,
                                timeout=args.plugin_timeout, since=since)
            b = measure(c, per, 1, args.qos, args.cpu, args.memory)
            if not plugin.running:
                raise RuntimeError("plugin exited during the measurement:\n"
                                   + plugin.log_text()[-2000:])
            plugin.stop()
            plugin = None
            with_plugin += b
            diffs.append(statistics.median(b) - statistics.median(a))
        lines.append(report(f"containerd {version}, no plugin", without))
        print(lines[-1], flush=True)
        if args.plugin_cmd:
            lines.append(report(f"containerd {version}, {args.plugin_name}", with_plugin))
            print(lines[-1], flush=True)
            lines.append(
                f"{'':32} added by {args.plugin_name}: median of {rounds} interleaved rounds' "
                f"median differences = {statistics.median(diffs):+.2f} ms "
                f"(rounds: {', '.join(f'{d:+.2f}' for d in diffs)})"
            )
            print(lines[-1], flush=True)
    finally:
        if plugin is not None:
            plugin.stop()
        problems = c.stop()
        if problems:
            print(f"  containerd cleanup: {problems}", file=sys.stderr)
        if args.keep:
            print(f"  kept {workdir}", file=sys.stderr)
        elif not c.shim_processes():
            shutil.rmtree(workdir, ignore_errors=True)
        cg.remove_empty_kubepods()
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CRI CreateContainer latency (median, p90)")
    ap.add_argument("--version", action="append", choices=["1.7", "2.1"],
                    help="containerd version (repeatable; default both)")
    ap.add_argument("-n", type=int, default=50, help="measured creations (default 50)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured creations first")
    ap.add_argument("--qos", choices=["Guaranteed", "Burstable", "BestEffort"],
                    default="Guaranteed")
    ap.add_argument("--cpu", default="1", help="CPU request (=limit when Guaranteed)")
    ap.add_argument("--memory", default="64Mi", help="memory request (=limit when Guaranteed)")
    ap.add_argument("--plugin-cmd", help="external NRI plugin command line (see above)")
    ap.add_argument("--plugin-name", default="nri-cpumgr",
                    help="plugin name as registered (to wait for it in containerd's log)")
    ap.add_argument("--plugin-index", type=int, default=None)
    ap.add_argument("--plugin-timeout", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=5,
                    help="with --plugin-cmd: alternate this many blocks without and with the "
                         "plugin on the same daemon (n/rounds creations each), so drift of the "
                         "machine does not land on one side")
    ap.add_argument("--keep", action="store_true", help="keep the daemon work dirs")
    args = ap.parse_args(argv)
    versions = args.version or ["1.7", "2.1"]
    if runtimes_missing(versions):
        return 2
    print(f"CRI CreateContainer latency, {args.qos} container, N={args.n} "
          f"(+{args.warmup} warm-up), created without starting, then removed")
    for v in versions:
        run_version(v, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
