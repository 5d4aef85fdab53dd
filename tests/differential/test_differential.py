"""The kubelet v1.37 as the oracle: fixed-seed scenarios and the checked-in regression
scenarios run through the kubelet's own managers (oracle/cmd/kubelet-oracle) and through the
plugin's decision path; any mismatch not documented in known_differences.json fails.

The oracle is built by `make oracle` (scripts/build-oracle.sh; `make test` builds it first);
$NRI_CPUMGR_ORACLE names another binary. Without Go the tests skip, except under CI, where
they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.differential import scenarios as S

#: the fixed-seed subset `make test` runs in each mode (the full run: `make differential`):
#: every seed as deployed (the plugin knows each pod's spec), the first half NRI alone
SEEDS = range(1, int(os.environ.get("NRI_DIFFERENTIAL_SEEDS", "120")) + 1)
MODE_SEEDS = [("as-deployed", s) for s in SEEDS] + [
    ("nri-alone", s) for s in SEEDS[: max(1, len(SEEDS) // 2)]]


@pytest.fixture(scope="module")
def oracle() -> Iterator[S.Oracle]:
    o = S.oracle_for_tests()
    yield o
    o.close()


def _check(o: S.Oracle, s: dict) -> tuple[list[dict], str | None, dict, dict]:
    k = o.run(s)
    p = S.plugin(s)
    diffs = S.compare(k, p, s)
    return diffs, S.known_difference(s, diffs), k, p


def test_oracle_is_the_kubelet_release(oracle: S.Oracle) -> None:
    version = (S.ROOT / "oracle" / "KUBERNETES_VERSION").read_text().strip()
    r = oracle.run(S.generate(1))
    assert r["kubernetes"] == os.environ.get("KUBERNETES_VERSION", version)


def test_oracle_answers_a_known_case(oracle: S.Oracle) -> None:
    """A case with the kubelet's documented answer (policy_static_test.go: a 4-CPU
    Guaranteed container on topoDualSocketHT, reserved CPU 0, gets a whole socket's
    free cores: CPUs 2,4,8,10), and an SMT alignment refusal with full-pcpus-only."""
    m = next(t for t in S.conformance_machines() if t["name"] == "dual-socket-ht")
    pod = {"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}]}}
    odd = {"metadata": {"name": "q", "uid": "u2"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    s = {"name": "known", "machine": m,
         "config": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                    "cpuManagerPolicyOptions": {"full-pcpus-only": "true"}},
         "events": [{"op": "add", "pod": pod}, {"op": "add", "pod": odd}]}
    k = oracle.run(s)
    assert k["events"][0]["containers"] == [
        {"name": "c", "cpus": "2,4,8,10", "exclusive": True, "mems": ""}]
    assert k["events"][0]["sharedPool"] == "0-1,3,5-7,9,11"
    assert k["events"][1]["admitted"] is False
    assert k["events"][1]["reason"] == "SMTAlignmentError"
    assert S.compare(k, S.plugin(s), s) == []


#: seeds of the subset with an undocumented difference found once the documented classes
#: required their evidence (docs/development/differential.md, "Open"), per mode; strict, so a
#: fix shows (the seed then passes and must leave this list)
OPEN: dict[tuple[str, int], str] = {}


@pytest.mark.parametrize(("mode", "seed"), [pytest.param(m, s, marks=pytest.mark.xfail(
    reason=OPEN[m, s], strict=True)) if (m, s) in OPEN else (m, s) for m, s in MODE_SEEDS])
def test_seeded_scenario(oracle: S.Oracle, mode: str, seed: int) -> None:
    s = {**S.generate(seed), "mode": mode}
    diffs, known, k, p = _check(oracle, s)
    if diffs and known is None:
        first = next(d for d, c in zip(diffs, S.classify(s, diffs), strict=True) if c is None)
        pytest.fail(f"seed {seed} ({mode}): the plugin differs from the kubelet: {first}\n"
                    f"(scripts/differential.py -n 1 --seed {seed} --mode {mode} shrinks it)\n"
                    f"kubelet: {json.dumps(k)}\nplugin: {json.dumps(p)}")


def _regressions() -> list[Path]:
    return sorted(S.REGRESSIONS.glob("*.json"))


#: regression scenarios whose difference the evidence rules do not explain yet (strict: one
#: that starts to pass must leave the list)
OPEN_REGRESSIONS: dict[str, str] = {}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xfail(
    reason=OPEN_REGRESSIONS[p.stem], strict=True)) if p.stem in OPEN_REGRESSIONS else p
    for p in _regressions()], ids=lambda p: p.stem)
def test_regression_scenario(oracle: S.Oracle, path: Path) -> None:
    """Each checked-in scenario ("expect": "agree" or the id of a documented difference)."""
    s = json.loads(path.read_text())
    diffs, known, k, p = _check(oracle, s)
    expect = s.get("expect", "agree")
    if expect == "agree":
        assert diffs == [], f"kubelet: {json.dumps(k)}\nplugin: {json.dumps(p)}"
    else:
        assert diffs, f"{path.name}: expected the documented difference {expect}; they agree"
        assert known is not None and expect in known.split("+"), f"{diffs} is not {expect}"
    if s.get("mode") == "nri-alone":
        # what NRI alone imposes is gone once the plugin knows the pod (as deployed)
        s = {**s, "mode": "as-deployed"}
        k, p = oracle.run(s), S.plugin(s)
        diffs = S.compare(k, p, s)
        # (what is left is documented and not NRI-imposed)
        assert not diffs or S.known_difference(s, diffs) is not None, \
            f"as deployed: {diffs}\nkubelet {json.dumps(k)}\nplugin {json.dumps(p)}"


def test_nri_imposed_classes_only_nri_alone(oracle: S.Oracle) -> None:
    """A difference of a class NRI imposes is documented only when the plugin decided
    without the pod's spec (``nri-alone``); as deployed the same differences are not."""
    for path in _regressions():
        s = json.loads(path.read_text())
        if s.get("expect") not in S.NRI_IMPOSED:
            continue
        diffs, known, _, _ = _check(oracle, s)
        assert known is not None and s["expect"] in known.split("+"), path.name
        got = S.known_difference({**s, "mode": "as-deployed"}, diffs)
        assert got is None or not set(got.split("+")) & S.NRI_IMPOSED, (path.name, got)


