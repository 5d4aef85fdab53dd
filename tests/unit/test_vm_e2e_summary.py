"""`make e2e-vm`'s summary (scripts/vm/e2e_vm.py) is a check that can fail, without QEMU: the
guest's results are given, the judges (tests/vm/checks.py, the kubelet oracle) are the real
ones. Exit status 0 only when every scenario and kubelet phase passed; a failed scenario, a
missing result, a guest that reported nothing, a phase without the oracle's answer, a wrong
answer, or a run where nothing ran gives 1.

The kubelet phases are the guest's record tests/data/vm/guest-kubelet-2.1.json (the oracle
runs: ``make oracle``; without Go those tests skip, except under CI)."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.differential import scenarios as S
from tests.vm import checks, kubelet_oracle, reconfigure_checks, runner, topology

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "data" / "vm" / "guest-kubelet-2.1.json"
PHASES = "docs_pods,pod_scope,pod_scope_best_effort"  # the record's phases


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("e2e_vm", ROOT / "scripts/vm/e2e_vm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


E2E = _load()
FAST = next(t for t in topology.all_topologies() if t.fast)


@pytest.fixture(autouse=True)
def no_host_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "missing", lambda: [])


def _guest(monkeypatch: pytest.MonkeyPatch, results: list[dict[str, Any]] | Exception,
           ) -> None:
    def run_guest(topo: topology.Topology, **kw: Any) -> runner.GuestRun:
        if isinstance(results, Exception):
            raise results
        return runner.GuestRun({"results": results}, 1.0, "")

    monkeypatch.setattr(runner, "run_guest", run_guest)


def _matrix(scen: list[str]) -> list[dict[str, Any]]:
    """A result for every scenario the guest runs (the live reconfiguration ones with the
    cgroupfs driver only)."""
    return [{"containerd": v, "driver": d, "scenario": s, "error": "", "steps": []}
            for v in ("2.1", "1.7") for d in ("cgroupfs", "systemd") for s in scen
            if reconfigure_checks.runs(s, d)]


ARGS = ["--topology", FAST.name, "--kubelet-containerd", ""]


def test_every_scenario_passing_exits_0(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    scen = [s for s in checks.SCENARIOS if checks.applicable(FAST, s)]
    res = _matrix(scen)
    _guest(monkeypatch, res)
    monkeypatch.setattr(checks, "check", lambda t, r: [])  # the pass path exists
    assert E2E.main(ARGS) == 0
    assert f"{len(res)} passed, 0 failed" in capsys.readouterr().out


def test_one_failed_scenario_exits_1(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    scen = [s for s in checks.SCENARIOS if checks.applicable(FAST, s)]
    res = _matrix(scen)
    monkeypatch.setattr(checks, "check",
                        lambda t, r: ["did not run to the end: boom"] if r["error"] else [])
    res[3]["error"] = "boom"
    _guest(monkeypatch, res)
    assert E2E.main(ARGS) == 1
    out = capsys.readouterr().out
    assert f"{len(res) - 1} passed, 1 failed" in out and "! did not run to the end" in out


def test_the_real_judge_fails_an_empty_result(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    scen = [s for s in checks.SCENARIOS if checks.applicable(FAST, s)]
    _guest(monkeypatch, _matrix(scen))  # no steps recorded: checks.check says so
    assert E2E.main(ARGS) == 1
    assert "! no step recorded" in capsys.readouterr().out


def test_a_missing_result_exits_1(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    scen = [s for s in checks.SCENARIOS if checks.applicable(FAST, s)]
    _guest(monkeypatch, _matrix(scen)[:-1])
    monkeypatch.setattr(checks, "check", lambda t, r: [])
    assert E2E.main(ARGS) == 1
    assert "no result (guest timed out?)" in capsys.readouterr().out


def test_a_guest_without_results_exits_1(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _guest(monkeypatch, runner.GuestError("guest gave no results after 9 s"))
    assert E2E.main(ARGS) == 1
    assert "0 passed, 1 failed" in capsys.readouterr().out


def test_nothing_run_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert E2E.main(["--kubelet-only", "--kubelet-containerd", ""]) == 1
    assert "FAIL nothing ran" in capsys.readouterr().out


# ------------------------------------------------------------------ the real-kubelet guest
@pytest.fixture(scope="module")
def oracle() -> Iterator[S.Oracle]:
    o = S.oracle_for_tests()
    yield o
    o.close()


@pytest.fixture
def kubelet_guest(monkeypatch: pytest.MonkeyPatch, oracle: S.Oracle,
                  ) -> dict[str, Any]:
    """The recorded guest run; the oracle answers through the module-wide process."""
    from tests.vm import test_guest_kubelet as T

    rec = json.loads(RECORD.read_text())
    monkeypatch.setenv("NRI_VM_KUBELET_PHASES", PHASES)
    monkeypatch.setattr(T, "missing", lambda versions: ({}, []))
    monkeypatch.setattr(T, "run_kubelet_guest", lambda *a, **kw: (
        runner.GuestRun(rec, 1.0, ""), {"controlplane_start_seconds": 1}))
    monkeypatch.setattr(kubelet_oracle, "expect_all", lambda topo, results: {
        (r["containerd"], r["scenario"]): kubelet_oracle.expect(topo, r, oracle)
        for r in results if not r.get("error") and r.get("events")})
    return rec


KARGS = ["--kubelet-only", "--kubelet-containerd", "2.1"]


def test_the_recorded_kubelet_guest_passes(kubelet_guest: dict[str, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert E2E.main(KARGS) == 0
    assert "3 passed, 0 failed" in capsys.readouterr().out


def test_a_refusal_with_the_wrong_reason_exits_1(kubelet_guest: dict[str, Any],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    r = next(x for x in kubelet_guest["kubelet_results"] if x["scenario"] == "pod_scope")
    for st in r["steps"]:
        for key, msg in (st.get("refused") or {}).items():
            st["refused"][key] = re.sub(r"\w+Error", "EmptyPodSharedPoolError", msg)
    assert E2E.main(KARGS) == 1
    assert "2 passed, 1 failed" in capsys.readouterr().out


def test_a_phase_without_the_oracles_answer_exits_1(kubelet_guest: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    r = next(x for x in kubelet_guest["kubelet_results"] if x["scenario"] == "docs_pods")
    r["events"] = []
    assert E2E.main(KARGS) == 1
    assert "no kubelet oracle answer" in capsys.readouterr().out


def test_a_missing_phase_or_node_exits_1(kubelet_guest: dict[str, Any],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    saved = copy.deepcopy(kubelet_guest)
    kubelet_guest["kubelet_results"] = [x for x in saved["kubelet_results"]
                                        if x["scenario"] != "pod_scope_best_effort"]
    assert E2E.main(KARGS) == 1
    assert "no result (guest timed out?)" in capsys.readouterr().out
    kubelet_guest.clear()
    kubelet_guest.update(saved, kubelet_node={})
    assert E2E.main(KARGS) == 1
    assert "the node did not start" in capsys.readouterr().out


@pytest.mark.parametrize("env, want", [("", 300 + 150 * 4), ("5000", 5000), ("60", 900)])
def test_nri_vm_timeout_only_raises_a_boots_timeout(monkeypatch: pytest.MonkeyPatch,
                                                    env: str, want: int) -> None:
    seen: list[float] = []

    def run_guest(topo: topology.Topology, **kw: Any) -> runner.GuestRun:
        seen.append(kw["timeout"])
        return runner.GuestRun({"results": []}, 1.0, "")

    monkeypatch.setattr(runner, "run_guest", run_guest)
    monkeypatch.setenv("NRI_VM_TIMEOUT", env)
    E2E.main([*ARGS, "--scenario", "docs"])
    assert seen == [want]
