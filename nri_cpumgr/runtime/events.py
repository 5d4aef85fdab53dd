"""The NRI events the plugin subscribes to: read before registration, so it imports only the
generated API."""

from __future__ import annotations

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.transport.wire import event_mask

# Events we subscribe to (bit 1 << (event - 1)). Each adds a round trip to the CRI call it
# belongs to; PostStartContainer is the one POST_* event: a shrink of the shared pool waits for
# the new exclusive container's start, so it never holds the runtime's lock during it.
EVENTS = event_mask(
    nri_pb2.RUN_POD_SANDBOX,
    nri_pb2.STOP_POD_SANDBOX,
    nri_pb2.REMOVE_POD_SANDBOX,
    nri_pb2.CREATE_CONTAINER,
    nri_pb2.POST_START_CONTAINER,
    nri_pb2.UPDATE_CONTAINER,
    nri_pb2.STOP_CONTAINER,
    nri_pb2.REMOVE_CONTAINER,
)
