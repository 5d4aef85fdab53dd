"""End-to-end on cgroup v2 and a real multi-socket/NUMA/SMT topology, inside a QEMU guest.

One boot of the fast topology (``fast = true`` in tests/vm/topologies) runs every scenario of
:data:`FAST_SCENARIOS` on containerd 2.1 with the cgroupfs driver and then the systemd
driver; the guest records the cpusets of the OCI spec, the cgroup v2 files and /proc, and
these tests judge them (:mod:`tests.vm.checks`). The guest image is built, or reused from
``NRI_VM_CACHE``, by the session fixture (cold: about 4 minutes; the boot and scenarios about
5). The full matrix (every topology, containerd 1.7 too) is ``make e2e-vm``.

Gate: requested with ``NRI_E2E_VM=1`` (``make test`` and ``make e2e-vm`` set it), else
skipped with the reason. When requested but the machine cannot run it (not root, tools
missing) it is skipped, or fails when ``CI`` is set, as tests/e2e/conftest.py does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.vm import checks, runner, topology

pytestmark = pytest.mark.e2e

FAST_SCENARIOS = ["docs", "full-pcpus-only", "numa-memory"]
DRIVERS = ["cgroupfs", "systemd"]


def _gate() -> None:
    if os.environ.get("NRI_E2E_VM") != "1":
        pytest.skip("QEMU guest tests not requested (NRI_E2E_VM=1; make test sets it)")
    reasons = runner.missing()
    if reasons:
        msg = "QEMU guest tests cannot run here: " + "; ".join(reasons)
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set: the end-to-end tests are required)", pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def fast_topology() -> topology.Topology:
    return next(t for t in topology.all_topologies() if t.fast)


@pytest.fixture(scope="module")
def guest(fast_topology: topology.Topology) -> runner.GuestRun:
    _gate()
    keep = os.environ.get("NRI_VM_KEEP")
    return runner.run_guest(fast_topology, containerd=["2.1"], drivers=DRIVERS,
                            scenarios=FAST_SCENARIOS, keep=Path(keep) if keep else None)


def test_guest_topology_is_the_data_file(guest: runner.GuestRun,
                                         fast_topology: topology.Topology) -> None:
    """The guest kernel sees the sockets, SMT siblings, L3 groups and NUMA nodes of the file."""
    facts = guest.results["facts"]
    t = fast_topology
    assert facts["cgroup_version"] == 2 and "cpuset" in facts["controllers"]
    assert facts["online"] == f"0-{t.ncpus - 1}"
    for i in range(t.ncpus):
        seen, want = facts["cpus"][str(i)], t.cpu(i)
        assert seen["socket"] == want.socket, (i, seen)
        core = next(g for g in t.groups("core") if i in g)
        assert checks.cpus(seen["siblings"]) == core, (i, seen)
        die = next(g for g in t.groups("die") if i in g)
        assert checks.cpus(seen["l3"]) == die, (i, seen)
    assert {int(n): checks.cpus(c) for n, c in facts["numa"].items()} == {
        n: nd.cpus for n, nd in enumerate(t.numa)}


def _result(guest: runner.GuestRun, driver: str, scenario: str) -> dict[str, Any]:
    for r in guest.results["results"]:
        if (r["driver"], r["scenario"], r["containerd"]) == (driver, scenario, "2.1"):
            return r
    raise AssertionError(f"no result for {driver}/{scenario}; guest finished: "
                         f"{guest.results.get('done')}")


@pytest.mark.parametrize("scenario", FAST_SCENARIOS)
@pytest.mark.parametrize("driver", DRIVERS)
def test_fast_subset(guest: runner.GuestRun, fast_topology: topology.Topology, driver: str,
                     scenario: str) -> None:
    res = _result(guest, driver, scenario)
    bad = checks.check(fast_topology, res)
    assert not bad, (f"{driver}/{scenario}: " + "\n".join(bad) + "\nseen: "
                     + checks.summary(res) + "\nplugin log:\n"
                     + res.get("plugin_log_tail", "")[-1500:])
