"""Prints, after the run, how many kubelet conformance cases of each group ran and passed."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conformance_data import conformance_dir


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts: dict[str, Counter[str]] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if not nodeid.startswith("tests/conformance/") or rep.when not in ("call", "setup"):
                continue
            if rep.when == "setup" and outcome == "passed":
                continue
            module = nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
            counts.setdefault(module, Counter())[outcome] += 1
    if not counts:
        return
    terminalreporter.section(f"kubelet conformance ({conformance_dir()})")
    for module in sorted(counts):
        c = counts[module]
        parts = ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "error", "skipped") if c[k])
        terminalreporter.write_line(f"{module.removeprefix('test_'):32s} {parts}")
