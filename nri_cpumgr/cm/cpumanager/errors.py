"""Typed errors of the CPU manager.

Each error carries the facts the kubelet puts in its message as attributes, and ``str()`` renders
them in the kubelet's wording so log lines and admission reasons read the same.
"""

from __future__ import annotations

from dataclasses import dataclass


class CPUManagerError(Exception):
    """Base class of every CPU manager error."""


class NotEnoughCPUsError(CPUManagerError):
    """A take could not be satisfied from the available CPUs.

    ``requested`` and ``available`` are CPU counts (kubelet cpu_assignment.go,
    takeByTopologyNUMAPacked / takeByTopologyNUMADistributed: "not enough cpus available to
    satisfy request: requested=N, available=M").
    """

    def __init__(self, requested: int, available: int) -> None:
        self.requested = requested
        self.available = available
        super().__init__(
            f"not enough cpus available to satisfy request: "
            f"requested={requested}, available={available}"
        )


class AllocationFailedError(CPUManagerError):
    """The take algorithm ran out of candidates although enough CPUs seemed available
    (kubelet: "failed to allocate cpus"), or its bookkeeping did not add up
    (kubelet: "accounting error, ...")."""


@dataclass(eq=True)
class SMTAlignmentError(CPUManagerError):
    """full-pcpus-only could not be honoured (kubelet policy_static.go, SMTAlignmentError).

    ``requested`` CPUs, ``cpus_per_core`` (SMT threads per core), ``available_physical_cpus``
    (free CPUs whose whole core is free of reserved CPUs) and ``caused_by_physical_cpus``
    (True: not enough free whole cores; False: the request is not a multiple of the SMT level).
    """

    requested: int
    cpus_per_core: int
    available_physical_cpus: int = 0
    caused_by_physical_cpus: bool = False

    def __post_init__(self) -> None:
        Exception.__init__(self, str(self))

    def __str__(self) -> str:
        if self.caused_by_physical_cpus:
            return (
                "SMT Alignment Error: not enough free physical CPUs: "
                f"available physical CPUs = {self.available_physical_cpus}, "
                f"requested CPUs = {self.requested}, CPUs per core = {self.cpus_per_core}"
            )
        return (
            f"SMT Alignment Error: requested {self.requested} cpus not multiple cpus per core = "
            f"{self.cpus_per_core}"
        )

    @property
    def type(self) -> str:
        """The admission failure reason the kubelet reports ("SMTAlignmentError")."""
        return "SMTAlignmentError"

    def __hash__(self) -> int:
        return hash(
            (
                self.requested,
                self.cpus_per_core,
                self.available_physical_cpus,
                self.caused_by_physical_cpus,
            )
        )


class InvalidPolicyOptionError(CPUManagerError, ValueError):
    """A CPU manager policy option is unknown, not enabled by the feature gates, has a bad
    value, or conflicts with another option / the machine / the topology manager policy.

    ``option`` names the (first) offending option.
    """

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class PolicyConfigError(CPUManagerError, ValueError):
    """The static policy cannot be built (kubelet NewStaticPolicy): bad reservation."""


class InvalidStateError(CPUManagerError):
    """The stored state contradicts the policy or the machine (kubelet staticPolicy.Start /
    validateState); the kubelet asks to drain the node and remove the state file."""
