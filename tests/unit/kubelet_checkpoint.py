"""The kubelet's own checkpoint writer (oracle/cmd/kubelet-checkpoint, built and cached by
scripts/oracle/build-kubelet-checkpoint.sh) for the adoption tests: checkpoints written by
the kubelet v1.37.2's cpumanager/state and memorymanager/state packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "oracle" / "build-kubelet-checkpoint.sh"


def writer_path() -> str:
    """The writer's path, built on first use. Without Go: skips, or fails when CI is set."""
    if shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("the kubelet checkpoint writer needs Go 1.26 (make oracle)")
        pytest.skip("no Go: oracle/cmd/kubelet-checkpoint cannot be built (make oracle)")
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    assert out.returncode == 0, f"{BUILD}: {out.stderr[-2000:]}"
    return out.stdout.strip()


def write(writer: str, d: Path, cpu: dict[str, Any] | None, memory: dict[str, Any] | None,
          cpu_format: str = "current", memory_format: str = "current") -> None:
    """``cpu_manager_state`` / ``memory_manager_state`` in ``d`` for the assignments given in
    the kubelet's JSON shapes (see the command's main.go)."""
    d.mkdir(parents=True, exist_ok=True)
    doc = ({"cpu": cpu} if cpu else {}) | ({"memory": memory} if memory else {})
    out = subprocess.run([writer, "-dir", str(d), "-cpu-format", cpu_format,
                          "-memory-format", memory_format], input=json.dumps(doc),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "v1.37.2"
