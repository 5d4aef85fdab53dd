"""Shared-pool updates after the replies (see :mod:`nri_cpumgr.poolsync.planner`)."""

from nri_cpumgr.poolsync.planner import Batch, PoolPlanner
from nri_cpumgr.poolsync.sync import SharedPoolSync, encode_updates, update_body

__all__ = ["Batch", "PoolPlanner", "SharedPoolSync", "encode_updates", "update_body"]
