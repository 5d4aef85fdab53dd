"""The HTTP endpoint of :class:`~nri_cpumgr.metrics.Metrics`: ``/metrics``, ``/healthz``,
``/readyz``. A module of its own: http.server pulls in http.client and ssl (~5 MiB of RSS),
which a plugin without ``metricsAddress`` never needs."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from nri_cpumgr.metrics.address import parse_address

log = logging.getLogger("nri_cpumgr.metrics")


class Exposition(Protocol):
    """What the server reads: :class:`nri_cpumgr.metrics.Metrics` (its ``exposition``), named
    by shape so that this module does not import the one that starts it."""

    def exposition(self, accept: str) -> tuple[bytes, str]: ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    metrics: Exposition
    ready: Callable[[], bool | str]


class _Server6(_Server):
    """An IPv6 host (``[::1]:9109``, given bracketed)."""

    address_family = socket.AF_INET6


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
            reason = "not registered with the runtime"
            try:
                ok = self.server.ready()
            except Exception as e:  # noqa: BLE001 - a broken probe means "not ready"
                log.warning("readiness check failed: %s", e)
                ok = False
            if isinstance(ok, str):  # not ready, and why
                ok, reason = False, ok
            if ok:
                self._send(200, b"ok\n", head=head)
            else:
                self._send(503, f"{reason}\n".encode(), head=head)
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

    * ``GET /metrics`` - the Prometheus exposition of :class:`nri_cpumgr.metrics.Metrics` (200);
    * ``GET /healthz`` - 200 while the process serves (liveness);
    * ``GET /readyz``  - 200 when ``ready()`` is true (the plugin is registered with the
      runtime), else 503 (readiness; a ``str`` from ``ready()`` is the reason, sent as the
      503's body); ``ready`` runs in the server thread, so it must only
      read state.

    ``port`` is the bound port (the kernel's choice for port 0); :meth:`close` stops it.
    Raises ValueError for a bad address, OSError when it cannot listen.
    """

    def __init__(self, metrics: Exposition, address: str, ready: Callable[[], bool | str]) -> None:
        host, port = parse_address(address)
        self._server = (_Server6 if ":" in host else _Server)((host, port), _Handler)
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
