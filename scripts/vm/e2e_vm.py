"""`make e2e-vm`: the full guest matrix. One QEMU boot per topology (tests/vm/topologies),
inside it every applicable scenario on each containerd version with the cgroupfs and the
systemd driver, all on cgroup v2. Prints, per topology and scenario, PASS/FAIL and the cpusets
seen (cgroup v2 ``cpuset.cpus.effective``, ``/m<mems>`` where mems were set). Exit status 1
when anything failed.

    python scripts/vm/e2e_vm.py [--topology NAME ...] [--containerd 2.1,1.7]
                                [--drivers cgroupfs,systemd] [--scenario NAME ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.vm import checks, runner, topology  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topology", action="append", help="topology name (default: all)")
    ap.add_argument("--containerd", default="2.1,1.7")
    ap.add_argument("--drivers", default="cgroupfs,systemd")
    ap.add_argument("--scenario", action="append", help=f"one of {checks.SCENARIOS}")
    ap.add_argument("--keep", type=Path, help="copy each guest's logs to DIR/<topology>")
    a = ap.parse_args(argv)
    why = runner.missing()
    if why:
        print("e2e-vm cannot run here: " + "; ".join(why), file=sys.stderr)
        return 2
    tops = ([topology.load(n) for n in a.topology] if a.topology
            else topology.all_topologies())
    versions = [v for v in a.containerd.split(",") if v]
    drivers = [d for d in a.drivers.split(",") if d]
    failed = 0
    rows: list[tuple[str, ...]] = []
    t_all = time.monotonic()
    for t in tops:
        scen = [s for s in (a.scenario or checks.SCENARIOS) if checks.applicable(t, s)]
        timeout = 300 + 150 * len(scen) * len(versions) * len(drivers)
        print(f"== {t.name}: {t.description}; {len(scen)} scenarios x containerd {versions} "
              f"x {drivers} (timeout {timeout} s)", flush=True)
        try:
            run = runner.run_guest(t, containerd=versions, drivers=drivers, scenarios=scen,
                                   timeout=timeout, keep=a.keep / t.name if a.keep else None)
        except runner.GuestError as e:
            print(f"   FAIL {t.name}: {e}", flush=True)
            failed += 1
            continue
        print(f"   guest ran {run.seconds} s", flush=True)
        got = {(r["containerd"], r["driver"], r["scenario"]): r for r in run.results["results"]}
        for v in versions:
            for d in drivers:
                for s in scen:
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
    print(f"== e2e-vm: {len(rows) - failed} passed, {failed} failed in "
          f"{time.monotonic() - t_all:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
