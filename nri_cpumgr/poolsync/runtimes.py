"""Which shared-pool update path is safe on the runtime that configured the plugin.

containerd's NRI integration takes two locks: its own (``l.Lock()`` around every CRI call's
NRI hook, and around applying a plugin's updates in ``updateFromPlugin``) and the NRI
Adaptation's. A CRI call takes containerd's lock, then the Adaptation's; up to NRI v0.12.0 a
plugin's UpdateContainers took the Adaptation's lock first (``(*Adaptation).updateContainers``)
and containerd's second: the two can wait for each other for good, and every container
operation of the node hangs behind them (containerd/containerd#13733). NRI v0.12.1 (the first
release with containerd/nri#301) no longer takes the Adaptation lock there.

Read in the Go modules of each release (``go.mod`` of containerd, ``pkg/adaptation/
adaptation.go`` of NRI): containerd 1.7.x (up to 1.7.35: NRI v0.6.1 .. v0.8.0), 2.1.x (v0.8.0),
2.2.x (v0.11.0) and 2.3.x (up to 2.3.7: v0.12.0) have the inversion; containerd 2.4.0
(v0.12.3) is the first release without it.

CRI-O's NRI integration (``internal/nri/nri.go``, a port of containerd's) has the same two
locks in the same orders: its ``l.Lock()`` around every CRI hook and in ``updateFromPlugin``.
CRI-O v1.36.3 (the newest release the module proxy serves, read in its Go module: the same
``l.Lock()`` in ``internal/nri/nri.go``) vendors NRI v0.11.0, whose ``updateContainers``
takes ``r.Lock()``: the inversion. Earlier CRI-O releases vendor older NRIs (before v0.12.1,
all with it: the module proxy's v1.34.0, a commit of main from May 2025, vendors
v0.9.1-0.20250219030224-e597e7849f24). No CRI-O release was read with a fixed NRI, so a
later CRI-O (1.37 on) is "not known". Other runtimes are not
known either: they get the path that is safe whatever their NRI does.

Where the inversion is (or may be), the shared containers are moved the way the kubelet's CPU
manager moves them: CRI ``UpdateContainerResources`` calls on the runtime's CRI socket
(``cri``, :mod:`nri_cpumgr.poolsync.cri`). A CRI call takes containerd's NRI lock first and
the Adaptation's second, as every other CRI call does, so it cannot invert; the ``runc
update`` runs after both are released. CRI-O's ``UpdateContainerResources`` takes its locks
in the same order. Only without a reachable CRI socket is ``reply`` left.

The decision is pure (strings and a socket check's answer in, a :class:`ModeChoice` out); the
runtime glue checks the socket and logs the choice.
"""

from __future__ import annotations

import dataclasses
import re

#: The first containerd release whose vendored NRI (v0.12.3) has containerd/nri#301.
FIXED_CONTAINERD = (2, 4, 0)
#: The first NRI release with containerd/nri#301.
FIXED_NRI = "v0.12.1"
ISSUE = "containerd/containerd#13733"
#: The newest CRI-O read (v1.36.3, NRI v0.11.0): it and every earlier CRI-O have the
#: inversion; later ones are not known here.
LAST_READ_CRIO = (1, 36)

#: ``sharedPoolUpdateMode`` values: ``auto`` picks ``async``, ``cri`` or ``reply`` per runtime.
CONFIG_MODES = ("auto", "async", "cri", "reply")

#: The CRI socket each runtime listens on by default (``containerRuntimeEndpoint: ""``):
#: containerd's ``[grpc] address``, CRI-O's ``listen``.
DEFAULT_CRI_ENDPOINTS = {
    "containerd": "/run/containerd/containerd.sock",
    "cri-o": "/var/run/crio/crio.sock",
}

# "1.7.24", "v2.1.9", "2.1.9+unknown", "1.7.24~ds1", "v2.4.0-rc.1", "v2.4.0-12-gabcdef0"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(.*)")
# (IGNORECASE; compiled at its first use, a version with a suffix: not at every start)
_PRERELEASE = r"[-~.]?(alpha|beta|rc|pre|dev)"


@dataclasses.dataclass(frozen=True)
class ModeChoice:
    """``mode``: ``async``, ``cri`` or ``reply``; ``reason``: one line for the log;
    ``hazard``: True when the mode is ``async`` and the runtime's NRI may have the lock-order
    inversion (an explicit choice on a runtime not known: logged as a WARNING);
    ``overruled``: the configured mode was not honoured (an explicit ``async`` on a runtime
    known to have the inversion, ``cri`` without a reachable socket: logged as an ERROR);
    ``degraded``: ``auto`` had to take ``reply`` (no CRI socket: logged as a WARNING)."""

    mode: str
    reason: str
    hazard: bool = False
    overruled: bool = False
    degraded: bool = False


