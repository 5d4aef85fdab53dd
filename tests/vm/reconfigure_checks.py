"""Judge the live reconfiguration scenarios the guest recorded (tests/vm/guest_reconfigure.py).

Issue 35's "Done when", with running containers, in the OCI spec, the cgroup v2
``cpuset.cpus.effective`` and ``/proc/<pid>/status`` (every step: the three views agree;
:func:`tests.vm.checks.check_step` with the step's reserved CPUs: exclusive sets disjoint, of
the requested size, without reserved CPUs; shared containers on online - exclusive):

* ``reconfigure-reserved``: ``reservedSystemCPUs`` 0 -> 0-1 moves only the exclusive
  containers on CPU 1 (each to CPUs of its size outside 0-1; every other exclusive container
  keeps its CPUs), the shared ones follow the new pool; ``nri-cpumgr plan --reconfigure``
  printed, before, the moves the daemon then made; the daemon logged one move per container
  on CPU 1 and ``applied``; the recorded plan is gone; the update mode was the default's
  (``cri`` on containerd 1.7 and 2.1).
* ``reconfigure-full-pcpus-only``: the container spread over two cores moves onto whole
  cores free of reserved CPUs' siblings; the aligned one stays; one move logged.
* ``reconfigure-none-static-none``: under none every container on every CPU with its CPU
  limit's quota; under static the Guaranteed integer ones exclusive without quota; under
  none again every container back on every CPU with its quota (no CPU leaked).
* ``reconfigure-sigkill``: the plugin was killed with the plan recorded; after the relaunch
  the plan completed (log), the recorded plan is gone and the containers are where the
  reserved scenario puts them.

:func:`check` returns the failures (empty = pass); tests/unit/test_vm_reconfigure_checks.py
shows each failing on an injected wrong answer.
"""

from __future__ import annotations

from typing import Any

from nri_cpumgr.cpuset import CPUSet
from tests.vm.topology import Topology

# tests.vm.checks imports this module (its check() and applicable() hand these scenarios
# over), so its names are imported where they are used

SCENARIOS = ["reconfigure-reserved", "reconfigure-full-pcpus-only",
             "reconfigure-none-static-none", "reconfigure-sigkill"]


#: the cgroup driver they run with (the job's ``scenario@driver``): the update path is the
#: same CRI call under both; the systemd driver's run would double a scenario that creates
#: 20 pods under TCG
DRIVER = "cgroupfs"
#: seconds a scenario may take in the guest, for the boot's timeout (seen at load 27-30 on the
#: 2-CPU development machine: reconfigure-reserved 747 s, most of it starting 20 pods)
SECONDS = {"reconfigure-reserved": 1000, "reconfigure-full-pcpus-only": 600,
           "reconfigure-none-static-none": 400, "reconfigure-sigkill": 400}


def job_names(scenarios: list[str], drivers: list[str]) -> list[str]:
    """``scenarios`` as a guest job lists them: a reconfiguration scenario as
    ``name@cgroupfs`` (:data:`DRIVER`) when the job runs other drivers too."""
    return [f"{s}@{DRIVER}" if s in SCENARIOS and drivers != [DRIVER] else s
            for s in scenarios]


def runs(scenario: str, driver: str) -> bool:
    """Whether the guest runs ``scenario`` with ``driver`` (see :func:`job_names`)."""
    return scenario not in SCENARIOS or driver == DRIVER


def seconds(scenarios: list[str], versions: int, drivers: list[str]) -> int:
    """The guest time the job's scenarios may take: 150 s per run of another scenario."""
    return sum(SECONDS.get(s, 150) * versions * (1 if s in SCENARIOS else len(drivers))
               for s in scenarios if any(runs(s, d) for d in drivers))


def applicable(topo: Topology, scenario: str) -> bool:
    """On an SMT topology (the SMT-misaligned container needs siblings; the others prove
    nothing more on the no-SMT ones) with CPUs to spare after reserving two."""
    return topo.threads > 1 and topo.ncpus >= 8


def _excl(c: dict[str, Any]) -> bool:
    cpu = c["requests"].get("cpu", "")
    return c["qos"] == "Guaranteed" and cpu.isdigit()


def _step(res: dict[str, Any], name: str, bad: list[str]) -> dict[str, Any]:
    st = next((s for s in res.get("steps") or [] if s["step"] == name), None)
    if st is None:
        bad.append(f"step {name!r} was not recorded")
        return {"step": name, "containers": {}, "refused": {}}
    return st


