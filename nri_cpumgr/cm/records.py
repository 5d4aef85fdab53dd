"""The records the container manager and the pod-level managers share, pure.

:class:`Decision` (what to do for a container), :class:`Tracked` (the container manager's
record of a container), :class:`AdmissionError` and :func:`admission_text` (the kubelet's
refusal text). In their own module so that :mod:`nri_cpumgr.cm.container_manager` and
:mod:`nri_cpumgr.cm.podresources` both import them without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel.nri import ContainerInfo

#: Name of the pod's bubble in the CPU and memory states (not a valid container name; the
#: pod-level resource managers', nri_cpumgr.cm.podresources.manager). Here so that readers of
#: the states need not import those managers where they are off (issue 34: the start).
POD_ENTRY = "<pod>"


class AdmissionError(Exception):
    """A container cannot be admitted. ``str()`` carries the kubelet's error name
    (SMTAlignmentError, TopologyAffinityError, ...) and the numbers."""


@dataclass(slots=True)
class Decision:
    """What to do for one new (or re-synchronized) container.

    ``cpus``: the container's cpuset (never empty; ``None`` = leave it alone, as the ``none``
    policy does). ``exclusive``: the CPUs are the container's alone (clear its CFS quota).
    ``mems``: its cpuset.mems (``None``: left alone). ``quota``: a CFS quota (microseconds
    per period) to restore because the container left exclusive CPUs (``None``: unchanged).
    ``pod_updates``: other containers of the same pod to move with it (pod-level resource
    managers: the pod shared pool shrank; see nri_cpumgr.cm.podresources).
    """

    container_id: str
    cpus: CPUSet | None
    exclusive: bool = False
    mems: CPUSet | None = None
    quota: int | None = None
    pod_updates: list[Decision] = field(default_factory=list)


@dataclass(slots=True)
class Tracked:
    """The container manager's record of a tracked container: the runtime's ``info``,
    whether it holds ``exclusive`` CPUs, the cpuset it was given (``applied``), whether it
    ``stopped`` and the cpuset.mems it was given."""

    info: ContainerInfo
    exclusive: bool
    # exclusive: the cpuset we gave it; shared: None (it follows the shared pool);
    # None also when we never set one (policy none)
    applied: CPUSet | None
    stopped: bool = False
    mems: CPUSet | None = None  # the cpuset.mems we gave it (None: left alone)

    @property
    def shared(self) -> bool:
        return not self.exclusive and self.applied is None


def admission_text(e: Exception) -> str:
    """The refusal text of an admission error ``e``: ``"<ErrorName>: <text>"`` (the kubelet's
    error names: SMTAlignmentError, NotEnoughCPUsError, ...), its text as is when it
    already starts with the error's name."""
    name = type(e).__name__
    text = str(e)
    return text if text.startswith(name) else f"{name}: {text}"


#: the allocation errors the kubelet's admission result names by their type (an
#: admission.Error: cpumanager SMTAlignmentError, admission EmptyPodSharedPoolError, v1.37.2);
#: any other is an UnexpectedAdmissionError
TYPED_ADMISSION_ERRORS = frozenset({"SMTAlignmentError", "EmptyPodSharedPoolError"})


def kubelet_admission_text(reason: str, message: str, error: BaseException | None) -> str:
    """The kubelet's pod admission result as one text, ``"<reason>: <message>"``, from a
    refused Topology Manager admission (its ``reason``, ``message`` and the allocating
    provider's ``error``): a typed error (:data:`TYPED_ADMISSION_ERRORS`) by its type name
    and text, any other as the result has it (``UnexpectedAdmissionError: Allocate failed due
    to <error>, which is unexpected``; kubelet admission.GetPodAdmitResult, v1.37.2)."""
    if error is not None and type(error).__name__ in TYPED_ADMISSION_ERRORS:
        return admission_text(error)  # type: ignore[arg-type]
    return f"{reason}: {message}"


def memory_unsatisfiable_text(names: Sequence[str], policy: str) -> str:
    """The plugin's explanation beside the kubelet's refusal of a pod admitted whole whose
    memory no NUMA node set can hold: ``names`` the containers (``""``: the pod, pod
    scope), ``policy`` the Topology Manager's. The kubelet v1.37.2 admits such a pod with no
    memory preference (its Memory Manager answers an empty hint map) and its Allocate fails
    afterwards (memorymanager policy_static.go, kubernetes #128708, #138495)."""
    who = ", ".join(f"container {n}" if n else "the pod" for n in names)
    return (f"no NUMA node set can hold the memory of {who} now; the kubelet's Memory "
            f"Manager then gives no hint, so {policy} admits the pod without a memory "
            "preference and an allocation fails afterwards (kubernetes #128708): the "
            "refusal above is the kubelet's")
