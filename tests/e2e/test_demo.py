"""``make demo`` (scripts/demo.py) as a user runs it: the table, the decisions and the
plugin's ``nri-cpumgr status``; and Ctrl-C in the middle: one clear message, no traceback,
everything removed (pods, containerd, plugin, cgroups, work directory), exit status 130.

Each demo runs as its own process with a cgroup root of its own (``NRI_E2E_CGROUP_ROOT``),
so its cleanup is checked apart from this session's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.e2e.conftest import _versions, require_e2e
from tests.e2e.harness import cgroups as cg

REPO = Path(__file__).resolve().parents[2]


def _version() -> str:
    """The demo runs on the first containerd version selected (NRI_E2E_CONTAINERD)."""
    version = _versions()[0]
    require_e2e(version)
    return version


def _start_demo() -> tuple[subprocess.Popen[str], str]:
    root = f"{cg.TEST_BASE}/demo-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{cg.RUN_ROOT_ENV: root})
    argv = [sys.executable, "scripts/demo.py", "--containerd", _version()]
    # its own session, as a terminal's foreground job gets Ctrl-C: killpg below
    p = subprocess.Popen(argv, cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return p, root


def _leftovers(root: str, work: str) -> list[str]:
    left = [str(h / root.lstrip("/")) for h in cg.all_hierarchies().values()
            if (h / root.lstrip("/")).exists()]
    if Path(work).exists():
        left.append(work)
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if work.encode() in (proc / "cmdline").read_bytes():
                left.append(f"process {proc.name}")
        except OSError:
            pass
    return left


def _work_dir(first_line: str) -> str:
    m = re.search(r" in (/tmp/nri-demo-\S+) \.\.\.", first_line)
    assert m, first_line
    return m.group(1)


def test_demo_shows_the_table_and_the_plugins_status() -> None:
    p, root = _start_demo()
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, out + err
    work = _work_dir(out.splitlines()[0])
    assert re.search(r"^guaranteed-1cpu +app +Guaranteed +1 +spec=1 cgroup=1$", out, re.M), out
    # the shared containers on the shared pool (CPU 1 is guaranteed-1cpu's), not on 0-1: the
    # shipped sharedPoolUpdateMode moves them after that creation, the demo waits for it
    for name in ("besteffort", "burstable-memory", "burstable-cpu", "guaranteed-1500m"):
        assert re.search(rf"^{name} +app +\w+ +0 +spec=0 cgroup=0$", out, re.M), out
    assert "every container runs where the plugin's checkpoint puts it after" in out, out
    assert re.search(r"^guaranteed-limits-only .* refused +NotEnoughCPUsError", out, re.M), out
    status = out.split("as `nri-cpumgr status` shows it on a node:", 1)[1]
    assert f"$ nri-cpumgr status --config {work}/config.yaml" in status
    assert re.search(r"^ +shared pool: +0$", status, re.M), status
    assert re.search(r"^ +e2e/guaranteed-1cpu +app +Guaranteed +1 .* yes +live$", status, re.M)
    assert len(re.findall(r"^ +e2e/\S+ +app ", status.split("why guaranteed-1cpu")[0],
                          re.M)) == 5, status
    explain = out.split("as `nri-cpumgr explain` shows it:", 1)[1]
    assert f"$ nri-cpumgr explain e2e/guaranteed-1cpu --config {work}/config.yaml" in explain
    assert re.search(r"^ +decision: exclusive cpus 1: ", explain, re.M), explain
    assert "Traceback" not in err and _leftovers(root, work) == []


def test_ctrl_c_cleans_up_without_a_traceback() -> None:
    p, root = _start_demo()
    assert p.stdout is not None
    first = p.stdout.readline()
    work = _work_dir(first)
    line = p.stdout.readline()  # registered: containerd and the plugin run, pods are next
    assert "registered" in line, first + line
    os.killpg(p.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)  # a second Ctrl-C does not cut the cleanup short
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == [
        "interrupted: removing the demo's pods, containerd, the plugin and their cgroups ...",
        "cleaned up"], err
    assert _leftovers(root, work) == []
