"""Prometheus metrics and the health endpoints (``/metrics``, ``/healthz``, ``/readyz``).

:class:`Metrics` owns its own registry (never the process-global one) with the kubelet's
resource-manager metrics under the kubelet's metric keys and meanings (kubelet
pkg/kubelet/metrics/metrics.go; the kubelet exposes them with its ``kubelet_`` subsystem prefix,
e.g. ``kubelet_cpu_manager_pinning_requests_total``; ours carry no prefix) plus the plugin's
own NRI metrics (``nri_cpumgr_*``). :meth:`Metrics.serve` starts the HTTP endpoint.
"""

from typing import Any

from .address import parse_address
from .metrics import (
    ADMISSION_BUCKETS_MS,
    REQUEST_BUCKETS_S,
    Metrics,
)


def __getattr__(name: str) -> Any:
    # MetricsServer lives with http.server (and ssl): imported only when asked for
    if name == "MetricsServer":
        from .server import MetricsServer

        return MetricsServer
    raise AttributeError(name)

__all__ = [
    "ADMISSION_BUCKETS_MS",
    "REQUEST_BUCKETS_S",
    "Metrics",
    "MetricsServer",
    "parse_address",
]
