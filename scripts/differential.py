#!/usr/bin/env python3
"""Differential run: seeded random scenarios through the kubelet oracle and the plugin.

    scripts/differential.py [-n N | --minutes M] [--seed S | --seed-list S,S,...|@FILE]
                            [--mode MODE] [--oracle PATH] [--json] [--log FILE.jsonl]
    scripts/differential.py --replay FILE.json     (one scenario: both answers, the diff)

--mode: ``as-deployed`` (default: the plugin knows every pod's spec, as the deployed
DaemonSet's pod watch gives it, and admits each pod whole) or ``nri-alone`` (only what NRI
shows: container by container; the NRI-imposed documented classes apply only here).

Prints per area (cpu manager options, topology manager, memory manager, pod-level,
lifecycle) how many scenarios agree, how many differ in a documented way
(tests/differential/known_differences.json: every difference of the scenario shows a
documented class's evidence) and how many differ otherwise, and apart, how many carry a
config both refuse; per documented class, the scenarios and the differences it explains;
for every undocumented mismatch: the seed, the shrunk scenario and both answers. Exit 1
when there is an undocumented mismatch. See docs/development/differential.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.differential import scenarios as S  # noqa: E402


def both(oracle: S.Oracle, s: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    p = oracle._start()
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(s) + "\n")  # the oracle works while the plugin side runs
    p.stdin.flush()
    ours = S.plugin(s)
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"kubelet-oracle exited on {s.get('name')}")
    oracle.count += 1
    return json.loads(line), ours


def undocumented(s: dict[str, Any], diffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The differences of ``diffs`` no documented class explains."""
    return [d for d, c in zip(diffs, S.classify(s, diffs), strict=True) if c is None]


