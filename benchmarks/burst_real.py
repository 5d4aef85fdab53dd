#!/usr/bin/env python3
"""A burst of Guaranteed pods on a real containerd (issue 9 item 4, part (b)).

For each containerd version: a private daemon logging at trace level, nri-cpumgr on the
``dual-socket-smt`` sysfs fixture (16 CPUs, CPU 0 reserved), ``--shared`` BestEffort
containers, then ``--burst`` Guaranteed 1-CPU pods created back to back; counted per shared
container: the updates containerd applied from the start of the burst (its own trace line
``NRI update of ... container <id> successful``, whatever carried the update), and the seconds
from the end of the burst until no shared container's cpuset holds an exclusive CPU. The host
has 2 CPUs, so the containers are created, not started (see
tests/e2e/test_shared_pool_burst.py, which runs the same code and asserts the count).

Prints a markdown table; asserts nothing. Needs root and scripts/fetch-runtime.sh's binaries.

    .venv/bin/python benchmarks/burst_real.py [--version 1.7 --version 2.1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.report import print_table, runtimes_missing  # noqa: E402
from tests.e2e.harness import Containerd  # noqa: E402
from tests.e2e.harness import cgroups as cg  # noqa: E402
from tests.e2e.test_shared_pool_burst import burst_update_counts  # noqa: E402


def run(version: str, args: argparse.Namespace) -> list[str]:
    counts: list[int] = []
    offs: list[float] = []
    took: list[float] = []
    for r in range(args.rounds):
        wd = Path(tempfile.mkdtemp(prefix=f"burst{version}-", dir="/tmp"))
        c = Containerd(version, wd, log_level="trace")
        try:
            c.start()
            (wd / "plugin").mkdir()
            cri = c.cri_client()
            try:
                got, t, off = burst_update_counts(c, cri, wd / "plugin", shared=args.shared,
                                                  burst=args.burst,
                                                  shrink_delay=args.shrink_delay)
            finally:
                cri.cleanup()
                cri.close()
            counts += got
            offs.append(off)
            took.append(t)
            print(f"  containerd {version} round {r}: burst took {t:.2f} s, updates per shared "
                  f"container {got}, all off {off:.2f} s after it", file=sys.stderr, flush=True)
        finally:
            c.stop()
            if not c.shim_processes():
                shutil.rmtree(wd, ignore_errors=True)
            cg.remove_empty_kubepods()
    return [version, str(args.shared), str(args.burst), f"{statistics.median(took):.2f}",
            f"{statistics.median(counts):.0f}",
            str(min(counts)), str(max(counts)), f"{statistics.median(offs):.2f}",
            str(len(offs))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="append", choices=["1.7", "2.1"])
    ap.add_argument("--shared", type=int, default=20, help="shared (BestEffort) containers")
    ap.add_argument("--burst", type=int, default=10, help="Guaranteed pods in the burst")
    ap.add_argument("--rounds", type=int, default=3, help="fresh daemon per round")
    ap.add_argument("--shrink-delay", type=float, default=1.0,
                    help="sharedPoolShrinkDelay, seconds (default: the plugin's default, 1)")
    args = ap.parse_args(argv)
    versions = args.version or ["1.7", "2.1"]
    if runtimes_missing(versions):
        return 2
    rows = [run(v, args) for v in versions]
    print(f"\nBurst of {args.burst} Guaranteed 1-CPU pods among {args.shared} shared containers "
          f"(created, not started), sharedPoolShrinkDelay {args.shrink_delay:g}s, {args.rounds} "
          f"rounds\n")
    print_table(["containerd", "shared", "burst", "burst took, s (median)",
                 "updates per shared container (median)", "min", "max",
                 "s from its end until all off (median)", "rounds"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