def cri_endpoint(configured: str, runtime_name: str) -> str | None:
    """The CRI socket path: ``configured`` (``containerRuntimeEndpoint``: a path, or
    ``unix://`` and a path as the kubelet writes it) or, when it is ``""``, the runtime's
    default (:data:`DEFAULT_CRI_ENDPOINTS`); None when neither names one (another runtime, or
    an endpoint that is not a unix socket)."""
    text = configured.strip()
    if not text:
        return DEFAULT_CRI_ENDPOINTS.get(runtime_name.strip().lower())
    if text.startswith("unix://"):
        text = text[len("unix://"):]
    if not text.startswith("/"):
        return None
    return text


def parse_version(text: str) -> tuple[int, int, int, bool] | None:
    """``(major, minor, patch, prerelease)`` of a runtime version string as runtimes report
    it in Configure (containerd's ``version.Version``: ``v2.1.9`` upstream, ``2.1.9+unknown``
    or ``1.7.24~ds1`` as Debian builds it); None when it does not start with a version.
    ``prerelease`` is True for ``-rc.1``, ``-beta.2``, ``~rc1``, ...: those come before the
    release. Build metadata (``+unknown``), Debian repacks (``~ds1``) and ``git describe``
    suffixes (``-12-gabcdef0``, commits after the tag) are not pre-releases."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        return None
    rest = m.group(4)
    if rest and rest[0] not in "-~+_ ":
        return None  # "2.1.9x": not a version we can read
    pre = bool(rest) and not rest.startswith("+") and re.match(
        _PRERELEASE, rest, re.IGNORECASE) is not None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), pre


def nri_lock_inversion(runtime_name: str, runtime_version: str) -> bool | None:
    """True: the runtime's NRI takes its locks in opposite orders for a plugin's
    UpdateContainers and for CRI calls (a plugin calling UpdateContainers can hang it:
    containerd < 2.4.0, CRI-O <= 1.36.x); False: it does not (containerd >= 2.4.0); None: not
    known (another runtime, a CRI-O after 1.36, or a version that cannot be read)."""
    name = runtime_name.strip().lower()
    if name not in ("containerd", "cri-o"):
        return None
    v = parse_version(runtime_version)
    if v is None:
        return None
    if name == "cri-o":
        return True if (v[0], v[1]) <= LAST_READ_CRIO else None
    major, minor, patch, pre = v
    if (major, minor, patch) > FIXED_CONTAINERD:
        return False
    if (major, minor, patch) == FIXED_CONTAINERD:
        return pre  # 2.4.0-rc.N: not known to carry the fix, so taken as without it
    return True


def choose_update_mode(configured: str, runtime_name: str, runtime_version: str,
                       no_cri: str | None = "not checked") -> ModeChoice:
    """The shared-pool update path for ``configured`` (one of :data:`CONFIG_MODES`) on the
    runtime that sent Configure; ``no_cri``: why the runtime's CRI socket cannot be used,
    None when it is reachable (the default: not checked, so not used).

    ``auto``: ``async`` only where the runtime is known to be without the inversion, else
    ``cri``, else (no CRI socket) ``reply``. ``reply`` and ``cri`` are kept as given (``cri``
    without a socket: ``reply``, overruled). ``async`` on a runtime known to have the
    inversion is not honoured (``cri``, else ``reply``; overruled); on a runtime not known it
    is kept and flagged (``hazard``). Raises ValueError for any other ``configured``."""
    if configured not in CONFIG_MODES:
        raise ValueError(f"sharedPoolUpdateMode {configured!r}: expected one of {CONFIG_MODES}")
    runtime = f"{runtime_name or '?'} {runtime_version or '?'}"
    inverted = nri_lock_inversion(runtime_name, runtime_version)
    if inverted is True:
        fixed = (f"fixed in containerd {'.'.join(map(str, FIXED_CONTAINERD))}"
                 if runtime_name.strip().lower() == "containerd" else
                 f"no CRI-O release known here with NRI {FIXED_NRI}+")
        why = (f"{runtime} vendors an NRI older than {FIXED_NRI}: a plugin's UpdateContainers "
               f"can deadlock it against CRI calls ({ISSUE}; {fixed})")
    elif inverted is False:
        why = f"{runtime} vendors NRI {FIXED_NRI} or later (containerd/nri#301)"
    else:
        why = (f"{runtime} is not known to be free of the NRI lock-order inversion "
               f"({ISSUE})")
    cri = no_cri
    safe = "cri" if cri is None else "reply"
    no_cri = f"; no CRI socket: {cri}" if cri is not None else ""
    if configured == "reply":
        return ModeChoice("reply", f"configured; {why}")
    if configured == "cri":
        if cri is None:
            return ModeChoice("cri", f"configured; {why}")
        return ModeChoice("reply", f"configured cri, but no CRI socket: {cri}; {why}",
                          overruled=True)
    if configured == "async":
        if inverted is True:
            return ModeChoice(safe, f"configured async is not honoured: {why}{no_cri}",
                              overruled=True)
        return ModeChoice("async", f"configured; {why}", hazard=inverted is None)
    if inverted is False:
        return ModeChoice("async", f"auto: {why}")
    return ModeChoice(safe, f"auto: {why}{no_cri}", degraded=cri is not None)
