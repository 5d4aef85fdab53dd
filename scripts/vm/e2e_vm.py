"""`make e2e-vm`: the full guest matrix. One QEMU boot per topology (tests/vm/topologies),
inside it every applicable scenario on each containerd version with the cgroupfs and the
systemd driver, all on cgroup v2. Prints, per topology and scenario, PASS/FAIL and the cpusets
seen (cgroup v2 ``cpuset.cpus.effective``, ``/m<mems>`` where mems were set). Exit status 1
when anything failed or nothing ran (tests/unit/test_vm_e2e_summary.py).

Then the real kubelet v1.37.2 on the fast topology (tests/vm/test_guest_kubelet.py: the
kubelet, containerd and nri-cpumgr in the guest, kube-apiserver + etcd on the host), once per
``--kubelet-containerd`` version (default 2.1,2.4, in one boot; "" skips it), judged by
``checks.check_kubelet`` against the kubelet oracle's answers for the same pods
(tests/vm/kubelet_oracle.py; the oracle is built when missing); it needs ``make modern`` (a
missing binary is a FAIL).

    python scripts/vm/e2e_vm.py [--topology NAME ...] [--containerd 2.1,1.7]
                                [--drivers cgroupfs,systemd] [--scenario NAME ...] [--keep DIR]
                                [--kubelet-containerd 2.1,2.4] [--kubelet-only]

``NRI_VM_TIMEOUT=SECONDS`` raises each boot's timeout (default 300 s + 150 s per scenario run;
the kubelet guest 600 s + 900 s per containerd version).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.vm import checks, kubelet_oracle, reconfigure_checks, runner, topology  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topology", action="append", help="topology name (default: all)")
    ap.add_argument("--containerd", default="2.1,1.7")
    ap.add_argument("--drivers", default="cgroupfs,systemd")
    ap.add_argument("--scenario", action="append", help=f"one of {checks.SCENARIOS}")
    ap.add_argument("--keep", type=Path, help="copy each guest's logs to DIR/<topology>")
    ap.add_argument("--kubelet-containerd", default="2.1,2.4",
                    help="containerd versions for the real-kubelet guest, one boot ("
                         "\"\": none); NRI_VM_KUBELET_PHASES=a,b runs only those phases")
    ap.add_argument("--kubelet-only", action="store_true", help="only the kubelet guest")
    a = ap.parse_args(argv)
    why = runner.missing()
    if why:
        print("e2e-vm cannot run here: " + "; ".join(why), file=sys.stderr)
        return 2
    tops = ([topology.load(n) for n in a.topology] if a.topology
            else topology.all_topologies())
    if a.kubelet_only:
        tops = []
    versions = [v for v in a.containerd.split(",") if v]
    drivers = [d for d in a.drivers.split(",") if d]
    failed = 0
    rows: list[tuple[str, ...]] = []
    t_all = time.monotonic()
    for t in tops:
        scen = [s for s in (a.scenario or checks.SCENARIOS) if checks.applicable(t, s)]
        timeout = max(300 + reconfigure_checks.seconds(scen, len(versions), drivers),
                      _min_timeout())
        print(f"== {t.name}: {t.description}; {len(scen)} scenarios x containerd {versions} "
              f"x {drivers} (timeout {timeout} s)", flush=True)
        try:
            run = runner.run_guest(t, containerd=versions, drivers=drivers,
                                   scenarios=reconfigure_checks.job_names(scen, drivers),
                                   timeout=timeout, keep=a.keep / t.name if a.keep else None)
        except runner.GuestError as e:
            print(f"   FAIL {t.name}: {e}", flush=True)
            failed += 1
            rows.append((t.name, "guest"))
            continue
        print(f"   guest ran {run.seconds} s", flush=True)
        got = {(r["containerd"], r["driver"], r["scenario"]): r for r in run.results["results"]}
        for v in versions:
            for d in drivers:
                for s in scen:
                    if not reconfigure_checks.runs(s, d):
                        continue
                    r = got.get((v, d, s))
                    bad = ["no result (guest timed out?)"] if r is None else checks.check(t, r)
                    failed += bool(bad)
                    status = "PASS" if not bad else "FAIL"
                    rows.append((t.name, v, d, s, status))
                    print(f"   {status} {t.name} containerd {v} {d:8} {s:34} "
                          f"{r.get('seconds', '?') if r else '?'} s", flush=True)
                    if r is not None:
                        print(f"        {checks.summary(r)}", flush=True)
                    for b in bad:
                        print(f"        ! {b}", flush=True)
    kv = [v for v in a.kubelet_containerd.split(",") if v]
    if kv:
        n, bad = kubelet(kv, a.keep)
        rows += [("kubelet",)] * n
        failed += bad
    if not rows:
        print("   FAIL nothing ran (no topology, no kubelet containerd)", flush=True)
        failed, rows = 1, [("none",)]
    print(f"== e2e-vm: {len(rows) - failed} passed, {failed} failed in "
          f"{time.monotonic() - t_all:.0f} s")
    return 1 if failed else 0


def _min_timeout() -> int:
    """``NRI_VM_TIMEOUT`` (seconds) raises every boot's timeout (a loaded machine: TCG
    guests run several times slower at a load average of 30 on 2 CPUs); 0 when unset."""
    import os

    return int(os.environ.get("NRI_VM_TIMEOUT") or 0)


def kubelet_phases() -> list[str]:
    """The phases run: ``NRI_VM_KUBELET_PHASES`` (comma-separated), else all."""
    import os

    only = [p for p in os.environ.get("NRI_VM_KUBELET_PHASES", "").split(",") if p]
    return [p for p in checks.KUBELET_PHASES if not only or p in only]


def kubelet(versions: list[str], keep: Path | None) -> tuple[int, int]:
    """The real-kubelet guest on the fast topology; (results, failures), printed."""
    from tests.vm.test_guest_kubelet import missing, run_kubelet_guest

    t = next(x for x in topology.all_topologies() if x.fast)
    print(f"== kubelet v1.37.2 on {t.name}: containerd {versions}, "
          f"{len(kubelet_phases())} phases each", flush=True)
    dirs, why = missing(versions)
    if why:
        print(f"   FAIL kubelet: cannot run: {'; '.join(why)} (make modern)", flush=True)
        return 1, 1
    try:
        run, times = run_kubelet_guest(t, versions, dirs, keep=keep / "kubelet" if keep
                                       else None,
                                       timeout=max(600 + 900 * len(versions), _min_timeout()))
    except runner.GuestError as e:
        print(f"   FAIL kubelet guest: {e}", flush=True)
        return 1, 1
    print(f"   control plane {times['controlplane_start_seconds']} s, guest ran "
          f"{run.seconds} s", flush=True)
    res = run.results
    try:
        answers = kubelet_oracle.expect_all(t, res.get("kubelet_results", []))
    except Exception as e:  # noqa: BLE001 - every phase then fails with the reason
        print(f"   FAIL the kubelet oracle: {type(e).__name__}: {e}", flush=True)
        return 1, 1
    n = failed = 0
    for v in versions:
        node = res.get("kubelet_node", {}).get(v)
        for phase in kubelet_phases():
            r = next((x for x in res.get("kubelet_results", [])
                      if x["scenario"] == phase and x["containerd"] == v), None)
            if node is None:
                err = next((x.get("error", "") for x in res.get("kubelet_results", [])
                            if x["scenario"] == "node" and x["containerd"] == v), "")
                bad = [f"the node did not start: {err.splitlines()[0] if err else '?'}"]
            elif r is None:
                bad = ["no result (guest timed out?)"]
            else:
                bad = checks.check_kubelet(t, r, answers.get((v, phase)))
                if (v, phase) not in answers and not r.get("error"):
                    bad.append("no kubelet oracle answer (no events recorded)")
            n += 1
            failed += bool(bad)
            print(f"   {'PASS' if not bad else 'FAIL'} kubelet containerd {v} {phase:21} "
                  f"{r.get('seconds', '?') if r else '?'} s", flush=True)
            if r is not None:
                print(f"        {checks.kubelet_summary(r)}", flush=True)
            for b in bad:
                print(f"        ! {b}", flush=True)
    return n, failed


if __name__ == "__main__":
    raise SystemExit(main())
