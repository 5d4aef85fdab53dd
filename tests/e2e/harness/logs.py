"""Reading and waiting on a process's log file (containerd, the plugin)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path


class LogFile:
    """A growing log file; offsets are byte positions (pass one as ``since``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset(self) -> int:
        """Current size in bytes (0 before the file exists)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def text(self, since: int = 0) -> str:
        """The log from byte offset ``since`` on ("" before the file exists)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def wait_for(
        self,
        pattern: str | re.Pattern[str],
        timeout: float,
        since: int,
        alive: Callable[[], bool],
        fail: Callable[[str], Exception],
    ) -> re.Match[str]:
        """Poll until ``pattern`` matches after ``since``. Raises ``fail(reason)`` when the
        process dies first (after one last look) or on timeout."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.text(since))
            if m:
                return m
            if not alive():
                m = rx.search(self.text(since))  # written just before the exit?
                if m:
                    return m
                raise fail(f"process exited before {rx.pattern!r}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise fail(f"{rx.pattern!r} not in {self.path.name} after {timeout}s:\n"
                           f"{self.tail()}")
            time.sleep(0.05)
