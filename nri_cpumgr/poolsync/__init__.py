"""Shared-pool updates after the replies (see :mod:`nri_cpumgr.poolsync.planner`); the CRI
path (``cri``) is :mod:`nri_cpumgr.poolsync.cri`, imported only in that mode."""

from nri_cpumgr.poolsync.activity import NodeActivity
from nri_cpumgr.poolsync.planner import Batch, PoolPlanner
from nri_cpumgr.poolsync.runtimes import (
    CONFIG_MODES,
    DEFAULT_CRI_ENDPOINTS,
    ModeChoice,
    choose_update_mode,
    cri_endpoint,
    nri_lock_inversion,
    parse_version,
)
from nri_cpumgr.poolsync.sync import MODES, SharedPoolSync, encode_updates, update_body

__all__ = ["CONFIG_MODES", "DEFAULT_CRI_ENDPOINTS", "MODES", "Batch", "ModeChoice",
           "NodeActivity", "PoolPlanner", "SharedPoolSync", "choose_update_mode", "cri_endpoint",
           "encode_updates", "nri_lock_inversion", "parse_version", "update_body"]
