"""The node's pod operations as the plugin sees them, so that a shared-pool pass yields to them.

A pass of the ``cri`` path makes one CRI ``UpdateContainerResources`` per shared container
(a ``runc update`` each, ~10 ms of CPU, and containerd's NRI locks for the NRI
UpdateContainer it causes). A pod created or deleted meanwhile competes with those calls for
the node's CPUs and the runtime's locks, on its critical path. :class:`NodeActivity` records
when the runtime last told the plugin of a pod operation (an NRI request answered: a
container created, started, stopped or removed, a pod sandbox stopped or removed), and the
worker thread of a pass holds its next call until the node has been quiet for ``quiet``
seconds, never more than ``max_hold`` seconds per call: a pass under sustained churn slows
down (at most ``max_hold`` per container) but always ends.

The event loop writes one float; the worker thread reads it (a float attribute is read and
written whole under the GIL: no lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: seconds without a pod operation before the next CRI call of a pass: covers the runtime's
#: own work after the plugin's reply (a container's creation, start or kill by runc, the
#: sandbox's teardown: a deletion's four NRI events are 100-500 ms apart on a loaded node).
#: Measured with benchmarks/busy_node.py --overlap (docs/development/measurements.md): a
#: deletion during a pass 1.11x the no-plugin time with 0.2 s, 1.31-1.50x with 0.03 s,
#: 1.68x without the yield
QUIET = 0.2
#: seconds one call of a pass may be held at most: the bound that keeps a pass going under
#: sustained churn (250 shared containers: at most 75 s longer)
MAX_HOLD = 0.3


class NodeActivity:
    """When the last pod operation was answered (``clock`` seconds), and the wait a pass's
    next CRI call takes for it. ``quiet``, ``max_hold``: seconds (:data:`QUIET`,
    :data:`MAX_HOLD`); ``max_hold`` 0 turns the yield off."""

    def __init__(self, quiet: float = QUIET, max_hold: float = MAX_HOLD,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.quiet = quiet
        self.max_hold = max_hold
        self._clock = clock
        self._sleep = sleep
        self.last = float("-inf")
        #: seconds the calls were held in all, and how many were (for the pass's log line)
        self.held = 0.0
        self.held_calls = 0

    def touch(self) -> None:
        """Event loop: a pod operation's NRI request was just answered."""
        self.last = self._clock()

    def hold(self) -> float:
        """Worker thread: wait until ``quiet`` seconds have passed since the last pod
        operation, at most ``max_hold`` seconds; returns the seconds waited (0.0 on a quiet
        node)."""
        if self.max_hold <= 0:
            return 0.0
        t0 = now = self._clock()
        deadline = t0 + self.max_hold
        while True:
            due = self.last + self.quiet  # (re-read: a new operation moves it)
            if due <= now or now >= deadline:
                break
            self._sleep(min(due, deadline) - now)
            now = self._clock()
        waited = now - t0
        if waited > 0:
            self.held += waited
            self.held_calls += 1
        return waited
