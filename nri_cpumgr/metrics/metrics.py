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
==============================================  =========  ===================================

The kubelet exposes its metrics with the ``kubelet_`` subsystem prefix; ours have none (they are
scraped from this plugin, not the kubelet, whose own CPU manager is off when this plugin runs).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("nri_cpumgr.metrics")

# kubelet TopologyManagerAdmissionDuration: ExponentialBuckets(.05, 2, 15), milliseconds
ADMISSION_BUCKETS_MS: tuple[float, ...] = tuple(0.05 * 2**i for i in range(15))
# NRI request handling time, seconds: fine-grained below 1 ms (the plugin's decisions take tens
# to hundreds of microseconds) up to 2 s (containerd's default plugin_request_timeout)
REQUEST_BUCKETS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.0,
)


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


class Metrics:
    """The plugin's metrics in a private :class:`prometheus_client.CollectorRegistry`.

    The recording methods are what the NRI glue calls; each costs about a microsecond
    (one lock-protected float add), so they sit on the request path.

    prometheus_client is imported, and the registry built, on the first use of a metric
    (in practice the first NRI request, after the plugin has registered): its import is
    ~15 ms that need not delay the registration.
    """

    _COLLECTORS = frozenset({
        "registry", "cpu_pinning_requests", "cpu_pinning_errors", "shared_pool_millicores",
        "exclusive_cpus", "admission_requests", "admission_errors", "admission_duration",
        "memory_pinning_requests", "memory_pinning_errors", "request_duration", "connected",
        "registered",
    })

    def __init__(self, version: str = "") -> None:
        self._version = version
        self._request_children: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not yet set: the collectors before _build
        if name not in Metrics._COLLECTORS or "registry" in self.__dict__:
            raise AttributeError(name)
        self._build()
        return self.__dict__[name]

    def _build(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry(auto_describe=True)
        self.cpu_pinning_requests = Counter(
            "cpu_manager_pinning_requests_total",
            "The number of cpu core allocations which required pinning.", registry=r)
        self.cpu_pinning_errors = Counter(
            "cpu_manager_pinning_errors_total",
            "The number of cpu core allocations which required pinning failed.", registry=r)
        self.shared_pool_millicores = Gauge(
            "cpu_manager_shared_pool_size_millicores",
            "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
            registry=r)
        self.exclusive_cpus = Gauge(
            "cpu_manager_exclusive_cpu_allocation_count",
            "The total number of CPUs exclusively allocated to containers running on this node",
            registry=r)
        self.admission_requests = Counter(
            "topology_manager_admission_requests_total",
            "The number of admission requests where resources have to be aligned.", registry=r)
        self.admission_errors = Counter(
            "topology_manager_admission_errors_total",
            "The number of admission request failures where resources could not be aligned.",
            registry=r)
        self.admission_duration = Histogram(
            "topology_manager_admission_duration_ms",
            "Duration in milliseconds to serve a pod admission request.",
            buckets=ADMISSION_BUCKETS_MS, registry=r)
        self.memory_pinning_requests = Counter(
            "memory_manager_pinning_requests_total",
            "The number of memory pages allocations which required pinning.", registry=r)
        self.memory_pinning_errors = Counter(
            "memory_manager_pinning_errors_total",
            "The number of memory pages allocations which required pinning that failed.",
            registry=r)
        self.request_duration = Histogram(
            "nri_cpumgr_nri_request_duration_seconds",
            "Time to handle an NRI request from the runtime, in seconds, by method.",
            ["method"], buckets=REQUEST_BUCKETS_S, registry=r)
        self.connected = Gauge(
            "nri_cpumgr_nri_connected",
            "1 while the plugin is connected to the runtime's NRI socket, else 0.", registry=r)
        self.registered = Gauge(
            "nri_cpumgr_nri_registered",
            "1 while the plugin is registered with the runtime and synchronized, else 0.",
            registry=r)
        info = Gauge("nri_cpumgr_build_info", "Always 1; the plugin's version as a label.",
                     ["version"], registry=r)
        info.labels(self._version or _package_version()).set(1)

    # ------------------------------------------------------------------ recording
    def observe_request(self, method: str, seconds: float) -> None:
        """One NRI request ``method`` (e.g. ``"CreateContainer"``) took ``seconds``."""
        child = self._request_children.get(method)
        if child is None:
            child = self._request_children[method] = self.request_duration.labels(method)
        child.observe(seconds)

    def pinning(self, ok: bool) -> None:
        """A container needed exclusive CPUs (kubelet policy_static Allocate: Guaranteed pod,
        integer CPU request); ``ok`` False when the allocation failed."""
        self.cpu_pinning_requests.inc()
        if not ok:
            self.cpu_pinning_errors.inc()

    def set_pools(self, shared_millicores: int, exclusive_count: int) -> None:
        """Current shared pool size (millicores, i.e. CPUs x 1000) and number of CPUs
        exclusively allocated."""
        self.shared_pool_millicores.set(shared_millicores)
        self.exclusive_cpus.set(exclusive_count)

    def admission(self, ok: bool, ms: float) -> None:
        """One Topology Manager admission (kubelet topologymanager Admit: counted for every
        admission, an error when refused) that took ``ms`` milliseconds."""
        self.admission_requests.inc()
        if not ok:
            self.admission_errors.inc()
        self.admission_duration.observe(ms)

    def memory_pinning(self, ok: bool) -> None:
        """A container needed NUMA-pinned memory (Memory Manager static policy, Guaranteed
        pod); ``ok`` False when the allocation failed."""
        self.memory_pinning_requests.inc()
        if not ok:
            self.memory_pinning_errors.inc()

    def connection(self, connected: bool, registered: bool) -> None:
        """Connection state to the runtime: socket connected, plugin registered."""
        self.connected.set(1 if connected else 0)
        self.registered.set(1 if registered else 0)

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

    def serve(self, address: str, ready: Callable[[], bool]) -> MetricsServer:
        """Start the HTTP endpoint on ``address`` (``"host:port"``, ``":port"`` = every
        interface, port 0 = a free port) in a daemon thread; see :class:`MetricsServer`.
        Raises ValueError for a bad address, OSError when it cannot listen."""
        return MetricsServer(self, address, ready)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("nri-cpumgr")
    except Exception:  # noqa: BLE001 - not installed (source tree): no version to show
        return "unknown"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    metrics: Metrics
    ready: Callable[[], bool]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              head: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype = self.server.metrics.exposition(self.headers.get("Accept", ""))
            self._send(200, body, ctype, head)
        elif path == "/healthz":
            self._send(200, b"ok\n", head=head)
        elif path == "/readyz":
            try:
                ok = bool(self.server.ready())
            except Exception as e:  # noqa: BLE001 - a broken probe means "not ready"
                log.warning("readiness check failed: %s", e)
                ok = False
            if ok:
                self._send(200, b"ok\n", head=head)
            else:
                self._send(503, b"not registered with the runtime\n", head=head)
        else:
            self._send(404, b"not found\n", head=head)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._route(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(head=True)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s %s", self.address_string(), format % args)


class MetricsServer:
    """The HTTP endpoint, served from a daemon thread (one more thread per open connection).

    * ``GET /metrics`` - the Prometheus exposition of :class:`Metrics` (200);
    * ``GET /healthz`` - 200 while the process serves (liveness);
    * ``GET /readyz``  - 200 when ``ready()`` is true (the plugin is registered with the
      runtime), else 503 (readiness); ``ready`` runs in the server thread, so it must only
      read state.

    ``port`` is the bound port (the kernel's choice for port 0); :meth:`close` stops it.
    Raises ValueError for a bad address, OSError when it cannot listen.
    """

    def __init__(self, metrics: Metrics, address: str, ready: Callable[[], bool]) -> None:
        host, port = parse_address(address)
        self._server = _Server((host, port), _Handler)
        self._server.metrics = metrics
        self._server.ready = ready
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
            name="nri-cpumgr-metrics", daemon=True)
        self._thread.start()
        log.info("metrics, /healthz and /readyz on %s:%d", host or "*", self.port)

    def close(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        with contextlib.suppress(OSError):
            self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
