"""pytest's tmp_path trees do not pile up in /tmp/pytest-of-<user>: the project's pytest
settings (pyproject.toml) keep a test's directory only when the test failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

INNER = '''
def test_passes(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 1_000_000)

def test_fails(tmp_path):
    (tmp_path / "evidence").write_text("kept for the post-mortem")
    assert False
'''


def test_only_failed_tests_keep_their_tmp_path(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner/test_inner.py").write_text(INNER)
    temp = tmp_path / "t"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path / "inner"),
         str(tmp_path / "inner/test_inner.py")],
        env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    kept = {p.name for p in temp.glob("pytest-of-*/pytest-*/*") if p.is_dir()}
    assert any(k.startswith("test_fails") for k in kept), kept
    assert not any(k.startswith("test_passes") for k in kept), kept
    assert not list(temp.glob("pytest-of-*/pytest-*/test_passes*/big"))
