#!/usr/bin/env python3
"""The busy-node cost of nri-cpumgr on a real containerd or CRI-O (issue 9 item 4, part (a)).

For each containerd version (or ``crio``: the harness's CRI-O, tests/e2e/harness/crio.py) and
each count N of shared containers: start one private daemon (tests/e2e/harness) whose runc is
a counting wrapper (every ``runc update`` call is appended to a file), run N BestEffort pods
with one started container each (the shared pool, reused across rounds), then alternate rounds
with no plugin and with nri-cpumgr (static policy, reservedSystemCPUs "0") on the same daemon.
In each round, ``--pods`` Guaranteed 1-CPU pods are handled one after the other, kubelet-like:

* RunPodSandbox of the Guaranteed pod (wall clock, ms: with ``--pod-spec-source`` the
  plugin admits the pod there);
* Create+Start: CreateContainer then StartContainer at once (wall clock, ms);
* off: ms from the end of StartContainer until no shared container's cgroup ``cpuset.cpus``
  contains the Guaranteed container's CPUs (polled every ~1 ms; with no plugin nothing moves
  and the figure is not taken);
* deletion: StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox (total, ms);
* back: ms from the end of the deletion until every shared container has those CPUs again
  (``sharedPoolGrowDelay``, 10 s, and the pass; in ``reply`` mode the poke below);
* runc updates: ``runc update`` calls from CreateContainer until the CPUs are back.

With ``--mode`` (repeatable: ``async``, ``cri``, ``reply``, ``auto``) each round runs the plugin
once per ``sharedPoolUpdateMode`` given, on the same daemon. In ``reply`` mode nothing carries the
growth until a runtime call has a reply after ``sharedPoolGrowDelay``: "back" is then measured
with one UpdateContainerResources (the BestEffort container's own resources, unchanged) sent
to a shared container once the delay has passed, as the next container operation of a node.

Prints a markdown table: median (p90) per mode and the ratio mode/no plugin of the medians.
Needs root and the binaries of scripts/fetch-runtime.sh (2.4: scripts/modern/build.sh containerd
runc; crio: scripts/modern/build.sh crio and Debian's conmon); each version runs its own runc
(tests/e2e/harness/paths.py ``runc_path``; CRI-O ``crio_runtime``), wrapped to count updates.

    .venv/bin/python benchmarks/busy_node.py --quick            # 1.7 and 2.1, 40 shared, 2 rounds
    .venv/bin/python benchmarks/busy_node.py --shared 40 --shared 100 --rounds 3 --pods 3
    .venv/bin/python benchmarks/busy_node.py --shared 40 --mode async --mode reply
    .venv/bin/python benchmarks/busy_node.py --version crio --shared 40 --mode reply --mode auto

``--overlap``: a busy node's timing instead (each deletion as soon as the shrink pass has moved
its first shared container, each next pod as soon as the grow pass has: both meet a pass
under way). ``--compare-src DIR``: one more plugin run per round from another source tree, so
two revisions alternate in one run. ``--keep-logs DIR``: the plugin's and containerd's logs.
The four calls of each deletion are printed one by one on stderr with every sample.
``--settle S`` (0.5 s): every mode waits S before each deletion and before each next creation,
so that no measured call meets the tail of the plugin's last CRI call (its cgroup write shows
"off" or "back" before containerd has recorded the container's resources) and both modes
delete a settled container (before it, no plugin deleted each pod right after its start).

    .venv/bin/python benchmarks/busy_node.py --version 2.1 --shared 40 --mode auto --overlap \
        --compare-src /tmp/src-main      # /tmp/src-main: git archive main nri_cpumgr | tar -x

``--pod-spec-source``: the plugin reads pod specs from a loopback fake API server
(tests/e2e/harness/fakeapi.py; ``podSpecSource: apiServer``), each Guaranteed pod shown there
before it runs, as the kubelet sees it first (the facts' lookup is on the measured path).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.cri_create import percentile  # noqa: E402
from benchmarks.report import print_table, runtimes_missing  # noqa: E402
from tests.e2e.harness import Containerd, Crio, PluginProcess  # noqa: E402
from tests.e2e.harness import cgroups as cg  # noqa: E402
from tests.e2e.harness.paths import crio_runtime, runc_path  # noqa: E402

PLUGIN_NAME = "cpumgr"
PLUGIN_INDEX = 90
CONFIG = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
POLL_TIMEOUT_S = 20.0
#: more seconds per shared container for "off" and "back": a pass makes one CRI call per shared
#: container (~30 ms each on a quiet node, several times that under load: 250 at 2 s per 10 would
#: not fit in POLL_TIMEOUT_S, and the next pod would meet the pass)
POLL_PER_SHARED_S = 0.15
GROW_DELAY_S = 10.0  # the shipped sharedPoolGrowDelay (CONFIG leaves it)




def parse_cpus(text: str) -> set[int]:
    """CPU ids of a Linux list string ("0-3,7"); "" is the empty set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def write_runc_counter(path: Path, count_file: Path, real: Path) -> Path:
    """A shell wrapper for the runc at ``real`` that appends one line to ``count_file`` per
    ``runc update``."""
    path.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        f'  if [ "$a" = update ]; then echo u >> "{count_file}"; break; fi\n'
        "done\n"
        f'exec "{real}" "$@"\n')
    path.chmod(0o755)
    return path


