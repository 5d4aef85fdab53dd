"""``nri-cpumgr nrt-export``: keep the node's NodeResourceTopology object in step with the plugin.

Runs as a second container of the DaemonSet (deploy/base/daemonset.yaml), never in the plugin's
process: it reads what the plugin persists (``<stateDirectory>/cpu_manager_state`` and
``memory_manager_state``) and the machine (sysfs), builds the object with
:func:`nri_cpumgr.nrt.model.build`, and creates or replaces it through the API server with the
official Kubernetes Python client (in-cluster service-account credentials, or a kubeconfig).

* It looks at the checkpoint files every ``interval`` seconds (default 1 s: a stat each), and
  writes only when the object's content changed, so a change reaches the API server within
  about ``interval`` + one request.
* Its credentials are loaded at start: a ``--kubeconfig`` that is missing, unreadable or not a
  kubeconfig (or, without one, no in-cluster service account) is a configuration error
  (:class:`~nri_cpumgr.config.ConfigError`: one line naming the file, exit status 2), never
  retried.
* When the API server cannot be reached or refuses, it retries with exponential backoff
  (1 s doubling to 60 s) and logs once per kind of failure; the plugin is never affected.
* An unreadable or corrupt checkpoint is logged and skipped (the last good object stays).

The plugin's state directory and the machine are the only inputs: the exporter never speaks
NRI and never imports the transport.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.nrt import model
from nri_cpumgr.topology.model import Machine

log = logging.getLogger("nri_cpumgr.nrt")

CPU_STATE = "cpu_manager_state"
MEMORY_STATE = "memory_manager_state"
MAX_BACKOFF = 60.0


class NRTApi:
    """Create-or-replace of one cluster-scoped NodeResourceTopology object.

    Wraps ``kubernetes.client.CustomObjectsApi``. Made with the credentials (the
    ``kubeconfig`` file, else the in-cluster service account), without asking the API server
    anything: raises :class:`~nri_cpumgr.config.ConfigError` when they cannot be loaded.
    :meth:`apply` raises whatever the client raises (``kubernetes.client.ApiException``,
    urllib3 errors) for the caller's backoff."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        try:
            from kubernetes import client, config  # heavy: imported by the exporter only
        except ImportError as e:
            raise ConfigError(f"nrt-export needs the kubernetes package ({e}): install "
                              "nri-cpumgr[nrt]") from None
        if kubeconfig:
            load_kubeconfig(config, kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException as e:
                raise ConfigError(f"no in-cluster credentials ({_first_line(e)}): give "
                                  "--kubeconfig FILE, or run it in a pod with a service "
                                  "account token") from None
        self._api = client.CustomObjectsApi()
        self._exc = client.ApiException

    def apply(self, obj: dict[str, Any]) -> str:
        """Create the object, or replace it (keeping its resourceVersion); returns
        ``"created"`` or ``"updated"``."""
        name = obj["metadata"]["name"]
        args = (model.GROUP, model.VERSION, model.PLURAL)
        try:
            cur = self._api.get_cluster_custom_object(*args, name)
        except self._exc as e:
            if e.status != 404:
                raise
            self._api.create_cluster_custom_object(*args, obj)
            return "created"
        body = dict(obj, metadata=dict(obj["metadata"],
                                       resourceVersion=cur["metadata"]["resourceVersion"]))
        self._api.replace_cluster_custom_object(*args, name, body)
        return "updated"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def load_kubeconfig(config: Any, path: str) -> None:
    """Load the kubeconfig file ``path`` with ``config`` (``kubernetes.config``) as the
    client's default. Raises :class:`~nri_cpumgr.config.ConfigError`, one line naming the
    file: ``kubeconfig <path>: cannot read it: No such file or directory`` (the client
    itself says only "No configuration found" for a missing file), ``kubeconfig <path>: not
    a usable kubeconfig: <the client's first line>`` for one it refuses (not YAML, empty,
    no context, a certificate file it names missing, ...)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError(f"kubeconfig {path}: cannot read it: {e.strerror or e}") from None
    try:
        config.load_kube_config(config_file=path)
    except Exception as e:  # noqa: BLE001 - the client's ConfigException, YAML and shape errors
        mark = getattr(e, "problem_mark", None)
        if mark is not None:  # (PyYAML's MarkedYAMLError)
            why = f"not YAML at line {mark.line + 1}, column {mark.column + 1}: {e.problem}"  # type: ignore[attr-defined]
        else:
            why = f"{type(e).__name__}: {_first_line(e)}"
        raise ConfigError(f"kubeconfig {path}: not a usable kubeconfig: {why}") from None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size)


class Exporter:
    """The export loop's state: what was last read and last written (testable without an API
    server: ``apply`` is any callable taking the object)."""

    def __init__(self, node_name: str, machine: Machine, config: Config,
                 apply: Callable[[dict[str, Any]], str]) -> None:
        self.node_name = node_name
        self.machine = machine
        self.config = config
        self.apply = apply
        self.state_dir = Path(config.stateDirectory)
        self._stamps: tuple[Any, ...] | None = None
        self._cpu: dict[str, Any] | None = None
        self._mem: dict[str, Any] | None = None
        self.written: dict[str, Any] | None = None  # content of the last object written
        self.backoff = 0.0
        self._last_error = ""

    def _read(self, name: str, old: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            return Checkpoint(self.state_dir / name).load()
        except (CheckpointError, OSError) as e:
            log.warning("cannot read %s (%s): keeping the last state read", name, e)
            return old

    def current(self) -> dict[str, Any]:
        """The object as the state directory says now (re-reads only changed files)."""
        stamps = (_stamp(self.state_dir / CPU_STATE), _stamp(self.state_dir / MEMORY_STATE))
        if stamps != self._stamps:
            self._stamps = stamps
            self._cpu = self._read(CPU_STATE, self._cpu) if stamps[0] else None
            static = self.config.memoryManagerPolicy == "Static"
            self._mem = self._read(MEMORY_STATE, self._mem) if stamps[1] and static else None
        return model.build(
            self.node_name, self.machine, policy=self.config.topologyManagerPolicy,
            scope=self.config.topologyManagerScope, reserved=self.config.reserved_cpus(),
            cpu_state=self._cpu, memory_state=self._mem)

    def step(self) -> float:
        """One pass: write the object if its content changed (or the last write failed).
        Returns how long to sleep before the next pass."""
        obj = self.current()
        if self.written == model.content(obj):
            return 0.0
        try:
            what = self.apply(obj)
        except Exception as e:  # noqa: BLE001 - any API/transport failure: back off, retry
            self.backoff = min(MAX_BACKOFF, max(1.0, self.backoff * 2))
            kind = type(e).__name__ + ":" + str(getattr(e, "status", ""))
            if kind != self._last_error:
                log.error("NodeResourceTopology %s not written (%s); retrying with backoff "
                          "up to %.0f s", self.node_name, _short(e), MAX_BACKOFF)
                self._last_error = kind
            return self.backoff
        if self._last_error:
            log.info("API server reachable again")
        self.backoff, self._last_error = 0.0, ""
        self.written = model.content(obj)
        cpu = {z["name"]: next(r["available"] for r in z["resources"] if r["name"] == "cpu")
               for z in obj["zones"]}
        log.info("NodeResourceTopology %s %s: available cpu per zone %s", self.node_name, what,
                 cpu)
        return 0.0


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def run(node_name: str, machine: Machine, config: Config, *, kubeconfig: str | None = None,
        interval: float = 1.0, passes: int | None = None) -> int:
    """Run the export loop until SIGTERM/SIGINT (or ``passes`` passes); returns 0. The
    credentials are loaded first: raises :class:`~nri_cpumgr.config.ConfigError` when they
    cannot be (:class:`NRTApi`); the API server is first asked at the first write, and
    retried with backoff while it cannot be reached."""
    api = NRTApi(kubeconfig)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    exporter = Exporter(node_name, machine, config, api.apply)
    log.info("exporting NodeResourceTopology %s from %s every %.1f s (pid %d)", node_name,
             config.stateDirectory, interval, os.getpid())
    n = 0
    while not stop["now"] and (passes is None or n < passes):
        wait = exporter.step() or interval
        n += 1
        deadline = time.monotonic() + wait
        while not stop["now"] and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return 0
