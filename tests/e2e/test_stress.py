"""No hang under churn (issue 21): the short run of tests/e2e/stress.py with the shipped
``sharedPoolUpdateMode`` on each containerd version, every CRI call under a 20 s deadline.

``make stress`` runs the same churn for 10 minutes per version. The shrink and grow delays
are the stress tool's (100ms / 0s: a shrink and a grow pass after every Guaranteed pod),
shorter than the shipped ones so that the passes the deadlock needs are frequent: with
``sharedPoolUpdateMode: async`` the same churn hangs containerd 1.7.24 and 2.1.9 within
minutes (docs/runtimes.md). ``NRI_E2E_STRESS_SECONDS`` sets the
churn time (default 45).
"""

from __future__ import annotations

import os

from tests.e2e import stress
from tests.e2e.conftest import require_e2e

SECONDS = float(os.environ.get("NRI_E2E_STRESS_SECONDS", "45"))


def test_churn_with_the_shipped_mode_never_outlives_a_deadline(containerd_version, tmp_path):
    require_e2e(containerd_version)
    r = stress.run(containerd_version, minutes=SECONDS / 60, mode=None, out=tmp_path / "out")
    report = "\n".join(r.lines())
    print(report)
    assert r.hang is None, report
    # containerd 1.7.24 / 2.1.9 and CRI-O vendor NRI < v0.12.1: CRI calls; 2.4.2 has the fix
    assert r.mode == ("async" if containerd_version == "2.4" else "cri"), report
    assert not r.errors, report
    # the churn churned: Guaranteed pods came and went, each moving the shared containers
    assert r.cycles.get("Guaranteed", 0) >= 3, report
    assert r.cycles.get("BestEffort", 0) >= 6, report
    assert r.passes >= 2, report
