"""The guest's kubelet ``resize`` phase (tests/vm/guest_kubelet.py ``resize``) against a scripted
node: no guest, no runtime.

Why: in the QEMU guest (kubelet 1.37.2, containerd 2.4.2, the plugin's default ``async`` mode)
the phase failed once in three runs with the BestEffort witness recorded at ``resize: before``
with spec ``0-1,4-7`` but cgroup and /proc ``0-7``. The witness had started while the plugin's
first update for it was under way (containerd applies an update of a container that is not
running to its spec only); the plugin sent it again 1.0 s after that pass (its shrink rate
limit), at 06:34:36.83, and the harness had recorded the step at about 36.3, right after the
resize pod ran, without waiting for the witness as every other step does. The step must wait
for the witness to reach the shared pool (a lost update still fails: the wait times out).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.vm import checks, topology
from tests.vm import guest_kubelet as G

TOPO = topology.load("2s-2numa-smt")


class _API:
    def __init__(self, node: _Node) -> None:
        self.node = node

    def kubectl(self, *args: str, check: bool = True) -> str:
        if "patch" in args:  # the resize patch: its limits' cpu
            patch = json.loads(args[-1])
            self.node.patched.append(
                patch["spec"]["containers"][0]["resources"]["limits"]["cpu"])
        return ""

    def pod(self, name: str) -> dict[str, Any]:
        n = self.node
        cpu = "4" if "4" in n.patched else "2"
        conds = []
        if "8" in n.patched:
            conds.append({"type": "PodResizeInProgress", "status": "True", "reason": "Error",
                          "message": "NotEnoughCPUsError: not enough cpus available"})
        res = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
        return {"spec": {"containers": [{"name": "app", "resources": res}]},
                "status": {"conditions": conds, "containerStatuses": [
                    {"name": "app", "resources": res}]}}


class _Node(G.Node):
    """The phase's view of a node where the witness reaches the shared pool only on its
    ``lag``-th view after the resize pod runs (the plugin's re-send of a container that
    started during its update: 1.0 s after its first pass)."""

    def __init__(self, lag: int) -> None:  # no processes: what resize() calls is scripted
        self.steps, self.events, self.patched = [], [], []
        self.api = _API(self)
        self.lag = lag
        self.witness_views = 0

    def create(self, p: dict[str, Any]) -> None:
        pass

    def delete(self, *names: str) -> None:
        pass

    def wait_running(self, name: str, ctr: str) -> str:
        return f"{name}-id"

    def view(self, cid: str) -> dict[str, Any]:
        if cid == "resize-id":
            cpus = "1-4" if self.patched else "2-3"
        else:
            self.witness_views += 1
            cpus = ("0,5-7" if self.patched else
                    "0-1,4-7" if self.witness_views > self.lag else "0-7")
        spec = "0-1,4-7" if cid == "witness-id" and not self.patched else cpus
        return {"spec": spec, "cgroup": cpus, "proc": cpus, "spec_mems": "", "cgroup_mems": "0-1",
                "proc_mems": "0-1", "cpu_max": "max 100000"}

    def entry(self, name: str, ctr: str, cid: str) -> dict[str, Any]:
        qos = "Guaranteed" if name == "resize" else "BestEffort"
        res = self.api.pod(name)["spec"]["containers"][0]["resources"] if qos == (
            "Guaranteed") else {}
        return {"qos": qos, "requests": res.get("requests", {}),
                "limits": res.get("limits", {}), "pod": name, "container": ctr, "id": cid,
                **self.view(cid)}


class _Clock:
    """The harness's waits on a clock of their own: a sleep moves it on, takes no time."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> _Node:
    clock = _Clock()
    monkeypatch.setattr(G.cg, "host_online_cpus", lambda: "0-7")
    monkeypatch.setattr(G.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(G.time, "sleep", clock.sleep)
    return _Node(lag=2)


def test_resize_records_its_first_step_once_the_witness_left_the_new_exclusive_cpus(node):
    G.resize(node)
    before = node.steps[0]
    assert before["step"] == "resize: before"
    w = before["containers"]["witness"]
    assert (w["spec"], w["cgroup"], w["proc"]) == ("0-1,4-7",) * 3
    assert checks.check_step(TOPO, before) == []
    # two views on 0-7, the third on the pool: two polls of 0.5 s
    assert before["witness_seconds"] == 1.0


def test_resize_still_fails_when_the_witness_never_leaves_them(node):
    node.lag = 10**9  # the update lost for good: the wait times out, nothing recorded
    with pytest.raises(G.KubeletError, match="witness.*last seen: spec=0-1,4-7 cgroup=0-7"):
        G.resize(node)
    assert node.steps == []


def test_every_step_says_when_it_was_recorded(node):
    G.resize(node)
    ats = [st["at"] for st in node.steps]
    assert len(ats) == 3 and ats == sorted(ats)
    assert all(a.endswith("Z") and a.startswith("20") for a in ats)
