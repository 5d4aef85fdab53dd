"""Topology Manager policies: none, best-effort, restricted, single-numa-node.

Sources: kubelet pkg/kubelet/cm/topologymanager/policy_none.go, policy_best_effort.go,
policy_restricted.go, policy_single_numa_node.go. Every policy maps the providers' hints
(one mapping per provider, see :data:`merge.ProviderHints`) to ``(best hint, admit)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import (
    ProviderHints,
    filter_providers_hints,
    filter_single_numa_hints,
    merge_filtered_hints,
)
from nri_cpumgr.cm.topologymanager.numa_info import NUMAInfo
from nri_cpumgr.cm.topologymanager.options import PolicyOptions

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICY_NAMES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)


class Policy:
    """Base class. ``merge(providers_hints) -> (hint, admit)``."""

    name: ClassVar[str] = ""

    def can_admit(self, hint: TopologyHint) -> bool:
        """Whether a pod with this merged hint may run (canAdmitPodResult)."""
        raise NotImplementedError

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        """The best hint for the providers' answers and the admission verdict."""
        raise NotImplementedError


class NonePolicy(Policy):
    """No alignment: always ``(TopologyHint(None, False), True)`` (policy_none.go)."""

    name = POLICY_NONE

    def can_admit(self, hint: TopologyHint) -> bool:
        return True

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        return TopologyHint(None, False), True


class BestEffortPolicy(Policy):
    """Merge to the best hint, admit whatever it is (policy_best_effort.go)."""

    name = POLICY_BEST_EFFORT

    def __init__(self, numa_info: NUMAInfo, options: PolicyOptions | None = None) -> None:
        self.numa_info = numa_info
        self.options = options or PolicyOptions()

    def can_admit(self, hint: TopologyHint) -> bool:
        return True

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        hints = filter_providers_hints(providers_hints)
        best = merge_filtered_hints(hints, self.numa_info, self.options.prefer_closest_numa)
        return best, self.can_admit(best)


class RestrictedPolicy(BestEffortPolicy):
    """Best-effort merge, admit only a preferred hint (policy_restricted.go)."""

    name = POLICY_RESTRICTED

    def can_admit(self, hint: TopologyHint) -> bool:
        return hint.preferred


class SingleNumaNodePolicy(Policy):
    """Only single-node (or "don't care") preferred hints take part; a result equal to all
    NUMA nodes becomes "don't care"; admit only a preferred hint. prefer-closest-numa-nodes
    does not apply (policy_single_numa_node.go)."""

    name = POLICY_SINGLE_NUMA_NODE

    def __init__(self, numa_info: NUMAInfo, options: PolicyOptions | None = None) -> None:
        self.numa_info = numa_info
        self.options = options or PolicyOptions()

    def can_admit(self, hint: TopologyHint) -> bool:
        return hint.preferred

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        hints = filter_single_numa_hints(filter_providers_hints(providers_hints))
        best = merge_filtered_hints(hints, self.numa_info, closest=False)
        if best.numa is not None and best.numa == frozenset(self.numa_info.nodes):
            best = TopologyHint(None, best.preferred)
        return best, self.can_admit(best)


def new_policy(name: str, numa_info: NUMAInfo, options: PolicyOptions | None = None) -> Policy:
    """The policy called ``name``; ValueError for an unknown name."""
    if name == POLICY_NONE:
        return NonePolicy()
    if name == POLICY_BEST_EFFORT:
        return BestEffortPolicy(numa_info, options)
    if name == POLICY_RESTRICTED:
        return RestrictedPolicy(numa_info, options)
    if name == POLICY_SINGLE_NUMA_NODE:
        return SingleNumaNodePolicy(numa_info, options)
    raise ValueError(f'unknown policy: "{name}"')
