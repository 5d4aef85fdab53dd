"""Loading the kubelet conformance corpus (``$NRI_CPUMGR_CONFORMANCE``,
default ``../shared/conformance`` relative to the repository root)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from nri_cpumgr.topology import CPUTopology

REPO = Path(__file__).resolve().parent.parent


def conformance_dir() -> Path:
    return Path(os.environ.get("NRI_CPUMGR_CONFORMANCE", REPO.parent / "shared" / "conformance"))


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
