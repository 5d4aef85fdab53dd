"""A checkpoint file: one JSON object plus a checksum over its canonical form.

Written as temp file + fsync + rename + fsync of the directory, so a crash leaves either
the old or the new file, never a torn one. A file whose checksum does not match, that is not
JSON, or whose ``version`` we do not know is reported as :class:`CheckpointError`; the caller
then rebuilds its state from the runtime (Synchronize) instead of crash-looping.

Format ``version`` 2 (written since issue 34): ``checksum`` is the CRC-32 (zlib, IEEE 802.3)
of the body's canonical JSON, an unsigned integer, as the kubelet's checkpoints carry a 32-bit
FNV-1a of theirs (kubelet pkg/kubelet/checkpointmanager/checksum, v1.37.2): it detects a torn
or edited file, and is no signature. Version 1 (read still, an upgrade's first start) had the
sha256 hex digest there: CPython's own SHA-256 takes ~0.5 ms of GIL for a 1,000-container
body (130 KB), before a release's reply and on the writer thread, where zlib's CRC-32 takes
~0.03 ms and lets the GIL go while it runs (buffers over 5 KiB).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nri_cpumgr.jsontext import canonical as _canonical
from nri_cpumgr.jsontext import canonical_parts
from nri_cpumgr.paths import normal

if TYPE_CHECKING:
    from pathlib import Path

#: The format written; :data:`READABLE` the formats read.
VERSION = 2
READABLE = (1, 2)


class CheckpointError(Exception):
    """The checkpoint exists but cannot be used (unreadable, not JSON, bad checksum,
    unknown version). The message names the file and the reason."""


def checksum(body: dict[str, Any], version: int = VERSION) -> int | str:
    """The checksum of ``body`` in format ``version``: the CRC-32 (an int) of its canonical
    JSON (sorted keys, no blanks) for 2, the sha256 hex digest of it for 1. Raises
    ValueError for another version."""
    text = _canonical(body)
    if version == 2:
        from zlib import crc32

        return crc32(text)
    if version == 1:
        return _sha256()(text).hexdigest()
    raise ValueError(f"unknown checkpoint version {version!r}")


def _sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (version 1 files only): hashlib's OpenSSL one maps libcrypto
    (3.4 MiB of RSS here)."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef]
        except ImportError:  # a build without them
            from hashlib import sha256  # type: ignore[no-redef]
    return sha256  # type: ignore[no-any-return]


class Checkpoint:
    """One checkpoint file at ``path``."""

    def __init__(self, path: str | Path) -> None:
        #: the file (``str(path)``): what the reads and writes use, pathlib not imported
        #: (issue 34: the plugin's start makes its checkpoints before its first Synchronize)
        self.file = normal(path)
        head, name = os.path.split(self.file)
        #: the file's directory (``str(path.parent)``)
        self.directory = head or "."
        self._tmp = os.path.join(head, f".{name}.tmp")
        self._path: Path | None = None
        self._dir_made = False  # (the directory is made once, again only if it went away)

    @property
    def path(self) -> Path:
        """The file as a :class:`pathlib.Path`."""
        if self._path is None:
            from pathlib import Path

            self._path = Path(self.file)
        return self._path

    def load(self) -> dict[str, Any] | None:
        """The stored body, or ``None`` when no checkpoint exists yet.

        Raises :class:`CheckpointError` when the file exists but is unusable.
        """
        try:
            with open(self.file, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.file}: unreadable: {e.strerror}") from None
        import json  # (here and in save: not imported before a checkpoint is read or written)

        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"checkpoint {self.file}: not JSON: {e}") from None
        if isinstance(doc, dict) and "policyName" in doc and "data" not in doc:
            raise CheckpointError(
                f"checkpoint {self.file}: the kubelet's own checkpoint (policyName "
                f"{doc['policyName']!r}), not one of the plugin's; the plugin adopts the "
                "kubelet's cpu_manager_state and memory_manager_state at its first start "
                "(docs/operations/adopting.md)")
        if not isinstance(doc, dict) or "checksum" not in doc or "data" not in doc:
            raise CheckpointError(f"checkpoint {self.file}: missing data or checksum")
        version = doc.get("version")
        if type(version) is not int or version not in READABLE:
            raise CheckpointError(
                f"checkpoint {self.file}: unknown version {doc.get('version')!r}"
            )
        body = doc["data"]
        if not isinstance(body, dict) or checksum(body, version) != doc["checksum"]:
            raise CheckpointError(f"checkpoint {self.file}: checksum mismatch (corrupt)")
        from nri_cpumgr.checkpoint import cpustate

        if cpustate.is_cpu_state(body):
            why = cpustate.cpu_state_problem(body)
            if why is not None:
                raise CheckpointError(f"checkpoint {self.file}: malformed: {why}")
        return body

    def save(self, body: dict[str, Any], durable: bool = True) -> None:
        """Write ``body`` atomically (temp file + rename) and, when ``durable``, fsync'd
        (the file, then the directory). Without ``durable`` the new file survives the death
        of this process (the kernel's page cache has it: what a release before its reply
        needs, docs/concepts/crash-after-a-change.md) but not a crash of the machine before
        the kernel writes it back; two fsyncs fewer (5-9 ms median, 15-30 ms p90 on this
        project's loaded 2-CPU VM). Raises OSError on I/O failure."""
        if not self._dir_made:
            os.makedirs(self.directory, exist_ok=True)
            self._dir_made = True
        # the body is encoded once: its canonical form is both what the checksum covers and
        # what the file holds (a 1,000-container body costs ~2 ms of GIL once, not twice),
        # and checksummed and written piece by piece, never copied into one text
        import json
        from zlib import crc32

        text = canonical_parts(body)  # (the rows' text is one piece, not copied)
        crc = 0
        for piece in text:
            crc = crc32(piece, crc)
        head = json.dumps({"checksum": crc, "version": VERSION}, sort_keys=True)
        parts = [head[:-1].encode() + b', "data": ', *text, b"}\n"]
        tmp = self._tmp
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except FileNotFoundError:  # the directory was removed since
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, parts)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.file)
        if not durable:
            return
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write ``parts`` one after another to ``fd`` (one writev when the kernel takes it all,
    as it does for a regular file). Raises OSError."""
    n = os.writev(fd, parts)
    total = sum(len(p) for p in parts)
    if n < total:  # (a short write: the rest, from where it stopped)
        rest = b"".join(parts)[n:]
        while rest:
            rest = rest[os.write(fd, rest):]


class BackgroundWriter:
    """Writes checkpoints on a thread of its own, so fsync never blocks the event loop that
    answers the runtime. :meth:`submit` hands over a finished snapshot (a fresh dict the caller
    no longer mutates); only the newest snapshot per file is written, ``linger`` seconds after
    the first pending one (a burst of decisions costs one fsync, which would otherwise compete
    with the runtime's own fsyncs during container creation). :meth:`flush` writes what is
    pending now and waits until it is on disk."""

    def __init__(
        self,
        on_error: Callable[[Checkpoint, OSError], None] | None = None,
        linger: float = 0.0,
    ) -> None:
        self._linger = linger
        self._flushing = False
        self._pending: dict[str, tuple[Checkpoint, dict[str, Any]]] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, checkpoint: Checkpoint, body: dict[str, Any]) -> None:
        with self._cond:
            self._pending[checkpoint.file] = (checkpoint, body)
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Write every submitted snapshot now and wait until done; False on timeout."""
        with self._cond:
            if not self._pending and not self._busy:
                # nothing to wait for (a release's write before its reply, mostly): the
                # writer thread is not woken (a GIL hand-off, ~0.7 ms under load)
                return True
            self._flushing = True
            self._cond.notify_all()
            try:
                return self._cond.wait_for(
                    lambda: not self._pending and not self._busy, timeout
                )
            finally:
                self._flushing = False

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if self._closed and not self._pending:
                    return
                if self._linger and not self._closed:
                    # gather a burst; a flush or close cuts the wait short
                    self._cond.wait_for(lambda: self._flushing or self._closed, self._linger)
                items = list(self._pending.values())
                self._pending.clear()
                self._busy = True
            for cp, body in items:
                try:
                    cp.save(body)
                except OSError as e:
                    if self._on_error is not None:
                        self._on_error(cp, e)
            with self._cond:
                self._busy = False
                self._cond.notify_all()
