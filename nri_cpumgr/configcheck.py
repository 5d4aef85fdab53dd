"""``nri-cpumgr run --check-config``: the start-up checks of ``nri-cpumgr run`` on a config,
without a runtime and without writing anything.

The config is loaded and validated by the same code as ``run`` (:func:`nri_cpumgr.config.
load_config`, the same ``--socket`` / ``--state-dir`` overrides), then checked against this
machine as the plugin's build checks it (:mod:`nri_cpumgr.managers`: reservedSystemCPUs on
the machine, the CPU policy and its options, the Topology Manager, the Memory Manager's
reservedMemory against the NUMA nodes), with the start's other fatal checks made without
their side effects: a checkpoint written by another CPU policy, a state directory or a log
file that cannot be written (looked at, not created; one that is relative or on a pseudo
filesystem, where root passes ``os.access``, is refused by the key checks of the load:
:func:`nri_cpumgr.config.model.location_error`), a pod spec source that cannot be set up.
Errors are the ones ``run`` gives (:class:`~nri_cpumgr.config.ConfigError`, one line naming
the key and the file; exit status 2 by :func:`nri_cpumgr.cli.main`). Not checked:
whether ``metricsAddress`` can be bound (the running plugin holds it) and the runtime's
config a launched plugin receives in Configure.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.config.model import with_source
from nri_cpumgr.topology import Machine


def differences(config: Config, overrides: dict[str, Any] | None = None) -> list[str]:
    """``key: value`` lines for the keys of ``config`` whose value differs from the model's
    default, in the model's order; values in JSON (a YAML flow scalar or mapping); a key an
    option set ends with ``(--socket)`` or ``(--state-dir)``."""
    flags = {"socketPath": "--socket", "stateDirectory": "--state-dir"}
    defaults = Config()
    out = []
    for f in dataclasses.fields(Config):
        value = getattr(config, f.name)
        if value == getattr(defaults, f.name):
            continue
        if isinstance(value, list):
            value = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
                     for v in value]
        line = f"{f.name}: {json.dumps(value)}"
        if overrides and f.name in overrides:
            line += f" ({flags.get(f.name, 'option')})"
        out.append(line)
    return out


def _first_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _writable_dir(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def directory_error(path: Path) -> str | None:
    """What creating the directory ``path`` (``mkdir -p``) and a file in it would fail with,
    as the start's probe of the state directory says it (``it is not a directory``, or the
    error's text: ``Not a directory``, ``Permission denied``, also for a parent it may not
    search); None when it would work. Looked at, nothing created."""
    try:
        return _directory_error(path)
    except OSError as e:
        return e.strerror or str(e)


def _directory_error(path: Path) -> str | None:
    if path.exists():
        if not path.is_dir():
            return "it is not a directory"
        return None if _writable_dir(path) else "Permission denied"
    return _missing_dir_error(path)


def _missing_dir_error(path: Path) -> str | None:
    """What ``mkdir -p`` of the missing directory ``path`` would fail with (None: nothing)."""
    here = _first_existing(path)
    if not here.is_dir():
        return "Not a directory"
    return None if _writable_dir(here) else "Permission denied"


def file_error(path: Path) -> str | None:
    """What creating the directory of the file ``path`` and opening it for appending would
    fail with (the error's text, as the start's log file says it, also for a parent it may
    not search: ``Permission denied``); None when it would work. Looked at, nothing
    created."""
    try:
        return _file_error(path)
    except OSError as e:
        return e.strerror or str(e)


def _file_error(path: Path) -> str | None:
    if path.is_dir():
        return "Is a directory"
    if path.exists():
        return None if os.access(path, os.W_OK) else "Permission denied"
    parent = path.parent
    if parent.exists():
        if not parent.is_dir():
            return "File exists"
        return None if _writable_dir(parent) else "Permission denied"
    return _missing_dir_error(parent)


def check_log_file(config: Config, source: str | None) -> None:
    """``logFile`` must be a file the plugin can append to (checked before the machine is
    read, as the start opens it first: cli._setup_logging, with its message). Raises
    :class:`~nri_cpumgr.config.ConfigError`."""
    if config.logFile:
        why = file_error(Path(config.logFile))
        if why is not None:
            raise with_source(ConfigError(
                f"logFile: cannot write the log file {config.logFile}: {why}"), source)


class _Notes(logging.Handler):
    """Collects the WARNING records the start's own code logs while :func:`check` runs it
    (all CPUs reserved, a checkpoint the policy rejects and the start rebuilds), as notes:
    without it they reached stderr through logging's last resort, unlabelled and before
    ``config OK``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check(config: Config, machine: Machine, source: str | None) -> list[str]:
    """Check ``config`` (validated, with the command line's overrides) against ``machine`` as
    the start of ``run`` does (module doc). Returns notes, one line each (what the start
    would log as a warning or do differently, those warnings included; not errors). Raises
    :class:`~nri_cpumgr.config.ConfigError` naming the key and ``source``."""
    logger = logging.getLogger("nri_cpumgr")
    handler = _Notes()
    logger.addHandler(handler)
    try:
        notes = _check(config, machine, source)
    finally:
        logger.removeHandler(handler)
    return handler.lines + notes


