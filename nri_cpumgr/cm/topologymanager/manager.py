"""The Topology Manager: configuration checks, then admission through a scope.

Source: kubelet pkg/kubelet/cm/topologymanager/topology_manager.go (NewManager, Admit,
GetAffinity, AddHintProvider, AddContainer, RemoveContainer). Construction follows the
kubelet's order of checks:

1. policy ``none``: nothing else is validated (options and scope are ignored), the none
   scope is used;
2. the policy options are parsed (unknown / gated / malformed options fail);
3. NUMA info is built (prefer-closest-numa-nodes needs a distance row for every node);
4. more NUMA nodes than ``max-allowable-numa-nodes`` (default 8) fail;
5. unknown policy names fail, then unknown scope names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nri_cpumgr.cm.topologymanager.errors import TopologyManagerConfigError
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo, new_numa_info
from nri_cpumgr.cm.topologymanager.options import (
    DEFAULT_OPTION_SETS,
    OptionSets,
    PolicyOptions,
    new_policy_options,
)
from nri_cpumgr.cm.topologymanager.policy import POLICY_NONE, NonePolicy, Policy, new_policy
from nri_cpumgr.cm.topologymanager.scope import (
    HintProvider,
    NoneScope,
    PodAdmitResult,
    Scope,
    new_scope,
)
from nri_cpumgr.podmodel import Pod


class TopologyManager:
    """Topology Manager with one policy and one scope.

    Arguments: ``policy_name`` (none | best-effort | restricted | single-numa-node),
    ``scope`` (container | pod), ``options`` (raw ``topologyManagerPolicyOptions`` strings),
    ``numa_nodes`` (the machine's NUMA node ids), ``distances`` (node id -> distance row
    indexed by node id; needed only with prefer-closest-numa-nodes), ``feature_gates``
    (gate name -> bool; absent gates keep kubelet defaults), ``option_sets`` (maturity of
    option names; tests may register extra ones).

    Raises TopologyManagerConfigError (PolicyOptionError for option problems).
    """

    def __init__(
        self,
        policy_name: str,
        scope: str = "container",
        options: Mapping[str, str] | None = None,
        numa_nodes: Sequence[int] = (),
        distances: Mapping[int, Sequence[int] | None] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        option_sets: OptionSets = DEFAULT_OPTION_SETS,
    ) -> None:
        nodes = tuple(numa_nodes)
        if len(set(nodes)) != len(nodes) or any(n < 0 for n in nodes):
            raise TopologyManagerConfigError(f"invalid NUMA node ids {list(nodes)}")
        self._scope: Scope
        if policy_name == POLICY_NONE:
            self.options = PolicyOptions()
            self.numa_info = NUMAInfo(nodes, {n: None for n in nodes})
            self._policy: Policy = NonePolicy()
            self._scope = NoneScope(self._policy)
            return
        self.options = new_policy_options(options, feature_gates, option_sets)
        try:
            self.numa_info = new_numa_info(nodes, distances, self.options.prefer_closest_numa)
        except TopologyManagerConfigError as e:
            raise TopologyManagerConfigError(f"cannot discover NUMA topology: {e}") from e
        if len(nodes) > self.options.max_allowable_numa_nodes:
            raise TopologyManagerConfigError(
                f"unsupported on machines with more than "
                f"{self.options.max_allowable_numa_nodes} NUMA Nodes"
            )
        try:
            self._policy = new_policy(policy_name, self.numa_info, self.options)
            self._scope = new_scope(scope, self._policy)
        except ValueError as e:
            raise TopologyManagerConfigError(str(e)) from None

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def policy_name(self) -> str:
        return self._policy.name

    @property
    def scope(self) -> Scope:
        return self._scope

    @property
    def scope_name(self) -> str:
        return self._scope.name

    def add_hint_provider(self, provider: HintProvider) -> None:
        """Register a hint provider (consulted in registration order)."""
        self._scope.add_hint_provider(provider)

    def admit(self, pod: Pod) -> PodAdmitResult:
        """Admit ``pod``: merge hints per the scope and policy, store the chosen affinity per
        container and let the providers allocate. Refusal: ``admit=False`` with reason
        ``"TopologyAffinityError"`` (or the allocating provider's error)."""
        return self._scope.admit(pod)

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        """The hint stored at admission, ``TopologyHint(None, False)`` if none."""
        return self._scope.get_affinity(pod_uid, container_name)

    def add_container(self, pod: Pod, container_name: str, container_id: str) -> None:
        self._scope.add_container(pod, container_name, container_id)

    def remove_container(self, container_id: str) -> None:
        self._scope.remove_container(container_id)
