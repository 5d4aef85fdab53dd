"""Pod-level resource managers, whole-pod rules (KEP-5526), pure.

Rules as the kubelet's static CPU policy has them with ``PodLevelResources`` and
``PodLevelResourceManagers`` on (kubernetes/kubernetes pkg/kubelet/cm/cpumanager
policy_static.go: guaranteedCPUs, podGuaranteedCPUs, validatePodScopeResources, AllocatePod;
memorymanager policy_static.go validatePodScopeResources for the memory texts; read at the
stored revisions named in the README section "Pod-level resource managers"):

* a container *qualifies* for an exclusive slice when its pod is Guaranteed (pod-level
  requests == limits for cpu and memory) and the container itself would be Guaranteed: cpu
  and memory requests equal to limits, and the CPU request a positive whole number;
* the pod's CPU budget ("bubble") is the pod-level CPU request when it is a whole number of
  CPUs (0 otherwise: no bubble);
* the bubble is refused when it would leave an empty pod shared pool for containers that
  need one (:func:`validate_pod_scope`, errors of kind ``EmptyPodSharedPoolError``);
* :func:`allocate_pod` takes the bubble NUMA-aligned, then partitions it: init containers
  that qualify take slices of (bubble - sidecar slices), sidecars keep theirs; other init
  containers get (bubble - sidecar slices); app containers that qualify take slices of what
  the sidecars left; every other container shares the rest (the pod shared pool).

The runtime never shows the whole pod at once; :mod:`nri_cpumgr.cm.podresources.manager`
applies the same rules container by container. This module is what the conformance cases
(transcribed from TestStaticPolicyAllocatePod / TestValidatePodScopeResources) check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology
from nri_cpumgr.cm.cpumanager.errors import SMTAlignmentError
from nri_cpumgr.cm.cpumanager.policy_static import StaticPolicy
from nri_cpumgr.cm.cpumanager.state import CPUManagerState
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass

#: Reason of an empty-pod-shared-pool refusal (kubelet cm/admission ErrorReasonEmptyPodSharedPool).
EMPTY_POD_SHARED_POOL = "EmptyPodSharedPoolError"

#: Texts of the kubelet's validatePodScopeResources (CPU manager).
TEXT_NO_CPUS_FOR_SHARED = (
    "pod rejected, sum of exclusive container cpu requests equals pod budget, "
    "leaving no cpus for shared containers"
)
TEXT_NO_CPUS_FOR_SHARED_INIT = (
    "pod rejected, pod has shared init containers but no cpus available for them"
)


def text_init_too_large(requested: int, available: int) -> str:
    return (
        f"pod rejected, largest exclusive init container requests {requested} cpus, "
        f"but only {available} available"
    )


def text_no_memory_for_shared(resource: str) -> str:
    """The Memory Manager's text for the same refusal (memorymanager policy_static.go)."""
    return (
        f"pod rejected, sum of exclusive container {resource} requests equals pod budget, "
        f"leaving no memory for shared containers"
    )


def text_no_memory_for_shared_init(resource: str) -> str:
    """The Memory Manager's text when regular init containers without memory of their own
    find the pod's budget taken by its sidecars (memorymanager policy_static.go)."""
    return f"pod rejected, pod has shared init containers but no {resource} available for them"


def validate_pod_scope_memory(pod_requests: Mapping[str, int], pod: Pod) -> str | None:
    """The Memory Manager's empty-pod-shared-pool check of a pod with ``.spec.resources``
    (memorymanager policy_static.go validatePodScopeResources, v1.37.2): ``pod_requests``
    the pod's own requests (bytes; only ``memory`` and ``hugepages-*`` count), ``pod`` its
    init and app containers. A container's memory is its own only when its requests equal
    its limits (getContainerRequestedResources); the long-running ones' (app containers and
    sidecars) must leave some of each budget for the containers without memory of their
    own. The kubelet's error text, or None when the pod passes."""
    from nri_cpumgr.cm.memorymanager.policy_static import container_requested_resources
    from nri_cpumgr.cm.memorymanager.quantity import is_memory_resource

    total = {n: v for n, v in pod_requests.items() if is_memory_resource(n) and v > 0}

    def own(c: ContainerSpec) -> dict[str, int]:
        return container_requested_resources(c) if c.equivalent_guaranteed() else {}

    used: dict[str, int] = {}
    shared = False
    for c in pod.init_containers:
        reqs = own(c)
        if not c.restartable:
            if not reqs:
                for name in sorted(total):
                    if used.get(name, 0) >= total[name]:
                        return text_no_memory_for_shared_init(name)
            continue
        if not reqs:
            shared = True
        for name, v in reqs.items():
            used[name] = used.get(name, 0) + v
    for c in pod.containers:
        reqs = own(c)
        if not reqs:
            shared = True
        for name, v in reqs.items():
            used[name] = used.get(name, 0) + v
    if shared:
        for name in sorted(total):
            if used.get(name, 0) >= total[name]:
                return text_no_memory_for_shared(name)
    return None


