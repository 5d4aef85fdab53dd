"""nri-cpumgr: the kubelet's CPU, Topology and Memory managers as an NRI plugin.

Commands: run (the plugin; run --check-config checks a config and exits), topology (the
machine as the managers see it), status (the checkpointed assignments), plan (a dry run for
Pod manifests, or with --reconfigure for a config change), explain (why a container got its
CPUs), nrt-export (the NodeResourceTopology exporter), enable-nri (turn NRI on in the
runtime's configuration). Started by the runtime from its plugin_path with no arguments
(NRI_PLUGIN_SOCKET set), it runs the plugin:
configuration from the runtime's Configure request, else /etc/nri-cpumgr/config.yaml if
present, else the defaults; log in <stateDirectory>/nri-cpumgr.log.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import TYPE_CHECKING

from nri_cpumgr import aio, locations
from nri_cpumgr.config import Config, ConfigError, load_config
from nri_cpumgr.config.model import location_error, with_source
from nri_cpumgr.locations import config_path, state_dir_of
from nri_cpumgr.paths import normal

if TYPE_CHECKING:
    import argparse


def _asyncio():
    """asyncio, imported without ssl (:func:`nri_cpumgr.aio.import_asyncio`). Imported here,
    not at the top: the plugin registers and answers its first requests before asyncio is
    loaded."""
    return aio.import_asyncio()


log = logging.getLogger("nri_cpumgr")

class _AfterReplyHandler(logging.Handler):
    """Hands records to ``target`` (a file or stderr :class:`logging.StreamHandler`) from
    the event loop, :data:`LOG_BATCH_S` after the first record of a batch: the handler that
    logged has returned and its reply is written, and under a burst of requests one write
    carries the lines of many (each keeps the time it was logged at). A record is formatted
    when it is logged (a create's line after its answer, ~10 us), so the batch's write is a
    write: formatting a batch of 15 lines at the timer took ~150 us, and a request arriving
    then waited for it (the fake-runtime benchmark's create p99). Without a running event
    loop in the logging thread (start-up, shutdown, the checkpoint writer's thread) a record
    is written at once, or after the lines the event loop holds if it holds any (the lines
    stay in the order they were logged).

    No thread of its own: a logging thread woke for every record and took the GIL back from
    the event loop just as the runtime's next request arrived (the fake-runtime benchmark's
    create/start/stop/remove cycle: 3-4 more context switches per cycle)."""

    def __init__(self, target: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        super().__init__()
        self.target = target
        self._pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        # (called with self.lock held, as flush_pending holds it: the batch and the records
        # of other threads are written in the order they were logged)
        loop = aio.running_loop()  # (asyncio is not imported before the first requests)
        if loop is None and not self._pending:
            self.target.handle(record)
            return
        t = self.target
        try:
            text = t.format(record) + t.terminator
        except Exception:  # noqa: BLE001 - as logging does: report, never raise
            t.handleError(record)
            return
        if loop is not None and not self._pending:
            loop.call_later(LOG_BATCH_S, self.flush_pending)
        # another thread's record while the event loop holds some goes after them
        self._pending.append(text)

    def flush_pending(self) -> None:
        """Write the lines held for the event loop, in one write (also at exit: a loop that
        stopped drops its timers)."""
        with self.lock:  # type: ignore[union-attr]
            lines, self._pending = self._pending, []
            if not lines:
                return
            t = self.target
            try:
                with t.lock:  # type: ignore[union-attr]
                    t.stream.write("".join(lines))
                t.flush()
            except Exception:  # noqa: BLE001 - as logging does: report, never raise
                t.handleError(logging.makeLogRecord({"msg": lines[0]}))


#: How long the event loop holds log records before writing them (seconds).
LOG_BATCH_S = 0.01


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _launched_log_file(config: Config) -> str:
    """Where a plugin launched by the runtime logs: ``logFile``, else
    ``<stateDirectory>/nri-cpumgr.log``."""
    return config.logFile or normal(os.path.join(config.stateDirectory, "nri-cpumgr.log"))


def _fallback_log_file(args: argparse.Namespace) -> str:
    """The launched-mode log file when the start-up config could not be loaded: its
    ``logFile`` / ``stateDirectory`` when the file is YAML with those keys as strings the
    keys would take (absolute, on no pseudo filesystem; whatever else is wrong in it;
    ``--state-dir`` still overrides), else the defaults' (/var/lib/nri-cpumgr/nri-cpumgr.log)."""
    keys: dict[str, str] = {}
    path = config_path(getattr(args, "config", None))
    if path is not None:
        try:
            from pathlib import Path

            import yaml

            doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            if isinstance(doc, dict):
                keys = {k: doc[k] for k in ("logFile", "stateDirectory")
                        if isinstance(doc.get(k), str) and doc[k]
                        and location_error(k, doc[k]) is None}
        except Exception:  # noqa: BLE001 - unreadable or not YAML: the defaults' file
            pass
    if getattr(args, "state_dir", None):
        keys["stateDirectory"] = args.state_dir
    return _launched_log_file(Config(**keys))


def _log_fatal_launched(message: str, args: argparse.Namespace) -> None:
    """Append a fatal start-up error to the launched-mode log file (the runtime gives the
    plugin /dev/null for stdio, so stderr alone would lose it): the one logging was set up
    with, else :func:`_fallback_log_file`. Best effort: a file that cannot be written is
    skipped."""
    from pathlib import Path

    record = logging.LogRecord("nri_cpumgr", logging.ERROR, __file__, 0, "%s", (message,), None)
    try:
        path = Path(getattr(args, "launched_log", None) or _fallback_log_file(args))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(logging.Formatter(LOG_FORMAT).format(record) + "\n")
    except OSError:
        pass


def _setup_logging(config: Config, launched: bool, verbose: bool) -> _AfterReplyHandler:
    """Log to stderr, or to a file (``logFile``; launched by the runtime:
    ``<stateDirectory>/nri-cpumgr.log`` since stdio is /dev/null), through
    :class:`_AfterReplyHandler`. Returns it (call its ``flush_pending`` at exit)."""
    level = logging.DEBUG if verbose else logging.INFO
    # the format uses none of these: skip collecting them for every record (the logging
    # HOWTO's "Optimization": caller frame, thread, process, multiprocessing names)
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    fmt = logging.Formatter(LOG_FORMAT)
    log_file = config.logFile
    if launched and not log_file:
        log_file = _launched_log_file(config)
    target: logging.StreamHandler  # type: ignore[type-arg]
    if log_file:
        try:
            # (Path(log_file).parent.mkdir(parents=True, exist_ok=True), pathlib not imported)
            os.makedirs(os.path.dirname(normal(log_file)) or ".", exist_ok=True)
            target = logging.FileHandler(log_file)
        except OSError as e:
            key = "logFile" if config.logFile else "stateDirectory (the log file's directory)"
            raise ConfigError(f"{key}: cannot write the log file {log_file}: "
                              f"{e.strerror or e}") from None
    else:
        target = logging.StreamHandler(sys.stderr)
    target.setFormatter(fmt)
    handler = _AfterReplyHandler(target)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return handler


def _discover(sysfs_root: str):
    from nri_cpumgr.sysfs import discover

    return discover(sysfs_root)


def _register_early(config: Config):
    """The connection on which RegisterPlugin was sent before asyncio and the transport are
    imported: the one :mod:`nri_cpumgr.boot` made before this module was loaded when it
    registered this config's plugin and socket, else one made now on a blocking socket
    (:func:`nri_cpumgr.transport.wire.register_early`); None when the runtime cannot be
    reached that way (the stub then connects, retries and reports as usual)."""
    from nri_cpumgr.transport import wire

    boot = sys.modules.get("nri_cpumgr.boot")
    if boot is not None:
        taken = boot.take(config.pluginName, config.pluginIndex, config.socketPath)
        if taken is not None:
            import _socket  # (socket.py, ~12 M instructions, comes with asyncio later)

            fd, sid = taken
            return wire.EarlyRegistration(
                _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, fileno=fd), sid)
        if boot.skipped is not None:
            log.debug("registration not sent at launch: %s", boot.skipped)
    try:
        return wire.register_early(config.pluginName, config.pluginIndex,
                                   socket_path=config.socketPath)
    except OSError as e:
        log.debug("early registration not sent (%s): connecting the usual way", e)
        return None


def cmd_run(args: argparse.Namespace) -> int:
    """The plugin. Connecting to a running runtime (a DaemonSet), registration comes first:
    RegisterPlugin goes out on a blocking socket before the rest of the plugin is imported
    (:mod:`nri_cpumgr.boot`, else :func:`_register_early` once the config is validated).
    Then, still on that blocking socket and before asyncio is imported, the runtime's first
    requests are answered (:meth:`Stub.serve_first_requests
    <nri_cpumgr.transport.stub.Stub.serve_first_requests>`): Configure with only the NRI
    schema and the transport loaded; right after its answer the topology, the managers, the
    checkpoints, the metrics and what they import are built (while the runtime gathers its
    Synchronize); then Synchronize. Only then is asyncio imported and the event loop takes
    the session over (the same connection, what was read and not consumed, the work the
    handlers left for a loop); anything else first (another request, a refused
    registration, EOF, a runtime silent for a second) hands over at once (issue 9: launch ->
    registered <= 150 ms; issue 34: launch -> synchronized). With ``podSpecSource:
    apiServer`` the build starts the pod spec watch (its first LIST once a Synchronize needs
    it or the first Synchronize was answered). SIGTERM or SIGINT before the
    event loop runs stop the plugin once it does. Errors of that build end
    the command with the status they had before (ConfigError: exit 2), also when no runtime
    listens (after the first failed attempt). Launched by the runtime (``NRI_PLUGIN_SOCKET``),
    everything is built before connecting: a start-up error stops the plugin before it
    registers, never by failing the runtime's Configure (fatal to containerd 1.7)."""
    launched = "NRI_PLUGIN_SOCKET" in os.environ
    source = config_path(args.config)
    config = load_config(source)
    overrides = {}
    if args.socket:
        overrides["socketPath"] = args.socket
    if args.state_dir:
        overrides["stateDirectory"] = args.state_dir
    if overrides:
        config = config.model_copy(update=overrides)
    if args.check_config:
        return _check_config(config, source, overrides, args.sysfs_root)
    if launched:
        args.launched_log = _launched_log_file(config)
    try:
        log_handler = _setup_logging(config, launched, args.verbose)
    except ConfigError as e:
        raise with_source(e, source) from None
    built: dict[str, object] = {}  # plugin, server: what build() made, for the cleanup
    try:

        def build():
            """The handlers (called once by the stub, on the event loop): the machine's
            topology (read after registration: on a large machine it is thousands of sysfs
            files), the managers, their checkpoints, the metrics. Raises ConfigError (bad
            config for this machine, checkpoint of another policy, unwritable state
            directory, metricsAddress that cannot be served) or SysfsError."""
            from nri_cpumgr.metrics import Metrics
            from nri_cpumgr.runtime.plugin import Plugin

            machine = _discover(args.sysfs_root)
            metrics = Metrics()
            plugin = Plugin(
                config, machine, accept_runtime_config=launched and args.config is None,
                sysfs_root=args.sysfs_root, metrics=metrics, overrides=overrides,
            )
            log.info("nri-cpumgr starting: plugin %s-%s, socket %s", stub.idx, stub.name,
                     "fd" if launched else config.socketPath)
            built["plugin"] = plugin
            plugin.sender = stub.update_containers

            def ready() -> bool | str:
                if plugin.refused is not None:
                    return f"config refused: {plugin.refused}"
                return stub.registered

            def serve(cfg: Config) -> None:
                built["server"] = metrics.serve(cfg.metricsAddress, ready=ready)
                log.info("metrics, /healthz and /readyz on %s", cfg.metricsAddress)

            if config.metricsAddress:
                try:
                    serve(config)
                except (OSError, ValueError) as e:
                    raise ConfigError(f"metricsAddress {config.metricsAddress}: {e}") from None
            else:  # launched: the runtime's Configure may name one (started once, then)

                def configured(cfg: Config) -> None:
                    if "server" in built or not cfg.metricsAddress:
                        return
                    try:
                        serve(cfg)
                    except (OSError, ValueError) as e:
                        log.error("metricsAddress %s (from the runtime's Configure): %s; no "
                                  "metrics server", cfg.metricsAddress, e)

                plugin.on_configured = configured
            # the start-up objects (modules, managers, topology) live as long as the
            # process: out of the collector's generations, later collections skip them
            gc.freeze()
            boot = sys.modules.get("nri_cpumgr.boot")
            if boot is not None:  # (it turned the collector off for the start)
                boot.release_gc()
            return plugin

        # launched by the runtime, the plugin starts with the runtime itself (containerd waits
        # for its registration before serving CRI) and a Configure it fails stops containerd
        # 1.7: it builds everything first and stops before connecting when it cannot start;
        # a plugin that connects to a running runtime registers first
        early = None if launched else _register_early(config)
        from nri_cpumgr.runtime.events import EVENTS
        from nri_cpumgr.transport.stub import Stub

        nri_log = logging.getLogger("nri_cpumgr.nri")
        if launched:
            stub = Stub.from_env(None, build_handlers=build, events=EVENTS, logger=nri_log)
        else:
            stub = Stub(None, build_handlers=build, name=config.pluginName,
                        idx=config.pluginIndex, socket_path=config.socketPath, events=EVENTS,
                        logger=nri_log, early=early)

        if launched:
            stub.build_now()
        early_signals: list[int] = []
        if not launched and early is not None:
            # the runtime's Configure and Synchronize answered on the blocking socket, the
            # build right after Configure's answer; the event loop continues the session.
            # SIGTERM or SIGINT until the loop's handlers: stop as they would, once it runs
            # (_signal: signal.py's enum conversions, ~4 M instructions, come with asyncio)
            import _signal

            def early_signal(signum: int, frame: object) -> None:
                early_signals.append(signum)
                stub.stop()

            for signum in (_signal.SIGTERM, _signal.SIGINT):
                _signal.signal(signum, early_signal)
            stub.serve_first_requests()
        asyncio = _asyncio()
        import signal

        async def main() -> None:
            loop = asyncio.get_running_loop()
            def on_signal(sig: signal.Signals) -> None:
                log.info("%s received: stopping", sig.name)
                stub.stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal, sig)
            for signum in early_signals:  # (received before the event loop ran)
                on_signal(signal.Signals(signum))
            watch = None
            if source is not None and not (launched and args.config is None):
                # a config change at runtime: SIGHUP, or the file changed (a ConfigMap's
                # update swaps a symlink: the resolved file's identity is watched)
                reload = _Reloader(source, overrides, built)
                loop.add_signal_handler(signal.SIGHUP, reload.soon, "SIGHUP")
                watch = loop.create_task(reload.watch(CONFIG_WATCH_INTERVAL))
            try:
                await stub.run()
            finally:
                if watch is not None:
                    watch.cancel()

        try:
            asyncio.run(main())
        finally:
            log_handler.flush_pending()  # (before what is logged from here on)
            plugin, server = built.get("plugin"), built.get("server")
            if plugin is not None:
                plugin.close()  # type: ignore[attr-defined]
            if server is not None:
                server.close()  # type: ignore[attr-defined]
            if plugin is not None:  # it started
                log.info("nri-cpumgr stopped")
        if stub.failed is not None:  # launched: the runtime's connection failed (logged)
            return 1
    except ConfigError as e:  # the machine-dependent checks: name the file as load_config does
        raise with_source(e, source) from None
    finally:
        log_handler.flush_pending()  # what the stopped event loop did not write
    return 0


