"""Topology Manager scopes: where hints are gathered (per container or per pod), where the
chosen affinity is stored, and the admission flow.

Sources: kubelet pkg/kubelet/cm/topologymanager/scope.go, scope_container.go, scope_pod.go,
scope_none.go; admission results as pkg/kubelet/cm/admission GetPodAdmitResult builds them.

What the kubelet does with the stored affinity: after admitting a container (container
scope) or the whole pod (pod scope) the scope records the best hint under
(pod uid, container name) and immediately calls every provider's ``Allocate``; the
providers (CPU manager, memory manager, device manager) read the hint back through
``GetAffinity`` to pick NUMA-aligned resources. A refused container leaves the hints already
stored for earlier containers of the same pod in place (no rollback), as in the kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nri_cpumgr.cm.topologymanager.errors import ERROR_TOPOLOGY_AFFINITY, TopologyAffinityError
from nri_cpumgr.cm.topologymanager.hint import TopologyHint
from nri_cpumgr.cm.topologymanager.merge import ProviderHints
from nri_cpumgr.cm.topologymanager.policy import Policy
from nri_cpumgr.podmodel import Pod

SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPE_NONE = "none"
SCOPE_NAMES = (SCOPE_CONTAINER, SCOPE_POD)

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"

#: What GetAffinity returns for an unknown (pod, container): Go's TopologyHint{}.
NO_AFFINITY = TopologyHint(None, False)


@runtime_checkable
class HintProvider(Protocol):
    """A resource manager that proposes NUMA placements and then allocates.

    ``get_topology_hints`` / ``get_pod_topology_hints`` return resource name -> hints, or
    ``None`` / ``{}`` for "no preference" (see merge.ProviderHints). ``allocate`` allocates
    for one container after admission and raises on failure; it may read the chosen hint
    through the scope's / manager's ``get_affinity``.
    """

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints: ...

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints: ...

    def allocate(self, pod: Pod, container_name: str) -> None: ...


@dataclass(frozen=True)
class PodAdmitResult:
    """Admission verdict. On refusal ``reason`` is the error kind (``"TopologyAffinityError"``
    or, for a failing provider allocation, the error's ``reason`` attribute or
    ``"UnexpectedAdmissionError"``), ``message`` its text and ``error`` the exception.

    For a TopologyAffinityError ``message`` is the detail without the error's name, as the
    kubelet's admit result has it (reason "TopologyAffinityError", message "Resources cannot
    be allocated with Topology locality"): whoever reports ``reason: message`` names the
    error once."""

    admit: bool
    reason: str = ""
    message: str = ""
    error: BaseException | None = None


#: The result of every admitted pod (immutable: one object shared).
ADMITTED = PodAdmitResult(True)


def admit_result(error: BaseException | None) -> PodAdmitResult:
    """Turn an allocation outcome into a PodAdmitResult (kubelet admission.GetPodAdmitResult)."""
    if error is None:
        return ADMITTED
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return PodAdmitResult(False, reason, str(error), error)
    return PodAdmitResult(
        False,
        UNEXPECTED_ADMISSION_ERROR,
        f"Allocate failed due to {error}, which is unexpected",
        error,
    )


def _containers(pod: Pod) -> list[str]:
    return [c.name for c in pod.init_containers + pod.containers]


class Scope:
    """Shared bookkeeping: hint providers, stored affinities per (pod uid, container name),
    container id -> (pod uid, container name) map."""

    name = ""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._providers: list[HintProvider] = []
        self._hints: dict[str, dict[str, TopologyHint]] = {}
        self._ids: dict[str, tuple[str, str]] = {}

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def hint_providers(self) -> tuple[HintProvider, ...]:
        return tuple(self._providers)

    def add_hint_provider(self, provider: HintProvider) -> None:
        """Register a provider; providers are consulted in registration order."""
        self._providers.append(provider)

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        """The stored hint, or ``TopologyHint(None, False)`` if none."""
        return self._hints.get(pod_uid, {}).get(container_name, NO_AFFINITY)

    def set_affinity(self, pod_uid: str, container_name: str, hint: TopologyHint) -> None:
        self._hints.setdefault(pod_uid, {})[container_name] = hint

    def stored_affinities(self) -> dict[str, dict[str, TopologyHint]]:
        """A copy of pod uid -> container name -> hint."""
        return {uid: dict(c) for uid, c in self._hints.items()}

    def add_container(self, pod: Pod, container_name: str, container_id: str) -> None:
        """Remember which (pod, container) a runtime container id belongs to."""
        self._ids[container_id] = (pod.uid, container_name)

    def remove_container(self, container_id: str) -> None:
        """Forget a container id; drop its stored hint unless another id (a restarted
        container) still refers to the same (pod, container). Unknown ids are ignored."""
        ref = self._ids.pop(container_id, None)
        if ref is None:
            return
        if ref in self._ids.values():
            return
        uid, name = ref
        per_pod = self._hints.get(uid)
        if per_pod is not None:
            per_pod.pop(name, None)
            if not per_pod:
                del self._hints[uid]

    def forget_pod(self, pod_uid: str) -> None:
        """Drop every stored hint of a pod (it is gone, or its admission was refused: hints
        stored for containers never created). Container ids are forgotten by
        :meth:`remove_container`."""
        self._hints.pop(pod_uid, None)

    def _allocate(self, pod: Pod, container_name: str) -> BaseException | None:
        for provider in self._providers:
            try:
                provider.allocate(pod, container_name)
            except Exception as e:  # any provider failure refuses the pod
                return e
        return None

    def admit(self, pod: Pod) -> PodAdmitResult:
        raise NotImplementedError


class ContainerScope(Scope):
    """One merge per container (init containers first, then app containers)."""

    name = SCOPE_CONTAINER

    def accumulate_providers_hints(
        self, pod: Pod, container_name: str
    ) -> list[ProviderHints] | None:
        """Each provider's answer for the container, in provider order; ``None`` when there
        are no providers (Go nil slice)."""
        if not self._providers:
            return None
        return [p.get_topology_hints(pod, container_name) for p in self._providers]

    def calculate_affinity(self, pod: Pod, container_name: str) -> tuple[TopologyHint, bool]:
        return self._policy.merge(self.accumulate_providers_hints(pod, container_name) or [])

    def admit(self, pod: Pod) -> PodAdmitResult:
        """Merge, store and allocate container by container; the first refused container
        refuses the pod with a TopologyAffinityError."""
        for name in _containers(pod):
            hint, ok = self.calculate_affinity(pod, name)
            if not ok:
                err = TopologyAffinityError()  # the kubelet's text (scope_container.go)
                return PodAdmitResult(False, ERROR_TOPOLOGY_AFFINITY, err.detail, err)
            self.set_affinity(pod.uid, name, hint)
            error = self._allocate(pod, name)
            if error is not None:
                return admit_result(error)
        return ADMITTED


class PodScope(Scope):
    """One merge for the whole pod; every container gets the same hint."""

    name = SCOPE_POD

    def accumulate_providers_hints(self, pod: Pod) -> list[ProviderHints] | None:
        """Each provider's pod-level answer, in provider order; ``None`` without providers."""
        if not self._providers:
            return None
        return [p.get_pod_topology_hints(pod) for p in self._providers]

    def calculate_affinity(self, pod: Pod) -> tuple[TopologyHint, bool]:
        return self._policy.merge(self.accumulate_providers_hints(pod) or [])

    def admit(self, pod: Pod) -> PodAdmitResult:
        """Merge once; refuse with a TopologyAffinityError, or store the hint for every
        container and allocate them in order."""
        hint, ok = self.calculate_affinity(pod)
        if not ok:
            err = TopologyAffinityError()  # the kubelet's text (scope_pod.go)
            return PodAdmitResult(False, ERROR_TOPOLOGY_AFFINITY, err.detail, err)
        for name in _containers(pod):
            self.set_affinity(pod.uid, name, hint)
            error = self._allocate(pod, name)
            if error is not None:
                return admit_result(error)
        return ADMITTED


class NoneScope(Scope):
    """Policy none: no hints are gathered or stored; providers still allocate every
    container, init containers first, and the first failing allocation refuses the pod
    (scope.go admitPolicyNone and allocateAlignedResources, v1.37.2: nothing else)."""

    name = SCOPE_NONE

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        """Always ``TopologyHint(None, False)``: this scope stores no hint (the kubelet's
        none scope's GetAffinity answers from an empty map)."""
        return NO_AFFINITY

    def admit(self, pod: Pod) -> PodAdmitResult:
        providers = self._providers
        for containers in (pod.init_containers, pod.containers):
            for c in containers:
                name = c.name
                for provider in providers:
                    try:
                        provider.allocate(pod, name)
                    except Exception as e:  # any provider failure refuses the pod
                        return admit_result(e)
        return ADMITTED


def new_scope(name: str, policy: Policy) -> Scope:
    """Scope called ``name`` (container | pod) for ``policy``; ValueError otherwise."""
    if name == SCOPE_CONTAINER:
        return ContainerScope(policy)
    if name == SCOPE_POD:
        return PodScope(policy)
    raise ValueError(f'unknown scope: "{name}"')
