"""Unit tests never adopt the host's kubelet checkpoints: a kubelet running on the
development machine (``/var/lib/kubelet/cpu_manager_state``) must not change their results.
Tests of the adoption pass their own ``kubeletStateDirectory``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


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
