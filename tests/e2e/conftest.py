"""Fixtures for the real-containerd end-to-end tests.

* ``containerd`` - a session-wide :class:`~tests.e2e.harness.Containerd` per version, the
  fixture is parametrized over the versions in ``NRI_E2E_CONTAINERD`` (comma separated,
  default ``1.7,2.1``; ``2.4`` is the scripts/modern/build.sh containerd 2.4.2 with runc
  1.5.3; ``crio`` is CRI-O v1.36.3 with Debian's conmon and crun,
  :class:`~tests.e2e.harness.Crio`, the same interface). Restarted if a test left it dead;
  stopped (with full cleanup) at the end.
* ``cri`` - a :class:`~tests.e2e.harness.CRIClient` on it; after the test every pod it ran is
  stopped and removed and the pod cgroups are rmdir'ed (the test fails if that leaves
  something behind).
* ``make_containerd`` - factory for a private daemon (own work dir, custom NRI timeouts),
  stopped after the test: ``make_containerd("2.1", nri_request_timeout="1s")``.
* ``e2e_workdir`` - a short per-test directory for plugin configs and logs.

Work dirs are ``/tmp/e2e-*`` (short: unix socket paths); set ``NRI_E2E_KEEP=1`` to keep the
shared daemons' dirs (config, containerd.log, pod logs) after the session.

Gate: these tests need root, a cpuset controller (cgroup v1, or v2 with ``cpuset``), the
binaries from ``scripts/fetch-runtime.sh`` and a machine that is not a live Kubernetes node
(no kubelet process, no processes in the node's /kubepods; ``NRI_E2E_ALLOW_LIVE_NODE=1``
overrides this). Pods live under ``/nri-cpumgr-test/run-<pid>/kubepods``, removed after the
session in
every cgroup hierarchy. When something is missing they are skipped with the reason, or,
when the ``CI`` environment variable is set, they fail with it (CI must not pass vacuously).
Every test in this directory is marked ``e2e``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import VERSIONS, Containerd, CRIClient, e2e_missing, runtime_daemon
from tests.e2e.harness import cgroups as cg
from tests.e2e.harness.paths import DEFAULT_VERSIONS

REPO = Path(__file__).resolve().parents[2]


def _versions() -> list[str]:
    raw = os.environ.get("NRI_E2E_CONTAINERD", ",".join(DEFAULT_VERSIONS))
    vs = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in vs if v not in VERSIONS]
    if bad:
        raise pytest.UsageError(f"NRI_E2E_CONTAINERD names unknown versions {bad}; "
                                f"known: {list(VERSIONS)}")
    return vs


def require_e2e(version: str) -> None:
    """Skip (or, under CI, fail) the current test when containerd ``version`` cannot run."""
    reasons = e2e_missing(version)
    if not reasons:
        return
    msg = f"e2e containerd {version} cannot run here: " + "; ".join(reasons)
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI is set: the end-to-end tests are required)", pytrace=False)
    pytest.skip(msg)


def skip_unless_created_containers_stay_unapplied(c: Containerd) -> None:
    """Skip a test that creates (not starts) containers pinned to a sysfs fixture's CPUs the
    host lacks, on a runtime whose CreateContainer already applies the cpuset (CRI-O: the OCI
    runtime's ``create`` fails with "numerical result out of range"). Not a silent skip
    under CI: CI runs containerd only, which never takes this path."""
    if c.applies_cpuset_at_create:
        pytest.skip(f"{c.runtime_name} runs the OCI runtime's create in CreateContainer: a "
                    "cpuset of CPUs this host lacks fails there (containerd applies it at "
                    "StartContainer)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _short_tmp(prefix: str) -> Path:
    # unix socket paths are limited to 108 bytes: keep work dirs short, under /tmp
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture(scope="session")
def _containerd_pool() -> Iterator[dict[str, Containerd]]:
    pool: dict[str, Containerd] = {}
    yield pool
    for c in pool.values():
        problems = c.stop()
        if problems:
            print(f"containerd {c.version} cleanup: {problems}")
        if not os.environ.get("NRI_E2E_KEEP") and not c.shim_processes():
            shutil.rmtree(c.workdir, ignore_errors=True)
    cg.remove_empty_kubepods()


@pytest.fixture(scope="session", params=_versions())
def containerd_version(request: pytest.FixtureRequest) -> str:
    """The runtime this test runs against: containerd "1.7", "2.1" or "2.4", or "crio"."""
    return str(request.param)


@pytest.fixture
def containerd(containerd_version: str, _containerd_pool: dict[str, Containerd]) -> Containerd:
    """The shared, running containerd of this version (started on first use)."""
    require_e2e(containerd_version)
    c = _containerd_pool.get(containerd_version)
    if c is None:
        c = runtime_daemon(containerd_version,
                           _short_tmp(f"e2e-ctrd{containerd_version}-"))
        _containerd_pool[containerd_version] = c
    if not c.running:
        c.start()
    return c


@pytest.fixture
def cri(containerd: Containerd) -> Iterator[CRIClient]:
    """A kubelet-like CRI client; its pods and their cgroups are removed after the test."""
    client = containerd.cri_client()
    yield client
    errors: list[str] = []
    if containerd.running:
        errors = client.cleanup()
    else:  # the test killed containerd: restart it to remove what the client created
        containerd.start()
        errors = client.cleanup()
    client.close()
    assert not errors, f"cleanup after test failed: {errors}"


@pytest.fixture
def make_containerd() -> Iterator[Callable[..., Containerd]]:
    """Factory: ``make_containerd(version, **Containerd kwargs)`` -> a started private daemon."""
    made: list[tuple[Containerd, Path]] = []

    def make(version: str, **kw: Any) -> Containerd:
        require_e2e(version)
        wd = _short_tmp(f"e2e-priv{version}-")
        c = runtime_daemon(version, wd, **kw)
        made.append((c, wd))
        return c.start()

    yield make
    for c, wd in made:
        c.stop()
        if not os.environ.get("NRI_E2E_KEEP") and not c.shim_processes():
            shutil.rmtree(wd, ignore_errors=True)
    cg.remove_empty_kubepods()


@pytest.fixture
def e2e_workdir() -> Iterator[Path]:
    """A short per-test directory (plugin config, state dir, logs); removed after the test."""
    d = _short_tmp("e2e-test-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def twelve_cpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sysfs tree (scripts/make_sysfs_fixtures.py) of the kubelet's topoDualSocketHT."""
    spec = importlib.util.spec_from_file_location("make_sysfs_fixtures",
                                                  REPO / "scripts" / "make_sysfs_fixtures.py")
    assert spec is not None and spec.loader is not None
    mk = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mk  # (its dataclasses look their module up there)
    spec.loader.exec_module(mk)
    cpus = tuple(mk.CPUSpec(cpu=c, package=c % 2, die=0, core_id=c % 6, node=c % 2,
                            llc=c % 2) for c in range(12))
    gib_kb = 1024 * 1024
    nodes = (mk.NodeSpec(0, 8 * gib_kb, {2048: 0}, (10, 21)),
             mk.NodeSpec(1, 8 * gib_kb, {2048: 0}, (21, 10)))
    machine = mk.MachineSpec(name="dual-socket-ht", cpus=cpus, nodes=nodes, nr_cpu_ids=12)
    return mk.write_machine(machine, tmp_path_factory.mktemp("sysfs"))