class CountingContainerd(Containerd):
    """A :class:`Containerd` whose CRI runtime runs ``wrapper`` instead of the version's runc
    (tests/e2e/harness/paths.py ``runc_path``: Debian's for 1.7/2.1, the modern build's for
    2.4)."""

    def __init__(self, version: str, workdir: Path, wrapper: Path, **kw: object) -> None:
        super().__init__(version, workdir, **kw)  # type: ignore[arg-type]
        self.wrapper = wrapper

    def config_text(self) -> str:
        text = super().config_text()
        real = f'BinaryName = "{self.runc}"'
        if real not in text:
            raise RuntimeError(f"containerd config without {real}: cannot count runc updates")
        return text.replace(real, f'BinaryName = "{self.wrapper}"')


class CountingCrio(Crio):
    """A :class:`Crio` whose OCI runtime entry (``runtime_path``) is ``wrapper``, the counting
    wrapper of the runc it would run (tests/e2e/harness/paths.py ``crio_runtime``)."""

    def __init__(self, version: str, workdir: Path, wrapper: Path, **kw: object) -> None:
        super().__init__(version, workdir, **kw)  # type: ignore[arg-type]
        self.wrapper = wrapper

    def config_text(self) -> str:
        text = super().config_text()
        real = f'runtime_path = "{self.runc}"'
        if real not in text:
            raise RuntimeError(f"CRI-O config without {real}: cannot count runc updates")
        return text.replace(real, f'runtime_path = "{self.wrapper}"')


def count(path: Path) -> int:
    try:
        return len(path.read_bytes().splitlines())
    except FileNotFoundError:
        return 0


def wait_until(pred, timeout: float = POLL_TIMEOUT_S) -> float | None:
    """ms until ``pred()`` is true (polled every ~1 ms), None on timeout."""
    t0 = time.perf_counter()
    while True:
        if pred():
            return (time.perf_counter() - t0) * 1000
        if time.perf_counter() - t0 > timeout:
            return None
        time.sleep(0.001)


