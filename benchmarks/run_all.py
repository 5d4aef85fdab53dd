#!/usr/bin/env python3
"""`make bench`: every benchmark, one after the other, figures on stdout.

1. take_bench.py   - one topology-aware CPU take on a 2-socket, 8-NUMA, 24-L3, 384-CPU machine
2. merge_bench.py  - Topology Manager hint merge (8 NUMA x 4 providers x 255 hints; GB200-like)
3. cri_create.py   - CRI CreateContainer on a real containerd, without and with nri-cpumgr
                     (static policy, CPU 0 reserved): the plugin's cost on the critical path
4. busy_node.py    - a Guaranteed pod among 40 running shared containers (--quick): Create+Start,
                     deletion, time until the shared pool moves off/back, runc updates per pod
5. fake_runtime.py - Synchronize/CreateContainer/StopContainer on the fake runtime at 1,000 shared
                     containers, 256 CPUs, beside the minimal Go plugin (--quick), then with the
                     chart's pod spec watch (--quick --pod-spec)
6. burst_real.py   - a burst of 10 Guaranteed pods on a real containerd (fixture topology):
                     updates per shared container (--rounds 1)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(args: list[str]) -> None:
    print(f"\n$ {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, *args], check=True, cwd=HERE.parent)


def main() -> int:
    run([str(HERE / "take_bench.py")])
    run([str(HERE / "merge_bench.py")])
    run([str(HERE / "footprint.py")])  # start-up time and VmRSS, beside a minimal Go plugin
    with tempfile.TemporaryDirectory(prefix="bench-cfg-", dir="/tmp") as tmp:
        run_cri_create(Path(tmp) / "config.yaml")
    run([str(HERE / "busy_node.py"), "--quick"])
    run([str(HERE / "fake_runtime.py"), "--quick"])
    run([str(HERE / "fake_runtime.py"), "--quick", "--pod-spec"])  # (the chart's default)
    run([str(HERE / "burst_real.py"), "--rounds", "1"])
    return 0


def run_cri_create(cfg: Path) -> None:
    """cri_create.py without and with nri-cpumgr, its config written to ``cfg``."""
    cfg.write_text('cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n')
    plugin = (
        "{python} -m nri_cpumgr run --config " + str(cfg)
        + " --socket {nri_socket} --state-dir {workdir}/nri-cpumgr-state"
    )
    for qos, cpu in (("Guaranteed", "1"), ("BestEffort", "0")):
        base = [str(HERE / "cri_create.py"), "--version", "1.7", "--version", "2.1",
                "-n", "50", "--qos", qos]
        if cpu != "0":
            base += ["--cpu", cpu]
        run(base)
        run(base + ["--plugin-cmd", plugin, "--plugin-name", "cpumgr", "--plugin-index", "90"])


if __name__ == "__main__":
    raise SystemExit(main())
