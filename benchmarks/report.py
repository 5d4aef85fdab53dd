"""What every benchmark script shares: refusing early when a real runtime cannot run here, and
printing its figures as a Markdown table (the form the README quotes)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence


def runtimes_missing(versions: Iterable[str]) -> bool:
    """True (after one line per version on stderr) when a containerd version cannot run here
    (tests.e2e.harness.e2e_missing: root, cgroups, the fetched binaries, not a live node)."""
    from tests.e2e.harness import e2e_missing

    missing = False
    for v in versions:
        reasons = e2e_missing(v)
        if reasons:
            print(f"cannot run containerd {v}: {'; '.join(reasons)}", file=sys.stderr)
            missing = True
    return missing


def print_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A Markdown table: the header cells, the separator, one line per row."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def find_valgrind() -> str | None:
    """The path of ``valgrind`` on PATH, or None after saying on stderr how to get it (the
    instruction-count benchmarks: start_instructions.py, create_instructions.py)."""
    import shutil

    path = shutil.which("valgrind")
    if path is None:
        print("no valgrind on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
    return path