def test_plan_scenario_command(tmp_path: Path) -> None:
    """`nri-cpumgr plan --scenario` prints run_scenario's answer, one line per scenario."""
    ss = [S.with_kubelet_requests(S.generate(3)), S.generate(4)]  # (3: pod-level, CRI given)
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(s) + "\n" for s in ss))
    out = subprocess.run([sys.executable, "-m", "nri_cpumgr", "plan", "--scenario", str(f)],
                         capture_output=True, text=True, check=True).stdout
    assert [json.loads(line) for line in out.splitlines()] == [S.plugin(s) for s in ss]
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    r = subprocess.run([sys.executable, "-m", "nri_cpumgr", "plan", "--scenario", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not a scenario" in r.stderr


def test_every_documented_difference_has_a_regression_and_a_docs_row() -> None:
    ids = {k["id"] for k in S.load_known()}
    expected = {json.loads(p.read_text()).get("expect") for p in _regressions()}
    docs = (S.ROOT / "docs" / "concepts" / "differences.md").read_text()
    assert ids - expected == set(), "a documented difference without a regression scenario"
    assert [i for i in sorted(ids) if f"`{i}`" not in docs] == []


def test_a_cpu_handed_out_twice_is_never_documented() -> None:
    """The plugin's answer is checked for CPUs another pod holds (any kind of difference is
    then undocumented); the kubelet's, for the events its double assignment explains."""
    s = S.generate(1)
    s["machine"] = {"name": "eight", "cpus": [
        {"cpu": i, "core": i, "socket": 0, "numa": 0, "uncore": 0} for i in range(8)]}
    s["config"] = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"}
    s["events"] = [
        {"op": "add", "pod": {"metadata": {"name": n, "uid": n}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}}
        for n in ("a", "b")]

    def answer(b_cpus: str, pool: str) -> dict:
        return {"events": [
            {"op": "add", "pod": "a", "admitted": True, "sharedPool": "0,2-7",
             "containers": [{"name": "c", "cpus": "1", "exclusive": True}]},
            {"op": "add", "pod": "b", "admitted": True, "sharedPool": pool,
             "containers": [{"name": "c", "cpus": b_cpus, "exclusive": True}]}]}

    good, twice = answer("2", "0,3-7"), answer("1", "0,2-7")
    assert S.double_assigned(s, good) is None
    assert S.double_assigned(s, twice) == (1, "b/c got CPUs [1] another pod holds")
    assert S.double_assigned(s, answer("2", "0-1,3-7"))[0] == 1  # the pool holds a's CPU
    # every event that hands out a held CPU, not only the first: a third pod taking b's
    # CPU after an event that did so too (the kubelet's bug can strike again, seed 1102052)
    s3 = {**s, "events": [*s["events"], {"op": "add", "pod": {
        "metadata": {"name": "c3", "uid": "c3"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}}]}
    thrice = answer("1", "0,2-7")
    thrice["events"].append({"op": "add", "pod": "c3", "admitted": True,
                             "sharedPool": "0,2-7",
                             "containers": [{"name": "c", "cpus": "1", "exclusive": True}]})
    assert S.double_assignments(s3, thrice) == [
        (1, "b/c got CPUs [1] another pod holds"), (2, "c3/c got CPUs [1] another pod holds")]
    assert S.double_assignments(s, good) == []
    d = S.compare(good, twice, s)
    assert d[0]["kind"] == "plugin-double-assign" and S.known_difference(s, d) is None
    d = S.compare(twice, good, s)
    assert d == [{"kind": "cpus", "event": 1, "what": "b/c", "kubelet": "1", "plugin": "2",
                  "kubeletDoubleAssigned": "b/c got CPUs [1] another pod holds"},
                 {"kind": "shared-pool", "event": 1, "what": "b", "kubelet": "0,2-7",
                  "plugin": "0,3-7", "kubeletDoubleAssigned": "b/c got CPUs [1] another pod holds"}]
    assert S.classify(s, d) == ["kubelet-takes-a-held-cpu", S.CONSEQUENCE]
    assert S.known_difference(s, d) == "kubelet-takes-a-held-cpu"
    # a plugin pool its own allocations do not leave is never documented
    lost = answer("2", "0,4-7")
    d = S.compare(twice, lost, s)
    assert d[0]["kind"] == "plugin-pool-inconsistent" and S.known_difference(s, d) is None
    # a shared container on another pod's exclusive CPU is a double assignment
    shared = answer("2", "0,3-7")
    shared["events"][1]["containers"][0].update(exclusive=False, cpus="0-1,3-7")
    d = S.compare(good, shared, s)
    assert d[0]["kind"] == "plugin-double-assign" and S.known_difference(s, d) is None
