"""Where the command line finds the plugin's configuration and state: the default config
file, the state directory of a ``--config`` / ``--state-dir`` pair, and reading one
checkpoint-format file of it. Shared by ``nri_cpumgr.cli`` and the sub-commands it builds
(``nri_cpumgr.planner.cli``, ``nri_cpumgr.explain.cli``), which import this module, never
``nri_cpumgr.cli`` (no import circle)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from nri_cpumgr.config import load_config
from nri_cpumgr.paths import is_file

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

# Read when --config is not given (run, status, plan, explain) and the file exists; the image
# ships it.
DEFAULT_CONFIG = "/etc/nri-cpumgr/config.yaml"


def config_path(given: str | None) -> str | None:
    """``--config`` when given, else :data:`DEFAULT_CONFIG` when that file exists, else None
    (all defaults)."""
    if given is not None:
        return given
    return DEFAULT_CONFIG if is_file(DEFAULT_CONFIG) else None


def state_dir_of(args: argparse.Namespace) -> Path:
    """The plugin's state directory for a command with ``--state-dir`` / ``--config``: the
    option, else the config's ``stateDirectory``. Raises ConfigError for a bad config."""
    from pathlib import Path

    if args.state_dir:
        return Path(args.state_dir)
    return Path(load_config(config_path(args.config)).stateDirectory)


def load_state_file(state_dir: Path, name: str, prog: str, missing: str) -> dict | None:
    """A checkpoint-format file of the state directory, or None after one line on stderr
    (``prog: <why>``) when it is corrupt or missing (``missing`` says what to do)."""
    from nri_cpumgr.checkpoint import Checkpoint, CheckpointError

    try:
        body = Checkpoint(state_dir / name).load()
    except CheckpointError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    if body is None:
        print(f"{prog}: {missing}", file=sys.stderr)
    return body
