"""The shell entry points a user runs first: ``scripts/build_image.sh --help`` and
``scripts/clean.sh`` (``make clean``) on a throw-away checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str, cwd: Path = REPO, cache: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    # never the machine's /var/cache/nri-cpumgr: clean.sh removes the cache it is given
    env = dict(os.environ, NRI_CPUMGR_CACHE=str(cache or cwd / "no-such-cache"))
    return subprocess.run(["bash", *argv], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_build_image_help_is_usage_not_a_tag(flag: str) -> None:
    r = _run("scripts/build_image.sh", flag)
    assert r.returncode == 0, r.stderr
    assert "usage: scripts/build_image.sh [TAG]" in r.stdout
    assert "IMAGE_STORE=DIR" in r.stdout and "set -euo" not in r.stdout
    assert "[build_image]" not in r.stderr  # nothing was started


@pytest.mark.parametrize("argv", [["--tag", "x"], ["-x"], ["a:1", "b:2"]])
def test_build_image_bad_arguments(argv: list[str]) -> None:
    r = _run("scripts/build_image.sh", *argv)
    assert r.returncode == 2
    assert r.stderr.startswith("build_image.sh: ") and "usage:" in r.stderr


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A fake checkout with everything setup, the tests and a shared runtime create."""
    top = tmp_path / "co"
    (top / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts/clean.sh", top / "scripts/clean.sh")
    shared = tmp_path / "shared-runtime"
    (shared / "containerd-1.7").mkdir(parents=True)
    (shared / "containerd-1.7/containerd").write_text("binary")
    (top / ".runtime").symlink_to(shared)
    for d in [".venv/bin", ".pytest_cache/v", ".ruff_cache/0.6", ".hypothesis/examples",
              "nri_cpumgr.egg-info", "build/lib", "dist", "tests/e2e/_cri",
              "nri_cpumgr/__pycache__", "nri_cpumgr/cm/__pycache__", "tests/unit/__pycache__",
              ".git/hooks/__pycache__"]:
        (top / d).mkdir(parents=True)
        (top / d / "f").write_text("x")
    for f in ["nri_cpumgr/__init__.py", "tests/unit/test_x.py", "README.md"]:
        (top / f).write_text("kept")
    return top, shared


def _tree(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def test_clean_removes_setup_and_caches_but_not_a_shared_runtime(tmp_path: Path) -> None:
    top, shared = _checkout(tmp_path)
    cache = tmp_path / "cache"  # the cluster binaries and guest images outside the checkout
    (cache / "cluster/abc/bin").mkdir(parents=True)
    (cache / "cluster/abc/bin/kubelet").write_text("binary")
    r = _run("scripts/clean.sh", cwd=top, cache=cache)
    assert r.returncode == 0, r.stderr
    assert (cache / "cluster/abc/bin/kubelet").exists()  # shared by every checkout: kept
    assert f"kept {cache}" in r.stdout and "make clean-cache" in r.stdout
    r2 = _run("scripts/clean.sh", "--cache", cwd=top, cache=cache)
    assert r2.returncode == 0 and not cache.exists() and f"removed {cache}" in r2.stdout
    assert _tree(top) == {
        "scripts", "scripts/clean.sh", "nri_cpumgr", "nri_cpumgr/__init__.py", "nri_cpumgr/cm",
        "tests", "tests/unit", "tests/unit/test_x.py", "tests/e2e", "README.md",
        ".git", ".git/hooks", ".git/hooks/__pycache__", ".git/hooks/__pycache__/f"}
    # the link went, what it pointed to did not
    assert (shared / "containerd-1.7/containerd").read_text() == "binary"
    assert f"removed the symlink .runtime (its target {shared} is left)" in r.stdout


def test_clean_removes_a_real_runtime_dir(tmp_path: Path) -> None:
    top, _ = _checkout(tmp_path)
    (top / ".runtime").unlink()
    (top / ".runtime/images").mkdir(parents=True)
    (top / ".runtime/images/nri-cpumgr.tar").write_text("x")
    assert _run("scripts/clean.sh", cwd=top).returncode == 0
    assert not (top / ".runtime").exists() and not (top / ".venv").exists()


def test_fake_runtime_bench_without_the_go_peer_skips_with_one_line(tmp_path: Path) -> None:
    """`make bench` in a plain clone (no .runtime/go-peer): the Go comparison is skipped with
    one line saying how to get the plugin, exit 0 (it used to exit 2 and fail make)."""
    import sys

    env = dict(os.environ, GO_PEER=str(tmp_path / "no-go-peer"))
    r = subprocess.run([sys.executable, str(REPO / "benchmarks/fake_runtime.py"), "--quick"],
                       cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith(f"skipped (no Go comparison plugin at {tmp_path}/no-go-peer)")
    assert "../shared/tools/go-peer/build.sh" in lines[0] and "GO_PEER=PATH" in lines[0]


def test_readme_runs_benchmarks_with_the_venv_python() -> None:
    """`python3 benchmarks/X.py` fails with ModuleNotFoundError outside the venv: the README,
    the docs and the scripts' own usage lines say `.venv/bin/python benchmarks/X.py`."""
    texts = {str(p.relative_to(REPO)): p.read_text() for p in [
        REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "benchmarks").glob("*.py"))]}
    bare = [name for name, text in texts.items() if "python3 benchmarks/" in text]
    assert bare == []
    log = texts["docs/development/measurements.md"]  # the tables and their commands
    assert ".venv/bin/python benchmarks/fake_runtime.py" in log


def test_the_benchmarks_python_is_the_interpreter_a_wrapper_runs_and_must_run_the_plugin(
        tmp_path: Path) -> None:
    """``--python`` (footprint.py, fake_runtime.py): a wrapper such as pyenv's shim gives
    way to the interpreter it runs; an interpreter without the plugin's dependencies is
    refused with one line, not a traceback after its launch (found by a fresh user)."""
    import pytest

    from benchmarks.footprint import interpreter_path

    shim = tmp_path / "python3"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    shim.chmod(0o755)
    assert interpreter_path(str(shim)) == os.path.abspath(sys.executable)
    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'google'\" >&2\n"
                    "exit 1\n")
    bare.chmod(0o755)
    with pytest.raises(SystemExit, match=r"--python .*bare-python: it cannot run the plugin "
                       r"\(ModuleNotFoundError: No module named 'google'\)"):
        interpreter_path(str(bare))
    with pytest.raises(SystemExit, match="no such interpreter"):
        interpreter_path(str(tmp_path / "none"))