def _check_config(config: Config, source: str | None, overrides: dict[str, object],
                  sysfs_root: str) -> int:
    """``run --check-config``: ``config`` (loaded and validated as ``run`` does) checked
    against this machine as the plugin's start checks it (nri_cpumgr.configcheck); prints
    ``config OK`` and the effective values that differ from the defaults. Returns 0; an
    invalid config raises ConfigError (exit status 2), an unreadable topology SysfsError."""
    from nri_cpumgr.configcheck import check, check_log_file, differences

    check_log_file(config, source)
    machine = _discover(sysfs_root)
    notes = check(config, machine, source)
    topo = machine.topology
    print(f"config OK: {source or 'no config file (the built-in defaults)'} (checked against "
          f"{'this machine' if sysfs_root == '/' else f'{sysfs_root}/sys'}: CPUs {topo.cpus()}, "
          f"NUMA nodes {topo.numa_nodes()})")
    for note in notes:
        print(f"note: {note}")
    diff = differences(config, overrides)
    if diff:
        print("effective values that differ from the defaults:")
        for line in diff:
            print(f"  {line}")
    else:
        print("every value is the default")
    return 0


#: seconds between two looks at the config file (a change is then applied at runtime)
CONFIG_WATCH_INTERVAL = 2.0


class _Reloader:
    """Reads the config file again on SIGHUP or when it changes, and hands it to the
    running plugin (nri_cpumgr.runtime.reconfig), one change at a time. An unreadable or
    invalid file is an ERROR in the log; the plugin keeps its config."""

    def __init__(self, source: str, overrides: dict[str, object],
                 built: dict[str, object]) -> None:
        self.source = source
        self.overrides = overrides
        self.built = built
        self.seen = self._identity()
        self._lock: object = None

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.source)
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)

    def soon(self, why: str) -> None:
        import asyncio

        asyncio.get_running_loop().create_task(self.reload(why))

    async def watch(self, interval: float) -> None:
        import asyncio

        while True:
            await asyncio.sleep(interval)
            now = self._identity()
            if now is not None and now != self.seen:
                await self.reload("a change of the config file")

    async def reload(self, why: str) -> None:
        import asyncio

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # type: ignore[attr-defined]
            self.seen = self._identity()
            plugin = self.built.get("plugin")
            if plugin is None:
                log.info("%s: the plugin is not built yet; the file is read at its start", why)
                return
            try:
                config = load_config(self.source)
            except ConfigError as e:
                from nri_cpumgr.runtime.reconfig import event

                log.error("%s: %s; keeping the running config", why, e)
                event("Warning", "ReconfigurationInvalid", f"{e}; keeping the running config")
                plugin.metrics.reconfiguration("invalid")  # type: ignore[attr-defined]
                return
            await plugin.reconfigure(  # type: ignore[attr-defined]
                config.model_copy(update=self.overrides), f"{why} ({self.source})")


