"""The metrics endpoint's listen address (``metricsAddress``): shared by the HTTP server
(``nri_cpumgr.metrics.server``) and its callers, without importing ``http.server``."""

from __future__ import annotations


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; ``":port"`` gives host ``""`` (all interfaces),
    port 0 asks the kernel for a free port. Raises ValueError for anything else (no port, a
    port outside 0-65535)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid listen address {address!r}: want host:port or :port")
    n = int(port)
    if n > 65535:
        raise ValueError(f"invalid listen address {address!r}: port out of range")
    return host.strip("[]"), n
