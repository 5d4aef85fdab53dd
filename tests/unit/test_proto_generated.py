"""The committed generated protobuf modules match proto/ (scripts/gen_proto.py --check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date() -> None:
    res = subprocess.run(
        [sys.executable, str(TOP / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=TOP,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "up to date" in res.stdout


def test_check_reports_stale_file(tmp_path, monkeypatch) -> None:
    """--check must fail (and name the file) when a committed module differs."""
    sys.path.insert(0, str(TOP / "scripts"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    fake_out = tmp_path / "api"
    fake_out.mkdir()
    for f in (TOP / "nri_cpumgr" / "api").glob("*_pb2.py*"):
        (fake_out / f.name).write_bytes(f.read_bytes())
    (fake_out / "nri_pb2.py").write_text("# tampered\n")
    monkeypatch.setattr(gen_proto, "OUT_DIR", fake_out)
    monkeypatch.setattr(gen_proto, "TOP", tmp_path)
    assert gen_proto.check() == 1


def test_generated_imports_are_absolute() -> None:
    from nri_cpumgr.api import nri_pb2, ttrpc_pb2

    assert nri_pb2.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    assert ttrpc_pb2.Status.DESCRIPTOR.fields_by_name["message"].number == 2