def cmd_topology(args: argparse.Namespace) -> int:
    from nri_cpumgr.topology.render import format_table, to_json

    machine = _discover(args.sysfs_root)
    if args.json:
        import json
        from pathlib import Path

        name = args.name or ("host" if args.sysfs_root == "/" else Path(args.sysfs_root).name)
        print(json.dumps(to_json(machine, name), indent=1))
    else:
        print(format_table(machine))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """The checkpointed assignments. Exit status 0, also with no checkpoint yet (a note on
    stderr naming the file looked for, then the empty state: ``{}`` with ``--json``); 1 for
    a checkpoint that cannot be read (corrupt, another version, the kubelet's own); 2 for a
    bad config."""
    from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
    from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME

    state_dir = state_dir_of(args)
    path = state_dir / CHECKPOINT_NAME
    try:
        body = Checkpoint(path).load()
    except CheckpointError as e:
        print(f"nri-cpumgr: {e}", file=sys.stderr)
        return 1
    if body is None:
        where = "" if state_dir.is_dir() else f" (no directory {state_dir})"
        print(f"nri-cpumgr: no checkpoint yet at {path}{where}: the plugin writes it once a "
              "runtime has configured it with that stateDirectory (--config FILE or "
              "--state-dir DIR reads another); the state is empty", file=sys.stderr)
        body = {}
    if args.json:
        import json

        print(json.dumps(body, indent=1))
        return 0
    print(f"policy:        {body.get('policyName') or '-'}")
    print(f"reserved CPUs: {body.get('reservedCpuSet') or '-'}")
    print(f"shared pool:   {body.get('defaultCpuSet') or '-'}")
    rows = sorted(body.get("containers", []), key=lambda r: (r["pod"], r["container"]))
    hdr = ("POD", "CONTAINER", "QOS", "CPUS", "MEMS", "NUMA", "EXCLUSIVE", "STATE")
    table = [hdr] + [
        (r["pod"], r["container"], r["qos"], r["cpus"] or "-", r.get("mems") or "-",
         r.get("numa") or "-", "yes" if r["exclusive"] else "no",
         "stopped" if r.get("stopped") else "live")
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(hdr))]
    print()
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    _print_pod_level(body)
    return 0


