"""The kubelet's own CRI requests for pods, from oracle/cmd/kubelet-cri (the kubelet
v1.37.2's kuberuntime manager driven against the CRI API's fake runtime service).

:func:`kubelet_requests` takes ``v1.Pod`` dicts (build them with :func:`k8s_pod`) and
returns, per pod name, ``{"sandbox": {"resources": R|None, "overhead": R|None},
"containers": {name: R}, "order": [names in creation order]}`` with R as
:func:`tests.e2e.harness.cri.oracle_resources` takes it. The command is built once per
source change by scripts/oracle/build-kubelet-cri.sh into the cache outside the checkout;
answers are memoised per input in this process.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from typing import Any

from .paths import REPO

BUILD = REPO / "scripts" / "oracle" / "build-kubelet-cri.sh"


def missing() -> list[str]:
    """Why the oracle cannot run here (empty: it can): Go is needed to build it."""
    return [] if shutil.which("go") else ["go not found (Go 1.26 builds oracle/)"]


@functools.cache
def binary() -> str:
    """The built command's path (builds it when the cache has none; minutes when cold).
    Raises RuntimeError with the build's output on failure."""
    p = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"building kubelet-cri failed:\n{p.stderr[-3000:]}")
    return p.stdout.strip().splitlines()[-1]


def k8s_pod(name: str, uid: str, containers: list[tuple[str, dict | None, dict | None]], *,
            pod_resources: dict[str, dict[str, Any]] | None = None,
            init_containers: list[tuple[str, dict | None, dict | None, bool]] = (),  # type: ignore[assignment]
            namespace: str = "e2e") -> dict[str, Any]:
    """A ``v1.Pod`` dict: ``containers`` as (name, requests, limits), ``init_containers``
    as (name, requests, limits, restartable), ``pod_resources`` as ``.spec.resources``."""
    def c(n: str, req: dict | None, lim: dict | None) -> dict[str, Any]:
        res: dict[str, Any] = {}
        if req:
            res["requests"] = {k: str(v) for k, v in req.items()}
        if lim:
            res["limits"] = {k: str(v) for k, v in lim.items()}
        return {"name": n, "image": "busybox", "resources": res}

    spec: dict[str, Any] = {"containers": [c(*x) for x in containers]}
    if init_containers:
        spec["initContainers"] = []
        for n, req, lim, restartable in init_containers:
            d = c(n, req, lim)
            if restartable:
                d["restartPolicy"] = "Always"
            spec["initContainers"].append(d)
    if pod_resources is not None:
        spec["resources"] = {k: {r: str(q) for r, q in v.items()}
                             for k, v in pod_resources.items()}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": spec}


@functools.cache
def _run(doc: str) -> str:
    p = subprocess.run([binary()], input=doc, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "GOGC": "off"})
    if p.returncode != 0:
        raise RuntimeError(f"kubelet-cri failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def kubelet_requests(pods: list[dict[str, Any]], gates: dict[str, bool] | None = None,
                     memory_capacity: int | None = None) -> dict[str, dict[str, Any]]:
    """The kubelet's requests for ``pods`` (see the module docstring), by pod name.
    ``gates``: the kubelet's feature gates (its defaults otherwise: PodLevelResources on).
    Raises RuntimeError when the command fails (a pod the kubelet refuses, bad input)."""
    doc: dict[str, Any] = {"pods": pods, "featureGates": gates or {}}
    if memory_capacity is not None:
        doc["memoryCapacity"] = memory_capacity
    out = json.loads(_run(json.dumps(doc, sort_keys=True)))
    result = {}
    for p in out["pods"]:
        result[p["name"]] = {
            "kubelet": out["kubelet"],
            "sandbox": p["sandbox"],
            "containers": {c["name"]: c["resources"] for c in p["containers"]},
            "order": [c["name"] for c in p["containers"]],
        }
    return result


def requests_or_skip(pods: list[dict[str, Any]], **kw: Any) -> dict[str, dict[str, Any]]:
    """:func:`kubelet_requests` for a test fixture: when the Go command cannot be built or run
    (:func:`missing`), the test is skipped, or fails when ``CI`` is set."""
    import pytest

    why = missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail("; ".join(why) + " (CI is set)", pytrace=False)
        pytest.skip("; ".join(why))
    return kubelet_requests(pods, **kw)
