#!/usr/bin/env python3
"""`make demo`: a local containerd 1.7 with NRI, nri-cpumgr (static policy, CPU 0 reserved),
and the Kubernetes docs' static-policy example pods, created through CRI the way the kubelet
creates them. Prints what each container really runs on (/proc/<pid>/status), then cleans up.

Needs root, cgroup v1 or v2 with the cpuset controller, and the binaries from
scripts/fetch-runtime.sh. The pods live under the harness's own cgroup parent
(``/nri-cpumgr-test/run-<pid>/kubepods``), all of which is removed afterwards in every
hierarchy; on a
machine that looks like a live node (a kubelet runs, or the node's /kubepods holds processes)
it refuses to run unless NRI_E2E_ALLOW_LIVE_NODE=1.

Before the pods are removed it also shows ``nri-cpumgr status`` for the demo's plugin (its
checkpoint: shared pool and a row per container). Ctrl-C (or SIGTERM) stops it cleanly: the
pods, containerd, the plugin, the cgroups and the work directory are removed all the same
(exit status 130).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc  # noqa: E402

from tests.e2e.harness import VERSIONS, Containerd, cgroups, e2e_missing  # noqa: E402
from tests.e2e.harness.docs_pods import DOCS_PODS  # noqa: E402
from tests.e2e.plugin_run import eventually, start_plugin  # noqa: E402

PODS = DOCS_PODS  # name, QoS, requests, limits (the docs' examples)


def _status(work: Path, expect_rows: int) -> str:
    """``nri-cpumgr status --config <work>/config.yaml`` once the checkpoint (written at most
    every 200 ms) holds ``expect_rows`` containers; its output, indented."""
    cmd = [sys.executable, "-m", "nri_cpumgr", "status", "--config", str(work / "config.yaml")]
    deadline = time.monotonic() + 5
    while True:
        r = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
        rows = len(json.loads(r.stdout).get("containers", [])) if r.returncode == 0 else -1
        if rows >= expect_rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    r = subprocess.run(cmd, capture_output=True, text=True)
    shown = "$ nri-cpumgr status --config " + str(work / "config.yaml")
    lines = [shown] + (r.stdout + r.stderr).splitlines()
    return "\n".join(("  " + line).rstrip() for line in lines)


def _explain(work: Path, pod: str) -> str:
    """``nri-cpumgr explain POD --config <work>/config.yaml``, its output indented."""
    shown = ["nri-cpumgr", "explain", pod, "--config", str(work / "config.yaml")]
    r = subprocess.run([sys.executable, "-m", "nri_cpumgr", *shown[1:]], capture_output=True,
                       text=True)
    lines = ["$ " + " ".join(shown)] + (r.stdout + r.stderr).splitlines()
    return "\n".join(("  " + line).rstrip() for line in lines)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--containerd", default="1.7", choices=list(VERSIONS),
                    help="1.7/2.1: Debian's; 2.4: scripts/modern/build.sh's")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (containerd and plugin logs, config, the "
                         "plugin's state; the pods are removed all the same)")
    args = ap.parse_args()
    missing = e2e_missing(args.containerd)
    if missing:
        print("demo cannot run here: " + "; ".join(missing), file=sys.stderr)
        return 1
    # Ctrl-C raises KeyboardInterrupt even when started with SIGINT ignored (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    work = Path(tempfile.mkdtemp(prefix="nri-demo-", dir="/tmp"))
    ctrd = Containerd(args.containerd, work / "ctrd")
    plugin = None
    status = 0
    try:
        print(f"starting containerd {args.containerd} with NRI in {work} ...", flush=True)
        ctrd.start()
        plugin = start_plugin(ctrd, work, explainDecisions=True)
        print(f"nri-cpumgr registered (static policy, reservedSystemCPUs \"0\"); host CPUs "
              f"{cgroups.host_online_cpus()}", flush=True)
        _show(ctrd, plugin, work)
    except KeyboardInterrupt:
        print("\ninterrupted: removing the demo's pods, containerd, the plugin and their "
              "cgroups ...", file=sys.stderr, flush=True)
        status = 130
    finally:
        # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        problems = ctrd.stop()  # removes every pod through CRI first
        if status:
            # the shim of a pod whose creation Ctrl-C cut short is not known to CRI yet: the
            # harness kills it, which is the cleanup working, not a problem
            problems = [p for p in problems if not p.startswith("killed leftover shim")]
        if plugin is not None:
            plugin.stop()
        if problems:
            print("cleanup:", problems, file=sys.stderr)
        left = cgroups.remove_empty_kubepods()
        if left:
            print("cgroups still in use:", ", ".join(map(str, left)), file=sys.stderr)
        if args.keep:
            print(f"kept {work} (plugin.log, ctrd/containerd.log, config.yaml, state/)")
        else:
            shutil.rmtree(work, ignore_errors=True)
        if status:
            print("cleaned up" if not (problems or left) else "cleanup incomplete (see above)",
                  file=sys.stderr)
    return status


def _show(ctrd: Containerd, plugin, work: Path) -> None:
    """Create the docs' pods through CRI and print the table, the decisions and the status."""
    rows: list[tuple[str, ...]] = []
    cri = ctrd.cri_client()
    cids = {}
    for name, qos, req, lim in PODS:
        pod = cri.run_pod(name, qos)
        try:
            cid = cri.create_container(pod, "app", requests=req, limits=lim)
        except grpc.RpcError as e:
            detail = e.details().rsplit("desc = ", 1)[-1]
            rows.append((name, "app", qos, "refused", detail))
            continue
        cri.start_container(cid)
        cids[name] = (cid, qos)
    # shared containers are moved by the same reply; give the cgroup writes a moment
    for cid, _ in cids.values():
        eventually(lambda c=cid: cri.proc_cpus(c) != "", True, 2)
    for name, (cid, qos) in cids.items():
        rows.append((name, "app", qos, cri.proc_cpus(cid),
                     f"spec={cri.spec_cpus(cid) or '-'} cgroup={cri.cgroup_cpus(cid)}"))
    order = [p[0] for p in PODS]
    rows.sort(key=lambda r: order.index(r[0]))
    hdr = ("POD", "CONTAINER", "QOS", "CPUS (/proc)", "DETAIL")
    widths = [max(len(r[i]) for r in rows + [hdr]) for i in range(len(hdr))]
    print()
    for r in [hdr] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print()
    print("plugin log (decisions):")
    for line in plugin.log_text().splitlines():
        if " create pod=" in line or "refused" in line:
            print("  " + line.split(": ", 1)[-1])
    print()
    print("the plugin's checkpoint, as `nri-cpumgr status` shows it on a node:")
    print(_status(work, len(cids)), flush=True)
    print()  # recorded with the checkpoint (explainDecisions: true in the demo's config)
    print("why guaranteed-1cpu got its CPU, as `nri-cpumgr explain` shows it:")
    print(_explain(work, "e2e/guaranteed-1cpu"), flush=True)
    cri.cleanup()
    cri.close()


if __name__ == "__main__":
    raise SystemExit(main())