def cmd_nrt_export(args: argparse.Namespace) -> int:
    from nri_cpumgr.nrt.exporter import run

    config = load_config(config_path(args.config))
    if args.state_dir:
        config = config.model_copy(update={"stateDirectory": args.state_dir})
    node = args.node_name or os.environ.get("NODE_NAME", "")
    if not node:
        print("nri-cpumgr: nrt-export needs the node's name (--node-name or NODE_NAME)",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(node, _discover(args.sysfs_root), config, kubeconfig=args.kubeconfig,
               interval=args.interval)

def _print_pod_level(body: dict) -> None:
    """Pod pools (pod-level resource managers) and resized containers, when there are."""
    names = {}
    for r in body.get("containers", []):
        names.setdefault(r.get("podUID"), r["pod"])
    pools = body.get("podPools") or {}
    if pools:
        print("\npod pools (pod-level resource managers):")
        for uid, p in sorted(pools.items()):
            members = [f"{r['container']}={r.get('pool', '')}"
                       for r in body.get("containers", []) if r.get("podUID") == uid]
            print(f"  {names.get(uid, uid)}  bubble={p['bubble']}  "
                  f"pod-shared-pool={p['podSharedPool'] or '-'}  mems={p.get('mems') or '-'}  "
                  f"{' '.join(members)}".rstrip())
    resized = body.get("resized") or {}
    if resized:
        print("\nresized containers:")
        for key, r in sorted(resized.items()):
            uid, _, name = key.partition("/")
            print(f"  {names.get(uid, uid)} {name}  {r['from']} -> {r['to']}  "
                  f"(promised {r['promised']})")


def _positive_seconds(text: str) -> float:
    """``--interval``: a finite number of seconds above zero (0 or less would look at the
    state directory without pause: a CPU spun). Raises argparse.ArgumentTypeError."""
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds above 0 "
                                         "(e.g. 1 or 0.5)")
    return v


