"""Loading the kubelet conformance corpus (``$NRI_CPUMGR_CONFORMANCE``,
default ``../shared/conformance`` relative to the repository root)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from nri_cpumgr.podmodel import ContainerSpec, Pod, parse_quantity
from nri_cpumgr.topology import CPUTopology

REPO = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The steering repository's shared/ (``$NRI_CPUMGR_SHARED``; else the parent of
    ``$NRI_CPUMGR_CONFORMANCE``; else ``../shared`` beside the repository)."""
    if "NRI_CPUMGR_SHARED" in os.environ:
        return Path(os.environ["NRI_CPUMGR_SHARED"])
    if "NRI_CPUMGR_CONFORMANCE" in os.environ:
        return Path(os.environ["NRI_CPUMGR_CONFORMANCE"]).parent
    return REPO.parent / "shared"


def conformance_dir() -> Path:
    if "NRI_CPUMGR_CONFORMANCE" in os.environ:
        return Path(os.environ["NRI_CPUMGR_CONFORMANCE"])
    return shared_dir() / "conformance"


def nri_examples_dir() -> Path:
    """Decoded real NRI requests (shared/docs/nri-examples)."""
    return shared_dir() / "docs" / "nri-examples"


def load_group(rel: str) -> list[dict[str, Any]]:
    """All cases of one group, e.g. ``load_group("cpumanager/take.json")``. A missing corpus
    is an error, never an empty list: the required groups must run."""
    path = conformance_dir() / rel
    if not path.is_file():
        raise FileNotFoundError(f"conformance group {path} missing (set NRI_CPUMGR_CONFORMANCE)")
    return json.loads(path.read_text())


@functools.cache
def topology(name: str) -> CPUTopology:
    doc = json.loads((conformance_dir() / "topologies" / f"{name}.json").read_text())
    return CPUTopology.from_conformance(doc)


def case_id(case: dict[str, Any]) -> str:
    return case["name"]


def _quantities(raw: dict[str, str] | None) -> dict[str, int]:
    return {n: parse_quantity(q, milli=(n == "cpu")) for n, q in (raw or {}).items()}


def corpus_container(raw: dict[str, Any]) -> ContainerSpec:
    """A corpus container (``requests``/``limits`` at the top, as in cpumanager/, or under
    ``resources``, as in memorymanager/) as the pod model's ContainerSpec."""
    res = raw.get("resources") or raw
    return ContainerSpec(
        name=raw["name"],
        requests=_quantities(res.get("requests")),
        limits=_quantities(res.get("limits")),
        restartable=raw.get("restart_policy") == "Always",
    )


def corpus_pod(raw: dict[str, Any]) -> Pod:
    """A corpus pod as the pod model's Pod (QoS derived from the containers)."""
    return Pod(
        uid=raw["uid"],
        name=raw.get("name") or "",
        containers=tuple(corpus_container(c) for c in raw.get("containers") or []),
        init_containers=tuple(corpus_container(c) for c in raw.get("init_containers") or []),
    )
