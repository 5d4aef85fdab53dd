"""Benchmark of the topology-aware CPU take (nri_cpumgr.cm.cpumanager.cpu_assignment).

Machine: 2 sockets, 8 NUMA nodes (4 per socket), 24 L3 caches (3 per NUMA node), 192 cores,
SMT 2 = 384 CPUs (CPU c and c+192 are the two threads of core c).

For each strategy, times one take with the free pool whole and with a pool fragmented by a
churn of 500 random allocations/releases (fixed seed), and prints the median and p99 in ms.

Run: ``.venv/bin/python benchmarks/take_bench.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology
from nri_cpumgr.cm.cpumanager.errors import CPUManagerError
from nri_cpumgr.cm.cpumanager.policy_options import StaticPolicyOptions
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.topology import CPUInfo, CPUTopology

SOCKETS, NUMA_PER_SOCKET, L3_PER_NUMA, CORES_PER_L3, THREADS = 2, 4, 3, 8, 2


def build_topology() -> CPUTopology:
    """The 384-CPU benchmark machine."""
    cores = SOCKETS * NUMA_PER_SOCKET * L3_PER_NUMA * CORES_PER_L3
    details: dict[int, CPUInfo] = {}
    for core in range(cores):
        l3 = core // CORES_PER_L3
        numa = l3 // L3_PER_NUMA
        socket = numa // NUMA_PER_SOCKET
        for t in range(THREADS):
            details[core + t * cores] = CPUInfo(numa=numa, socket=socket, core=core, uncore=l3)
    return CPUTopology.from_details(details)


def churn(topo: CPUTopology, opts: StaticPolicyOptions, steps: int, seed: int) -> CPUSet:
    """Free pool after ``steps`` random allocations (1-16 CPUs) and releases (about half
    the machine stays allocated, scattered)."""
    rng = random.Random(seed)
    free = topo.cpus()
    held: list[CPUSet] = []
    for _ in range(steps):
        if held and (rng.random() < 0.5 or len(free) < len(topo.details) // 2):
            free = free | held.pop(rng.randrange(len(held)))
            continue
        try:
            got = take_by_topology(topo, free, rng.randint(1, 16), opts)
        except CPUManagerError:
            continue
        held.append(got)
        free = free - got
    return free


def time_take(fn: Callable[[], CPUSet], rounds: int) -> tuple[float, float]:
    samples: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))]
    return statistics.median(samples), p99


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    topo = build_topology()
    strategies = {
        "packed": StaticPolicyOptions(),
        "packed+uncore": StaticPolicyOptions(prefer_align_by_uncorecache=True),
        "spread": StaticPolicyOptions(distribute_cpus_across_cores=True),
        "numa-distributed": StaticPolicyOptions(
            distribute_cpus_across_numa=True, full_pcpus_only=True
        ),
    }
    take_by_topology(topo, topo.cpus(), 1)  # build the per-topology index outside the timing
    print(f"topology: {len(topo.details)} CPUs, 2 sockets, 8 NUMA nodes, 24 L3, SMT 2")
    print(f"{'strategy':<18}{'pool':<12}{'free':>5}{'request':>9}{'median ms':>11}{'p99 ms':>9}")
    worst = 0.0
    for label, opts in strategies.items():
        fragmented = churn(topo, opts, 500, args.seed)
        for pool_name, pool in (("whole", topo.cpus()), ("fragmented", fragmented)):
            for request in (4, 16, 64):
                if request > len(pool):
                    continue
                med, p99 = time_take(
                    lambda p=pool, r=request, o=opts: take_by_topology(topo, p, r, o),
                    args.rounds,
                )
                if pool_name == "fragmented":
                    worst = max(worst, p99)
                print(
                    f"{label:<18}{pool_name:<12}{len(pool):>5}{request:>9}{med:>11.3f}{p99:>9.3f}"
                )
    verdict = "OK" if worst < 1.0 else "ABOVE TARGET"
    print(f"worst fragmented p99: {worst:.3f} ms (target < 1 ms: {verdict})")


if __name__ == "__main__":
    main()
