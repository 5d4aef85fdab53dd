"""Shared-pool updates after the replies (see :mod:`nri_cpumgr.poolsync.planner`)."""

from nri_cpumgr.poolsync.planner import Batch, PoolPlanner
from nri_cpumgr.poolsync.runtimes import (
    CONFIG_MODES,
    ModeChoice,
    choose_update_mode,
    nri_lock_inversion,
    parse_version,
)
from nri_cpumgr.poolsync.sync import MODES, SharedPoolSync, encode_updates, update_body

__all__ = ["CONFIG_MODES", "MODES", "Batch", "ModeChoice", "PoolPlanner", "SharedPoolSync",
           "choose_update_mode", "encode_updates", "nri_lock_inversion", "parse_version",
           "update_body"]
