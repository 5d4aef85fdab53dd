"""NRI transport: connection multiplexer, ttrpc client/server and the plugin stub.

``mux``: frames of one unix socket; ``ttrpc``: unary ttrpc over one mux connection;
``stub``: registration, dispatch to :class:`~nri_cpumgr.transport.stub.Handlers`,
reconnection. See /work/shared/docs/nri-protocol.md for the wire rules.
"""

from nri_cpumgr.transport.stub import DEFAULT_EVENTS, Handlers, PluginError, Stub, event_mask

__all__ = ["DEFAULT_EVENTS", "Handlers", "PluginError", "Stub", "event_mask"]