def _check(config: Config, machine: Machine, source: str | None) -> list[str]:
    from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
    from nri_cpumgr.managers import (
        build_memory_manager,
        build_policy,
        build_topology_manager,
        restore_state,
    )
    from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME, load_own_checkpoint

    notes: list[str] = []
    override = config.reserved_cpus_override()
    if override is not None:
        notes.append(override)
    try:
        policy = build_policy(config, machine)
        build_topology_manager(config, machine)
        memory = build_memory_manager(config, machine)
        checkpoint = Checkpoint(config.state_path(CHECKPOINT_NAME))
        try:
            body = load_own_checkpoint(config, checkpoint)  # (the start's: Plugin._setup)
        except CheckpointError as e:
            notes.append(f"{e}: the plugin would rebuild its state from the runtime")
            body = None
        if body is not None:
            restore_state(policy, body, checkpoint.path)  # (another policy's: ConfigError)
        if memory is not None:
            notes += _memory_state_notes(memory, config)
        # (the message of the start's probe: runtime.plugin Plugin._setup)
        why = directory_error(Path(config.stateDirectory))
        if why is not None:
            if why != "it is not a directory":
                why = f"cannot write {CHECKPOINT_NAME}: {why}"
            raise ConfigError(f"invalid config: stateDirectory {config.stateDirectory}: {why}")
        if config.podSpecSource == "apiServer":
            from nri_cpumgr.podsource import APIServerPodSource, PodSpecStore

            try:  # (built, not started: no connection)
                APIServerPodSource(PodSpecStore(), config.apiServerURL, config.nodeName)
            except ValueError as e:
                raise ConfigError(f"invalid config: {e}") from None
    except ConfigError as e:
        raise with_source(e, source) from None
    if not Path(config.socketPath).is_socket():
        notes.append(f"socketPath {config.socketPath}: no socket there now (is NRI enabled "
                     "in the runtime? `nri-cpumgr enable-nri`); `run` keeps trying to connect")
    return notes


def _memory_state_notes(memory: Any, config: Config) -> list[str]:
    """The Memory Manager's checkpoint as the start reads it (managers.restore_memory_state):
    a note when it is corrupt or rejected (the start goes on with a fresh memory state)."""
    from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
    from nri_cpumgr.cm.memorymanager.state import MemoryState
    from nri_cpumgr.runtime.plugin import MEMORY_CHECKPOINT_NAME

    checkpoint = Checkpoint(config.state_path(MEMORY_CHECKPOINT_NAME))
    try:
        body = checkpoint.load()
    except CheckpointError as e:
        return [f"{e}: the plugin would rebuild its memory state from the runtime"]
    if body:
        try:
            memory.start(MemoryState.from_dict(body))
        except Exception as e:  # noqa: BLE001 - what the start rejects, whatever it is
            return [f"checkpoint {checkpoint.path}: rejected ({e}): the plugin would start "
                    "its memory state fresh"]
    return []
