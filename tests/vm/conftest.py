"""One QEMU boot of the fast topology for the whole tests/vm run (``make test``).

The fast subset (tests/vm/test_guest_e2e.py) and the real kubelet
(tests/vm/test_guest_kubelet.py) share the boot: the guest runs the kubelet's phases on each
containerd version, then the fast scenarios (tests/vm/guest_scenarios.py runs both when the
job has a ``kubelet`` section). A boot costs 24-184 s under TCG on the loaded development
machine (docs/development/qemu-guests.md); the control plane stays up on the host for it.
When the kubelet cannot run here (turned off with ``NRI_E2E_VM_KUBELET=0``, or its binaries
missing outside CI) the boot runs the fast subset alone and the kubelet's tests skip with the
reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.vm import runner, topology


@dataclass
class FastGuest:
    """The shared boot: its run, and why the kubelet's phases are not in it (None: they
    are)."""

    run: runner.GuestRun
    kubelet_skipped: str | None


def vm_gate() -> None:
    """Skip unless ``NRI_E2E_VM=1`` and the machine can run QEMU guests (fail under CI)."""
    if os.environ.get("NRI_E2E_VM") != "1":
        pytest.skip("QEMU guest tests not requested (NRI_E2E_VM=1; make test sets it)")
    reasons = runner.missing()
    if reasons:
        msg = "QEMU guest tests cannot run here: " + "; ".join(reasons)
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set: the end-to-end tests are required)", pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def fast_topology() -> topology.Topology:
    return next(t for t in topology.all_topologies() if t.fast)


@pytest.fixture(scope="session")
def fast_guest(fast_topology: topology.Topology) -> FastGuest:
    from tests.vm import reconfigure_checks
    from tests.vm.test_guest_e2e import DRIVERS, FAST_SCENARIOS, RECONFIGURE_SCENARIOS
    from tests.vm.test_guest_kubelet import kubelet_versions, missing, run_kubelet_guest

    vm_gate()
    keep = os.environ.get("NRI_VM_KEEP")
    keep_dir = Path(keep) if keep else None
    names = FAST_SCENARIOS + RECONFIGURE_SCENARIOS
    scen = {"containerd": ["2.1"], "drivers": DRIVERS,
            "scenarios": reconfigure_checks.job_names(names, DRIVERS)}
    guest_seconds = reconfigure_checks.seconds(names, 1, DRIVERS)
    why: str | None = None
    if os.environ.get("NRI_E2E_VM_KUBELET") == "0":
        why = "the guest kubelet test is turned off (NRI_E2E_VM_KUBELET=0)"
    else:
        versions = kubelet_versions()
        dirs, reasons = missing(versions)
        if reasons:
            why = "the guest kubelet test cannot run here: " + "; ".join(reasons)
            if os.environ.get("CI"):
                pytest.fail(why + " (CI is set: the end-to-end tests are required)",
                            pytrace=False)
    if why is None:
        run, _ = run_kubelet_guest(fast_topology, versions, dirs, keep=keep_dir,
                                   timeout=600 + 900 * len(versions) + guest_seconds, **scen)
    else:
        run = runner.run_guest(fast_topology, keep=keep_dir, timeout=float(
            os.environ.get("NRI_VM_TIMEOUT") or 300 + guest_seconds), **scen)
    return FastGuest(run, why)
