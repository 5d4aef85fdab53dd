"""The kubelet CPU manager (pkg/kubelet/cm/cpumanager) as pure Python: take strategies,
policy options, the ``static`` and ``none`` policies and their state."""

from nri_cpumgr.cm.cpumanager.cpu_assignment import (
    take_by_topology,
    take_distributed,
    take_packed,
)
from nri_cpumgr.cm.cpumanager.errors import (
    AllocationFailedError,
    CPUManagerError,
    InvalidPolicyOptionError,
    InvalidStateError,
    NotEnoughCPUsError,
    PolicyConfigError,
    SMTAlignmentError,
)
from nri_cpumgr.cm.cpumanager.policy_none import NonePolicy
from nri_cpumgr.cm.cpumanager.policy_options import (
    StaticPolicyOptions,
    check_option_available,
    validate_static_policy_options,
)
from nri_cpumgr.cm.cpumanager.policy_static import (
    StaticPolicy,
    guaranteed_cpus,
    pod_guaranteed_cpus,
)
from nri_cpumgr.cm.cpumanager.state import CPUManagerState

__all__ = [
    "AllocationFailedError",
    "CPUManagerError",
    "CPUManagerState",
    "InvalidPolicyOptionError",
    "InvalidStateError",
    "NonePolicy",
    "NotEnoughCPUsError",
    "PolicyConfigError",
    "SMTAlignmentError",
    "StaticPolicy",
    "StaticPolicyOptions",
    "check_option_available",
    "guaranteed_cpus",
    "pod_guaranteed_cpus",
    "take_by_topology",
    "take_distributed",
    "take_packed",
    "validate_static_policy_options",
]
