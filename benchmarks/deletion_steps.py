#!/usr/bin/env python3
"""Where a Guaranteed pod's deletion spends its time, per CRI call, with and without nri-cpumgr.

A check of busy_node.py's deletion figure on one runtime (default ``crio``; or a containerd
version): one private daemon (tests/e2e/harness), ``--shared`` running BestEffort containers,
then ``--rounds`` rounds alternating no plugin / nri-cpumgr with the shipped config
(tests/e2e/plugin_run.py ``start_plugin``, 12 s to settle after its start), ``--pods``
Guaranteed 1-CPU pods per round and mode. Each pod is created and started; with the plugin
the script waits until no shared container's cgroup has the pod's CPU (the shrink pass, as
busy_node.py does; ``--settle`` waits 6 s + 0.15 s per shared container instead, so the pass
is long over); then StopContainer, RemoveContainer, StopPodSandbox and RemovePodSandbox are
timed one by one (ms), and the grow pass is let finish (13 s) before the next pod.

Prints the median and every sample of each step and of their sum, per mode. Needs root and
the runtime's binaries (busy_node.py's).

    .venv/bin/python benchmarks/deletion_steps.py --shared 40 --rounds 3 --pods 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.busy_node import parse_cpus, wait_until  # noqa: E402
from benchmarks.report import runtimes_missing  # noqa: E402
from tests.e2e.harness import Containerd, Crio  # noqa: E402
from tests.e2e.harness import cgroups as cg  # noqa: E402
from tests.e2e.plugin_run import start_plugin  # noqa: E402

G1 = {"cpu": "1", "memory": "64Mi"}


def run(version: str, n_shared: int, rounds: int, pods: int, settle: bool) -> dict:
    """{mode: {step: [ms, ...]}} for modes "none" and "plugin"."""
    w = Path(tempfile.mkdtemp(prefix=f"ds{version}-", dir="/tmp"))
    c: Containerd = Crio(version, w) if version == "crio" else Containerd(version, w)
    res: dict[str, dict[str, list[float]]] = {"none": {}, "plugin": {}}
    plugin = None
    try:
        c.start()
        with c.cri_client() as cri:
            dirs = []
            for i in range(n_shared):
                pod = cri.run_pod(f"shared-{i}", "BestEffort")
                cid = cri.create_container(pod, "c")
                cri.start_container(cid)
                dirs.append(cg.controller_dir("cpuset", cri.cgroups_path(cid)))
            for r in range(rounds):
                for mode in ("none", "plugin"):
                    if mode == "plugin":
                        pw = w / f"plugin-{r}"
                        pw.mkdir()
                        plugin = start_plugin(c, pw, stateDirectory=str(w / "state"))
                        time.sleep(12)
                    for k in range(pods):
                        uid = f"bbbbbbbb-0000-4000-8000-{r:06d}{k:03d}{int(mode == 'plugin')}00"
                        pod = cri.run_pod(f"g-{mode}-{r}-{k}", "Guaranteed", uid=uid)
                        cid = cri.create_container(pod, "g", requests=G1, limits=G1)
                        cri.start_container(cid)
                        g = parse_cpus(cri.cgroup_cpus(cid))
                        if settle:
                            time.sleep(6 + 0.15 * n_shared)
                        elif mode == "plugin":
                            off = wait_until(lambda g=g: all(
                                not parse_cpus((d / "cpuset.cpus").read_text()) & g
                                for d in dirs), 30 + 0.15 * n_shared)
                            res[mode].setdefault("off", []).append(off or float("nan"))
                        for step, fn, arg in (("StopContainer", cri.stop_container, cid),
                                              ("RemoveContainer", cri.remove_container, cid),
                                              ("StopPodSandbox", cri.stop_pod, pod),
                                              ("RemovePodSandbox", cri.remove_pod, pod)):
                            t = time.perf_counter()
                            fn(arg)
                            res[mode].setdefault(step, []).append(
                                (time.perf_counter() - t) * 1000)
                        cri.pods.pop(pod, None)
                        time.sleep(13 if mode == "plugin" else 1)
                    if plugin is not None:
                        plugin.stop()
                        plugin = None
            cri.cleanup()
    finally:
        if plugin is not None:
            plugin.stop()
        c.stop()
        if not c.shim_processes():
            shutil.rmtree(w, ignore_errors=True)
        cg.remove_empty_kubepods()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="crio", choices=["1.7", "2.1", "2.4", "crio"])
    ap.add_argument("--shared", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pods", type=int, default=3)
    ap.add_argument("--settle", action="store_true",
                    help="delete 6 s + 0.15 s per shared container after the start")
    args = ap.parse_args(argv)
    if runtimes_missing([args.version]):
        return 2
    res = run(args.version, args.shared, args.rounds, args.pods, args.settle)
    steps = ("StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox")
    for mode, got in res.items():
        got["deletion"] = [sum(x) for x in zip(*(got[s] for s in steps), strict=True)]
        for step, vals in got.items():
            print(f"{mode} {step}: median {statistics.median(vals):.0f} ms; "
                  + " ".join(f"{v:.0f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
