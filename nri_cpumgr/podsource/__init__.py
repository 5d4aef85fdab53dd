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

import logging
import os
import threading
import time

from nri_cpumgr import standin

# (urllib.parse imports ipaddress, ~1.5 ms of class building, before the first Synchronize
# of a plugin that watches, and in the early LIST's child: it uses it only for a bracketed
# IPv6 host, which then imports it, issue 34)
standin.import_with("urllib.parse", ("ipaddress",))
import urllib.parse  # noqa: E402 - (imported above: binds the name)

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without typing: the early LIST's child)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from nri_cpumgr.podmodel.spec import PodSpecFacts

log = logging.getLogger("nri_cpumgr.podsource")

REQUEST_TIMEOUT = 2.0  # seconds: connect + response headers of every request
WATCH_SECONDS = 290  # the server closes a watch after this (timeoutSeconds)
PAGE = 500
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: nri_cpumgr.podmodel.spec.MIRROR_ANNOTATION (a mirror pod's static pod UID), for
#: :func:`facts_parts`
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: The longest the watch's first LIST waits for facts to be needed (seconds, PodSpecStore)
START_GATE = 2.0


class _Parts:
    """A pod of an early LIST whose facts :class:`PodSpecStore` has not decoded yet: the
    LIST's object, the store's keys for it (UID, alias), the facts once decoded."""

    __slots__ = ("obj", "keys", "facts", "done")

    def __init__(self, obj: Any, keys: tuple[str, ...]) -> None:
        self.obj = obj
        self.keys = keys
        self.facts: PodSpecFacts | None = None
        self.done = False


def _parts_keys(obj: Any) -> tuple[str, ...] | None:
    """The store's keys for a LIST's pod, as its facts will have them (``uid``, then the
    mirror pod's alias: :func:`nri_cpumgr.podmodel.spec.facts_from_pod`), or None when it
    has no UID (its decoding refuses it)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str) or not uid:
        return None
    ann = meta.get("annotations")
    mirror = ann.get(MIRROR_ANNOTATION) if isinstance(ann, dict) else None
    return (uid, mirror) if isinstance(mirror, str) and mirror and mirror != uid else (uid,)


class PodSpecStore:
    """Pod UID -> :class:`PodSpecFacts`, written by the watch thread, read by the handlers.

    ``connected``: the last LIST or WATCH succeeded and the stream is open; ``starting``:
    the watch was started and its first LIST has neither come nor failed yet (only in
    these two does :meth:`wait` wait). ``needed``: set once anything asks for facts, or the
    plugin's first Synchronize was answered; the watch makes its first LIST only then (or
    after :data:`START_GATE` seconds), so that a restarted plugin's start does not share the
    GIL with the watch's imports and LIST (issue 34). ``answered``: cleared by a plugin that
    starts the watch before its first Synchronize, set once that Synchronize is answered or
    a lookup waits for a pod the store lacks; the watch opens its stream (its
    ``http.client`` and ``ssl`` imports: ~25 ms of the GIL) only then (or after
    :data:`START_GATE` seconds), not while that answer is being built after a first LIST it
    waited for. ``listed_early``: the last full LIST is the one a child process made at the
    plugin's start (:mod:`nri_cpumgr.early_list`); its pods' facts are decoded when first
    looked up (:meth:`replace_parts`: the first Synchronize waits for that LIST and reads
    only its Guaranteed pods), the rest by the watch thread once that Synchronize is
    answered (:meth:`complete`). Thread-safe: writers hold the condition; a read is one
    dict lookup (and, for a pod of that LIST not decoded yet, its decoding, under the
    condition).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._by_uid: dict[str, PodSpecFacts | _Parts] = {}
        self.connected = False
        self.starting = False
        self.needed = threading.Event()
        self.answered = threading.Event()
        self.answered.set()
        self.synced_at: float | None = None  # monotonic time of the last full LIST
        self.listed_early = False  # that LIST was made at the start (APIServerPodSource)
        self.waits = 0  # lookups that had to wait
        self.misses = 0  # lookups that found nothing (fallback to NRI alone)

    def __len__(self) -> int:
        return len(self._by_uid)

    def get(self, uid: str) -> PodSpecFacts | None:
        f = self._by_uid.get(uid)
        return self._decode(f) if type(f) is _Parts else f

    def wait(self, uid: str, timeout: float) -> PodSpecFacts | None:
        """The facts of pod ``uid``; when unknown and the watch is connected, wait up to
        ``timeout`` seconds for them. None when still unknown (counted in ``misses``)."""
        f = self.get(uid)
        if f is not None:
            return f
        if (self.connected or self.starting) and timeout > 0:
            self.needed.set()
            self.answered.set()  # (the stream brings a pod created after the LIST)
            self.waits += 1
            with self._cond:
                self._cond.wait_for(
                    lambda: uid in self._by_uid or not (self.connected or self.starting),
                    timeout)
            f = self.get(uid)
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

    def _index(self, f: PodSpecFacts, into: dict[str, Any] | None = None) -> None:
        by = self._by_uid if into is None else into
        by[f.uid] = f
        for a in f.aliases:
            by[a] = f

    def replace(self, facts: Iterable[PodSpecFacts], *, early: bool = False) -> None:
        """A full LIST: the store becomes exactly ``facts``. ``early``: the LIST made at the
        plugin's start by a child process (``listed_early``: a pod created since is not in
        it until the stream brings it). The new index is built aside and put in place at
        once: a lookup meanwhile reads the whole previous one."""
        by: dict[str, Any] = {}
        with self._cond:
            for f in facts:
                self._index(f, by)
            self._by_uid = by
            self._replaced(early)

    def _replaced(self, early: bool) -> None:
        self.listed_early = early
        self.connected = True
        self.starting = False
        self.synced_at = time.monotonic()
        self._cond.notify_all()

    def replace_parts(self, pods: Iterable[Any], *, early: bool = False) -> None:
        """:meth:`replace` with the LIST's pods as :func:`facts_parts` gives them (or whole),
        each decoded (:func:`nri_cpumgr.podmodel.spec.facts_from_pod`) when first looked up
        or by :meth:`complete`, whichever comes first: the same facts, under the same UIDs
        and aliases, the same warning for a pod that has none (UIDs and aliases being
        unique in a LIST: a pod that has none leaves its keys empty). A pod without a UID is
        decoded (and refused) at once."""
        by: dict[str, Any] = {}
        with self._cond:
            for obj in pods:
                keys = _parts_keys(obj)
                if keys is None:
                    if (f := _facts(obj)) is not None:  # (it logs why there is none)
                        self._index(f, by)
                    continue
                parts = _Parts(obj, keys)
                for k in keys:
                    by[k] = parts
            self._by_uid = by
            self._replaced(early)

    def complete(self) -> None:
        """Decode the pods :meth:`replace_parts` left undecoded (the watch thread, once the
        first Synchronize is answered), one at a time: a lookup waits for one pod's
        decoding at most."""
        with self._cond:
            left = {id(v): v for v in self._by_uid.values() if type(v) is _Parts}
        for parts in left.values():
            self._decode(parts)

    def _decode(self, parts: _Parts) -> PodSpecFacts | None:
        with self._cond:
            if not parts.done:
                parts.facts = _facts(parts.obj)  # (None, and a warning, for a bad pod)
                parts.done = True
                for k in parts.keys:
                    if self._by_uid.get(k) is parts:
                        if parts.facts is None:
                            del self._by_uid[k]
                        else:
                            self._by_uid[k] = parts.facts
            return parts.facts

    def unsync(self) -> None:
        """A full LIST is due again (:meth:`APIServerPodSource.refresh`): ``synced_at`` is
        None until it is in; the facts stay."""
        with self._cond:
            self.synced_at = None

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
    from nri_cpumgr.podmodel.spec import facts_from_pod  # (not in the early LIST's child)

    try:
        return facts_from_pod(obj)
    except Exception as e:  # noqa: BLE001 - a value of any type the API server's may hold
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        log.warning("pod spec source: pod %s skipped: %s", name,
                    e if isinstance(e, ValueError) else f"{type(e).__name__}: {e}")
        return None