def _invariants(topo: Topology, st: dict[str, Any]) -> list[str]:
    from tests.vm import checks

    reserved = checks.cpus(st.get("reserved", "0"))
    return [f"[{st['step']}] {b}" for b in checks.check_step(topo, st, reserved=reserved)]


def _applied(st: dict[str, Any], moves: int | None) -> list[str]:
    bad = []
    tag = f"[{st['step']}]"
    if st.get("result") != "applied":
        bad.append(f"{tag} the reconfiguration's result is {st.get('result')!r}, not applied:\n"
                   f"{st.get('log', '')[-1500:]}")
    if moves is not None and len(st.get("moves") or []) != moves:
        bad.append(f"{tag} the plugin logged {len(st.get('moves') or [])} moves, expected "
                   f"{moves}: {st.get('moves')}")
    if st.get("plan_left"):
        bad.append(f"{tag} the recorded plan (reconfiguration_plan) is still there")
    return bad


def _moved_off(topo: Topology, before: dict[str, Any], after: dict[str, Any],
               gone: frozenset[int]) -> list[str]:
    """Exclusive containers holding a CPU of ``gone`` move (same size, none of ``gone``);
    every other exclusive container keeps its CPUs; all are still running."""
    from tests.vm import checks

    bad = []
    tag = f"[{after['step']}]"
    on = [n for n, c in before["containers"].items()
          if _excl(c) and checks.cpus(c["spec"]) & gone]
    if not on:
        bad.append(f"no exclusive container held {CPUSet(gone)} before the change: the "
                   "scenario proves nothing")
    for n, c in before["containers"].items():
        a = after["containers"].get(n)
        if a is None:
            bad.append(f"{tag} {n} is no longer running")
            continue
        if not _excl(c):
            continue
        was, now = checks.cpus(c["spec"]), checks.cpus(a["spec"])
        if n in on:
            if now == was or now & gone or len(now) != len(was):
                bad.append(f"{tag} {n} on {CPUSet(was)} should have moved off "
                           f"{CPUSet(gone)} to {len(was)} other CPUs, is on {a['spec']}")
        elif now != was:
            bad.append(f"{tag} {n} moved {CPUSet(was)} -> {a['spec']}: only the containers "
                       f"on {CPUSet(gone)} may move")
    return bad


def _mode(res: dict[str, Any]) -> list[str]:
    want = "async" if res["containerd"] >= "2.4" else "cri"
    if res.get("update_mode") != want:
        return [f"shared pool update mode {res.get('update_mode')!r}, the default (auto) takes "
                f"{want!r} on containerd {res['containerd']}"]
    return []


