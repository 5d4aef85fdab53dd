"""The plugin's metrics and their HTTP endpoint.

Metric names and meanings follow the kubelet (pkg/kubelet/metrics/metrics.go) where it has one:

==============================================  =========  ===================================
name                                            type       meaning
==============================================  =========  ===================================
cpu_manager_pinning_requests_total              counter    CPU allocations that needed
                                                           exclusive CPUs (pinning)
cpu_manager_pinning_errors_total                counter    ... of which failed
cpu_manager_shared_pool_size_millicores         gauge      shared pool size, millicores
cpu_manager_exclusive_cpu_allocation_count      gauge      CPUs exclusively allocated
topology_manager_admission_requests_total       counter    admissions (containers admitted
                                                           through the Topology Manager)
topology_manager_admission_errors_total         counter    ... refused (resources not aligned)
topology_manager_admission_duration_ms          histogram  admission time, milliseconds
memory_manager_pinning_requests_total           counter    memory allocations needing pinning
memory_manager_pinning_errors_total             counter    ... of which failed
nri_cpumgr_nri_request_duration_seconds         histogram  NRI request handling time by
                                                           ``method`` (CreateContainer, ...)
nri_cpumgr_nri_connected                        gauge      1 while connected to the runtime
nri_cpumgr_nri_registered                       gauge      1 while registered (and
                                                           synchronized) with the runtime
nri_cpumgr_build_info                           gauge      1, labelled with the version
nri_cpumgr_reconfigurations_total               counter    config changes at runtime by
                                                           ``result`` (applied, unchanged,
                                                           invalid, refused, rolled-back,
                                                           resumed)
==============================================  =========  ===================================

The kubelet exposes its metrics with the ``kubelet_`` subsystem prefix; ours have none (they are
scraped from this plugin, not the kubelet, whose own CPU manager is off when this plugin runs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nri_cpumgr.metrics.server import MetricsServer

log = logging.getLogger("nri_cpumgr.metrics")

# kubelet TopologyManagerAdmissionDuration: ExponentialBuckets(.05, 2, 15), milliseconds
ADMISSION_BUCKETS_MS: tuple[float, ...] = tuple(0.05 * 2**i for i in range(15))
# NRI request handling time, seconds: fine-grained below 1 ms (the plugin's decisions take tens
# to hundreds of microseconds) up to 2 s (containerd's default plugin_request_timeout)
REQUEST_BUCKETS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.0,
)


class _Histogram:
    """Bucket counts (not cumulative), count and sum of observations."""

    __slots__ = ("buckets", "counts", "count", "sum")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.count += 1
        self.sum += v
        for i, le in enumerate(self.buckets):
            if v <= le:
                self.counts[i] += 1
                break


# name -> (help, kind); counters without the _total suffix (prometheus_client adds it)
_COUNTERS = {
    "cpu_manager_pinning_requests": "The number of cpu core allocations which required pinning.",
    "cpu_manager_pinning_errors":
        "The number of cpu core allocations which required pinning failed.",
    "topology_manager_admission_requests":
        "The number of admission requests where resources have to be aligned.",
    "topology_manager_admission_errors":
        "The number of admission request failures where resources could not be aligned.",
    "memory_manager_pinning_requests":
        "The number of memory pages allocations which required pinning.",
    "memory_manager_pinning_errors":
        "The number of memory pages allocations which required pinning that failed.",
}
_GAUGES = {
    "cpu_manager_shared_pool_size_millicores":
        "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
    "cpu_manager_exclusive_cpu_allocation_count":
        "The total number of CPUs exclusively allocated to containers running on this node",
    "nri_cpumgr_nri_connected":
        "1 while the plugin is connected to the runtime's NRI socket, else 0.",
    "nri_cpumgr_nri_registered":
        "1 while the plugin is registered with the runtime and synchronized, else 0.",
}


class Metrics:
    """The plugin's metrics, exposed through a private
    :class:`prometheus_client.CollectorRegistry` (never the process-global one).

    The recording methods are what the NRI glue calls; each is a few integer/float adds on
    plain Python values (well under a microsecond-scale lock), so they sit on the request
    path. prometheus_client is imported, and the registry built, only when the values are
    read (:meth:`exposition`, :meth:`value`, a scrape): a plugin without ``metricsAddress``
    never loads it, and one with it loads it at the first scrape, not before registering
    (its import, with the ``ssl`` module it pulls in, is ~15 ms and ~5 MiB).
    """

    def __init__(self, version: str = "") -> None:
        self._version = version
        self._counters = dict.fromkeys(_COUNTERS, 0.0)
        self._gauges = dict.fromkeys(_GAUGES, 0.0)
        self._admission = _Histogram(ADMISSION_BUCKETS_MS)
        self._requests: dict[str, _Histogram] = {}
        self._reconfigurations: dict[str, float] = {}
        self._registry: Any = None

    # ------------------------------------------------------------------ recording
    def observe_request(self, method: str, seconds: float) -> None:
        """One NRI request ``method`` (e.g. ``"CreateContainer"``) took ``seconds``."""
        h = self._requests.get(method)
        if h is None:
            h = self._requests[method] = _Histogram(REQUEST_BUCKETS_S)
        h.observe(seconds)

    def pinning(self, ok: bool) -> None:
        """A container needed exclusive CPUs (kubelet policy_static Allocate: Guaranteed pod,
        integer CPU request); ``ok`` False when the allocation failed."""
        c = self._counters
        c["cpu_manager_pinning_requests"] += 1
        if not ok:
            c["cpu_manager_pinning_errors"] += 1

    def set_pools(self, shared_millicores: int, exclusive_count: int) -> None:
        """Current shared pool size (millicores, i.e. CPUs x 1000) and number of CPUs
        exclusively allocated."""
        g = self._gauges
        g["cpu_manager_shared_pool_size_millicores"] = shared_millicores
        g["cpu_manager_exclusive_cpu_allocation_count"] = exclusive_count

    def admission(self, ok: bool, ms: float) -> None:
        """One Topology Manager admission (kubelet topologymanager Admit: counted for every
        admission, an error when refused) that took ``ms`` milliseconds."""
        c = self._counters
        c["topology_manager_admission_requests"] += 1
        if not ok:
            c["topology_manager_admission_errors"] += 1
        self._admission.observe(ms)

    def memory_pinning(self, ok: bool) -> None:
        """A container needed NUMA-pinned memory (Memory Manager static policy, Guaranteed
        pod); ``ok`` False when the allocation failed."""
        c = self._counters
        c["memory_manager_pinning_requests"] += 1
        if not ok:
            c["memory_manager_pinning_errors"] += 1

    def reconfiguration(self, result: str) -> None:
        """A config change at runtime ended with ``result`` (nri_cpumgr.runtime.reconfig:
        applied, unchanged, invalid, refused, rolled-back, resumed)."""
        self._reconfigurations[result] = self._reconfigurations.get(result, 0.0) + 1

    def connection(self, connected: bool, registered: bool) -> None:
        """Connection state to the runtime: socket connected, plugin registered."""
        self._gauges["nri_cpumgr_nri_connected"] = 1 if connected else 0
        self._gauges["nri_cpumgr_nri_registered"] = 1 if registered else 0

    # ------------------------------------------------------------------ the registry
    @property
    def registry(self) -> Any:
        """The private ``CollectorRegistry`` (built on first use)."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            r = CollectorRegistry(auto_describe=True)
            r.register(_Collector(self))
            self._registry = r
        return self._registry

    def _families(self) -> Any:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )
        from prometheus_client.utils import floatToGoString

        def buckets(h: _Histogram) -> list[tuple[str, float]]:
            out, acc = [], 0
            for le, n in zip(h.buckets, list(h.counts), strict=True):
                acc += n
                out.append((floatToGoString(le), acc))
            out.append(("+Inf", h.count))
            return out

        for name, doc in _COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=self._counters[name])
        for name, doc in _GAUGES.items():
            if name.startswith("nri_cpumgr_"):
                continue
            yield GaugeMetricFamily(name, doc, value=self._gauges[name])
        adm = HistogramMetricFamily(
            "topology_manager_admission_duration_ms",
            "Duration in milliseconds to serve a pod admission request.")
        adm.add_metric([], buckets(self._admission), self._admission.sum)
        yield adm
        req = HistogramMetricFamily(
            "nri_cpumgr_nri_request_duration_seconds",
            "Time to handle an NRI request from the runtime, in seconds, by method.",
            labels=["method"])
        for method, h in list(self._requests.items()):
            req.add_metric([method], buckets(h), h.sum)
        yield req
        rec = CounterMetricFamily(
            "nri_cpumgr_reconfigurations",
            "Config changes at runtime (SIGHUP or the config file), by result.",
            labels=["result"])
        for result, n in sorted(self._reconfigurations.items()):
            rec.add_metric([result], n)
        yield rec
        for name in ("nri_cpumgr_nri_connected", "nri_cpumgr_nri_registered"):
            yield GaugeMetricFamily(name, _GAUGES[name], value=self._gauges[name])
        info = GaugeMetricFamily("nri_cpumgr_build_info",
                                 "Always 1; the plugin's version as a label.", labels=["version"])
        info.add_metric([self._version or _package_version()], 1)
        yield info


    # ------------------------------------------------------------------ exposition
    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """``(body, content type)`` of the current values; the format is picked from an
        HTTP ``Accept`` header (Prometheus text by default, OpenMetrics when asked)."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """Current value of one sample (e.g. ``"cpu_manager_pinning_requests_total"``), None
        when absent. For tests and the status command."""
        return self.registry.get_sample_value(name, labels or {})

    def serve(self, address: str, ready: Callable[[], bool | str]) -> MetricsServer:
        """Start the HTTP endpoint on ``address`` (``"host:port"``, ``":port"`` = every
        interface, port 0 = a free port) in a daemon thread; see :class:`MetricsServer`.
        Raises ValueError for a bad address, OSError when it cannot listen."""
        from nri_cpumgr.metrics.server import MetricsServer

        return MetricsServer(self, address, ready)


class _Collector:
    """prometheus_client custom collector reading a :class:`Metrics`' values."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Any:
        return self._metrics._families()

def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("nri-cpumgr")
    except Exception:  # noqa: BLE001 - not installed (source tree): no version to show
        return "unknown"
