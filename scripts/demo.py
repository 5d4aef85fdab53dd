#!/usr/bin/env python3
"""`make demo`: a local containerd with NRI (1.7 unless ``--containerd``), nri-cpumgr (static
policy, CPU 0 reserved, the shipped ``sharedPoolUpdateMode: auto``) and the Kubernetes docs'
static-policy example pods, created through CRI the way the kubelet creates them. Prints what
each container really runs on (/proc/<pid>/status, the OCI spec, the cgroup) once every
container is where the plugin's checkpoint puts it (the shared ones are moved just after the
creation that shrinks the shared pool: up to 30 s, else it says which are not and exits 1),
then cleans up.

Needs root, cgroup v1 or v2 with the cpuset controller, and the binaries from
scripts/fetch-runtime.sh. The pods live under the harness's own cgroup parent
(``/nri-cpumgr-test/run-<pid>/kubepods``), all of which is removed afterwards in every
hierarchy; on a machine that looks like a live node (a kubelet runs in this mount namespace,
or the node's /kubepods holds processes) it refuses to run unless NRI_E2E_ALLOW_LIVE_NODE=1.

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

from nri_cpumgr.cpuset import CPUSet  # noqa: E402
from tests.e2e.harness import VERSIONS, Containerd, cgroups, e2e_missing  # noqa: E402
from tests.e2e.harness.docs_pods import DOCS_PODS  # noqa: E402
from tests.e2e.plugin_run import start_plugin  # noqa: E402

PODS = DOCS_PODS  # name, QoS, requests, limits (the docs' examples)


def _checkpoint(work: Path) -> dict | None:
    """The plugin's checkpoint as ``nri-cpumgr status --json`` prints it: ``{}`` while there
    is none (it is written at most every 200 ms), None when it cannot be read."""
    cmd = [sys.executable, "-m", "nri_cpumgr", "status", "--config", str(work / "config.yaml"),
           "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


def _status(work: Path) -> str:
    """``nri-cpumgr status --config <work>/config.yaml``, its output indented."""
    cmd = [sys.executable, "-m", "nri_cpumgr", "status", "--config", str(work / "config.yaml")]
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
        status = _show(ctrd, plugin, work)
    except KeyboardInterrupt:
        print("\ninterrupted: removing the demo's pods, containerd, the plugin and their "
              "cgroups ...", file=sys.stderr, flush=True)
        status = 130
    finally:
        # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        problems = ctrd.stop()  # removes every pod through CRI first
        if status == 130:
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
        if status == 130:
            print("cleaned up" if not (problems or left) else "cleanup incomplete (see above)",
                  file=sys.stderr)
    return status


SETTLE_TIMEOUT = 30.0  # seconds the containers get to reach the CPUs the plugin gave them


def _same(a: str, b: str) -> bool:
    """Two cpusets in list format ("0-1", "0,1") are the same set."""
    try:
        return CPUSet.parse(a) == CPUSet.parse(b)
    except ValueError:
        return False


def _settle(cri, work: Path, cids: dict[str, tuple[str, str]],
            timeout: float = SETTLE_TIMEOUT) -> tuple[dict[str, tuple[str, str, str]],
                                                      str, list[str], float]:
    """Wait until every started container runs where the plugin's checkpoint puts it: a
    shared container (not exclusive in the checkpoint) on the checkpoint's shared pool, an
    exclusive one on its own CPUs, in its ``/proc/<pid>/status``, its OCI spec and its cgroup
    alike. Needed because the shipped ``sharedPoolUpdateMode: auto`` moves the shared
    containers after the creation that shrank the pool, from the plugin's worker thread
    (``cri`` on containerd 1.7-2.3: a CRI UpdateContainerResources each; ``async`` on 2.4:
    an NRI UpdateContainers), tens of milliseconds to seconds later.

    ``cids``: pod name -> (container id, QoS). Returns ``(seen, pool, wrong, seconds)``:
    what was read last per pod name (``/proc``, spec, cgroup; spec "-" when unset), the
    checkpoint's shared pool, a line per container not there when ``timeout`` (seconds) ran
    out ([] when all are) and the seconds waited."""
    t0 = time.monotonic()
    while True:
        body = _checkpoint(work) or {}
        pool = body.get("defaultCpuSet") or ""
        rows = {r["pod"].split("/", 1)[-1]: r for r in body.get("containers", [])
                if r.get("container") == "app" and not r.get("stopped")}
        seen: dict[str, tuple[str, str, str]] = {}
        wrong: list[str] = []
        for name, (cid, _) in cids.items():
            try:
                seen[name] = (cri.proc_cpus(cid), cri.spec_cpus(cid) or "-",
                              cri.cgroup_cpus(cid))
            except (OSError, KeyError, RuntimeError) as e:  # not running (yet)
                seen[name] = ("?", "?", "?")
                wrong.append(f"{name}: {e}")
                continue
            row = rows.get(name)
            if row is None:
                wrong.append(f"{name}: not in the plugin's checkpoint")
                continue
            want = row["cpus"] if row["exclusive"] else pool
            if not all(_same(v, want) for v in seen[name]):
                proc, spec, cgroup = seen[name]
                kind = "exclusive CPUs" if row["exclusive"] else "the shared pool"
                wrong.append(f"{name}: /proc {proc}, spec {spec}, cgroup {cgroup}; "
                             f"{kind} in the checkpoint: {want or '-'}")
        waited = time.monotonic() - t0
        if not wrong or waited > timeout:
            return seen, pool, wrong, waited
        time.sleep(0.1)


def _show(ctrd: Containerd, plugin, work: Path) -> int:
    """Create the docs' pods through CRI and print the table, the decisions and the status;
    1 when the containers did not reach the plugin's CPUs in time (printed all the same)."""
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
    # The shared containers are moved after guaranteed-1cpu's creation took CPU 1 from the
    # shared pool, by the plugin's worker (sharedPoolUpdateMode auto: cri or async), not in
    # that creation's reply: wait until /proc, the spec and the cgroup show it.
    seen, pool, wrong, waited = _settle(cri, work, cids)
    if wrong:
        print(f"\nafter {SETTLE_TIMEOUT:.0f} s these containers still do not run where the "
              f"plugin's checkpoint puts them (shared pool {pool or '-'}); the table shows "
              "them as they are (--keep keeps plugin.log and ctrd/containerd.log):",
              file=sys.stderr, flush=True)
        for line in wrong:
            print("  " + line, file=sys.stderr, flush=True)
    else:
        print(f"\nevery container runs where the plugin's checkpoint puts it after "
              f"{waited:.1f} s (the shared ones on the shared pool, {pool or '-'}: "
              "sharedPoolUpdateMode auto moves them just after the creation that shrank it)",
              flush=True)
    for name, (_cid, qos) in cids.items():
        proc, spec, cgroup = seen[name]
        rows.append((name, "app", qos, proc, f"spec={spec} cgroup={cgroup}"))
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
        if " create pod=" in line or "refused" in line or "shared pool update mode" in line:
            print("  " + line.split(": ", 1)[-1])
    print()
    print("the plugin's checkpoint, as `nri-cpumgr status` shows it on a node:")
    print(_status(work), flush=True)
    print()  # recorded with the checkpoint (explainDecisions: true in the demo's config)
    print("why guaranteed-1cpu got its CPU, as `nri-cpumgr explain` shows it:")
    print(_explain(work, "e2e/guaranteed-1cpu"), flush=True)
    cri.cleanup()
    cri.close()
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
