"""Benchmark of the bounded Topology Manager hint merger.

Scenarios (each merge goes through Policy.merge, so filtering and mask conversion count):

* ``8numa-*``: 8 NUMA nodes, 4 providers x 255 hints (every non-empty mask).
  ``aligned``: every provider prefers single nodes (preferred path);
  ``misaligned``: provider i prefers masks of i+1 nodes, so no preferred merge exists and
  the non-preferred search runs over all 8 nodes; ``random``: random preferred flags;
  ``sized``: provider i lists only the masks of at least i+1 nodes (255, 247, 219, 163
  hints), preferred when exactly i+1; ``closest``: misaligned with
  prefer-closest-numa-nodes. The kubelet's fold would visit
  255**4 (about 4.2e9) permutations.
* ``gb200-*``: 34 NUMA nodes of which only 0 and 1 have CPUs (the others are GPU memory
  nodes), max-allowable-numa-nodes=34. CPU and GPU providers hint over {0, 1}, a memory
  provider returns 255 masks mixing CPU and GPU-memory nodes, a fourth provider does not
  care. ``aligned``: a single-node preferred merge exists; ``split``: the CPU request needs
  both nodes while memory prefers one, so the non-preferred search runs (pruned to 2 nodes).

Targets: < 10 ms per merge for the 8-node cases, < 50 ms for the 34-node case.
Run: ``.venv/bin/python benchmarks/merge_bench.py [--iterations N] [--verify]``;
prints median and p99
in ms; exits 1 if a median misses its target (or, with --verify, a result differs from the
literal permutation fold where that fold is small enough to run).
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable

from nri_cpumgr.cm.topologymanager import TopologyHint, TopologyManager
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    filter_providers_hints,
    reference_merge,
)
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo
from nri_cpumgr.cm.topologymanager.options import PolicyOptions
from nri_cpumgr.cm.topologymanager.policy import BestEffortPolicy, Policy

H = TopologyHint


def all_masks(nodes: list[int]) -> list[frozenset[int]]:
    return [
        frozenset(c) for r in range(1, len(nodes) + 1) for c in itertools.combinations(nodes, r)
    ]


def eight_node_distances() -> dict[int, tuple[int, ...]]:
    # two sockets of four nodes: 10 local, 11 same socket, 20 remote
    return {
        a: tuple(10 if a == b else 11 if a // 4 == b // 4 else 20 for b in range(8))
        for a in range(8)
    }


def scenario_8numa(kind: str) -> tuple[Policy, list[ProviderHints]]:
    nodes = list(range(8))
    masks = all_masks(nodes)
    rnd = random.Random(42)
    providers: list[ProviderHints] = []
    for i in range(4):
        if kind == "aligned":
            hs = [H(m, len(m) == 1) for m in masks]
        elif kind == "sized":  # like real providers: only masks big enough for the request
            hs = [H(m, len(m) == i + 1) for m in masks if len(m) > i]
        elif kind == "random":
            hs = [H(m, rnd.random() < 0.2) for m in masks]
        else:  # misaligned / closest
            hs = [H(m, len(m) == i + 1) for m in masks]
        rnd.shuffle(hs)
        providers.append({f"resource-{i}": hs})
    opts = PolicyOptions(prefer_closest_numa=(kind == "closest"))
    return BestEffortPolicy(NUMAInfo(tuple(nodes), eight_node_distances()), opts), providers


def scenario_gb200(kind: str) -> tuple[Policy, list[ProviderHints]]:
    nodes = list(range(34))
    distances = {
        a: tuple(
            10 if a == b else 20 if a < 2 and b < 2 else 80 if (a < 2) != (b < 2) else 120
            for b in range(34)
        )
        for a in nodes
    }
    mgr = TopologyManager(
        "best-effort",
        "container",
        {"max-allowable-numa-nodes": "34", "prefer-closest-numa-nodes": "true"},
        nodes,
        distances,
    )
    rnd = random.Random(7)
    cpu_nodes = [0, 1]
    if kind == "aligned":
        cpu = [H(frozenset({0}), True), H(frozenset({1}), True), H(frozenset({0, 1}), False)]
    else:  # split: the CPU request only fits on both nodes
        cpu = [H(frozenset({0, 1}), True)]
    memory: list[TopologyHint] = []
    seen: set[frozenset[int]] = set()
    while len(memory) < 255:
        m = frozenset(
            rnd.sample(cpu_nodes, rnd.randint(1, 2)) + rnd.sample(range(2, 34), rnd.randint(0, 6))
        )
        if m not in seen:
            seen.add(m)
            memory.append(H(m, len(m) == 1))
    gpu = [H(frozenset({0}), True), H(frozenset({1}), True), H(frozenset({0, 1}), False)]
    providers: list[ProviderHints] = [
        {"cpu": cpu},
        {"memory": memory, "hugepages-2Mi": None},
        {"nvidia.com/gpu": gpu},
        None,
    ]
    return mgr.policy, providers


def measure(fn: Callable[[], object], iterations: int) -> tuple[float, float]:
    fn()  # warm caches of the interpreter, not of the merger (it keeps none)
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))]
    return statistics.median(samples), p99


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument(
        "--verify",
        action="store_true",
        help="also check results against the literal permutation fold where it is feasible",
    )
    args = ap.parse_args()
    cases: list[tuple[str, float, tuple[Policy, list[ProviderHints]]]] = [
        ("8numa-aligned", 10.0, scenario_8numa("aligned")),
        ("8numa-misaligned", 10.0, scenario_8numa("misaligned")),
        ("8numa-sized", 10.0, scenario_8numa("sized")),
        ("8numa-random", 10.0, scenario_8numa("random")),
        ("8numa-closest", 10.0, scenario_8numa("closest")),
        ("gb200-aligned", 50.0, scenario_gb200("aligned")),
        ("gb200-split", 50.0, scenario_gb200("split")),
    ]
    print(f"{'scenario':18} {'permutations':>14} {'median ms':>10} {'p99 ms':>8}  result")
    failed = False
    for name, target, (policy, providers) in cases:
        perms = 1
        for p in providers:
            for hs in (p or {}).values():
                perms *= max(1, len(hs or []))
        median, p99 = measure(lambda: policy.merge(providers), args.iterations)  # noqa: B023
        hint, admit = policy.merge(providers)
        nodes = sorted(hint.numa) if hint.numa is not None else None
        ok = median < target
        if args.verify and perms <= 100_000 and isinstance(policy, BestEffortPolicy):
            ref = reference_merge(
                filter_providers_hints(providers),
                policy.numa_info,
                policy.options.prefer_closest_numa,
            )
            if ref != hint:
                print(f"{name}: MISMATCH with permutation fold: {ref}")
                ok = False
        failed |= not ok
        print(
            f"{name:18} {perms:>14.3g} {median:>10.3f} {p99:>8.3f}  "
            f"{nodes} preferred={hint.preferred} {'OK' if ok else f'OVER {target} ms'}"
        )
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
