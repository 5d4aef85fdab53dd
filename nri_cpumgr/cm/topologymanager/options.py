"""Topology Manager policy options and their maturity gates.

Source of the rules: kubelet pkg/kubelet/cm/topologymanager/policy_options.go
(CheckPolicyOptionAvailable, NewPolicyOptions) as the kubelet's own tests describe them:

* ``prefer-closest-numa-nodes`` (bool) is stable: always available;
* ``max-allowable-numa-nodes`` (int, default 8, at least 8) is beta: it needs the
  ``TopologyManagerPolicyBetaOptions`` feature gate (on by default);
* alpha options need ``TopologyManagerPolicyAlphaOptions`` (off by default); there are none
  today, the sets are parameters so that tests can inject options.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nri_cpumgr.cm.topologymanager.errors import TopologyManagerConfigError

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
#: The kubelet's defaultMaxAllowableNUMANodes: larger machines need the option.
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8

GATE_ALPHA_OPTIONS = "TopologyManagerPolicyAlphaOptions"
GATE_BETA_OPTIONS = "TopologyManagerPolicyBetaOptions"
#: Kubelet defaults of the two gates.
DEFAULT_FEATURE_GATES: Mapping[str, bool] = {GATE_ALPHA_OPTIONS: False, GATE_BETA_OPTIONS: True}


class PolicyOptionError(TopologyManagerConfigError):
    """An invalid, unknown, unavailable or malformed Topology Manager policy option
    (kubelet policy_options.go CheckPolicyOptionAvailable / NewPolicyOptions).

    ``options`` holds the options as parsed before the failure (the kubelet returns them
    together with the error; only the defaults are guaranteed)."""

    def __init__(self, message: str, options: PolicyOptions | None = None) -> None:
        super().__init__(message)
        self.options = options


@dataclass(frozen=True)
class OptionSets:
    """Which option names exist at which maturity level."""

    alpha: frozenset[str] = frozenset()
    beta: frozenset[str] = frozenset({MAX_ALLOWABLE_NUMA_NODES})
    stable: frozenset[str] = frozenset({PREFER_CLOSEST_NUMA_NODES})

    def with_extra(
        self, alpha: frozenset[str] = frozenset(), beta: frozenset[str] = frozenset()
    ) -> OptionSets:
        """A copy with more alpha / beta names (for tests that register fake options)."""
        return OptionSets(self.alpha | alpha, self.beta | beta, self.stable)


DEFAULT_OPTION_SETS = OptionSets()


@dataclass(frozen=True)
class PolicyOptions:
    """Parsed policy options: ``prefer_closest_numa`` (bool) and ``max_allowable_numa_nodes``
    (count of NUMA nodes a non-none policy accepts)."""

    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    extra: Mapping[str, str] = field(default_factory=dict)


def _gate(feature_gates: Mapping[str, bool] | None, name: str) -> bool:
    if feature_gates is not None and name in feature_gates:
        return bool(feature_gates[name])
    return DEFAULT_FEATURE_GATES[name]


def check_policy_option_available(
    option: str,
    feature_gates: Mapping[str, bool] | None = None,
    option_sets: OptionSets = DEFAULT_OPTION_SETS,
) -> None:
    """Raise PolicyOptionError unless ``option`` is known and its maturity gate is on.

    ``feature_gates`` maps gate names to bools; absent gates keep the kubelet defaults
    (alpha off, beta on). Kubelet policy_options.go CheckPolicyOptionAvailable.
    """
    known = option_sets.alpha | option_sets.beta | option_sets.stable
    if option not in known:
        raise PolicyOptionError(f"unknown Topology Manager Policy option: {_q(option)}")
    if option in option_sets.alpha and not _gate(feature_gates, GATE_ALPHA_OPTIONS):
        raise PolicyOptionError(
            f"topology manager policy alpha-level options not enabled, "
            f"but option {_q(option)} provided"
        )
    if option in option_sets.beta and not _gate(feature_gates, GATE_BETA_OPTIONS):
        raise PolicyOptionError(
            f"topology manager policy beta-level options not enabled, "
            f"but option {_q(option)} provided"
        )


def is_policy_option_available(
    option: str,
    feature_gates: Mapping[str, bool] | None = None,
    option_sets: OptionSets = DEFAULT_OPTION_SETS,
) -> bool:
    """Boolean form of :func:`check_policy_option_available`."""
    try:
        check_policy_option_available(option, feature_gates, option_sets)
    except PolicyOptionError:
        return False
    return True


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_GO_INT = r"[+-]?[0-9]+\Z"  # (compiled at its first use, not at the start)


def parse_go_bool(value: str) -> bool:
    """Go strconv.ParseBool: raises ValueError on anything but its twelve spellings."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise ValueError(f"parsing {_q(value)}: invalid syntax")


def parse_go_int(value: str) -> int:
    """Go strconv.Atoi (decimal, optional sign, no spaces or underscores); ValueError else."""
    if not re.match(_GO_INT, value):
        raise ValueError(f"parsing {_q(value)}: invalid syntax")
    n = int(value)
    if not -2**63 <= n < 2**63:  # (Go's int is 64 bits)
        raise ValueError(f"parsing {_q(value)}: value out of range")
    return n


def new_policy_options(
    policy_options: Mapping[str, str] | None,
    feature_gates: Mapping[str, bool] | None = None,
    option_sets: OptionSets = DEFAULT_OPTION_SETS,
) -> PolicyOptions:
    """Parse the raw ``topologyManagerPolicyOptions`` strings.

    Raises PolicyOptionError (with ``.options`` = what was parsed so far) for an unknown or
    gated option, a malformed value, ``max-allowable-numa-nodes`` < 8, or an available option
    this implementation does not handle. Kubelet policy_options.go NewPolicyOptions.
    """
    prefer_closest = False
    max_nodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES

    def current() -> PolicyOptions:
        return PolicyOptions(prefer_closest, max_nodes)

    for name, value in (policy_options or {}).items():
        try:
            check_policy_option_available(name, feature_gates, option_sets)
        except PolicyOptionError as e:
            raise PolicyOptionError(str(e), current()) from None
        if name == PREFER_CLOSEST_NUMA_NODES:
            try:
                prefer_closest = parse_go_bool(value)
            except ValueError as e:
                raise PolicyOptionError(f"bad value for option {_q(name)}: {e}", current()) from e
        elif name == MAX_ALLOWABLE_NUMA_NODES:
            try:
                n = parse_go_int(value)
            except ValueError as e:
                raise PolicyOptionError(
                    f"unable to convert policy option to integer {_q(name)}: {e}", current()
                ) from e
            if n < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise PolicyOptionError(
                    f"the minimum value of {_q(name)} should not be less than "
                    f"{DEFAULT_MAX_ALLOWABLE_NUMA_NODES}",
                    current(),
                )
            max_nodes = n
        else:
            raise PolicyOptionError(
                f"unsupported topologymanager option: {_q(name)} ({value})", current()
            )
    return current()


def _q(s: str) -> str:
    """Go's %q for plain strings."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
