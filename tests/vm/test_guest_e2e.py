"""End-to-end on cgroup v2 and a real multi-socket/NUMA/SMT topology, inside a QEMU guest.

One boot of the fast topology (``fast = true`` in tests/vm/topologies) runs every scenario of
:data:`FAST_SCENARIOS` on containerd 2.1 with the cgroupfs driver and then the systemd
driver; the guest records the cpusets of the OCI spec, the cgroup v2 files and /proc, and
these tests judge them (:mod:`tests.vm.checks`); then, with the cgroupfs driver only, the
live reconfiguration checks of :data:`RECONFIGURE_SCENARIOS`. The guest image is built, or
reused from ``NRI_VM_CACHE``, by the session fixture (cold: about 4 minutes; the boot and
scenarios about 5, the reconfiguration ones more). The boot is shared with
tests/vm/test_guest_kubelet.py (tests/vm/conftest.py). The full matrix (every topology,
containerd 1.7 too) is ``make e2e-vm``.

Gate: requested with ``NRI_E2E_VM=1`` (``make test`` and ``make e2e-vm`` set it), else
skipped with the reason. When requested but the machine cannot run it (not root, tools
missing) it is skipped, or fails when ``CI`` is set, as tests/e2e/conftest.py does.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vm import checks, reconfigure_checks, runner, topology
from tests.vm.conftest import FastGuest

pytestmark = pytest.mark.e2e

FAST_SCENARIOS = ["docs", "full-pcpus-only", "numa-memory"]
DRIVERS = ["cgroupfs", "systemd"]
#: issue 35's checks with running containers (tests/vm/guest_reconfigure.py), on containerd
#: 2.1 with the cgroupfs driver only (reconfigure_checks.DRIVER); none -> static -> none and
#: the SIGKILL mid-plan run in `make e2e-vm` (and on the host's cgroup v1 in `make e2e`)
RECONFIGURE_SCENARIOS = ["reconfigure-reserved", "reconfigure-full-pcpus-only"]


@pytest.fixture(scope="module")
def guest(fast_guest: FastGuest) -> runner.GuestRun:
    """The shared boot (tests/vm/conftest.py: with the guest kubelet's phases unless those
    cannot run)."""
    return fast_guest.run


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


@pytest.mark.parametrize("scenario", RECONFIGURE_SCENARIOS)
def test_live_reconfiguration(guest: runner.GuestRun, fast_topology: topology.Topology,
                              scenario: str) -> None:
    """reservedSystemCPUs 0 -> 0-1 with 20 running containers moves only the one on CPU 1;
    full-pcpus-only moves the SMT-misaligned container only (spec, cgroup v2, /proc)."""
    res = _result(guest, reconfigure_checks.DRIVER, scenario)
    bad = checks.check(fast_topology, res)
    assert not bad, (f"{scenario}: " + "\n".join(bad) + "\nseen: " + checks.summary(res)
                     + "\nplugin log:\n" + res.get("plugin_log_tail", "")[-1500:])
