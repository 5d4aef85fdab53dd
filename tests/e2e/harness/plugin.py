"""Run an external NRI plugin (any command) for a test, with its output in a log file.

Generic: the command is given as an argv list, e.g.
``[sys.executable, "-m", "nri_cpumgr", "run", "--config", cfg]``. Combine with
:meth:`Containerd.wait_plugin_ready` to know when containerd has registered and synchronized it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .logs import LogFile


class PluginError(RuntimeError):
    """The plugin process died or a log line did not appear in time."""


class PluginProcess:
    """A child process in its own session, stdout+stderr appended to ``log_path``.

    ``start()`` launches it; ``kill(sig)`` signals it; ``stop()`` = SIGTERM, then SIGKILL after
    a grace period, then reap; ``wait_for_log(regex)`` polls the log. A context manager
    (start on enter, stop on exit).
    """

    def __init__(self, argv: Sequence[str], log_path: Path | str, *,
                 env: Mapping[str, str] | None = None, cwd: Path | str | None = None) -> None:
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.env = dict(os.environ if env is None else env)
        self.cwd = str(cwd) if cwd is not None else None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id once started, else None."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status once it ended (negative = killed by that signal), else None."""
        return self._proc.poll() if self._proc else None

    def start(self) -> PluginProcess:
        """Launch the command (log appended, a header line marks each start)."""
        if self.running:
            raise PluginError(f"already running as pid {self.pid}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: starting {' '.join(self.argv)} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                          start_new_session=True)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process (no-op if it has exited)."""
        if self.running and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit and return the status; raises subprocess.TimeoutExpired."""
        if self._proc is None:
            raise PluginError("not started")
        return self._proc.wait(timeout)

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout`` seconds; reap. Returns the exit status."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self._proc.wait(10)
        return self._proc.returncode

    def log_offset(self) -> int:
        """Current log size in bytes (a ``since`` for :meth:`wait_for_log`)."""
        return LogFile(self.log_path).offset()

    def log_text(self, since: int = 0) -> str:
        """The log from byte offset ``since`` on."""
        return LogFile(self.log_path).text(since)

    def wait_for_log(self, pattern: str | re.Pattern[str], timeout: float = 10.0,
                     since: int = 0, allow_exit: bool = False) -> re.Match[str]:
        """Wait until regex ``pattern`` matches the log after byte ``since``; return the match.

        Raises PluginError on timeout, or when the process exits first (unless ``allow_exit``,
        for lines written just before a deliberate exit).
        """
        return LogFile(self.log_path).wait_for(
            pattern, timeout, since, lambda: allow_exit or self.running,
            lambda why: PluginError(f"plugin ({self.returncode}): {why}"))

    def __enter__(self) -> PluginProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