def check(topo: Topology, res: dict[str, Any]) -> list[str]:
    """Failures of one reconfiguration scenario result (empty = pass)."""
    from tests.vm import checks

    if res.get("error"):
        return [f"did not run to the end: {res['error'].splitlines()[0]}"]
    if not res.get("steps"):
        return ["no step recorded"]
    bad: list[str] = [f"cleanup: {e}" for e in res.get("cleanup_errors") or []]
    bad += _mode(res)
    sc = res["scenario"]
    online = frozenset(range(topo.ncpus))
    if sc in ("reconfigure-reserved", "reconfigure-sigkill"):
        before = _step(res, "before", bad)
        after = _step(res, "after" if sc == "reconfigure-reserved" else "after relaunch", bad)
        for st in (before, after):
            bad += _invariants(topo, st)
        n = len(before["containers"])
        want_n = 20 if sc == "reconfigure-reserved" else 6
        if n != want_n or before.get("refused"):
            bad.append(f"{n} containers running before the change (refused: "
                       f"{before.get('refused')}), expected {want_n}")
        bad += _moved_off(topo, before, after, frozenset({1}))
        on1 = sorted(k for k, c in before["containers"].items()
                     if _excl(c) and 1 in checks.cpus(c["spec"]))
        if sc == "reconfigure-reserved":
            bad += _applied(after, len(on1))
            bad += [f"[after] the move is not said to be for CPU 1 becoming reserved: {m}"
                    for m in after.get("moves") or [] if "CPU(s) 1 became reserved" not in m]
            planned = _step(res, "planned, not applied", bad)
            if planned.get("plan_exit") != 0:
                bad.append(f"plan --reconfigure exited {planned.get('plan_exit')}: "
                           f"{planned.get('plan_stderr', '')[-800:]}")
            else:
                moves = sorted(k for k, p in planned.get("planned", {}).items()
                               if p["action"] == "move")
                if moves != on1:
                    bad.append(f"plan --reconfigure moves {moves}, expected {on1}")
                for k, p in planned.get("planned", {}).items():
                    a = after["containers"].get(k)
                    if a is not None and _excl(a) and p["cpusAfter"] != a["spec"]:
                        bad.append(f"plan --reconfigure said {k} -> {p['cpusAfter']}, the "
                                   f"daemon put it on {a['spec']}")
                # nothing applied by the plan: the containers are where they were
                for k, c in planned["containers"].items():
                    was = before["containers"].get(k, {}).get("spec")
                    if c["spec"] != was:
                        bad.append(f"[planned, not applied] {k} changed {was} -> {c['spec']}")
        else:
            if not after.get("killed_mid_plan") or not after.get("plan_at_kill"):
                bad.append("the plugin was not killed in the middle of the plan (no recorded "
                           "plan at the kill)")
            if after.get("resumed") != "completed":
                bad.append(f"the interrupted plan was not completed after the relaunch: "
                           f"{after.get('resumed')}\n{after.get('log', '')[-1500:]}")
            if after.get("plan_left"):
                bad.append("[after relaunch] the recorded plan is still there")
    elif sc == "reconfigure-full-pcpus-only":
        before = _step(res, "before", bad)
        after = _step(res, "after", bad)
        for st in (before, after):
            bad += _invariants(topo, st)
        bad += _applied(after, 1)
        reserved = frozenset({0})
        near = frozenset().union(*(g for g in topo.groups("core") if g & reserved))
        mis = checks.cpus(before["containers"].get("misaligned", {}).get("spec", ""))
        al = checks.cpus(before["containers"].get("aligned", {}).get("spec", ""))
        if len(mis) != 2 or checks._whole(topo, "core", mis):
            bad.append(f"the misaligned container had {CPUSet(mis)} before the change: not "
                       "2 CPUs over two cores, the scenario proves nothing")
        if len(al) != 2 or not checks._whole(topo, "core", al):
            bad.append(f"the aligned container had {CPUSet(al)}, not one whole core")
        now = checks.cpus(after["containers"].get("misaligned", {}).get("spec", ""))
        if len(now) != 2 or not checks._whole(topo, "core", now) or now & near:
            bad.append(f"[after] misaligned {CPUSet(mis)} -> {CPUSet(now)}: expected one whole "
                       f"core without a reserved CPU's sibling ({CPUSet(near)})")
        kept = checks.cpus(after["containers"].get("aligned", {}).get("spec", ""))
        if kept != al:
            bad.append(f"[after] the aligned container moved {CPUSet(al)} -> {CPUSet(kept)}")
        if len(after["containers"]) != len(before["containers"]):
            bad.append(f"[after] running {sorted(after['containers'])}, before "
                       f"{sorted(before['containers'])}")
    elif sc == "reconfigure-none-static-none":
        none1 = _step(res, "none", bad)
        static = _step(res, "static", bad)
        none2 = _step(res, "none again", bad)
        bad += _invariants(topo, static)
        bad += _applied(static, None) + _applied(none2, None)
        for st in (none1, none2):
            for n, c in st["containers"].items():
                if checks.cpus(c["cgroup"]) != online or checks.cpus(c["proc"]) != online \
                        or c["spec"] not in ("", str(CPUSet(online))):
                    bad.append(f"[{st['step']}] {n}: spec={c['spec']!r} cgroup={c['cgroup']} "
                               f"proc={c['proc']}, expected every CPU ({CPUSet(online)})")
            for n, q in st.get("quota", {}).items():
                c = st["containers"][n]
                limit = c["limits"].get("cpu")
                want = int(round(_milli(limit) * 100)) if limit else -1
                if q != want:
                    bad.append(f"[{st['step']}] {n}: cfs quota {q}, its CPU limit's is {want}")
        for n, c in static["containers"].items():
            q = static.get("quota", {}).get(n)
            if _excl(c) and q != -1:
                bad.append(f"[static] {n}: exclusive with cfs quota {q}, expected none (-1)")
        if sorted(none2["containers"]) != sorted(none1["containers"]):
            bad.append(f"[none again] running {sorted(none2['containers'])}, at first "
                       f"{sorted(none1['containers'])}")
        if not any(_excl(c) for c in static["containers"].values()):
            bad.append("[static] no exclusive container")
    else:
        bad.append(f"unknown scenario {sc}")
    return bad


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)
