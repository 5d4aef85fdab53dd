"""Mutation check of the differential runner: can its comparison and classification fail?

The plugin's own answer to a seeded scenario stands in for the kubelet's; a copy gets one
genuine plugin error of a given kind; :func:`scenarios.compare` and
:func:`scenarios.known_difference` must flag it as an undocumented mismatch. No oracle is
needed (both answers come from the plugin's decision path).

    .venv/bin/python -m tests.differential.mutation [--seeds A:B]   (per-kind flag rates)

Kinds (:data:`KINDS`): a refused pod admitted, an admitted pod refused, exclusive CPUs moved
to a free CPU, the exclusive flag flipped, memory on another NUMA node, a CPU lost from the
shared pool, a shared container put on another pod's exclusive CPU.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from tests.differential import scenarios as S

Answer = dict[str, Any]
Mutator = Callable[[dict[str, Any], Answer, random.Random], Answer | None]

#: the refusals a mutated answer gives an admitted pod (the plugin's kinds of refusal)
REFUSALS = [("TopologyAffinityError", "Resources cannot be allocated with Topology locality"),
            ("SMTAlignmentError", "SMT Alignment Error: not enough free physical CPUs"),
            ("NotEnoughCPUsError", "not enough cpus available to satisfy request: "
             "requested=2, available=1"),
            ("UnexpectedAdmissionError", "Allocate failed due to [memorymanager] failed to "
             "find NUMA nodes to extend the current topology hint, which is unexpected")]


def _text(cpus: set[int]) -> str:
    """``cpus`` as a Linux cpuset list (``0-2,5``)."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))  # type: ignore[arg-type]
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)  # type: ignore[misc]


def _adds(p: Answer, pred: Callable[[dict[str, Any]], bool]) -> list[int]:
    return [i for i, e in enumerate(p["events"]) if e.get("op") == "add" and pred(e)]


def _held_before(s: dict[str, Any], p: Answer, upto: int, pod: str) -> set[int]:
    """The exclusive CPUs (and pod CPUs) other live pods than ``pod`` hold at event ``upto``."""
    held: dict[str, set[int]] = {}
    for i, (ev, r) in enumerate(zip(s["events"], p["events"], strict=False)):
        if i > upto:
            break
        if r.get("op") == "delete":
            held.pop(r.get("pod"), None)
        elif r.get("op") == "add" and r.get("admitted") and r["pod"] != pod:
            init = {c["name"] for c in ev["pod"]["spec"].get("initContainers") or []
                    if c.get("restartPolicy") != "Always"}
            h = S._cpus(r.get("podCPUs", ""))
            for c in r.get("containers") or []:
                if c.get("exclusive") and c["name"] not in init:
                    h |= S._cpus(c.get("cpus", ""))
            held[r["pod"]] = h
    return set().union(*held.values()) if held else set()


