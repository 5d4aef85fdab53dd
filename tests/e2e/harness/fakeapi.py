"""A small fake Kubernetes API server on loopback: ``/api/v1/pods`` LIST and WATCH with a
``spec.nodeName`` field selector, nothing else (the plugin's pod spec source,
nri_cpumgr.podsource, is its only client).

Pods are ``v1.Pod`` dicts; :meth:`FakeAPIServer.add` / :meth:`delete` change them and wake
the open watches (ADDED / DELETED events, a resourceVersion counter). ``delay`` (seconds)
holds every response back (a slow API server); ``down`` answers 503 (an unreachable one
after the connection).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeAPIServer:
    """``with FakeAPIServer("node-1") as api: api.url`` -> ``http://127.0.0.1:<port>``."""

    def __init__(self, node: str, *, tls: tuple[str, str] | None = None,
                 token: str | None = None) -> None:
        """``tls``: (certificate file, key file): serve https; ``token``: refuse (401) a
        request without ``Authorization: Bearer <token>``."""
        self.node = node
        self.token = token
        self.delay = 0.0
        self._down = False
        self.requests: list[str] = []
        self._cond = threading.Condition()
        self._rv = 1
        self._pods: dict[str, dict[str, Any]] = {}
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._closing = False
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                srv._serve(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, on: bool) -> None:
        """Answer 503 from now on (and end the open watches)."""
        with self._cond:
            self._down = on
            self._cond.notify_all()

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ pods
    def add(self, pod: dict[str, Any], node: str | None = None) -> None:
        """Add or replace ``pod`` (on ``node``, default this server's node)."""
        pod = json.loads(json.dumps(pod))
        pod.setdefault("spec", {})["nodeName"] = node or self.node
        with self._cond:
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            kind = "MODIFIED" if pod["metadata"]["uid"] in self._pods else "ADDED"
            self._pods[pod["metadata"]["uid"]] = pod
            self._events.append((self._rv, kind, pod))
            self._cond.notify_all()

    def delete(self, uid: str) -> None:
        with self._cond:
            pod = self._pods.pop(uid)
            self._rv += 1
            self._events.append((self._rv, "DELETED", pod))
            self._cond.notify_all()

    # ------------------------------------------------------------------ HTTP
    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        u = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        self.requests.append(h.path)
        if self.delay:
            threading.Event().wait(self.delay)
        if self.down:
            return self._reply(h, 503, {"kind": "Status", "code": 503, "message": "down"})
        if self.token is not None and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._reply(h, 401, {"kind": "Status", "code": 401})
        if u.path != "/api/v1/pods":
            return self._reply(h, 404, {"kind": "Status", "code": 404})
        sel = q.get("fieldSelector", "")
        node = sel.removeprefix("spec.nodeName=") if sel.startswith("spec.nodeName=") else None
        if q.get("watch") in ("1", "true"):
            return self._watch(h, node, int(q.get("resourceVersion") or 0),
                               float(q.get("timeoutSeconds") or 60))
        with self._cond:
            items = [p for p in self._pods.values()
                     if node is None or p["spec"].get("nodeName") == node]
            rv = self._rv
        self._reply(h, 200, {"kind": "PodList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _reply(self, h: BaseHTTPRequestHandler, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            h.wfile.write(body)
        except OSError:
            pass  # the client gave up (its deadline)

    def _watch(self, h: BaseHTTPRequestHandler, node: str | None, rv: int,
               timeout: float) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        import time

        end = time.monotonic() + timeout
        try:
            while True:
                seen = rv
                with self._cond:
                    self._cond.wait_for(
                        lambda: self._closing or self.down
                        or (self._events and self._events[-1][0] > seen),  # noqa: B023
                        max(0.0, end - time.monotonic()))
                    if self._closing or self.down or time.monotonic() >= end:
                        break
                    new = [e for e in self._events if e[0] > rv]
                for erv, kind, pod in new:
                    rv = erv
                    if node is None or pod["spec"].get("nodeName") == node:
                        chunk(json.dumps({"type": kind, "object": pod}).encode() + b"\n")
            chunk(b"")
        except OSError:
            pass
