"""The conformance suite against a corpus missing optional groups (``$NRI_CPUMGR_CONFORMANCE``
naming, e.g., the shared corpus, which predates ``cpumanager/pod_level.json``): the missing
groups' tests are skipped, each with the group's name, and collection does not fail; a
missing required group still fails. Runs pytest in a child process on a copy of the
repository's corpus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "conformance"
FILES = ["tests/conformance/test_cpumanager_pod_level.py",
         "tests/conformance/test_topologymanager_optional.py",
         "tests/conformance/test_cpumanager_take.py"]


def _run(corpus: Path, files: list[str] = FILES) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NRI_CPUMGR_CONFORMANCE": str(corpus)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    dst = tmp_path / "corpus"
    shutil.copytree(CORPUS, dst)
    return dst


def test_missing_optional_groups_are_skipped_by_name(corpus: Path) -> None:
    (corpus / "cpumanager" / "pod_level.json").unlink()
    (corpus / "optional" / "topologymanager" / "scope.json").unlink()
    r = _run(corpus)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # one skip per parametrized test of a missing group, each naming it
    assert out.count("cpumanager/pod_level.json not in $NRI_CPUMGR_CONFORMANCE") == 2, out
    assert out.count("optional/topologymanager/scope.json not in $NRI_CPUMGR_CONFORMANCE") == 1
    # the groups still present ran, every case: take.json's and the other optional groups'
    summary = out.strip().splitlines()[-1]
    ran = sum(len(json.loads((corpus / g).read_text())) for g in (
        "cpumanager/take.json", "optional/topologymanager/hint_merger.json",
        "optional/topologymanager/numa_info.json"))
    assert summary.startswith(f"{ran} passed, 3 skipped"), out


def test_missing_required_group_fails_collection(corpus: Path) -> None:
    (corpus / "cpumanager" / "take.json").unlink()
    r = _run(corpus, FILES[-1:])
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "conformance group" in out and "take.json missing" in out, out
