"""Static policy options (kubelet ``--cpu-manager-policy-options``).

Rules from kubelet pkg/kubelet/cm/cpumanager/policy_options.go (NewStaticPolicyOptions,
CheckPolicyOptionAvailable, ValidateStaticPolicyOptions):

* six options, each a boolean written as a Go ``strconv.ParseBool`` string;
* maturity: ``full-pcpus-only`` is GA (always available); ``distribute-cpus-across-numa``,
  ``strict-cpu-reservation`` and ``prefer-align-cpus-by-uncorecache`` are beta (need the
  ``CPUManagerPolicyBetaOptions`` feature gate, on by default); ``align-by-socket`` and
  ``distribute-cpus-across-cores`` are alpha (need ``CPUManagerPolicyAlphaOptions``, off by
  default);
* incompatible pairs: full-pcpus-only + distribute-cpus-across-cores,
  distribute-cpus-across-numa + distribute-cpus-across-cores,
  prefer-align-cpus-by-uncorecache + distribute-cpus-across-cores,
  prefer-align-cpus-by-uncorecache + distribute-cpus-across-numa;
* align-by-socket is refused with the ``single-numa-node`` topology manager policy and on
  machines with more sockets than NUMA nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from nri_cpumgr.cm.cpumanager.errors import InvalidPolicyOptionError
from nri_cpumgr.topology import CPUTopology

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_CPUS_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"

ALPHA_GATE = "CPUManagerPolicyAlphaOptions"
BETA_GATE = "CPUManagerPolicyBetaOptions"

#: Feature gate defaults of the current kubelet.
DEFAULT_FEATURE_GATES: dict[str, bool] = {ALPHA_GATE: False, BETA_GATE: True}

ALPHA_OPTIONS = frozenset({ALIGN_BY_SOCKET, DISTRIBUTE_CPUS_ACROSS_CORES})
BETA_OPTIONS = frozenset(
    {DISTRIBUTE_CPUS_ACROSS_NUMA, STRICT_CPU_RESERVATION, PREFER_ALIGN_CPUS_BY_UNCORECACHE}
)
STABLE_OPTIONS = frozenset({FULL_PCPUS_ONLY})
ALL_OPTIONS = ALPHA_OPTIONS | BETA_OPTIONS | STABLE_OPTIONS

# option name -> StaticPolicyOptions field
_FIELD = {
    FULL_PCPUS_ONLY: "full_pcpus_only",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "distribute_cpus_across_numa",
    ALIGN_BY_SOCKET: "align_by_socket",
    DISTRIBUTE_CPUS_ACROSS_CORES: "distribute_cpus_across_cores",
    STRICT_CPU_RESERVATION: "strict_cpu_reservation",
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: "prefer_align_by_uncorecache",
}

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

_INCOMPATIBLE = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)


def parse_bool(value: str) -> bool:
    """Go ``strconv.ParseBool``: 1/t/T/TRUE/true/True and 0/f/F/FALSE/false/False.

    Raises ValueError on anything else.
    """
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"invalid syntax: {value!r}")


def effective_gates(feature_gates: Mapping[str, bool] | None) -> dict[str, bool]:
    """The kubelet defaults overlaid with the explicitly set gates."""
    gates = dict(DEFAULT_FEATURE_GATES)
    if feature_gates:
        gates.update({k: bool(v) for k, v in feature_gates.items()})
    return gates


def check_option_available(option: str, feature_gates: Mapping[str, bool] | None = None) -> None:
    """Raise :class:`InvalidPolicyOptionError` unless ``option`` is known and its maturity
    level is enabled by the feature gates (kubelet CheckPolicyOptionAvailable)."""
    gates = effective_gates(feature_gates)
    if option not in ALL_OPTIONS:
        raise InvalidPolicyOptionError(option, f"unknown CPU Manager Policy option: {option!r}")
    if option in ALPHA_OPTIONS and not gates.get(ALPHA_GATE, False):
        raise InvalidPolicyOptionError(
            option,
            f"CPU Manager Policy Alpha-level Options not enabled, but option {option!r} provided",
        )
    if option in BETA_OPTIONS and not gates.get(BETA_GATE, False):
        raise InvalidPolicyOptionError(
            option,
            f"CPU Manager Policy Beta-level Options not enabled, but option {option!r} provided",
        )


@dataclass(frozen=True, slots=True)
class StaticPolicyOptions:
    """The parsed options; every flag defaults to False (kubelet StaticPolicyOptions)."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_by_uncorecache: bool = False

    @classmethod
    def parse(
        cls,
        options: Mapping[str, Any] | None,
        feature_gates: Mapping[str, bool] | None = None,
    ) -> StaticPolicyOptions:
        """Parse ``{option name: "true"/"false"}`` (Python bools are accepted too).

        Options are checked in sorted name order so the error is deterministic. Raises
        :class:`InvalidPolicyOptionError` for an unknown / gated option, a bad value, or an
        incompatible combination (kubelet NewStaticPolicyOptions).
        """
        values: dict[str, bool] = {}
        for name in sorted(options or {}):
            raw = (options or {})[name]
            check_option_available(name, feature_gates)
            if isinstance(raw, bool):
                val = raw
            else:
                try:
                    val = parse_bool(str(raw))
                except ValueError as exc:
                    raise InvalidPolicyOptionError(
                        name, f"bad value for option {name!r}: {exc}"
                    ) from None
            values[_FIELD[name]] = val
        opts = cls(**values)
        for a, b in _INCOMPATIBLE:
            if opts.enabled(a) and opts.enabled(b):
                raise InvalidPolicyOptionError(
                    a, f"static policy options {a} and {b} can not be used at the same time"
                )
        return opts

    def enabled(self, option: str) -> bool:
        """Whether the option named ``option`` (kubelet spelling) is on."""
        return bool(getattr(self, _FIELD[option]))

    def enabled_options(self) -> list[str]:
        """Names (kubelet spelling) of the options that are on, sorted."""
        return sorted(name for name, f in _FIELD.items() if getattr(self, f))

    def to_dict(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def validate_static_policy_options(
    opts: StaticPolicyOptions, topology: CPUTopology, topology_manager_policy: str = "none"
) -> None:
    """Check the options against the machine and the topology manager policy (kubelet
    ValidateStaticPolicyOptions). Raises :class:`InvalidPolicyOptionError`."""
    if opts.align_by_socket:
        if topology_manager_policy == "single-numa-node":
            raise InvalidPolicyOptionError(
                ALIGN_BY_SOCKET,
                "topology manager single-numa-node policy is incompatible with CPU manager "
                f"policy option {ALIGN_BY_SOCKET}",
            )
        if topology.num_sockets > topology.num_numa_nodes:
            raise InvalidPolicyOptionError(
                ALIGN_BY_SOCKET,
                f"option {ALIGN_BY_SOCKET} is not compatible with hardware where the number of "
                f"sockets ({topology.num_sockets}) is more than the number of NUMA nodes "
                f"({topology.num_numa_nodes})",
            )
