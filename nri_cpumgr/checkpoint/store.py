"""A checkpoint file: one JSON object plus a checksum over its canonical form.

Written as temp file + fsync + rename + fsync of the directory, so a crash leaves either
the old or the new file, never a torn one (a write that is not durable, a release's before
its reply, is swapped in without fsync: the death of the process leaves the old or the new
file, a crash of the machine may leave a torn one, which the checksum tells). A file whose
checksum does not match, that is not JSON, or whose ``version`` we do not know is reported as
:class:`CheckpointError`; the caller then rebuilds its state from the runtime (Synchronize)
instead of crash-looping.

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


class KubeletCheckpointFound(CheckpointError):
    """The file is the kubelet's own ``cpu_manager_state`` (any of its formats, v1 to the v4
    of kubelet 1.37), not a checkpoint of the plugin: read by adoption
    (:mod:`nri_cpumgr.adopt.kubelet`), never as the plugin's state."""


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


#: what :meth:`Checkpoint.save` writes between the head and the body's canonical text
_DATA_KEY = b', "data": '


def _written_text_matches(raw: bytes, version: Any, expected: Any) -> bool:
    """Whether ``raw``, a whole file, is laid out as :meth:`Checkpoint.save` writes a
    version-2 file (``{"checksum": N, "version": 2, "data": <canonical text>}`` and a
    newline) and the CRC-32 of the text between ``"data": `` and the last ``}`` is
    ``expected``: the text written is the canonical JSON the checksum covers, so a restart
    need not encode the parsed body again to check it (a 1,000-container checkpoint: ~6 ms
    of the restart's ~120, issue 34). False for anything else (other versions, a file
    written or reformatted by another tool), where :func:`checksum` of the parsed body
    decides."""
    if version != 2 or type(expected) is not int or not raw.endswith(b"}\n"):
        return False
    i = raw.find(_DATA_KEY, 0, 64)  # (in the head: the checksum and the version before it)
    if i < 0:
        return False
    from zlib import crc32

    return crc32(memoryview(raw)[i + len(_DATA_KEY):-2]) == expected


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
        # the kubelet's: policyName at the top, no data (v1-v3) or its data as a JSON string
        # (v4, kubelet 1.37: data + dataChecksum); ours keeps its data as an object
        if (isinstance(doc, dict) and "policyName" in doc
                and not isinstance(doc.get("data"), dict)):
            raise KubeletCheckpointFound(
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
        if not isinstance(body, dict) or (
                not _written_text_matches(raw, version, doc["checksum"])
                and checksum(body, version) != doc["checksum"]):
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
        project's loaded 2-CPU VM), and swapped in rather than renamed over the file
        (:meth:`_save_swapped`). Raises OSError on I/O failure."""
        if not self._dir_made:
            os.makedirs(self.directory, exist_ok=True)
            self._dir_made = True
        # the body is encoded once: its canonical form is both what the checksum covers and
        # what the file holds (a 1,000-container body costs ~2 ms of GIL once, not twice),
        # and checksummed and written piece by piece, never copied into one text
        import json

        text = canonical_parts(body)  # (the rows' text is one piece, not copied)
        crc = crc32_pieces(text)
        head = json.dumps({"checksum": crc, "version": VERSION}, sort_keys=True)
        parts = [head[:-1].encode() + _DATA_KEY, *text, b"}\n"]
        if not durable:
            self._save_swapped(parts)
            return
        tmp = self._tmp
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except FileNotFoundError:  # the directory was removed since
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, parts)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.file)
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _save_swapped(self, parts: list[bytes]) -> None:
        """The write without fsync: the temp file written over in place (the previous
        checkpoint's file, kept under the temp name by the last such write) and swapped with
        the checkpoint in one step (renameat2 RENAME_EXCHANGE). As atomic as a rename over
        the file (the old or the new file is there, whatever moment the process dies), but
        no file is created and none is freed, and the kernel is not made to start writing
        the new data back first (ext4 does that for a rename over an existing file, its
        ``auto_da_alloc``, not for an exchange): a release's write before its reply went
        from ~0.4 ms to ~0.1 ms here, 1,000 shared containers (``open`` of a new file and
        the rename were 1-2 ms of it under load). After a crash of the machine before the
        background writer's durable write, the file may be an empty or a torn one (detected:
        the state is rebuilt from the runtime) where a rename gave the old or the new one;
        what this write guards against is the death of the process
        (docs/concepts/crash-after-a-change.md). A reader holding the previous file open
        until the next such write may read a torn file (the checksum tells). Where the
        exchange is not available (no renameat2, a file system without it, no file yet): a
        rename."""
        tmp = self._tmp
        flags = os.O_WRONLY | os.O_CREAT
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:  # the directory was removed since
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(tmp, flags, 0o600)
        try:
            n = os.pwritev(fd, parts, 0)
            total = sum(len(p) for p in parts)
            if n < total:  # (a short write: the rest, from where it stopped)
                rest = b"".join(parts)[n:]
                while rest:
                    k = os.pwrite(fd, rest, n)
                    n += k
                    rest = rest[k:]
            os.ftruncate(fd, n)  # (the previous file may have been longer)
        finally:
            os.close(fd)
        if not _exchange(tmp, self.file):
            os.replace(tmp, self.file)

#: pieces at least this long have their CRC-32 kept (see :func:`crc32_pieces`)
KEEP_CRC_OF = 32 * 1024
#: how many long pieces' CRC-32 are kept (the shared rows' text of the last pools, as the
#: container manager keeps them)
_KEPT = 4
# piece -> (the piece, its CRC-32 from 0, the operator that moves a CRC-32 over its length);
# keyed by id and checked by identity (the piece is held, so its id is not reused)
_kept: dict[int, tuple[bytes, int, int]] = {}
_POLY = 0xEDB88320  # CRC-32 (IEEE 802.3), bit-reflected, as zlib
_X2N: list[int] = []  # x^(2^k) modulo the polynomial, k = 0..31


def _multmodp(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial (reflected bit order, zlib's multmodp)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _x8nmodp(n: int) -> int:
    """x^(8n) modulo the polynomial: the operator that moves a CRC-32 over ``n`` bytes (kept
    by ``n``: the shared rows' text keeps its length while the pool's cpulist does)."""
    op = _OPS.get(n)
    if op is None:
        if len(_OPS) >= 64:
            _OPS.clear()
        op = _OPS[n] = _x8nmodp_new(n)
    return op


_OPS: dict[int, int] = {}


def _x8nmodp_new(n: int) -> int:
    if not _X2N:
        p = 1 << 30  # x^1
        for _ in range(32):
            _X2N.append(p)
            p = _multmodp(p, p)
    p, k = 1 << 31, 3
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_pieces(pieces: list[bytes]) -> int:
    """``zlib.crc32(b"".join(pieces))`` without the join. A piece of at least
    :data:`KEEP_CRC_OF` bytes seen in one of the last calls (the same object: a checkpoint's
    shared rows, kept by the container manager while none of them changes) is not read again:
    its CRC-32 from 0 is kept and combined with the CRC so far (zlib's crc32_combine, which
    Python's zlib does not expose: 32 steps of a carry-less product). A release's checkpoint
    of 1,000 shared containers, written before its reply, checksums a few hundred bytes then,
    not 130 KB (~0.6 M instructions)."""
    from zlib import crc32

    crc = 0
    for piece in pieces:
        if len(piece) < KEEP_CRC_OF:
            crc = crc32(piece, crc)
            continue
        kept = _kept.get(id(piece))
        if kept is None or kept[0] is not piece:
            if len(_kept) >= _KEPT:
                _kept.clear()
            kept = (piece, crc32(piece), _x8nmodp(len(piece)))
            _kept[id(piece)] = kept
        crc = _multmodp(kept[2], crc) ^ kept[1]
    return crc


#: libc's renameat2 once looked up (ctypes is imported at the first release's write, not
#: at the start), or False when there is none
_renameat2: Any = None
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# errnos that say the exchange cannot be done here at all (then never tried again): EINVAL
# and EOPNOTSUPP (a file system without RENAME_EXCHANGE), ENOSYS (a kernel without
# renameat2), EPERM (a seccomp profile refusing it)
_NO_EXCHANGE = (22, 95, 38, 1)


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` atomically (Linux renameat2 RENAME_EXCHANGE); False
    when that was not done (no ``b`` yet, or no exchange here: see :data:`_NO_EXCHANGE`; any
    other error too, which the caller's rename then raises)."""
    global _renameat2
    fn = _renameat2
    if fn is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint)
            _renameat2 = fn
        except (ImportError, OSError, AttributeError):
            _renameat2 = fn = False
    if fn is False:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes

    if ctypes.get_errno() in _NO_EXCHANGE:
        _renameat2 = False
    return False


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