class EmptyPodSharedPoolError(Exception):
    """The pod's budget leaves no pod shared pool for containers that need one (kubelet
    admission.EmptyPodSharedPoolError; ``str()`` is the kubelet's message)."""

    def type(self) -> str:
        return EMPTY_POD_SHARED_POOL


def slice_cpus(pod: Pod, c: ContainerSpec) -> int:
    """Exclusive CPUs ``c`` takes from its pod's bubble: its whole CPU request when the pod
    is Guaranteed and the container qualifies, else 0 (kubelet guaranteedCPUs with pod-level
    resources)."""
    if pod.qos_class() is not QOSClass.GUARANTEED or not c.equivalent_guaranteed():
        return 0
    return c.guaranteed_cpus()


def pod_budget_cpus(pod: Pod, pod_cpu_milli: int | None) -> int:
    """The bubble's size: the pod-level CPU request in whole CPUs, 0 when the pod is not
    Guaranteed or the request is not a whole number (kubelet podGuaranteedCPUs)."""
    if pod.qos_class() is not QOSClass.GUARANTEED or not pod_cpu_milli:
        return 0
    if pod_cpu_milli <= 0 or pod_cpu_milli % 1000:
        return 0
    return pod_cpu_milli // 1000


def validate_pod_scope(pod: Pod, budget: int) -> None:
    """Refuse a pod whose exclusive slices leave no pod shared pool for the containers that
    need one (kubelet validatePodScopeResources, CPU). Raises
    :class:`EmptyPodSharedPoolError` with the kubelet's text."""
    long_running = 0
    shared_long_running = False
    for c in pod.init_containers:
        n = slice_cpus(pod, c)
        if not c.restartable:
            if n > 0:
                pool = budget - long_running
                if n > pool:
                    raise EmptyPodSharedPoolError(text_init_too_large(n, pool))
            elif long_running >= budget:
                raise EmptyPodSharedPoolError(TEXT_NO_CPUS_FOR_SHARED_INIT)
            continue
        if n == 0:
            shared_long_running = True
        else:
            long_running += n
    for c in pod.containers:
        n = slice_cpus(pod, c)
        if n == 0:
            shared_long_running = True
        else:
            long_running += n
    if shared_long_running and long_running >= budget:
        raise EmptyPodSharedPoolError(TEXT_NO_CPUS_FOR_SHARED)


def enforce_smt(policy: StaticPolicy, state: CPUManagerState, count: int) -> None:
    """full-pcpus-only on the pod's total (kubelet enforceSMTAlignment)."""
    if not policy.options.full_pcpus_only:
        return
    group = policy.cpu_group_size
    if group and count % group:
        raise SMTAlignmentError(count, group, 0, False)
    free = len(policy.available_physical_cpus(state))
    if count > free:
        raise SMTAlignmentError(count, group, free, True)


def partition(
    policy: StaticPolicy, pod: Pod, bubble: CPUSet
) -> tuple[dict[str, CPUSet], CPUSet]:
    """Split ``bubble`` among the pod's containers (kubelet AllocatePod step 5): returns
    (container name -> its cpuset, the pod shared pool). Containers that do not qualify and
    are not regular init containers get the pod shared pool. Raises NotEnoughCPUsError."""
    topo, opts = policy.topology, policy.options
    out: dict[str, CPUSet] = {}
    sidecars = CPUSet()
    for c in pod.init_containers:
        n = slice_cpus(pod, c)
        if n > 0:
            got = take_by_topology(topo, bubble - sidecars, n, opts)
            out[c.name] = got
            if c.restartable:
                sidecars = sidecars | got
        elif not c.restartable:
            out[c.name] = bubble - sidecars
    pool = bubble - sidecars
    for c in pod.containers:
        n = slice_cpus(pod, c)
        if n > 0:
            got = take_by_topology(topo, pool, n, opts)
            out[c.name] = got
            pool = pool - got
    for c in pod.init_containers + pod.containers:
        out.setdefault(c.name, pool)
    return out, pool


def allocate_pod(
    policy: StaticPolicy,
    state: CPUManagerState,
    pod: Pod,
    pod_cpu_milli: int | None,
    numa_affinity: Iterable[int] | None = None,
) -> CPUSet | None:
    """The kubelet's AllocatePod for a pod whose whole spec is known: validate, take the
    bubble (NUMA affinity first, as allocateCPUs), partition it, and record every container's
    cpuset in ``state`` (the shared pool shrinks by the bubble). Returns the bubble, or None
    when the pod has no CPU budget (nothing changes). Raises EmptyPodSharedPoolError,
    SMTAlignmentError or NotEnoughCPUsError; ``state`` is unchanged on error."""
    budget = pod_budget_cpus(pod, pod_cpu_milli)
    if budget == 0:
        return None
    validate_pod_scope(pod, budget)
    enforce_smt(policy, state, budget)
    bubble = policy.allocate_cpus(state, budget, numa_affinity, CPUSet())
    parts, _ = partition(policy, pod, bubble)
    state.default_set = state.default_set - bubble
    for name, cpus in parts.items():
        state.set_cpuset(pod.uid, name, cpus)
    return bubble
