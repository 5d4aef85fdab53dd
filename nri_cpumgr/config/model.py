"""Configuration model and loading.

Keys follow the kubelet's KubeletConfiguration where the kubelet has one
(``cpuManagerPolicy``, ``cpuManagerPolicyOptions``, ``reservedSystemCPUs``, ``kubeReserved``,
``systemReserved``, ``featureGates``, ``topologyManagerPolicy``, ...); the plugin's own keys
(``pluginName``, ``pluginIndex``, ``socketPath``, ``stateDirectory``, ...) sit beside them.
Unknown keys are errors (a typo must not silently fall back to a default).

Example::

    cpuManagerPolicy: static
    reservedSystemCPUs: "0"
    cpuManagerPolicyOptions:
      full-pcpus-only: "true"
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from nri_cpumgr.cpuset import CPUSet, CPUSetError
from nri_cpumgr.podmodel import parse_quantity


class ConfigError(ValueError):
    """Invalid configuration. ``str()`` is one line naming the offending key."""


# The feature gates this plugin reads (kubelet names); any other name is a typo.
KNOWN_FEATURE_GATES = frozenset({
    "CPUManagerPolicyAlphaOptions",
    "CPUManagerPolicyBetaOptions",
    "CPUManagerPolicyOptions",
    "TopologyManagerPolicyAlphaOptions",
    "TopologyManagerPolicyBetaOptions",
    "TopologyManagerPolicyOptions",
})


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader refusing duplicate keys (PyYAML keeps the last one silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


class ReservedMemory(BaseModel):
    """One ``reservedMemory`` entry (KubeletConfiguration MemoryReservation): memory and
    hugepages reserved for the system on ``numaNode``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    numaNode: int = Field(ge=0)
    limits: dict[str, str]

    @field_validator("limits", mode="before")
    @classmethod
    def _limits(cls, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                try:
                    parse_quantity(str(x))
                except ValueError:
                    raise ValueError(f"{k}: invalid quantity {x!r}") from None
                out[k] = str(x)
            return out
        return v


class Config(BaseModel):
    """The whole plugin configuration (all keys optional)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    # --- the plugin's own keys ---
    pluginName: str = Field("cpumgr", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    pluginIndex: str = Field("90", pattern=r"^[0-9]{2}$")
    socketPath: str = "/var/run/nri/nri.sock"
    stateDirectory: str = "/var/lib/nri-cpumgr"
    logFile: str | None = None
    # HTTP listen address for /metrics, /healthz and /readyz ("host:port"; "" = off)
    metricsAddress: str = Field("", pattern=r"^$|^[^\s:]*:[0-9]{1,5}$")

    @field_validator("metricsAddress")
    @classmethod
    def _port(cls, v: str) -> str:
        if v and int(v.rsplit(":", 1)[1]) > 65535:
            raise ValueError(f"port of {v!r} out of range (0-65535)")
        return v

    @field_validator("featureGates")
    @classmethod
    def _gates(cls, v: dict[str, bool]) -> dict[str, bool]:
        unknown = sorted(set(v) - KNOWN_FEATURE_GATES)
        if unknown:
            raise ValueError(
                f"unknown feature gate(s) {unknown}; known: {sorted(KNOWN_FEATURE_GATES)}"
            )
        return v
    # --- CPU manager (KubeletConfiguration) ---
    cpuManagerPolicy: Literal["none", "static"] = "none"
    cpuManagerPolicyOptions: dict[str, str] = Field(default_factory=dict)
    reservedSystemCPUs: str = ""
    kubeReserved: dict[str, str] = Field(default_factory=dict)
    systemReserved: dict[str, str] = Field(default_factory=dict)
    featureGates: dict[str, bool] = Field(default_factory=dict)
    # --- Topology / Memory manager (KubeletConfiguration) ---
    topologyManagerPolicy: Literal["none", "best-effort", "restricted", "single-numa-node"] = (
        "none"
    )
    topologyManagerScope: Literal["container", "pod"] = "container"
    topologyManagerPolicyOptions: dict[str, str] = Field(default_factory=dict)
    memoryManagerPolicy: Literal["None", "Static"] = "None"
    reservedMemory: list[ReservedMemory] = Field(default_factory=list)
    evictionHard: dict[str, str] = Field(default_factory=lambda: {"memory.available": "100Mi"})
    # --- the plugin's own: with memoryManagerPolicy None, pin an exclusive container's
    # cpuset.mems to the NUMA nodes of its CPUs (off by default, as in the kubelet) ---
    alignMemoryWithExclusiveCPUs: bool = False
    # --- the plugin's own: moving shared-pool containers after the reply (nri_cpumgr.poolsync).
    # Durations as the kubelet writes them ("100ms", "1s", "1m30s"). ---
    # the longest a shrink of the shared pool waits (for the new exclusive container's start
    # and a quiet moment) before shared containers are moved off the new exclusive CPUs
    sharedPoolShrinkDelay: str = "1s"
    # how long CPUs released by an exclusive container wait before shared containers get
    # them back (the kubelet's cpuManagerReconcilePeriod default); an allocation within that
    # time that takes them again costs no update at all
    sharedPoolGrowDelay: str = "10s"
    # container updates per UpdateContainers call: the runtime holds its NRI lock for the
    # whole call (about 10 ms per container), other containers' operations wait that long
    sharedPoolUpdateBatchSize: int = Field(10, ge=1, le=1000)

    @field_validator("sharedPoolShrinkDelay", "sharedPoolGrowDelay")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @field_validator("reservedSystemCPUs")
    @classmethod
    def _cpulist(cls, v: str) -> str:
        try:
            CPUSet.parse(v)
        except CPUSetError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("cpuManagerPolicyOptions", "topologyManagerPolicyOptions", mode="before")
    @classmethod
    def _option_values(cls, v: Any) -> Any:
        # YAML turns `full-pcpus-only: true` into a bool; the kubelet takes strings.
        if isinstance(v, dict):
            return {k: (str(x).lower() if isinstance(x, bool) else str(x)) for k, x in v.items()}
        return v

    @field_validator("kubeReserved", "systemReserved", mode="before")
    @classmethod
    def _quantities(cls, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                s = str(x)
                try:
                    parse_quantity(s, milli=True)
                except ValueError:
                    raise ValueError(f"{k}: invalid quantity {s!r}") from None
                out[k] = s
            return out
        return v

    @model_validator(mode="after")
    def _reserved_list_matches_count(self) -> Config:
        """reservedSystemCPUs and a kubeReserved/systemReserved cpu count must agree when
        both are given (the static policy reserves exactly that many CPUs)."""
        explicit = self.reserved_cpus()
        count = self._reserved_cpu_count_from_quantities()
        if explicit and count is not None and count != len(explicit):
            raise ValueError(
                f"reservedSystemCPUs {self.reservedSystemCPUs!r} names {len(explicit)} CPUs but "
                f"kubeReserved.cpu + systemReserved.cpu reserve {count}"
            )
        return self

    def _reserved_cpu_count_from_quantities(self) -> int | None:
        given = [r["cpu"] for r in (self.kubeReserved, self.systemReserved) if "cpu" in r]
        if not given:
            return None
        return math.ceil(sum(parse_quantity(q, milli=True) for q in given) / 1000)

    # --- derived values ---
    def reserved_cpus(self) -> CPUSet:
        """The explicit ``reservedSystemCPUs`` list (empty when not given)."""
        return CPUSet.parse(self.reservedSystemCPUs)

    def reserved_cpu_count(self) -> int:
        """Number of reserved CPUs: the size of ``reservedSystemCPUs`` when given, else
        ceil(kubeReserved.cpu + systemReserved.cpu) as the kubelet computes it (kubelet
        cm/container_manager_linux.go: numReservedCPUs from the node's reserved CPU
        quantity, rounded up)."""
        explicit = self.reserved_cpus()
        if explicit:
            return len(explicit)
        return self._reserved_cpu_count_from_quantities() or 0

    def node_allocatable_memory_reservation(self) -> dict[str, int]:
        """Memory the node reserves (bytes per resource): kubeReserved + systemReserved +
        the evictionHard memory.available threshold, as the kubelet's Memory Manager
        validates reservedMemory against (kubelet cm: getNodeAllocatableAbsolute)."""
        out: dict[str, int] = {}
        for src in (self.kubeReserved, self.systemReserved):
            for k, v in src.items():
                if k == "memory" or k.startswith("hugepages-"):
                    out[k] = out.get(k, 0) + parse_quantity(v)
        ev = self.evictionHard.get("memory.available")
        if ev and not ev.endswith("%"):
            out["memory"] = out.get("memory", 0) + parse_quantity(ev)
        return out

    def duration(self, key: str) -> float:
        """A duration key's value in seconds (``sharedPoolShrinkDelay``, ...)."""
        return parse_duration(getattr(self, key))

    def state_path(self, name: str) -> Path:
        return Path(self.stateDirectory) / name


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                  "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds of a duration written as the kubelet's metav1.Duration (Go's
    ``time.ParseDuration``: "0", "250ms", "1.5s", "1m30s"; no sign). Raises ValueError."""
    s = str(text).strip()
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            break
        total += float(m.group(1)) * _DURATION_UNIT[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"invalid duration {text!r} (for example \"500ms\", \"1s\", \"1m30s\")")
    return total


def _one_line(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{key}: {msg}")
    return "invalid config: " + "; ".join(parts)


def parse_config(text: str, source: str = "<config>") -> Config:
    """Parse YAML text into a :class:`Config`. Raises :class:`ConfigError` (one line, naming
    the key) for YAML errors, unknown keys and invalid values."""
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader) if text.strip() else {}  # noqa: S506
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid config {source}: not YAML: {str(e).splitlines()[0]}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping of keys")
    try:
        return Config.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(_one_line(e) + f" ({source})") from None


def load_config(path: str | Path | None) -> Config:
    """Load the config file (``None``: all defaults). Raises :class:`ConfigError`."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config {p}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"invalid config {p}: not UTF-8 text") from None
    return parse_config(text, str(p))