def run_daemon(version: str, n_shared: int, args: argparse.Namespace) -> list[list[str]]:
    """All rounds on one daemon; returns table rows."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bn{version}-", dir="/tmp"))
    counter = workdir / "runc-updates"
    crio = version == "crio"
    real_runc = crio_runtime()[1] if crio else runc_path(version)
    runc = write_runc_counter(workdir / "runc-counter.sh", counter, real_runc)
    what = "CRI-O" if crio else f"containerd {version}"
    api = None
    extra = ""
    if args.pod_spec_source:
        from tests.e2e.harness.fakeapi import FakeAPIServer

        api = FakeAPIServer("bn-node").__enter__()
        extra = f"podSpecSource: apiServer\napiServerURL: {api.url}\nnodeName: bn-node\n"
    modes = args.mode or [None]  # None: the shipped sharedPoolUpdateMode
    labels = {m: "cpumgr" if m is None else m for m in modes}
    cfgs = {}
    for m in modes:
        cfgs[m] = workdir / f"cpumgr-{labels[m]}.yaml"
        # the daemon's CRI socket (Containerd.cri_socket, Crio.cri_socket): sharedPoolUpdateMode
        # cri, what the shipped auto takes before containerd 2.4 and on CRI-O
        sock = workdir / ("crio.sock" if crio else "containerd.sock")
        cfgs[m].write_text(CONFIG + extra + f"containerRuntimeEndpoint: {sock}\n"
                           + (f"sharedPoolUpdateMode: {m}\n" if m else ""))
    c: Containerd = (CountingCrio if crio else CountingContainerd)(version, workdir, runc)
    plugin_log = workdir / "plugin.log"
    plugin: PluginProcess | None = None
    # (label, config's mode, source tree): each mode from this checkout (or --plugin-src),
    # then the last mode again from each --compare-src tree
    variants = [(labels[m], m, args.plugin_src or TOP) for m in modes]
    variants += [(f"{labels[modes[-1]]}@{d.name}", modes[-1], d) for d in args.compare_src or ()]
    res: dict[str, dict[str, list[float]]] = {"none": {}, **{v[0]: {} for v in variants}}
    effective: dict[str, str] = {}
    try:
        c.start()
        with c.cri_client() as cri:
            t0 = time.perf_counter()
            shared_dirs: list[Path] = []
            shared_ids: list[str] = []
            for i in range(n_shared):
                pod = cri.run_pod(f"shared-{i}", "BestEffort")
                cid = cri.create_container(pod, "c")
                cri.start_container(cid)
                shared_ids.append(cid)
                shared_dirs.append(cg.controller_dir("cpuset", cri.cgroups_path(cid)))
            print(f"  {what}: {n_shared} shared containers running in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

            poll_timeout = POLL_TIMEOUT_S + POLL_PER_SHARED_S * n_shared

            def shared_cpus() -> list[set[int]]:
                return [parse_cpus((d / "cpuset.cpus").read_text()) for d in shared_dirs]

            for r in range(args.rounds):
                for variant in (("none", None, None), *variants):
                    mode, pmode, src = variant
                    if mode != "none":
                        since = c.log_offset()
                        since_p = plugin_log.stat().st_size if plugin_log.exists() else 0
                        argv = [sys.executable, "-m", "nri_cpumgr", "run", "--config",
                                str(cfgs[pmode]),
                                "--socket", str(c.nri_socket),
                                "--state-dir", str(workdir / "nri-cpumgr-state")]
                        plugin = PluginProcess(argv, plugin_log, cwd=src).start()
                        c.wait_plugin_ready(PLUGIN_NAME, PLUGIN_INDEX, timeout=30, since=since)
                        time.sleep(0.5)
                        em = re.search(r"shared pool update mode (\S+)",
                                       plugin.log_text(since_p))
                        effective[mode] = em.group(1) if em else "?"
                    m = res[mode]
                    for k in range(args.pods):
                        uid = f"bbbbbbbb-0000-4000-8000-{r:06d}{k:06d}"
                        if api is not None:
                            g1 = {"cpu": "1", "memory": "64Mi"}
                            api.add({"metadata": {"uid": uid, "name": f"g-{r}-{k}",
                                                  "namespace": "e2e"},
                                     "spec": {"containers": [{"name": "g", "resources": {
                                         "requests": g1, "limits": g1}}]}})
                        t = time.perf_counter()
                        pod = cri.run_pod(f"g-{r}-{k}", "Guaranteed", uid=uid)
                        m.setdefault("RunPodSandbox", []).append(
                            (time.perf_counter() - t) * 1000)
                        u0 = count(counter)
                        t = time.perf_counter()
                        cid = cri.create_container(pod, "g", requests={"cpu": "1",
                                                                        "memory": "64Mi"},
                                                   limits={"cpu": "1", "memory": "64Mi"})
                        cri.start_container(cid)
                        m.setdefault("create+start", []).append((time.perf_counter() - t) * 1000)
                        gcpus = parse_cpus(cri.cgroup_cpus(cid))
                        overlap = (args.overlap and mode != "none"
                                   and effective.get(mode) != "reply")
                        if overlap:  # delete as soon as the shrink pass has begun: one
                            # shared container that had the new CPU at the start lost it
                            had = [i for i, s in enumerate(shared_cpus()) if s & gcpus]
                            st = wait_until(
                                lambda g=gcpus, h=had: not h or any(
                                    not parse_cpus((shared_dirs[i] / "cpuset.cpus")
                                                   .read_text()) & g for i in h),
                                poll_timeout)
                            m.setdefault("pass begun", []).append(
                                float("nan") if st is None else st)
                        elif mode != "none":
                            off = wait_until(lambda g=gcpus: all(not s & g for s in shared_cpus()),
                                             poll_timeout)
                            m.setdefault("off", []).append(float("nan") if off is None else off)
                        if not overlap:
                            # a settled node in every mode: the plugin's last CRI call of the
                            # pass returns after its cgroup write (containerd still records
                            # the container's new resources), and no plugin deletes a
                            # container as old as the others
                            time.sleep(args.settle)
                        t = t1 = time.perf_counter()
                        for step, call in (("stop", cri.stop_container),
                                           ("remove", cri.remove_container),
                                           ("stop pod", cri.stop_pod),
                                           ("remove pod", cri.remove_pod)):
                            call(cid if step in ("stop", "remove") else pod)
                            t2 = time.perf_counter()
                            # each call of the deletion alone (on stderr with every sample)
                            m.setdefault(f"deletion: {step}", []).append((t2 - t1) * 1000)
                            t1 = t2
                        cri.pods.pop(pod, None)
                        m.setdefault("deletion", []).append((time.perf_counter() - t) * 1000)
                        if overlap:
                            # the next pod as soon as the grow pass has begun (the last of
                            # the round: once every shared container is back)
                            moved = [i for i, s in enumerate(shared_cpus()) if not s & gcpus]
                            if k == args.pods - 1 or not moved:
                                wait_until(lambda g=gcpus: all(g <= s for s in shared_cpus()),
                                           poll_timeout + GROW_DELAY_S)
                            else:
                                st = wait_until(
                                    lambda g=gcpus, mv=moved: any(
                                        g <= parse_cpus((shared_dirs[i] / "cpuset.cpus")
                                                        .read_text()) for i in mv),
                                    poll_timeout + GROW_DELAY_S)
                                m.setdefault("grow begun", []).append(
                                    float("nan") if st is None else st)
                            m.setdefault("runc updates", []).append(float(count(counter) - u0))
                            continue
                        if mode != "none":
                            t_del = time.perf_counter()
                            if effective.get(mode) == "reply":
                                # the growth rides on the first reply after the grow delay:
                                # the node's next container operation, here right after it
                                time.sleep(GROW_DELAY_S)
                                cri.update_container_resources(shared_ids[0], None, None,
                                                               "BestEffort")
                            back = wait_until(lambda g=gcpus: all(g <= s for s in shared_cpus()),
                                              poll_timeout + GROW_DELAY_S)
                            if back is not None:  # ms from the end of the deletion
                                back = (time.perf_counter() - t_del) * 1000
                            m.setdefault("back", []).append(float("nan") if back is None else back)
                        time.sleep(args.settle)  # (the same before the next pod's creation)
                        m.setdefault("runc updates", []).append(float(count(counter) - u0))
                    if plugin is not None:
                        if not plugin.running:
                            raise RuntimeError("plugin exited:\n" + plugin.log_text()[-2000:])
                        plugin.stop()
                        plugin = None
            problems = cri.cleanup()
            if problems:
                print(f"  cleanup problems: {problems}", file=sys.stderr)
    finally:
        if plugin is not None:
            plugin.stop()
        if api is not None:
            api.close()
        problems = c.stop()
        if problems:
            print(f"  {what} cleanup: {problems}", file=sys.stderr)
        if args.keep_logs is not None:  # the plugin's and the runtime's logs, for a second look
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for f in (plugin_log, c.log_path):
                if f.exists():
                    shutil.copy(f, args.keep_logs / f"{version}-{n_shared}-{f.name}")
        if not c.shim_processes():
            shutil.rmtree(workdir, ignore_errors=True)
        cg.remove_empty_kubepods()
    rows: list[list[str]] = []
    for mode, got in res.items():  # every sample, in order, for a second look at the spread
        for metric, vals in got.items():
            print(f"  {what} N={n_shared} {mode} {metric}: "
                  + " ".join(f"{v:.0f}" for v in vals), file=sys.stderr)
    for metric in ("RunPodSandbox", "create+start", "deletion", "off", "back", "pass begun",
                   "grow begun", "runc updates"):
        a = res["none"].get(metric)
        for label, _, _ in variants:
            b = res[label].get(metric)
            if not b:
                continue
            fa = f"{statistics.median(a):.1f} ({percentile(a, 0.9):.1f})" if a else "-"
            fb = f"{statistics.median(b):.1f} ({percentile(b, 0.9):.1f})"
            ratio = (f"{statistics.median(b) / statistics.median(a):.2f}"
                     if a and statistics.median(a) > 0 else "-")
            unit = "" if metric == "runc updates" else " ms"
            got = effective.get(label, label)
            name = label if got == label else f"{label} ({got})"
            rows.append([version, str(n_shared), name, metric + unit, fa, fb, ratio,
                         str(len(b))])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="append", choices=["1.7", "2.1", "2.4", "crio"],
                    help="containerd (repeatable; default 1.7 and 2.1; 2.4: the modern build's "
                         "2.4.2 with runc 1.5.3, scripts/modern/build.sh containerd runc), or "
                         "crio: CRI-O (scripts/modern/build.sh crio; never with --mode async: "
                         "CRI-O has the NRI lock-order inversion, async hangs it)")
    ap.add_argument("--shared", action="append", type=int,
                    help="shared (BestEffort) containers running (repeatable; default 40, 100)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations no plugin / plugin")
    ap.add_argument("--pods", type=int, default=3, help="Guaranteed pods per round and mode")
    ap.add_argument("--plugin-src", type=Path,
                    help="run nri_cpumgr from this source tree (e.g. `git archive REV nri_cpumgr "
                         "| tar -x -C DIR`) instead of this checkout, to compare revisions")
    ap.add_argument("--compare-src", action="append", type=Path, metavar="DIR",
                    help="one more plugin run per round from this source tree (as "
                         "--plugin-src), with the last --mode: two revisions alternated in "
                         "one run (repeatable)")
    ap.add_argument("--mode", action="append", choices=["async", "cri", "reply", "auto"],
                    help="sharedPoolUpdateMode of the plugin's runs (repeatable: one plugin "
                         "run per mode and round; default: the shipped one)")
    ap.add_argument("--quick", action="store_true", help="40 shared, 2 rounds of 2 pods")
    ap.add_argument("--keep-logs", type=Path, metavar="DIR",
                    help="copy the plugin's and containerd's logs of each daemon into DIR")
    ap.add_argument("--overlap", action="store_true",
                    help="a busy node's timing: each deletion starts as soon as the shrink "
                         "pass has moved its first shared container, each next pod as soon "
                         "as the grow pass has (both meet a pass under way; off and back "
                         "are not measured; not in reply mode, which has no pass)")
    ap.add_argument("--settle", type=float, default=0.5, metavar="S",
                    help="seconds every mode waits before a deletion (after the start, or "
                         "after off) and before the next creation (after the deletion, or "
                         "after back), so that each measured call meets a settled node "
                         "(default 0.5; not with --overlap, which is about a pass under way)")
    ap.add_argument("--pod-spec-source", action="store_true",
                    help="the plugin with podSpecSource apiServer (a loopback fake API server)")
    args = ap.parse_args(argv)
    versions = args.version or ["1.7", "2.1"]
    if args.quick:
        args.shared = args.shared or [40]
        args.rounds, args.pods = 2, 2
    shared = args.shared or [40, 100]
    if runtimes_missing(versions):
        return 2
    if "crio" in versions and "async" in (args.mode or []):
        print("--mode async is refused with --version crio: CRI-O has the NRI lock-order "
              "inversion (no release has the fix) and async hangs it (tests/e2e/stress.py)",
              file=sys.stderr)
        return 2
    rows: list[list[str]] = []
    for v in versions:
        for n in shared:
            rows += run_daemon(v, n, args)
    print(f"\nBusy node: Guaranteed 1-CPU pod among N running BestEffort containers, "
          f"{args.rounds} alternating rounds x {args.pods} pods; median (p90)\n")
    print_table(["runtime", "N shared", "sharedPoolUpdateMode", "metric", "no plugin",
                 "nri-cpumgr", "ratio", "n"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
