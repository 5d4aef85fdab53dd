"""cm/topologymanager: the kubelet's Topology Manager (policies, hint merging, scopes)."""

from nri_cpumgr.cm.topologymanager.errors import (
    ERROR_TOPOLOGY_AFFINITY,
    POD_LEVEL_CONTAINER_SCOPE_REFUSAL,
    TopologyAffinityError,
    TopologyManagerConfigError,
)
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.manager import TopologyManager
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    filter_providers_hints,
    merge_filtered_hints,
)
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo, new_numa_info
from nri_cpumgr.cm.topologymanager.options import (
    OptionSets,
    PolicyOptionError,
    PolicyOptions,
    check_policy_option_available,
    new_policy_options,
)
from nri_cpumgr.cm.topologymanager.policy import (
    BestEffortPolicy,
    NonePolicy,
    Policy,
    RestrictedPolicy,
    SingleNumaNodePolicy,
    new_policy,
)
from nri_cpumgr.cm.topologymanager.scope import (
    ContainerScope,
    HintProvider,
    NoneScope,
    PodAdmitResult,
    PodScope,
    Scope,
)

__all__ = [
    "ERROR_TOPOLOGY_AFFINITY",
    "POD_LEVEL_CONTAINER_SCOPE_REFUSAL",
    "BestEffortPolicy",
    "ContainerScope",
    "HintProvider",
    "NUMAInfo",
    "NonePolicy",
    "NoneScope",
    "OptionSets",
    "PodAdmitResult",
    "PodScope",
    "Policy",
    "PolicyOptionError",
    "PolicyOptions",
    "ProviderHints",
    "RestrictedPolicy",
    "Scope",
    "SingleNumaNodePolicy",
    "TopologyAffinityError",
    "TopologyHint",
    "TopologyManager",
    "TopologyManagerConfigError",
    "check_policy_option_available",
    "filter_providers_hints",
    "merge_filtered_hints",
    "new_numa_info",
    "new_policy",
    "new_policy_options",
]