def _absolute_socket(path: str) -> str:
    """``--socket``: an absolute path, as ``socketPath`` must be (a relative one would be
    looked up from wherever the plugin starts). Raises argparse.ArgumentTypeError."""
    if not path.startswith("/"):
        import argparse

        raise argparse.ArgumentTypeError(
            f"{path!r}: expected an absolute path (the runtime's NRI socket, e.g. "
            "/var/run/nri/nri.sock)")
    return path


def _state_dir_option(path: str) -> str:
    """``run --state-dir``: a path ``stateDirectory`` would take (absolute, on no pseudo
    filesystem: :func:`nri_cpumgr.config.model.location_error`), or ``""`` (the config's).
    Raises argparse.ArgumentTypeError."""
    why = location_error("stateDirectory", path) if path else None
    if why is not None:
        import argparse

        raise argparse.ArgumentTypeError(why)
    return path


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nri-cpumgr")
    except Exception:  # noqa: BLE001 - not installed (source tree)
        from nri_cpumgr import __version__

        return __version__


class _RunOnlyError(Exception):
    """A command line the ``run``-only parser cannot take: the full parser says why."""


def _help_width() -> int:
    """The help text's width as argparse takes it (shutil.get_terminal_size's columns, less 2),
    without importing shutil, which brings bz2, lzma and their libraries (1.9 MiB resident in a
    bare interpreter, 0.4-0.6 MiB measured in the plugin)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def _parser_classes():  # noqa: ANN202 - classes made at the first call
    """(the ``--version`` action, the ``run``-only parser): argparse classes, made when a
    parser is built (argparse is not imported for a plain ``run`` command line)."""
    import argparse

    class VersionAction(argparse.Action):
        """``--version``: looks the version up only when asked (importlib.metadata is ~10 ms)."""

        def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                     default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002
            super().__init__(option_strings, dest, nargs=0, default=default, help=help)

        def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
            print(f"nri-cpumgr {_version()}")
            parser.exit()

    class RunOnlyParser(argparse.ArgumentParser):
        def error(self, message: str):  # type: ignore[override]
            raise _RunOnlyError(message)

        def _get_formatter(self) -> argparse.HelpFormatter:
            # argparse makes a formatter at every add_argument; its own imports shutil
            return self.formatter_class(prog=self.prog, width=_help_width())

    return VersionAction, RunOnlyParser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed. A ``run`` command line made only of the options as written
    (:func:`nri_cpumgr.runline.run_arguments`) is read without argparse (~5 ms of the plugin's
    start, issue 34), into the namespace the ``run`` parser gives; another ``run`` command
    line by a parser of ``run`` alone (the other sub-commands' parsers cost ~10 ms), its
    errors said by the full one."""
    if argv[:1] == ["run"]:
        from nri_cpumgr.runline import run_arguments

        plain = run_arguments(argv)
        if plain is not None and plain["state_dir"] and location_error(
                "stateDirectory", str(plain["state_dir"])):
            plain = None  # (a --state-dir on a pseudo filesystem: argparse says why)
        if plain is not None:
            from types import SimpleNamespace

            return SimpleNamespace(cmd="run", func=cmd_run, **plain)  # type: ignore[return-value]
        try:
            return build_parser(only_run=True).parse_args(argv)
        except _RunOnlyError:
            pass
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the sub-command's parser: its usage, not the top level's
        parser.subcommands[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser(only_run: bool = False) -> argparse.ArgumentParser:
    """The command line. ``only_run``: just the ``run`` sub-command, whose errors raise
    instead of printing (see :func:`parse_args`)."""
    import argparse

    version_action, run_only_parser = _parser_classes()
    p = (run_only_parser if only_run else argparse.ArgumentParser)(
        prog="nri-cpumgr", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=version_action, help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True)
    p.subcommands = sub.choices  # type: ignore[attr-defined]  # name -> parser (parse_args)

    r = sub.add_parser("run", help="run the NRI plugin")
    r.add_argument("--config", help="YAML config file (KubeletConfiguration-style keys; "
                   f"default: {locations.DEFAULT_CONFIG} if present, else the built-in defaults)")
    r.add_argument("--socket", type=_absolute_socket,
                   help="NRI socket to dial, an absolute path (overrides socketPath)")
    r.add_argument("--state-dir", type=_state_dir_option,
                   help="state directory, an absolute path (overrides stateDirectory)")
    r.add_argument("--sysfs-root", default="/", help="read topology from DIR/sys instead of /sys")
    r.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    r.add_argument("--check-config", action="store_true",
                   help="check the config as the plugin's start does (the file, the options "
                   "above, this machine's topology, the checkpoint's policy, the state "
                   "directory), print 'config OK' and the values that differ from the "
                   "defaults, and exit: 0, or 2 with the error `run` would give; needs no "
                   "runtime, writes nothing")
    r.set_defaults(func=cmd_run)
    if only_run:
        return p

    t = sub.add_parser("topology", help="print the machine's CPU/NUMA/cache topology")
    t.add_argument("--sysfs-root", default="/", help="read DIR/sys instead of /sys")
    t.add_argument("--json", action="store_true", help="conformance-corpus topology JSON")
    t.add_argument("--name", help="name written in the JSON")
    t.set_defaults(func=cmd_topology)

    s = sub.add_parser(
        "status", help="show the checkpointed assignments",
        description="The plugin's checkpointed assignments: the shared pool and a row per "
        "container. Exit status 0, also when the plugin has written no checkpoint yet (said "
        "on stderr, with the file looked for; the state printed is empty, {} with --json); "
        "1 when the checkpoint cannot be read; 2 for a bad config.")
    s.add_argument("--config", help="the plugin's config file, read for its stateDirectory "
                   f"(default: {locations.DEFAULT_CONFIG} if present, else the built-in defaults)")
    s.add_argument("--state-dir", help="read the checkpoint from DIR (overrides the config)")
    s.add_argument("--json", action="store_true", help="print the checkpoint as JSON")
    s.set_defaults(func=cmd_status)

    n = sub.add_parser("nrt-export", help="keep the node's NodeResourceTopology object up to "
                       "date from the plugin's state (a second container of the DaemonSet)")
    n.add_argument("--config", help="the plugin's config file (its stateDirectory, Topology "
                   "Manager policy and scope, reserved CPUs; default: "
                   f"{locations.DEFAULT_CONFIG} if present, else the built-in defaults)")
    n.add_argument("--state-dir", help="read the plugin's checkpoints from DIR")
    n.add_argument("--node-name", help="the node's name (default: $NODE_NAME)")
    n.add_argument("--sysfs-root", default="/", help="read topology from DIR/sys instead of /sys")
    n.add_argument("--kubeconfig",
                   help="kubeconfig file (default: in-cluster service account); one that is "
                   "missing, unreadable or malformed stops it at start (exit status 2), an API "
                   "server that cannot be reached is retried with backoff")
    n.add_argument("--interval", type=_positive_seconds, default=1.0,
                   help="seconds between looks at the state directory (default 1)")
    n.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    n.set_defaults(func=cmd_nrt_export)

    from nri_cpumgr.planner.cli import add_parser as add_plan  # plan (issue 12)

    add_plan(sub)
    from nri_cpumgr.explain.cli import add_parser as add_explain  # explain (issue 12)

    add_explain(sub)
    from nri_cpumgr.nodeprep.cli import add_parser as add_enable_nri  # enable-nri (issue 33)

    add_enable_nri(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    launched = "NRI_PLUGIN_SOCKET" in os.environ
    if launched and not argv:
        argv = ["run"]  # launched by the runtime from plugin_path: no arguments
    args = parse_args(argv)
    # also `run` from a wrapper script; never `run --check-config` (its stderr is the user's)
    launched = launched and args.cmd == "run" and not getattr(args, "check_config", False)

    def fail(message: str, status: int) -> int:
        print(f"nri-cpumgr: {message}", file=sys.stderr)
        if launched:  # stderr is /dev/null there
            _log_fatal_launched(f"{message}; exiting", args)
        return status

    try:
        return args.func(args)
    except ConfigError as e:
        return fail(str(e), 2)
    except BrokenPipeError:
        return 0
    except Exception as e:
        from nri_cpumgr.sysfs import SysfsError  # (not imported before the plugin registers)
        from nri_cpumgr.transport.wire import LaunchEnvError

        if isinstance(e, LaunchEnvError):
            return fail(str(e), 2)
        if isinstance(e, SysfsError):  # exit 2 for a --sysfs-root given (bad input), 1 for
            given = getattr(args, "sysfs_root", None) not in (None, "/")  # the host's
            return fail(f"cannot read the topology: {e}", 2 if given else 1)
        if launched:
            import traceback

            _log_fatal_launched("crashed:\n" + traceback.format_exc().rstrip(), args)
        raise
