"""Fixtures for the cluster end-to-end tests (a real kubelet + control plane on loopback).

``cluster``: the kubelet 1.20.2 cluster of test_cluster.py (``make cluster-e2e``, not in ``make
test``). Gate, as tests/e2e: root, a cpuset controller, the runtime from
scripts/fetch-runtime.sh, not a live node, and the cluster binaries from
scripts/cluster/build.sh (``make cluster`` builds them). When something is missing the tests
are skipped with the reason, or, with ``CI`` set, they fail with it. The kubelet 1.37
cluster's fixture (in ``make test``) is test_modern.py's own.

The cluster is module-scoped: it is gone (kubelet stopped, pods removed, cgroups and mounts
undone) before the next module's tests start, so the live-node check of the CRI-level e2e tests
never sees its kubelet.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, built_bin_dir
from tests.e2e.harness import e2e_missing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.cluster)


def _require() -> Path:
    reasons = e2e_missing("1.7")
    bin_dir = built_bin_dir()
    if bin_dir is None:
        reasons.append("cluster binaries not built (run `make cluster` or "
                       "scripts/cluster/build.sh)")
    if reasons:
        msg = "the test cluster cannot run here: " + "; ".join(reasons)
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set: the cluster tests are required)", pytrace=False)
        pytest.skip(msg)
    assert bin_dir is not None
    return bin_dir


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A started single-node cluster for this module's tests; stopped at the module's end."""
    c = Cluster(_require())
    c.start()
    try:
        yield c
    finally:
        problems = c.stop()
        assert not problems, f"cluster cleanup: {problems}"
