"""Unit tests never adopt the host's kubelet checkpoints: a kubelet running on the
development machine (``/var/lib/kubelet/cpu_manager_state``) must not change their results.
Tests of the adoption pass their own ``kubeletStateDirectory``.

Shared fixtures: ``sock_path`` (a unix socket path in a fresh short directory: sun_path is
108 bytes) and ``workdir`` (a fresh directory), both removed afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_path() -> Iterator[Path]:
    d = tempfile.mkdtemp(prefix="nri-t-", dir="/tmp")
    try:
        yield Path(d) / "nri.sock"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="nri-p-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_host_kubelet_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from nri_cpumgr.config import Config
    from nri_cpumgr.runtime import plugin

    host = Config().kubeletStateDirectory
    real = plugin.adopt_seed

    def seed(directory: str, *args: str):  # type: ignore[no-untyped-def]
        return (None, None, None) if directory == host else real(directory, *args)

    monkeypatch.setattr(plugin, "adopt_seed", seed)
    yield
