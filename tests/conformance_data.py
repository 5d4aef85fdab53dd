"""Loading the kubelet conformance corpus and the decoded NRI examples the tests use.

Both live in the repository (``tests/data/conformance``, ``tests/data/nri-examples``), so a
fresh clone needs nothing beside it. ``$NRI_CPUMGR_CONFORMANCE`` points the conformance runner
at another corpus in the same format instead."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from nri_cpumgr.podmodel import ContainerSpec, Pod, parse_quantity
from nri_cpumgr.topology import CPUTopology

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def conformance_dir() -> Path:
    """The corpus directory: ``$NRI_CPUMGR_CONFORMANCE`` if set, else ``tests/data/conformance``."""
    if os.environ.get("NRI_CPUMGR_CONFORMANCE"):
        return Path(os.environ["NRI_CPUMGR_CONFORMANCE"])
    return DATA / "conformance"


def nri_examples_dir() -> Path:
    """Decoded real NRI requests from containerd (``tests/data/nri-examples``)."""
    return DATA / "nri-examples"


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


def load_optional_group(rel: str) -> list[dict[str, Any]] | None:
    """The cases of a group a corpus may lack (newer than the shared corpus, or under
    ``optional/``): None when ``$NRI_CPUMGR_CONFORMANCE`` names a corpus without it. The
    repository's own corpus must have every group (FileNotFoundError)."""
    if (conformance_dir() / rel).is_file() or not os.environ.get("NRI_CPUMGR_CONFORMANCE"):
        return load_group(rel)
    return None


def cases_or_skip(cases: list[dict[str, Any]] | None, rel: str, kind: str | None = None) -> list:
    """``pytest.mark.parametrize`` values for an optional group: its cases (those of ``kind``
    when given), or, when the corpus lacks the group (``cases`` is None), one skipped
    parameter whose id names the group, so that collection never calls ``case_id`` on it."""
    import pytest

    if cases is None:
        return [pytest.param(None, id=f"missing:{rel}", marks=pytest.mark.skip(
            reason=f"{rel} not in $NRI_CPUMGR_CONFORMANCE ({conformance_dir()})"))]
    return [c for c in cases if kind is None or c["kind"] == kind]


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
