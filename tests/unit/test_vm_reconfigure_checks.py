"""The guest's live reconfiguration checks (tests/vm/reconfigure_checks.py) pass on what a real
guest recorded and fail on injected wrong answers: a plan that moves every exclusive
container, the container on CPU 1 left there, a stale cgroup or /proc, a plan printed that
the daemon did not follow, the SMT-misaligned container unmoved or the aligned one moved, a
CPU leaked after none -> static -> none, a quota not given back, a plan left after the
relaunch.

The record, tests/data/vm/reconfigure-results.json, is the ``results`` of a guest run
(``scripts/vm/e2e_vm.py --topology 2s-2numa-smt --containerd 2.1,1.7 --drivers cgroupfs
--scenario reconfigure-... --kubelet-containerd ""``; docs/development/qemu-guests.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nri_cpumgr.cpuset import CPUSet
from tests.vm import checks, topology

DATA = Path(__file__).resolve().parents[1] / "data/vm/reconfigure-results.json"
TOPO = topology.load("2s-2numa-smt")


def _results() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text())["results"]


def _one(scenario: str, version: str) -> dict[str, Any]:
    return copy.deepcopy(next(r for r in _results()
                              if (r["scenario"], r["containerd"]) == (scenario, version)))


def _step(res: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in res["steps"] if s["step"] == name)


def _set(c: dict[str, Any], cpus: str, views: tuple[str, ...] = ("spec", "cgroup", "proc")
         ) -> None:
    for v in views:
        c[v] = cpus


def _excl(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: c for n, c in st["containers"].items()
            if c["qos"] == "Guaranteed" and c["requests"].get("cpu", "").isdigit()}


VERSIONS = sorted({r["containerd"] for r in _results()}) if DATA.exists() else []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", ["reconfigure-reserved", "reconfigure-full-pcpus-only",
                                      "reconfigure-none-static-none", "reconfigure-sigkill"])
def test_the_recorded_guest_run_passes(scenario, version):
    assert checks.check(TOPO, _one(scenario, version)) == []


def test_the_record_covers_both_runtimes():
    assert VERSIONS == ["1.7", "2.1"]


def _fails(res: dict[str, Any], *words: str) -> list[str]:
    bad = checks.check(TOPO, res)
    assert bad, "the injected wrong answer passed"
    text = "\n".join(bad)
    for w in words:
        assert w in text, (w, text)
    return bad


@pytest.mark.parametrize("scenario", ["reconfigure-reserved", "reconfigure-sigkill"])
def test_a_plan_that_moves_every_exclusive_container_fails(scenario):
    res = _one(scenario, "2.1")
    after = _step(res, "after" if scenario == "reconfigure-reserved" else "after relaunch")
    ex = _excl(after)
    names = sorted(ex)
    sets = [ex[n]["spec"] for n in names]
    sizes = {len(CPUSet.parse(s)) for s in sets}
    if len(sizes) == 1:  # same sizes: rotate them
        rot = sets[1:] + sets[:1]
    else:  # swap two of the 1-CPU ones
        ones = [i for i, s in enumerate(sets) if len(CPUSet.parse(s)) == 1]
        rot = list(sets)
        rot[ones[0]], rot[ones[1]] = rot[ones[1]], rot[ones[0]]
    for n, s in zip(names, rot, strict=True):
        _set(ex[n], s)
    _fails(res, "only the containers on 1 may move")


@pytest.mark.parametrize("scenario", ["reconfigure-reserved", "reconfigure-sigkill"])
def test_the_container_on_cpu_1_left_there_fails(scenario):
    res = _one(scenario, "2.1")
    before = _step(res, "before")
    after = _step(res, "after" if scenario == "reconfigure-reserved" else "after relaunch")
    on1 = [n for n, c in _excl(before).items() if 1 in CPUSet.parse(c["spec"])]
    assert on1
    for n in on1:
        _set(after["containers"][n], before["containers"][n]["spec"])
    _fails(res, "should have moved off 1")


@pytest.mark.parametrize("view", ["cgroup", "proc"])
def test_a_stale_cgroup_or_proc_fails(view):
    res = _one("reconfigure-reserved", "1.7")
    before, after = _step(res, "before"), _step(res, "after")
    moved = next(n for n, c in _excl(before).items() if 1 in CPUSet.parse(c["spec"]))
    after["containers"][moved][view] = before["containers"][moved]["spec"]
    _fails(res, "cpus disagree")
    res = _one("reconfigure-reserved", "1.7")
    after = _step(res, "after")
    shared = next(n for n, c in after["containers"].items() if n not in _excl(after))
    after["containers"][shared][view] = _step(res, "before")["containers"][shared]["spec"]
    _fails(res, "cpus disagree")


def test_a_shared_container_left_on_the_old_pool_fails():
    res = _one("reconfigure-reserved", "2.1")
    before, after = _step(res, "before"), _step(res, "after")
    shared = next(n for n, c in after["containers"].items() if n not in _excl(after))
    _set(after["containers"][shared], before["containers"][shared]["spec"])
    _fails(res, "shared container on")


def test_a_plan_printed_that_the_daemon_did_not_follow_fails():
    res = _one("reconfigure-reserved", "2.1")
    planned = _step(res, "planned, not applied")["planned"]
    other = next(n for n, p in planned.items() if p["action"] == "keep")
    planned[other]["action"] = "move"
    _fails(res, "plan --reconfigure moves")
    res = _one("reconfigure-reserved", "2.1")
    planned = _step(res, "planned, not applied")["planned"]
    mv = next(n for n, p in planned.items() if p["action"] == "move")
    planned[mv]["cpusAfter"] = "1"
    _fails(res, "the daemon put it on")


def test_a_move_not_logged_or_another_update_mode_fails():
    res = _one("reconfigure-reserved", "2.1")
    _step(res, "after")["moves"] = []
    _fails(res, "logged 0 moves")
    res = _one("reconfigure-reserved", "1.7")
    res["update_mode"] = "reply"
    _fails(res, "update mode 'reply'")


def test_full_pcpus_only_misaligned_unmoved_or_aligned_moved_fails():
    res = _one("reconfigure-full-pcpus-only", "2.1")
    before, after = _step(res, "before"), _step(res, "after")
    _set(after["containers"]["misaligned"], before["containers"]["misaligned"]["spec"])
    _fails(res, "expected one whole core")
    res = _one("reconfigure-full-pcpus-only", "1.7")
    before, after = _step(res, "before"), _step(res, "after")
    a, m = after["containers"]["aligned"], after["containers"]["misaligned"]
    for v in ("spec", "cgroup", "proc"):  # the plan moved both: they swapped
        a[v], m[v] = m[v], a[v]
    _fails(res, "the aligned container moved")
    # the misaligned one had been aligned already: the scenario proves nothing
    res = _one("reconfigure-full-pcpus-only", "2.1")
    _set(_step(res, "before")["containers"]["misaligned"],
         _step(res, "after")["containers"]["misaligned"]["spec"])
    _fails(res, "the scenario proves nothing")


def test_none_static_none_leaking_a_cpu_or_a_quota_fails():
    res = _one("reconfigure-none-static-none", "2.1")
    st = _step(res, "none again")
    static = _step(res, "static")
    _set(st["containers"]["besteffort"], static["containers"]["besteffort"]["spec"],
         ("cgroup", "proc"))
    _fails(res, "expected every CPU")
    res = _one("reconfigure-none-static-none", "1.7")
    _step(res, "none again")["quota"]["g1"] = -1
    _fails(res, "cfs quota -1")
    res = _one("reconfigure-none-static-none", "1.7")
    _step(res, "static")["quota"]["g2"] = 200000
    _fails(res, "exclusive with cfs quota")


def test_sigkill_not_mid_plan_or_a_plan_left_fails():
    res = _one("reconfigure-sigkill", "2.1")
    _step(res, "after relaunch")["plan_at_kill"] = False
    _fails(res, "not killed in the middle")
    res = _one("reconfigure-sigkill", "1.7")
    _step(res, "after relaunch")["plan_left"] = True
    _fails(res, "still there")
    res = _one("reconfigure-sigkill", "1.7")
    _step(res, "after relaunch")["resumed"] = "not seen: timeout"
    _fails(res, "not completed")