def facts_parts(pod: Any) -> Any:
    """The parts of a ``v1.Pod`` (decoded JSON) that
    :func:`nri_cpumgr.podmodel.spec.facts_from_pod` reads, the rest left out:
    ``facts_from_pod(facts_parts(pod))`` gives what ``facts_from_pod(pod)`` gives, or
    raises the same error (tests/unit/test_early_list.py holds the two together). A pod as
    the API server serves it is ~5-15 KiB of JSON (managed fields, status); this is ~0.3
    KiB: the form in which the watch's first LIST, made by a child process at the plugin's
    start, is handed over (:mod:`nri_cpumgr.early_list`). Here, not beside
    ``facts_from_pod``: that child imports neither the pod model nor its dataclasses."""
    if not isinstance(pod, dict):
        return pod
    out: dict[str, Any] = {}
    meta, spec = pod.get("metadata"), pod.get("spec")
    if isinstance(meta, dict):
        m = {k: meta[k] for k in ("uid", "namespace", "name") if k in meta}
        ann = meta.get("annotations")
        if isinstance(ann, dict):
            m["annotations"] = ({MIRROR_ANNOTATION: ann[MIRROR_ANNOTATION]}
                                if MIRROR_ANNOTATION in ann else {})
        elif ann is not None:
            m["annotations"] = ann
        out["metadata"] = m
    elif meta is not None:
        out["metadata"] = meta
    if isinstance(spec, dict):
        sp = {k: spec[k] for k in ("resources", "initContainers", "containers") if k in spec}
        for k in ("initContainers", "containers"):
            if isinstance(sp.get(k), list):
                sp[k] = [{f: c[f] for f in ("name", "resources", "restartPolicy") if f in c}
                         if isinstance(c, dict) else c for c in sp[k]]
        out["spec"] = sp
    elif spec is not None:
        out["spec"] = spec
    return out


