"""Reconfiguration of a running node: the plan from one config to another (pure, no I/O).

See :mod:`nri_cpumgr.reconfigure.plan`.
"""

from nri_cpumgr.reconfigure.plan import (
    ContainerMove,
    ReconfigurationPlan,
    Refusal,
    format_reconfiguration,
    plan_reconfiguration,
    pod_pools_of,
)

__all__ = [
    "ContainerMove",
    "ReconfigurationPlan",
    "Refusal",
    "format_reconfiguration",
    "plan_reconfiguration",
    "pod_pools_of",
]
