"""Shared-pool updates after the replies (see :mod:`nri_cpumgr.poolsync.planner`)."""

from nri_cpumgr.poolsync.planner import Batch, PoolPlanner
from nri_cpumgr.poolsync.sync import MODES, SharedPoolSync, encode_updates, update_body

__all__ = ["MODES", "Batch", "PoolPlanner", "SharedPoolSync", "encode_updates", "update_body"]