def report_mismatch(oracle: S.Oracle, s: dict[str, Any], diffs: list[dict[str, Any]],
                    out: Any) -> dict[str, Any]:
    first = undocumented(s, diffs)[0]
    kind = first["kind"]

    def still(t: dict[str, Any]) -> bool:  # the same kind of undocumented mismatch
        k, p = both(oracle, t)
        d = S.compare(k, p, t)
        return bool(d) and any(u["kind"] == kind for u in undocumented(t, d))

    small = S.shrink(s, still)
    k, p = both(oracle, small)
    print(f"\nMISMATCH seed {s.get('seed')} ({kind}): {json.dumps(first)}", file=out)
    print("  shrunk scenario: " + json.dumps(small), file=out)
    print("  kubelet: " + json.dumps(k), file=out)
    print("  plugin:  " + json.dumps(p), file=out)
    return {"seed": s.get("seed"), "diff": S.compare(k, p, small) or diffs, "scenario": small,
            "kubelet": k, "plugin": p}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-n", type=int, default=0, help="number of scenarios")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="run for this long instead of -n")
    ap.add_argument("--seed", type=int, default=1, help="first seed (then seed+1, ...)")
    ap.add_argument("--seed-list", help="run these seeds instead (comma-separated, or @FILE "
                    "with one per line): e.g. those of a long run a later change may affect")
    ap.add_argument("--mode", choices=S.MODES, default=S.MODES[0],
                    help="what the plugin knows of each pod (default: %(default)s)")
    ap.add_argument("--oracle", help="the kubelet-oracle binary (default: make oracle's)")
    ap.add_argument("--max-report", type=int, default=5,
                    help="shrink and print at most this many undocumented mismatches")
    ap.add_argument("--replay", help="run one scenario file and print both answers")
    ap.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    ap.add_argument("--log", help="append one JSON line per scenario to this file as it runs "
                    "(seed, verdict, classes of its differences, the undocumented ones)")
    args = ap.parse_args(argv)
    oracle = S.Oracle(Path(args.oracle) if args.oracle else S.oracle_path())
    log = None
    try:
        if args.replay:
            s = json.loads(Path(args.replay).read_text())
            k, p = both(oracle, s)
            print(json.dumps({"kubelet": k, "plugin": p, "diff": S.compare(k, p, s)}, indent=1))
            return 0
        seeds: list[int] | None = None
        if args.seed_list:
            text = (Path(args.seed_list[1:]).read_text() if args.seed_list.startswith("@")
                    else args.seed_list)
            seeds = [int(x) for x in text.replace(",", " ").split()]
        n = len(seeds) if seeds is not None else args.n or (0 if args.minutes else 200)
        deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
        known = S.load_known()
        counts: dict[str, collections.Counter[str]] = {
            a: collections.Counter() for a in S.AREAS}
        by_known: collections.Counter[str] = collections.Counter()  # scenarios per class
        by_class: collections.Counter[str] = collections.Counter()  # differences per class
        kinds: collections.Counter[str] = collections.Counter()  # undocumented, per kind
        undocumented_scenarios = documented_scenarios = config_refused = 0
        undocumented_seeds: list[Any] = []
        reported: list[dict[str, Any]] = []
        log = open(args.log, "a") if args.log else None  # noqa: SIM115 - closed below
        t0 = time.monotonic()
        done = 0
        seed = seeds[0] if seeds else args.seed
        while (done < n) if not deadline else (time.monotonic() < deadline):
            if seeds is not None:
                if done >= len(seeds):
                    break
                seed = seeds[done]
            s = S.generate(seed)
            s["mode"] = args.mode
            k, p = both(oracle, s)
            diffs = S.compare(k, p, s)
            classes = S.classify(s, diffs, known)
            for c in classes:
                by_class[c or "UNDOCUMENTED"] += 1
            if not diffs and k.get("configError"):
                verdict = "config refused"  # by both: tests the config check only
                config_refused += 1
            elif not diffs:
                verdict = "agree"
            elif None not in classes:
                verdict = "documented"
                documented_scenarios += 1
                for kid in dict.fromkeys(c for c in classes if c != S.CONSEQUENCE):
                    by_known[kid] += 1
            else:
                verdict = "MISMATCH"
                undocumented_scenarios += 1
                undocumented_seeds.append(s.get("seed"))
                for d, c in zip(diffs, classes, strict=True):
                    if c is None:
                        kinds[d["kind"]] += 1
                if len(reported) < args.max_report:
                    reported.append(report_mismatch(oracle, s, diffs, sys.stderr))
            for a in S.areas(s):
                counts[a][verdict] += 1
            if log is not None:
                log.write(json.dumps({
                    "seed": s.get("seed"), "verdict": verdict,
                    "classes": sorted({c or "UNDOCUMENTED" for c in classes}),
                    "undocumented": [d for d, c in zip(diffs, classes, strict=True)
                                     if c is None][:5]}) + "\n")
                log.flush()
            done += 1
            seed += 1
        secs = time.monotonic() - t0
        summary = {
            "mode": args.mode, "scenarios": done,
            "seeds": seeds if seeds is not None else [args.seed, seed - 1],
            "seconds": round(secs, 1),
            "per_minute": round(done / secs * 60, 1) if secs else None,
            "kubernetes": k.get("kubernetes") if done else None,
            "areas": {a: dict(c) for a, c in counts.items() if c},
            "config_refused": config_refused,
            "documented_scenarios": documented_scenarios,
            "undocumented_scenarios": undocumented_scenarios,
            "documented": dict(by_known), "differences_by_class": dict(by_class),
            "undocumented_by_kind": dict(kinds), "undocumented_seeds": undocumented_seeds,
        }
        if args.json:
            print(json.dumps(summary, indent=1))
        else:
            which = (f"{len(seeds)} listed seeds" if seeds is not None
                     else f"seeds {args.seed}..{seed - 1}")
            print(f"{done} scenarios, mode {args.mode} ({which}) in "
                  f"{secs:.0f} s "
                  f"({summary['per_minute']}/min), kubelet {summary['kubernetes']}")
            print(f"{'area':22} {'agree':>7} {'documented':>11} {'MISMATCH':>9} "
                  f"{'config refused':>15}")
            for a in S.AREAS:
                c = counts[a]
                if c:
                    print(f"{a:22} {c['agree']:7} {c['documented']:11} {c['MISMATCH']:9} "
                          f"{c['config refused']:15}")
            print(f"config refused by both: {config_refused}; scenarios with a documented "
                  f"difference: {summary['documented_scenarios']}, with an undocumented one: "
                  f"{undocumented_scenarios}")
            for kid, c in sorted(by_known.items()):
                print(f"  documented {kid}: {c} scenarios "
                      f"({by_class[kid]} differences)")
            if by_class[S.CONSEQUENCE]:
                print(f"  consequences of an earlier documented difference: "
                      f"{by_class[S.CONSEQUENCE]} differences")
            for kind, c in sorted(kinds.items()):
                print(f"  UNDOCUMENTED {kind}: {c}")
        return 1 if kinds else 0
    finally:
        oracle.close()
        if log is not None:
            log.close()


if __name__ == "__main__":
    sys.exit(main())
