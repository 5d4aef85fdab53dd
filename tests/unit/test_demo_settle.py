"""``make demo`` (scripts/demo.py) waits for the shared containers: the shipped
``sharedPoolUpdateMode: auto`` moves them from the plugin's worker after the creation that
shrank the shared pool, so a table read right after the creates showed them on the old pool.
Its wait (``_settle``) against a fake CRI whose containers move a few reads late, and its
timeout; the real runs are tests/e2e/test_demo.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nri_demo", REPO / "scripts" / "demo.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nri_demo"] = mod
    spec.loader.exec_module(mod)
    return mod


class FakeCRI:
    """Containers on ``before`` until ``moves_after`` reads of their /proc, then on ``after``
    (the spec and the cgroup move with it, the cgroup one read earlier, as runc writes it)."""

    def __init__(self, before: dict[str, str], after: dict[str, str], moves_after: int) -> None:
        self.before, self.after, self.moves_after = before, after, moves_after
        self.reads = 0

    def _cpus(self, cid: str, early: int = 0) -> str:
        return (self.after if self.reads + early >= self.moves_after else self.before)[cid]

    def proc_cpus(self, cid: str) -> str:
        self.reads += cid == "be"
        return self._cpus(cid)

    def spec_cpus(self, cid: str) -> str:
        return self._cpus(cid)

    def cgroup_cpus(self, cid: str) -> str:
        return self._cpus(cid, early=1)


CHECKPOINT = {"defaultCpuSet": "0", "containers": [
    {"pod": "e2e/besteffort", "container": "app", "cpus": "0", "exclusive": False},
    {"pod": "e2e/guaranteed-1cpu", "container": "app", "cpus": "1", "exclusive": True},
]}
CIDS = {"besteffort": ("be", "BestEffort"), "guaranteed-1cpu": ("g1", "Guaranteed")}


def test_waits_until_the_shared_containers_are_on_the_checkpoints_shared_pool(
        demo: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "_checkpoint", lambda work: CHECKPOINT)
    cri = FakeCRI({"be": "0-1", "g1": "1"}, {"be": "0", "g1": "1"}, moves_after=4)
    seen, pool, wrong, _ = demo._settle(cri, Path("/nowhere"), CIDS, timeout=10)
    assert wrong == [] and pool == "0"
    assert seen == {"besteffort": ("0", "0", "0"), "guaranteed-1cpu": ("1", "1", "1")}
    assert cri.reads == 4  # it read the old pool three times and waited


def test_a_half_moved_container_is_not_settled(demo: ModuleType,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the cgroup on the new pool, /proc and the spec not yet: still waiting
    monkeypatch.setattr(demo, "_checkpoint", lambda work: CHECKPOINT)
    cri = FakeCRI({"be": "0-1", "g1": "1"}, {"be": "0", "g1": "1"}, moves_after=2)
    seen, _, wrong, _ = demo._settle(cri, Path("/nowhere"), CIDS, timeout=10)
    assert wrong == [] and seen["besteffort"] == ("0", "0", "0") and cri.reads == 2


def test_times_out_with_what_is_wrong(demo: ModuleType,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "_checkpoint", lambda work: CHECKPOINT)
    cri = FakeCRI({"be": "0-1", "g1": "1"}, {"be": "0-1", "g1": "1"}, moves_after=0)
    seen, pool, wrong, waited = demo._settle(cri, Path("/nowhere"), CIDS, timeout=0.3)
    assert waited >= 0.3 and pool == "0"
    assert wrong == ["besteffort: /proc 0-1, spec 0-1, cgroup 0-1; the shared pool in the "
                     "checkpoint: 0"]
    assert seen["besteffort"] == ("0-1", "0-1", "0-1")


def test_no_checkpoint_yet_is_not_settled(demo: ModuleType,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "_checkpoint", lambda work: None)
    cri = FakeCRI({"be": "0", "g1": "1"}, {"be": "0", "g1": "1"}, moves_after=0)
    _, _, wrong, _ = demo._settle(cri, Path("/nowhere"), CIDS, timeout=0.2)
    assert wrong == ["besteffort: not in the plugin's checkpoint",
                     "guaranteed-1cpu: not in the plugin's checkpoint"]
