"""The e2e harness's cgroup readers on fake cgroup v1 and v2 trees (tests/e2e/harness/cgroups.py):
v1/v2 detection, where a container's files are, the v2 file names and formats, the live-node
check, and that the harness's own cgroup parent is one the plugin's QoS classifier knows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import qos_from_cgroup_parent
from tests.e2e.harness import cgroups as cg
from tests.e2e.harness.cri import cgroup_parent

CID = "c0ffee"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    root = tmp_path / "v1"
    rel = f"{cg.KUBEPODS.lstrip('/')}/podu1/{CID}"
    _write(root / "cpuset/cpuset.cpus", "0-3")
    _write(root / "cpuset" / rel / "cpuset.cpus", "2-3")
    _write(root / "cpuset" / rel / "cpuset.mems", "0")
    _write(root / "cpu" / rel / "cpu.cfs_quota_us", "-1")
    _write(root / "cpu" / rel / "cpu.shares", "2048")
    _write(root / "memory" / rel / "memory.limit_in_bytes", "100663296")
    return root


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    root = tmp_path / "v2"
    d = root / cg.KUBEPODS.lstrip("/") / "podu1" / CID
    _write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids")
    _write(d / "cpuset.cpus", "")  # unset here: the effective set is inherited
    _write(d / "cpuset.cpus.effective", "1")
    _write(d / "cpuset.mems.effective", "0")
    _write(d / "cpu.max", "150000 100000")
    _write(d / "cpu.weight", str(cg.shares_to_weight(1536)))
    _write(d / "memory.max", "100663296")
    return root


def test_version_detection(v1: Path, v2: Path) -> None:
    assert (cg.cgroup_version(v1), cg.cgroup_version(v2)) == (1, 2)
    assert cg.cpuset_available(v1) and cg.cpuset_available(v2)
    _write(v2 / "cgroup.controllers", "cpu io memory pids")
    assert not cg.cpuset_available(v2)


def test_cgroupfs_paths(v1: Path, v2: Path) -> None:
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    assert cg.controller_dir("cpuset", path, v1) == v1 / "cpuset" / path.lstrip("/")
    assert cg.controller_dir("cpuset", path, v2) == v2 / path.lstrip("/")
    assert cg.controller_dir("cpu", path, v2) == cg.controller_dir("memory", path, v2)


def test_systemd_paths_on_v2(v2: Path) -> None:
    p = "kubepods-burstable-podu_1.slice:cri-containerd:abc"
    assert cg.controller_dir("cpuset", p, v2) == v2 / (
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice/"
        "cri-containerd-abc.scope")


def test_v1_readers(v1: Path) -> None:
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    assert cg.read_cgroup_file("cpuset", path, "cpuset.cpus", v1) == "2-3"
    assert cg.read_cgroup_file("cpuset", path, "cpuset.mems", v1) == "0"
    assert cg.read_cgroup_file("memory", path, "memory.limit_in_bytes", v1) == "100663296"
    assert cg.cpu_quota_us(path, v1) == -1
    assert cg.cpu_shares(path, v1) == 2048


def test_v2_readers(v2: Path) -> None:
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    # the effective cpuset, not the (empty) requested one
    assert cg.read_cgroup_file("cpuset", path, "cpuset.cpus", v2) == "1"
    assert cg.read_cgroup_file("cpuset", path, "cpuset.mems", v2) == "0"
    assert cg.read_cgroup_file("memory", path, "memory.limit_in_bytes", v2) == "100663296"
    assert cg.cpu_quota_us(path, v2) == 150000
    _write(v2 / path.lstrip("/") / "cpu.max", "max 100000")
    assert cg.cpu_quota_us(path, v2) == -1
    shares = cg.cpu_shares(path, v2)
    assert cg.shares_to_weight(shares) == cg.shares_to_weight(1536)
    assert shares <= 1536


@pytest.mark.parametrize(("shares", "weight"), [(0, 0), (2, 1), (1024, 39), (262144, 10000)])
def test_shares_to_weight(shares: int, weight: int) -> None:
    # runc's conversion: 2..262144 onto 1..10000 linearly
    assert cg.shares_to_weight(shares) == weight


@pytest.mark.parametrize("weight", [1, 2, 39, 100, 5000, 10000])
def test_weight_back_to_smallest_shares(tmp_path: Path, weight: int) -> None:
    root = tmp_path / "r"
    _write(root / "cgroup.controllers", "cpu")
    _write(root / "x/cpu.weight", str(weight))
    s = cg.cpu_shares("/x", root)
    assert cg.shares_to_weight(s) == weight and (s == 2 or cg.shares_to_weight(s - 1) < weight)


def test_mounts_parsing(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "sysfs /sys sysfs rw 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert cg._cgroup_mounts(mounts) == [(Path("/sys/fs/cgroup/cpuset"), "cgroup"),
                                         (Path("/sys/fs/cgroup/unified"), "cgroup2")]


def test_remove_tree_in_every_hierarchy(tmp_path: Path) -> None:
    hier = {"cpuset": tmp_path / "cpuset", "unified": tmp_path / "unified"}
    for h in hier.values():
        (h / cg.KUBEPODS.lstrip("/") / "besteffort/podu1").mkdir(parents=True)
    (hier["unified"] / "kubepods/burstable").mkdir(parents=True)  # the node's: not ours
    assert cg.remove_cgroup_tree(cg.TEST_ROOT, hier) == []
    assert not any((h / cg.TEST_ROOT.lstrip("/")).exists() for h in hier.values())
    assert (hier["unified"] / "kubepods/burstable").is_dir()
    with pytest.raises(ValueError):
        cg.remove_empty_kubepods("/kubepods")
    with pytest.raises(ValueError):
        cg.remove_cgroup_tree("/", hier)


def test_each_run_has_its_own_root(tmp_path: Path) -> None:
    # two runs side by side (the demo beside make e2e): each removes only its own tree
    assert cg.TEST_ROOT.startswith(cg.TEST_BASE + "/run-")
    assert os.environ[cg.RUN_ROOT_ENV] == cg.TEST_ROOT  # children of this run share it
    hier = {"cpuset": tmp_path / "cpuset"}
    other = hier["cpuset"] / cg.TEST_BASE.lstrip("/") / "run-1" / "kubepods/podu2"
    other.mkdir(parents=True)
    (hier["cpuset"] / cg.KUBEPODS.lstrip("/") / "podu1").mkdir(parents=True)
    assert cg.remove_cgroup_tree(cg.TEST_ROOT, hier) == []
    assert other.is_dir()
    assert not (hier["cpuset"] / cg.TEST_ROOT.lstrip("/")).exists()


def test_live_node_detection(tmp_path: Path) -> None:
    proc, hier = tmp_path / "proc", {"unified": tmp_path / "unified"}
    _write(proc / "1/comm", "systemd")
    _write(proc / "77/comm", "containerd")
    kp = hier["unified"] / "kubepods"
    (kp / "besteffort/podold").mkdir(parents=True)  # empty leftovers: not live
    _write(kp / "cgroup.procs", "")
    assert cg.live_node_reasons(proc, hier) == []
    _write(kp / "besteffort/podold/ctr/cgroup.procs", "4242")
    (r,) = cg.live_node_reasons(proc, hier)
    assert "kubepods holds processes" in r
    _write(proc / "900/comm", "kubelet")
    assert cg.live_node_reasons(proc, {})[0] == "a kubelet process runs (pid 900)"
    # a kubelet in a mount namespace of its own (the test cluster, a kind node) does not count
    (proc / "self/ns").mkdir(parents=True)
    (proc / "900/ns").mkdir()
    (proc / "self/ns/mnt").symlink_to("mnt:[4026531841]")
    (proc / "900/ns/mnt").symlink_to("mnt:[4026532999]")
    assert cg.live_node_reasons(proc, {}) == []
    (proc / "900/ns/mnt").unlink()
    (proc / "900/ns/mnt").symlink_to("mnt:[4026531841]")
    assert cg.live_node_reasons(proc, {})[0] == "a kubelet process runs (pid 900)"


@pytest.mark.parametrize(("qos", "expected"), [
    ("Guaranteed", QOSClass.GUARANTEED), ("Burstable", QOSClass.BURSTABLE),
    ("BestEffort", QOSClass.BESTEFFORT)])
def test_classifier_knows_the_harness_parent(qos: str, expected: QOSClass) -> None:
    # the pods of the tests and the demo live under /nri-cpumgr-test/kubepods; the plugin must
    # still read their QoS from the parent as it does for the kubelet's /kubepods/...
    parent = cgroup_parent(qos, "0b4a6c1e-1111-2222")
    assert parent.startswith(cg.TEST_ROOT + "/kubepods/")
    assert qos_from_cgroup_parent(parent) is expected


@pytest.mark.parametrize(("shares", "weight"),
                         [(0, 0), (1, 1), (2, 1), (1024, 100), (262144, 10000), (300000, 10000)])
def test_shares_to_weight_log(shares: int, weight: int) -> None:
    # runc >= 1.3.2: the ends and the v1 default (1024) onto the v2 default (100)
    assert cg.shares_to_weight_log(shares) == weight


def test_shares_to_weight_log_is_monotonic() -> None:
    weights = [cg.shares_to_weight_log(s) for s in range(2, 262145, 97)]
    assert weights == sorted(weights) and weights[0] == 1 and weights[-1] <= 10000


@pytest.mark.parametrize("convert", [cg.shares_to_weight, cg.shares_to_weight_log])
def test_guaranteed_request_on_v2_matches_either_runc(v2: Path, convert) -> None:
    """A 1500m request (shares 1536) as each runc version writes it on v2 is accepted; the
    v1 number itself (the check the e2e test used to make) is not what v2 holds."""
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    _write(v2 / path.lstrip("/") / "cpu.weight", str(convert(1536)))
    got = cg.cpu_weight_or_shares(path, v2)
    assert got == convert(1536) and got in cg.expected_cpu_weight_or_shares(1536, v2)
    assert cg.cpu_shares(path, v2) != 1536


def test_wrong_weight_on_v2_is_refused(v2: Path) -> None:
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    for wrong in (cg.shares_to_weight(1024), cg.shares_to_weight_log(1024), 1536):
        _write(v2 / path.lstrip("/") / "cpu.weight", str(wrong))
        assert cg.cpu_weight_or_shares(path, v2) not in cg.expected_cpu_weight_or_shares(1536, v2)


def test_shares_checked_exactly_on_v1(v1: Path) -> None:
    path = f"{cg.KUBEPODS}/podu1/{CID}"
    assert cg.cpu_weight_or_shares(path, v1) == 2048
    assert cg.expected_cpu_weight_or_shares(2048, v1) == {2048}
    assert 2048 not in cg.expected_cpu_weight_or_shares(2047, v1)
