"""tests/vm/runner.py without QEMU: a boot whose job share could not be mounted is booted once
more; twice is an error naming it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.vm import runner, topology


class FakeQemu:
    """Stands for the QEMU process: writes what the guest would (console, results)."""

    boots: list[str] = []
    outcomes: list[str] = []

    def __init__(self, cmd: list[str], **kw: object) -> None:
        job = Path(next(a for a in cmd if a.startswith("file:"))[5:]).parent
        what = FakeQemu.outcomes.pop(0)
        FakeQemu.boots.append(what)
        if what == "no-share":
            (job / "console.log").write_text(
                "mount: /mnt/job: special device job does not exist.\n"
                "[FAILED] Failed to start nri-vm-job.service\n")
        else:
            (job / "console.log").write_text("")
            (job / "results.json").write_text(json.dumps({"results": [], "done": True}))
        self.returncode = 0

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def poll(self) -> int:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[FakeQemu]:
    monkeypatch.setattr(runner, "build_guest", lambda: tmp_path)
    monkeypatch.setattr(runner, "tools", lambda: tmp_path)

    def wheel(dest: Path) -> Path:
        w = dest / "nri_cpumgr-0-py3-none-any.whl"
        w.write_bytes(b"")
        return w

    monkeypatch.setattr(runner, "build_wheel", wheel)
    monkeypatch.setattr(subprocess, "Popen", FakeQemu)
    FakeQemu.boots, FakeQemu.outcomes = [], []
    return FakeQemu


def fast() -> topology.Topology:
    return next(t for t in topology.all_topologies() if t.fast)


def test_missing_job_share_boots_once_more(fake: type[FakeQemu]) -> None:
    fake.outcomes = ["no-share", "ok"]
    run = runner.run_guest(fast(), containerd=[], drivers=[], scenarios=[])
    assert fake.boots == ["no-share", "ok"] and run.results["done"] is True


def test_missing_job_share_at_every_boot_is_an_error(fake: type[FakeQemu]) -> None:
    fake.outcomes = ["no-share"] * runner.GUEST_BOOTS
    with pytest.raises(runner.GuestError, match="failed 3 times: .*special device job does "
                       "not exist"):
        runner.run_guest(fast(), containerd=[], drivers=[], scenarios=[])
    assert fake.boots == ["no-share"] * 3


def test_two_crashes_then_a_good_boot_pass(fake: type[FakeQemu]) -> None:
    """Multi-threaded TCG can crash a guest kernel in its own start-up twice in a row (a
    topology of a make e2e-vm lost both boots): the third boot runs the job."""
    fake.outcomes = ["no-share", "no-share", "ok"]
    run = runner.run_guest(fast(), containerd=[], drivers=[], scenarios=[])
    assert fake.boots == ["no-share", "no-share", "ok"] and run.results["done"] is True