def refused_admitted(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    ix = _adds(p, lambda e: not e.get("admitted"))
    if not ix:
        return None
    i = rng.choice(ix)
    m = copy.deepcopy(p)
    e = m["events"][i]
    spec = s["events"][i]["pod"]["spec"]
    e.pop("reason", None)
    e.pop("message", None)
    e["admitted"] = True
    e["containers"] = [{"name": c["name"], "cpus": e.get("sharedPool", ""), "exclusive": False,
                        "mems": ""}
                       for c in (spec.get("initContainers") or []) + spec["containers"]]
    return m


def admitted_refused(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    ix = _adds(p, lambda e: bool(e.get("admitted")))
    if not ix:
        return None
    i = rng.choice(ix)
    m = copy.deepcopy(p)
    e = m["events"][i]
    pool = S._cpus(e.get("sharedPool", ""))
    for c in e.pop("containers", []):  # the pod's CPUs go back to the pool
        if c.get("exclusive"):
            pool |= S._cpus(c.get("cpus", ""))
    pool |= S._cpus(e.pop("podCPUs", ""))
    e["sharedPool"] = _text(pool)
    e["admitted"] = False
    e["reason"], msg = rng.choice(REFUSALS)
    e["message"] = msg
    return m


def _containers(p: Answer, pred: Callable[[dict[str, Any]], bool]) -> list[tuple[int, int]]:
    return [(i, j) for i in _adds(p, lambda e: bool(e.get("admitted")))
            for j, c in enumerate(p["events"][i].get("containers") or []) if pred(c)]


def cpus_moved(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    """One exclusive CPU of a container swapped with a CPU of the shared pool (the pool
    kept consistent: the plugin's state is whole, its choice is wrong)."""
    ix = [(i, j) for i, j in _containers(p, lambda c: bool(c.get("exclusive") and c.get("cpus")))
          if S._cpus(p["events"][i].get("sharedPool", ""))]
    if not ix:
        return None
    i, j = rng.choice(ix)
    m = copy.deepcopy(p)
    e = m["events"][i]
    c = e["containers"][j]
    mine, pool = S._cpus(c["cpus"]), S._cpus(e.get("sharedPool", ""))
    out, into = rng.choice(sorted(mine)), rng.choice(sorted(pool))
    new = (mine - {out}) | {into}
    for o in e["containers"]:  # the same CPUs elsewhere in the pod (a reused init's) too
        if o.get("exclusive") and S._cpus(o.get("cpus", "")) == mine:
            o["cpus"] = _text(new)
        elif not o.get("exclusive") and S._cpus(o.get("cpus", "")) == pool:
            o["cpus"] = _text((pool - {into}) | {out})
    e["sharedPool"] = _text((pool - {into}) | {out})
    return m


def exclusive_flipped(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    ix = _containers(p, lambda c: True)
    if not ix:
        return None
    i, j = rng.choice(ix)
    m = copy.deepcopy(p)
    c = m["events"][i]["containers"][j]
    c["exclusive"] = not c.get("exclusive")
    return m


def mems_other_numa(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    nodes = {r["numa"] for r in s["machine"]["cpus"]}
    ix = _containers(p, lambda c: bool(c.get("mems")) and bool(nodes - S._cpus(c["mems"])))
    if not ix:
        return None
    i, j = rng.choice(ix)
    m = copy.deepcopy(p)
    c = m["events"][i]["containers"][j]
    mine = S._cpus(c["mems"])
    other = rng.choice(sorted(nodes - mine))
    c["mems"] = _text((mine - {rng.choice(sorted(mine))}) | {other})
    return m


def pool_lost_cpu(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    ix = _adds(p, lambda e: len(S._cpus(e.get("sharedPool", ""))) > 1)
    if not ix:
        return None
    i = rng.choice(ix)
    m = copy.deepcopy(p)
    e = m["events"][i]
    pool = S._cpus(e["sharedPool"])
    e["sharedPool"] = _text(pool - {rng.choice(sorted(pool))})
    return m


def shared_on_exclusive(s: dict[str, Any], p: Answer, rng: random.Random) -> Answer | None:
    ix = [(i, j) for i, j in _containers(p, lambda c: not c.get("exclusive"))
          if _held_before(s, p, i, p["events"][i]["pod"])]
    if not ix:
        return None
    i, j = rng.choice(ix)
    m = copy.deepcopy(p)
    c = m["events"][i]["containers"][j]
    other = rng.choice(sorted(_held_before(s, p, i, p["events"][i]["pod"])))
    c["cpus"] = _text(S._cpus(c.get("cpus", "")) | {other})
    return m


KINDS: dict[str, Mutator] = {
    "refused pod admitted": refused_admitted,
    "admitted pod refused": admitted_refused,
    "exclusive CPUs moved": cpus_moved,
    "exclusive flag flipped": exclusive_flipped,
    "memory on another NUMA node": mems_other_numa,
    "CPU lost from the shared pool": pool_lost_cpu,
    "shared container on another pod's exclusive CPU": shared_on_exclusive,
}


def answers(seeds: range) -> Iterator[tuple[dict[str, Any], Answer]]:
    """(scenario, the plugin's answer) for each seed whose config the plugin accepts. A
    pod-level scenario runs without the kubelet's CRI requests (the planner's model of them:
    no binary needed)."""
    from nri_cpumgr.planner.scenario import run_scenario

    for seed in seeds:
        s = S.generate(seed)
        p = run_scenario(s)
        if not p.get("configError"):
            yield s, p


def flag_rates(seeds: range, known: list[dict[str, Any]] | None = None,
               ) -> dict[str, dict[str, Any]]:
    """Per kind: ``injected``, ``flagged`` (an undocumented mismatch), ``missed`` (seeds,
    with the verdict: ``agree`` or the documented ids it was filed under)."""
    known = known if known is not None else S.load_known()
    out = {k: {"injected": 0, "flagged": 0, "missed": []} for k in KINDS}
    for s, p in answers(seeds):
        assert S.compare(p, p, s) == [], f"seed {s['seed']}: an answer differs from itself"
        for n, (kind, mutate) in enumerate(KINDS.items()):
            m = mutate(s, p, random.Random(f"{s['seed']}-{n}"))
            if m is None or m == p:
                continue
            out[kind]["injected"] += 1
            diffs = S.compare(p, m, s)
            verdict = S.known_difference(s, diffs, known) if diffs else "agree"
            if verdict is None:
                out[kind]["flagged"] += 1
            else:
                out[kind]["missed"].append((s["seed"], verdict))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1:301", help="A:B, the seeds A..B-1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.seeds.split(":"))
    r = flag_rates(range(a, b))
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    for kind, v in r.items():
        rate = v["flagged"] / v["injected"] if v["injected"] else 0.0
        why = collections.Counter(x for _, x in v["missed"])
        print(f"{kind:50} {v['flagged']:4}/{v['injected']:4} flagged ({rate:.0%})"
              + (f"  missed: {dict(why)}" if why else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