def list_to(fd: int, url: str, node: str) -> int:
    """The early LIST's child (:mod:`nri_cpumgr.early_list`): LIST node ``node``'s pods at
    ``url`` (as :class:`APIServerPodSource` takes them) and write one document on ``fd``
    (:mod:`marshal`: the plugin reads it without importing ``json``, the child being the
    same interpreter, from the same process): ``{"resourceVersion": rv, "items":
    [facts_parts(pod), ...]}``, or ``{"error": "<kind>: <message>"}`` when the LIST fails,
    each with ``"cpu_ms"``: the child's CPU time so far (ms).
    Logs nothing (the watch logs what its own LIST meets). Returns the child's exit status:
    0, or 1 when ``fd`` is closed."""
    logging.disable(logging.CRITICAL)
    # (email.utils, which http.client imports, imports these for dates and message ids,
    # which a LIST never needs: the child's CPU is CPU the plugin's start competes with)
    standin.import_with("http.client", ("random", "datetime", "calendar"))
    doc: dict[str, Any]
    try:
        pods, rv = APIServerPodSource(PodSpecStore(), url, node).list_pods()
        doc = {"resourceVersion": rv, "items": [facts_parts(p) for p in pods]}
    except Exception as e:  # noqa: BLE001 - the watch meets it again itself
        doc = {"error": f"{type(e).__name__}: {e}"}
    import marshal

    doc["cpu_ms"] = time.process_time() * 1000  # (the child's CPU so far, for the log)
    data = memoryview(marshal.dumps(doc))
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # (the plugin went away, or gave up on the child)
        return 1
    return 0


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
        given = (url, node)  # (as configured: what nri_cpumgr.early_list was started for)
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
        self._config = given
        #: the child process making the first LIST (nri_cpumgr.early_list), once taken;
        #: its pid while the thread reads it
        self._early: tuple[int, int] | None = None
        self._reading: int | None = None
        self._relist = threading.Event()  # (refresh)
        self._streaming = False
        self._conn: Any = None
        self._said: set[str] = set()
        self._listed_at_start: float | None = None
        self._thread = threading.Thread(target=self._run, name="pod-spec-watch", daemon=True)

    def start(self) -> None:
        """Start the thread; its first LIST waits for the store's ``needed`` (at most
        :data:`START_GATE` seconds, see :class:`PodSpecStore`). That LIST is the one a
        child process made at the plugin's start for the same ``apiServerURL`` and
        ``nodeName`` (:mod:`nri_cpumgr.early_list`) when there is one."""
        from nri_cpumgr import early_list

        self._early = early_list.take(*self._config)
        self.store.starting = True
        self._thread.start()

    def refresh(self) -> None:
        """A fresh LIST, now: the first Synchronize found a Guaranteed pod missing from the
        LIST made at the start (:attr:`PodSpecStore.listed_early`; the pod may have been
        created since). The store's ``synced_at`` is cleared until that LIST is in (wait
        for it with :meth:`PodSpecStore.wait_synced`); an open stream is ended for it. The
        facts already in the store stay until then."""
        self.store.unsync()
        self._relist.set()
        self.store.needed.set()
        self.store.answered.set()
        conn = self._conn
        if self._streaming and conn is not None and conn.sock is not None:
            import socket

            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread (closes an open stream); waits up to ``timeout`` seconds."""
        self._stop.set()
        self.store.needed.set()  # (a thread still before its first LIST)
        self.store.answered.set()
        reading = self._reading
        if reading is not None:  # (the thread waits for the child: its pipe ends with it)
            import signal

            try:
                os.kill(reading, signal.SIGKILL)
            except OSError:
                pass
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
        early, self._early = self._early, None
        if early is not None and not self._thread.is_alive():  # (never read: stopped first)
            from nri_cpumgr import early_list

            early_list.discard(*early)

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

    def list_pods(self) -> tuple[list[Any], str]:
        """LIST every pod of the node (paged, :data:`PAGE` a page): the pods as served
        (decoded JSON) and the list's resourceVersion. Raises OSError (an HTTP status but
        200, a connection that fails or times out) or ValueError (a body that is not JSON)."""
        import json  # (in the watch's thread or the early LIST's child: not at the start)

        pods: list[Any] = []
        cont = ""
        conn = self._connection()
        self._conn = conn
        try:
            while True:
                q: dict[str, Any] = {"limit": PAGE}
                if cont:
                    q["continue"] = cont
                doc = json.loads(self._request(conn, self._path(**q)).read())
                pods.extend(doc.get("items") or ())
                meta = doc.get("metadata") or {}
                cont = meta.get("continue") or ""
                if not cont:
                    return pods, str(meta.get("resourceVersion", ""))
        finally:
            conn.close()
            self._conn = None

    def _list(self) -> str:
        """LIST every pod of the node; replaces the store; returns the resourceVersion to
        watch from."""
        pods, rv = self.list_pods()
        self.store.replace([f for obj in pods if (f := _facts(obj)) is not None])
        return rv

    def _listed_early(self) -> str:
        """The store from the first LIST the child process made at the start; the
        resourceVersion to watch from, or "" (the child failed: list again)."""
        from nri_cpumgr import early_list

        early, self._early = self._early, None
        if early is None:
            return ""
        self._reading = early[0]
        try:
            doc, cpu_ms = early_list.read(*early)
        finally:
            self._reading = None
        if doc is None or "error" in doc:
            log.debug("pod spec source: the LIST made at the start did not come (%s); "
                      "listing again", (doc or {}).get("error", "no answer"))
            return ""
        self.store.replace_parts(doc["items"], early=True)
        self._listed_at_start = cpu_ms
        return str(doc["resourceVersion"])

    def _watch(self, rv: str) -> str:
        """WATCH from ``rv`` until the server ends it; returns the last resourceVersion
        seen, or "" when the caller must relist (410 Gone / an ERROR event)."""
        import json

        conn = self._connection()
        self._conn = conn
        try:
            resp = self._request(conn, self._path(
                watch="1", resourceVersion=rv, allowWatchBookmarks="true",
                timeoutSeconds=self.watch_seconds))
            if conn.sock is not None:  # the stream may stay quiet until the server ends it
                conn.sock.settimeout(self.watch_seconds + 10)
            self._streaming = True
            while not self._stop.is_set() and not self._relist.is_set():
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
            self._streaming = False
            conn.close()
            self._conn = None

    def _run(self) -> None:
        self.store.needed.wait(START_GATE)
        backoff = BACKOFF_MIN
        try:
            rv = self._listed_early() if self._early is not None else ""
        except Exception as e:  # noqa: BLE001 - the watch lists itself, as without the child
            log.debug("pod spec source: the LIST made at the start: %s: %s; listing again",
                      type(e).__name__, e)
            rv = ""
        while not self._stop.is_set():
            try:
                if not rv or self._relist.is_set():
                    self._relist.clear()
                    rv = self._list()
                self.store.answered.wait(START_GATE)
                if self._stop.is_set():
                    break
                if self._relist.is_set():  # (a refresh: its LIST replaces the store)
                    continue
                self.store.complete()  # (an early LIST's facts the Synchronize left)
                if "ok" not in self._said:
                    self._said = {"ok"}
                    by = self._listed_at_start
                    log.info("pod spec source: %d pods of node %s from %s%s", len(
                        self.store), self.node, self.url.geturl(), "" if by is None else
                        f" (listed at the start by a child process, {by:.0f} ms of CPU)")
                    self._listed_at_start = None
                if self._stop.is_set():
                    break
                if not self._relist.is_set():
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
