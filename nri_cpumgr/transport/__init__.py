"""NRI transport: connection multiplexer, ttrpc client/server and the plugin stub.

``wire``: the frame and message formats, the ttrpc server rules and the early registration,
without asyncio; ``firstreqs``: Configure and Synchronize answered on the blocking socket
before asyncio is imported; ``mux``: frames of one unix socket; ``ttrpc``: unary ttrpc over
one mux connection; ``stub``: registration, dispatch to
:class:`~nri_cpumgr.transport.stub.Handlers`, reconnection (asyncio imported at first use).
See /work/shared/docs/nri-protocol.md for the wire rules.

The names below are loaded on first use: importing :mod:`.wire` must not import asyncio.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)

if TYPE_CHECKING:  # (typing's names only: the plugin registers before typing is loaded)
    from typing import Any

__all__ = ["DEFAULT_EVENTS", "Handlers", "PluginError", "Stub", "event_mask"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nri_cpumgr.transport import stub

        return getattr(stub, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
