"""Pod spec facts from the API server: a watch of this node's pods, off the critical path.

Why: see :mod:`nri_cpumgr.podmodel.spec` (NRI cannot show whether ``.spec.resources`` is
set, nor a container's own requests in such a pod). The kubelet puts nothing of that in the
sandbox or container annotations (kuberuntime labels.go: the sandbox gets the pod's own
annotations, containers a hash, the restart count and termination settings), so the spec is
read where the kubelet reads it: the API server.

:class:`APIServerPodSource` runs one daemon thread: a LIST of ``/api/v1/pods`` with
``fieldSelector=spec.nodeName=<node>`` (paged, 500 a page), then a WATCH from the list's
resourceVersion (bookmarks on, the server ends it after ``WATCH_SECONDS``; 410 Gone or any
error relists after a backoff of 0.5 s doubling to 30 s). Every request has a deadline of
``REQUEST_TIMEOUT`` (2 s) to connect and answer; a watch stream then reads with the watch's
own timeout. It uses http.client and the pod's service-account token and CA (re-read at
every connection: tokens rotate), no Kubernetes client library.

The runtime's handlers only read :class:`PodSpecStore` (a dict lookup); the one wait is
:meth:`PodSpecStore.wait`, bounded, taken only while the watch is connected (see the README,
"Pod spec facts"). Never raises into the plugin: failures are logged once per kind and the
plugin decides from NRI alone meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

from nri_cpumgr.podmodel.spec import PodSpecFacts, facts_from_pod

log = logging.getLogger("nri_cpumgr.podsource")

REQUEST_TIMEOUT = 2.0  # seconds: connect + response headers of every request
WATCH_SECONDS = 290  # the server closes a watch after this (timeoutSeconds)
PAGE = 500
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The longest the watch's first LIST waits for facts to be needed (seconds, PodSpecStore)
START_GATE = 2.0


class PodSpecStore:
    """Pod UID -> :class:`PodSpecFacts`, written by the watch thread, read by the handlers.

    ``connected``: the last LIST or WATCH succeeded and the stream is open; ``starting``:
    the watch was started and its first LIST has neither come nor failed yet (only in
    these two does :meth:`wait` wait). ``needed``: set once anything asks for facts, or the
    plugin's first Synchronize was answered; the watch makes its first LIST only then (or
    after :data:`START_GATE` seconds), so that a restarted plugin's start does not share the
    GIL with the watch's imports and LIST (issue 34). Thread-safe: writers hold the
    condition; a read is one dict lookup.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._by_uid: dict[str, PodSpecFacts] = {}
        self.connected = False
        self.starting = False
        self.needed = threading.Event()
        self.synced_at: float | None = None  # monotonic time of the last full LIST
        self.waits = 0  # lookups that had to wait
        self.misses = 0  # lookups that found nothing (fallback to NRI alone)

    def __len__(self) -> int:
        return len(self._by_uid)

    def get(self, uid: str) -> PodSpecFacts | None:
        return self._by_uid.get(uid)

    def wait(self, uid: str, timeout: float) -> PodSpecFacts | None:
        """The facts of pod ``uid``; when unknown and the watch is connected, wait up to
        ``timeout`` seconds for them. None when still unknown (counted in ``misses``)."""
        f = self._by_uid.get(uid)
        if f is not None:
            return f
        if (self.connected or self.starting) and timeout > 0:
            self.needed.set()
            self.waits += 1
            with self._cond:
                self._cond.wait_for(
                    lambda: uid in self._by_uid or not (self.connected or self.starting),
                    timeout)
            f = self._by_uid.get(uid)
        if f is None:
            self.misses += 1
        return f

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the first full LIST; True once it is in."""
        if self.synced_at is None and timeout > 0:
            self.needed.set()
            with self._cond:
                self._cond.wait_for(lambda: self.synced_at is not None, timeout)
        return self.synced_at is not None

    def _index(self, f: PodSpecFacts) -> None:
        self._by_uid[f.uid] = f
        for a in f.aliases:
            self._by_uid[a] = f

    def replace(self, facts: Iterable[PodSpecFacts]) -> None:
        """A full LIST: the store becomes exactly ``facts``."""
        with self._cond:
            self._by_uid = {}
            for f in facts:
                self._index(f)
            self.connected = True
            self.starting = False
            self.synced_at = time.monotonic()
            self._cond.notify_all()

    def put(self, f: PodSpecFacts) -> None:
        with self._cond:
            self._index(f)
            self._cond.notify_all()

    def delete(self, f: PodSpecFacts) -> None:
        with self._cond:
            for k in (f.uid, *f.aliases):
                self._by_uid.pop(k, None)

    def set_connected(self, on: bool) -> None:
        with self._cond:
            self.connected = on
            if not on:
                self.starting = False
            self._cond.notify_all()


def _facts(obj: Any) -> PodSpecFacts | None:
    try:
        return facts_from_pod(obj)
    except ValueError as e:
        name = (obj.get("metadata") or {}).get("name", "?") if isinstance(obj, dict) else "?"
        log.warning("pod spec source: pod %s skipped: %s", name, e)
        return None


class APIServerPodSource:
    """The LIST+WATCH thread feeding a :class:`PodSpecStore` (see the module docstring).

    ``url``: ``https://host:port`` (default: the in-cluster ``KUBERNETES_SERVICE_HOST`` /
    ``_PORT``) or ``http://`` (tests); ``node``: the node name (default ``NODE_NAME``);
    ``token_file`` / ``ca_file``: the service account's (a missing token file sends no
    Authorization header). Raises ValueError when no URL or node name can be found.
    """

    def __init__(self, store: PodSpecStore, url: str = "", node: str = "", *,
                 token_file: str = f"{SA_DIR}/token", ca_file: str = f"{SA_DIR}/ca.crt",
                 request_timeout: float = REQUEST_TIMEOUT,
                 watch_seconds: int = WATCH_SECONDS) -> None:
        if not url:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
                "KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise ValueError("podSpecSource apiServer: no apiServerURL and no "
                                 "KUBERNETES_SERVICE_HOST in the environment")
            url = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        node = node or os.environ.get("NODE_NAME", "")
        if not node:
            raise ValueError("podSpecSource apiServer: no nodeName and no NODE_NAME in the "
                             "environment")
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"apiServerURL {url!r}: expected http(s)://host[:port]")
        self.store = store
        self.url = u
        self.node = node
        self.token_file = token_file
        self.ca_file = ca_file
        self.request_timeout = request_timeout
        self.watch_seconds = watch_seconds
        self._stop = threading.Event()
        self._conn: Any = None
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="pod-spec-watch", daemon=True)

    def start(self) -> None:
        """Start the thread; its first LIST waits for the store's ``needed`` (at most
        :data:`START_GATE` seconds, see :class:`PodSpecStore`)."""
        self.store.starting = True
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread (closes an open stream); waits up to ``timeout`` seconds."""
        self._stop.set()
        self.store.needed.set()  # (a thread still before its first LIST)
        conn = self._conn
        if conn is not None:
            try:
                if conn.sock is not None:
                    import socket

                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ the HTTP side
    def _connection(self) -> Any:
        import http.client

        host, port = self.url.hostname, self.url.port
        if self.url.scheme == "http":
            return http.client.HTTPConnection(host, port, timeout=self.request_timeout)
        import ssl

        ctx = ssl.create_default_context(
            cafile=self.ca_file if os.path.exists(self.ca_file) else None)
        return http.client.HTTPSConnection(host, port, timeout=self.request_timeout,
                                           context=ctx)

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "nri-cpumgr"}
        try:
            with open(self.token_file) as f:
                h["Authorization"] = f"Bearer {f.read().strip()}"
        except OSError:
            pass
        return h

    def _path(self, **query: Any) -> str:
        q = {"fieldSelector": f"spec.nodeName={self.node}", **query}
        return f"{self.url.path.rstrip('/')}/api/v1/pods?{urllib.parse.urlencode(q)}"

    def _request(self, conn: Any, path: str) -> Any:
        conn.request("GET", path, headers=self._headers())
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read(512).decode(errors="replace")
            raise OSError(f"HTTP {resp.status} for {path}: {body.strip()[:200]}")
        return resp

    def _list(self) -> str:
        """LIST every pod of the node (paged); replaces the store; returns the
        resourceVersion to watch from."""
        items: list[PodSpecFacts] = []
        cont = ""
        conn = self._connection()
        self._conn = conn
        try:
            while True:
                q: dict[str, Any] = {"limit": PAGE}
                if cont:
                    q["continue"] = cont
                doc = json.loads(self._request(conn, self._path(**q)).read())
                for obj in doc.get("items") or ():
                    f = _facts(obj)
                    if f is not None:
                        items.append(f)
                meta = doc.get("metadata") or {}
                cont = meta.get("continue") or ""
                if not cont:
                    rv = str(meta.get("resourceVersion", ""))
                    break
        finally:
            conn.close()
            self._conn = None
        self.store.replace(items)
        return rv

    def _watch(self, rv: str) -> str:
        """WATCH from ``rv`` until the server ends it; returns the last resourceVersion
        seen, or "" when the caller must relist (410 Gone / an ERROR event)."""
        conn = self._connection()
        self._conn = conn
        try:
            resp = self._request(conn, self._path(
                watch="1", resourceVersion=rv, allowWatchBookmarks="true",
                timeoutSeconds=self.watch_seconds))
            if conn.sock is not None:  # the stream may stay quiet until the server ends it
                conn.sock.settimeout(self.watch_seconds + 10)
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return rv
                ev = json.loads(line)
                kind, obj = ev.get("type"), ev.get("object") or {}
                if kind == "ERROR":
                    log.info("pod spec source: watch ended: %s (relisting)",
                             obj.get("message", obj))
                    return ""
                rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                if kind == "BOOKMARK":
                    continue
                f = _facts(obj)
                if f is None:
                    continue
                if kind == "DELETED":
                    self.store.delete(f)
                else:
                    self.store.put(f)
            return rv
        finally:
            conn.close()
            self._conn = None

    def _run(self) -> None:
        self.store.needed.wait(START_GATE)
        backoff = BACKOFF_MIN
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                    if "ok" not in self._said:
                        self._said = {"ok"}
                        log.info("pod spec source: %d pods of node %s from %s", len(
                            self.store), self.node, self.url.geturl())
                rv = self._watch(rv)
                backoff = BACKOFF_MIN
            except Exception as e:  # noqa: BLE001 - any failure: fall back, retry later
                self.store.set_connected(False)
                rv = ""
                if self._stop.is_set():
                    break
                kind = type(e).__name__
                if kind not in self._said:
                    self._said.discard("ok")
                    self._said.add(kind)
                    log.warning("pod spec source: %s: %s; deciding from NRI alone until it "
                                "answers (retrying, backoff up to %.0f s)", kind, e,
                                BACKOFF_MAX)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
        self.store.set_connected(False)
