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

import dataclasses
import functools
import math
import os
import re
from collections.abc import Callable

from nri_cpumgr.cpuset import CPUSet, CPUSetError
from nri_cpumgr.paths import normal
from nri_cpumgr.shown import shown

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:  # (typing is not loaded before the plugin registers)
    from pathlib import Path
    from typing import Any


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
    # pod-level resource managers and in-place resize (nri_cpumgr.cm.podresources.gates)
    "PodLevelResources",
    "PodLevelResourceManagers",
    "InPlacePodVerticalScalingExclusiveCPUs",
    "InPlacePodVerticalScalingExclusiveMemory",
})

# (string tests rather than regular expressions for the keys every start validates: each
# pattern compiled is ~1 M instructions at the plugin's start, issue 34)
_PLUGIN_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# host:port, the host a name, an IPv4 address or a bracketed IPv6 one ("[::1]:9109"); compiled
# at its first use: metricsAddress is optional
_ADDRESS = r"(?:[^\s:\[\]]*|\[[0-9A-Fa-f:.]*:[0-9A-Za-z:.%]*\]):([0-9]{1,5})"
# YAML strings a boolean key takes besides true/false (what the Go/pydantic parsers accept)
_TRUE = frozenset({"true", "yes", "on", "1", "t", "y"})
_FALSE = frozenset({"false", "no", "off", "0", "f", "n"})


@functools.cache
def _unique_key_loader() -> type:
    """A SafeLoader refusing duplicate keys (PyYAML keeps the last one silently). Built on
    first use: PyYAML's import is ~15 ms, not needed when no config text is given."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return loader.construct_mapping(node, deep=True)

    UniqueKeyLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return UniqueKeyLoader


def parse_quantity(text: str, *, milli: bool = False) -> int:
    """:func:`nri_cpumgr.podmodel.parse_quantity`, imported at first use: the pod model (and
    fractions, decimal) is not needed to read a config without quantities, before the plugin
    registers."""
    from nri_cpumgr.podmodel import parse_quantity as parse

    return parse(text, milli=milli)


def did_you_mean(word: str, known: Any) -> str:
    """``"; did you mean 'X'?"`` for the entry of ``known`` (strings) closest to ``word``: the
    same name in another case, else difflib's closest match with a ratio of at least 0.6;
    ``""`` when nothing is close."""
    names = [k for k in known if isinstance(k, str)]
    same_case = [k for k in names if k.lower() == word.lower()]
    import difflib  # an error path only

    best = same_case or difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f"; did you mean {best[0]!r}?" if best else ""


def with_source(e: ConfigError, source: str | None) -> ConfigError:
    """``e`` with `` (<source>)`` appended (the file, or where the text came from), unless
    its message already names it or there is no source (built-in defaults)."""
    msg = str(e)
    if not source or msg.endswith(f"({source})"):
        return e
    return ConfigError(f"{msg} ({source})")


class _Invalid(Exception):
    """One invalid value: ``key`` (dotted path) and the message."""

    def __init__(self, key: str, msg: str) -> None:
        super().__init__(f"{key}: {msg}")
        self.key = key
        self.msg = msg


@dataclasses.dataclass(frozen=True)
class ReservedMemory:
    """One ``reservedMemory`` entry (KubeletConfiguration MemoryReservation): memory and
    hugepages (bytes as Kubernetes quantities, e.g. ``1Gi``) reserved for the system on
    NUMA node ``numaNode``."""

    numaNode: int
    limits: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole plugin configuration (all keys optional). Build it with
    :func:`parse_config` / :meth:`model_validate`, which check every key; ``Config()`` is all
    defaults."""

    # --- the plugin's own keys ---
    pluginName: str = "cpumgr"
    pluginIndex: str = "90"
    socketPath: str = "/var/run/nri/nri.sock"
    stateDirectory: str = "/var/lib/nri-cpumgr"
    logFile: str | None = None
    # HTTP listen address for /metrics, /healthz and /readyz ("host:port"; "" = off)
    metricsAddress: str = ""
    # --- CPU manager (KubeletConfiguration) ---
    cpuManagerPolicy: str = "none"
    cpuManagerPolicyOptions: dict[str, str] = dataclasses.field(default_factory=dict)
    reservedSystemCPUs: str = ""
    kubeReserved: dict[str, str] = dataclasses.field(default_factory=dict)
    systemReserved: dict[str, str] = dataclasses.field(default_factory=dict)
    featureGates: dict[str, bool] = dataclasses.field(default_factory=dict)
    # --- Topology / Memory manager (KubeletConfiguration) ---
    topologyManagerPolicy: str = "none"
    topologyManagerScope: str = "container"
    topologyManagerPolicyOptions: dict[str, str] = dataclasses.field(default_factory=dict)
    memoryManagerPolicy: str = "None"
    reservedMemory: list[ReservedMemory] = dataclasses.field(default_factory=list)
    evictionHard: dict[str, str] = dataclasses.field(
        default_factory=lambda: {"memory.available": "100Mi"})
    # --- the plugin's own: with memoryManagerPolicy None, pin an exclusive container's
    # cpuset.mems to the NUMA nodes of its CPUs (off by default, as in the kubelet) ---
    alignMemoryWithExclusiveCPUs: bool = False
    # --- the plugin's own: moving shared-pool containers after the pool changes
    # (nri_cpumgr.poolsync; durations as the kubelet writes them, "500ms", "1s") ---
    sharedPoolShrinkDelay: str = "1s"
    sharedPoolGrowDelay: str = "10s"
    sharedPoolUpdateBatchSize: int = 10
    # --- the plugin's own: with no checkpoint of its own, start from the kubelet's
    # cpu_manager_state / memory_manager_state found here ("" = never; nri_cpumgr.adopt) ---
    kubeletStateDirectory: str = "/var/lib/kubelet"
    # --- the plugin's own: record why each container got its CPUs (nri_cpumgr.explain;
    # `nri-cpumgr explain`); also on at debug level (-v) ---
    explainDecisions: bool = False
    # "async": the plugin's own UpdateContainers calls; "cri": CRI UpdateContainerResources
    # calls on the runtime's CRI socket, from a worker thread; "reply": only in replies;
    # "auto": "async" on a runtime known to be free of the NRI lock-order inversion
    # (containerd >= 2.4.0), "cri" elsewhere, "reply" when the CRI socket cannot be reached
    # (nri_cpumgr.poolsync.runtimes; README)
    sharedPoolUpdateMode: str = "auto"
    # the runtime's CRI socket for "cri" ("" = the runtime's default: containerd
    # /run/containerd/containerd.sock, CRI-O /var/run/crio/crio.sock; "unix://" optional)
    containerRuntimeEndpoint: str = ""
    # --- the plugin's own: where the pod spec facts NRI cannot show come from
    # (nri_cpumgr.podsource; README "Pod spec facts"): "none" = NRI alone, "apiServer" = a
    # watch of this node's pods. apiServerURL "" = in-cluster; nodeName "" = $NODE_NAME;
    # podSpecWait: the longest a Guaranteed container's creation waits for a pod the
    # connected watch has not shown yet ---
    podSpecSource: str = "none"
    apiServerURL: str = ""
    nodeName: str = ""
    podSpecWait: str = "500ms"

    @classmethod
    def model_validate(cls, doc: Any) -> Config:
        """Check the mapping ``doc`` (the parsed YAML) key by key. Raises
        :class:`ConfigError`: ``invalid config: <key>: <what is wrong>[; ...]``, every
        invalid key named (dotted path for nested keys, e.g. ``reservedMemory.0.numaNode``)."""
        if not isinstance(doc, dict):
            raise ConfigError("invalid config: (top level): expected a mapping of keys")
        errors: list[str] = []
        values: dict[str, Any] = {}
        for key, raw in doc.items():
            check = _CHECKS.get(key) if isinstance(key, str) else None
            if check is None:
                errors.append(f"{key}: unknown key{did_you_mean(str(key), _CHECKS)}")
                continue
            try:
                values[key] = check(key, raw)
            except _Invalid as e:
                errors.append(str(e))
        if errors:
            raise ConfigError("invalid config: " + "; ".join(errors))
        config = cls(**values)
        config.reserved_cpu_count()  # (the kubeReserved/systemReserved cpu sum parses)
        return config

    def model_copy(self, update: dict[str, Any] | None = None) -> Config:
        """A copy with the keys of ``update`` replaced (values taken as they are)."""
        return dataclasses.replace(self, **(update or {}))

    def reserved_cpus_override(self) -> str | None:
        """The line the start logs (a WARNING; ``run --check-config`` a note) when
        ``reservedSystemCPUs`` and a ``kubeReserved``/``systemReserved`` cpu are both given
        and do not count the same CPUs, else None: the list wins, as in the kubelet, which
        drops kubeReserved's cpu and sets systemReserved's to the list's size (kubelet
        cmd/kubelet/app/server.go, "Option --reserved-cpus is specified, it will overwrite
        the cpu setting in KubeReserved and SystemReserved", v1.37.2)."""
        explicit = self.reserved_cpus()
        count = self._reserved_cpu_count_from_quantities()
        if not explicit or count is None or count == len(explicit):
            return None
        def cpus(n: int) -> str:
            return f"{n} CPU" if n == 1 else f"{n} CPUs"

        return (f"reservedSystemCPUs {self.reservedSystemCPUs!r} ({cpus(len(explicit))}) "
                f"overrides the cpu of kubeReserved + systemReserved ({cpus(count)}), as the "
                f"kubelet's --reserved-cpus does")

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

    def node_allocatable_memory_reservation(self, memory_capacity: int | None = None
                                            ) -> dict[str, int]:
        """Memory the node reserves (bytes per resource): kubeReserved + systemReserved +
        the evictionHard memory.available threshold, as the kubelet's Memory Manager
        validates reservedMemory against (kubelet cm: GetNodeAllocatableReservation). A
        percentage threshold counts that share of ``memory_capacity`` (bytes: the node's
        memory; without it, 0). Raises ValueError for a threshold the kubelet refuses."""
        out: dict[str, int] = {}
        for src in (self.kubeReserved, self.systemReserved):
            for k, v in src.items():
                if k == "memory" or k.startswith("hugepages-"):
                    out[k] = out.get(k, 0) + parse_quantity(v)
        ev = self.evictionHard.get("memory.available")
        if ev:
            n = eviction_threshold_bytes(ev, memory_capacity or 0)
            if n:
                out["memory"] = out.get("memory", 0) + n
        return out

    def duration(self, key: str) -> float:
        """A duration key's value in seconds (``sharedPoolShrinkDelay``, ...)."""
        return parse_duration(getattr(self, key))

    def state_path(self, name: str) -> Path:
        from pathlib import Path

        return Path(self.stateDirectory) / name

    def state_file(self, name: str) -> str:
        """``str(state_path(name))``, without importing pathlib (the plugin's start)."""
        return normal(os.path.join(self.stateDirectory, name))

    def kubelet_state_conflict(self) -> str | None:
        """Why ``stateDirectory`` cannot hold the plugin's checkpoints: it is the kubelet's
        state directory (``kubeletStateDirectory``, compared with symbolic links resolved),
        where the plugin's ``cpu_manager_state`` and ``memory_manager_state`` would replace
        the kubelet's own files of the same names, which the kubelet then refuses at its next
        start ("could not restore state from checkpoint"). None when it can. Reads the file
        system (``os.path.realpath``); raises nothing."""
        kubelet = self.kubeletStateDirectory
        if not kubelet:
            return None
        if os.path.realpath(self.stateDirectory) != os.path.realpath(kubelet):
            return None
        return (f"the kubelet's state directory (kubeletStateDirectory {kubelet}): the "
                "plugin's cpu_manager_state and memory_manager_state would replace the "
                "kubelet's own, which the kubelet then refuses at its next start; give the "
                "plugin a directory of its own (the default: /var/lib/nri-cpumgr)")


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
    if total * 1e9 >= _MAX_DURATION_NS / 2 and _duration_ns(s) > _MAX_DURATION_NS:
        raise ValueError(f"invalid duration {text!r}: out of range (Go's durations end at "
                         "2562047h47m16.854775807s)")
    return total


_MAX_DURATION_NS = 2**63 - 1  # Go's time.Duration: int64 nanoseconds
_DURATION_NS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                "h": 3600 * 10**9}


def _duration_ns(s: str) -> int:
    """The exact nanoseconds of a duration :func:`parse_duration` read (near the limit)."""
    from fractions import Fraction

    return sum(int(Fraction(m.group(1)) * _DURATION_NS[m.group(2)])
               for m in _DURATION_PART.finditer(s))


# --- value checks: each takes (key, raw YAML value), returns the value or raises _Invalid ---

def _type_name(v: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list",
            dict: "a mapping", type(None): "empty"}.get(type(v), type(v).__name__)


def _string(key: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _Invalid(key, f"expected a string, got {_type_name(v)} ({shown(v)}); quote it")
    return v


def _cri_endpoint(key: str, v: Any) -> str:
    """A unix socket: ``""`` (the runtime's default), an absolute path, or ``unix://`` and
    one (as the kubelet's ``containerRuntimeEndpoint``)."""
    v = _string(key, v)
    path = v.strip().removeprefix("unix://")
    if v.strip() and not path.startswith("/"):
        raise _Invalid(key, f"expected \"\", an absolute path or unix:///path, got {shown(v)}")
    return v


def _path(key: str, v: Any) -> str:
    """A path that must name something: a string, not empty."""
    v = _string(key, v)
    if not v.strip():
        raise _Invalid(key, "expected a path, got an empty string")
    return v


def _socket_path(key: str, v: Any) -> str:
    """The runtime's NRI socket: an absolute path (containerd's ``[plugins."io.containerd.nri.
    v1.nri"] socket_path``, CRI-O's ``nri_listen``, both absolute; a relative one would be
    looked up from wherever the plugin happens to start)."""
    v = _path(key, v)
    if not v.startswith("/"):
        raise _Invalid(key, f"{v!r}: expected an absolute path (the runtime's NRI socket, "
                            "e.g. /var/run/nri/nri.sock)")
    return v


def _optional_string(key: str, v: Any) -> str | None:
    return None if v is None else _string(key, v)


#: What each path key names, for its messages: (what it is, an example of a good one).
_LOCATIONS = {
    "stateDirectory": ("the plugin's state directory", "/var/lib/nri-cpumgr"),
    "logFile": ("the log file", "/var/log/nri-cpumgr.log"),
}


def location_error(key: str, path: str) -> str | None:
    """What is wrong with ``path`` as ``stateDirectory`` or ``logFile`` (``key``), as the
    part of a message after the key (``"'state': expected an absolute path (...)"``); None
    when nothing is. Refused: a relative path (a DaemonSet's or a runtime's working
    directory is anyone's guess, as for ``socketPath``), and a path on a pseudo filesystem
    (proc, sysfs, devtmpfs, cgroup, ...: :func:`nri_cpumgr.mounts.pseudo_filesystem`, by
    the mount of the nearest existing ancestor in /proc/self/mountinfo), where root passes
    every permission check but the kernel keeps no files. A ``logFile`` that exists and is
    no regular file or directory (a device or pipe: ``/dev/stderr``, ``/proc/1/fd/1``) is
    a stream the log is written to, accepted as it is."""
    what, example = _LOCATIONS[key]
    if not path.startswith("/"):
        return f"{path!r}: expected an absolute path ({what}, e.g. {example})"
    if key == "logFile":
        import stat

        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return None  # a device or a pipe: written to, nothing kept there
    from nri_cpumgr.mounts import pseudo_filesystem

    where = pseudo_filesystem(path)
    if where is None:
        return None
    return (f"{path!r}: {where}: the kernel's interface, not storage (expected "
            f"{what} on the node's disk, e.g. {example})")


def _state_directory(key: str, v: Any) -> str:
    """``stateDirectory``: a path (:func:`_path`) that :func:`location_error` accepts."""
    v = _path(key, v)
    why = location_error(key, v)
    if why is not None:
        raise _Invalid(key, why)
    return v


def _kubelet_state_directory(key: str, v: Any) -> str:
    """``kubeletStateDirectory``: ``""`` (never adopt) or an absolute path, as the other path
    keys (a relative one would be looked up from wherever the plugin starts)."""
    v = _string(key, v)
    if v and not v.startswith("/"):
        raise _Invalid(key, f"{v!r}: expected an absolute path (the kubelet's state "
                            "directory, e.g. /var/lib/kubelet) or \"\" (never adopt)")
    return v


def _log_file(key: str, v: Any) -> str | None:
    """``logFile``: empty (``null``, ``""``: no log file) or a path that
    :func:`location_error` accepts."""
    v = _optional_string(key, v)
    if v:
        why = location_error(key, v)
        if why is not None:
            raise _Invalid(key, why)
    return v


def _boolean(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in _TRUE | _FALSE:
        return v.lower() in _TRUE
    raise _Invalid(key, f"expected true or false, got {shown(v)}")


def _one_of(*allowed: str) -> Callable[[str, Any], str]:
    def check(key: str, v: Any) -> str:
        if v not in allowed:
            hint = did_you_mean(v, allowed) if isinstance(v, str) else ""
            raise _Invalid(
                key, f"{shown(v)} is not one of {', '.join(repr(a) for a in allowed)}{hint}")
        return v
    check.allowed = allowed  # type: ignore[attr-defined]  # read by config.reference
    return check


def _mapping(key: str, v: Any) -> dict[Any, Any]:
    if not isinstance(v, dict):
        raise _Invalid(key, f"expected a mapping, got {_type_name(v)} ({shown(v)})")
    for k in v:
        if not isinstance(k, str):
            raise _Invalid(f"{key}.{k}", "expected a string key")
    return v


def _plugin_name(key: str, v: Any) -> str:
    v = _string(key, v)
    if not v or not _PLUGIN_NAME_CHARS.issuperset(v):  # [A-Za-z0-9_.-]+
        raise _Invalid(key, f"{v!r}: expected letters, digits, '_', '.' or '-' (at least one)")
    return v


def _plugin_index(key: str, v: Any) -> str:
    v = _string(key, v)
    if not (len(v) == 2 and v.isascii() and v.isdigit()):  # [0-9]{2}
        raise _Invalid(key, f"{v!r}: expected two digits (00-99)")
    return v


def _metrics_address(key: str, v: Any) -> str:
    v = _string(key, v)
    if not v:
        return v
    m = re.fullmatch(_ADDRESS, v)
    if m is None:
        raise _Invalid(key, f"{v!r}: expected host:port (e.g. ':9109', '127.0.0.1:9109' or "
                            "'[::1]:9109'), or '' for no endpoint")
    if int(m.group(1)) > 65535:
        raise _Invalid(key, f"port of {v!r} out of range (0-65535)")
    return v


def _cpu_list(key: str, v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)  # `reservedSystemCPUs: 0` is the CPU list "0"
    v = _string(key, v)
    if v != "".join(v.split()):
        # (the kubelet's cpuset.Parse takes each element with strconv.Atoi: no blanks)
        raise _Invalid(key, f"{v!r}: blanks in a CPU list (write it as the kubelet reads it, "
                            f"e.g. {''.join(v.split())!r})")
    try:
        CPUSet.parse(v)
    except CPUSetError as e:
        raise _Invalid(key, str(e)) from None
    return v


def _options(key: str, v: Any) -> dict[str, str]:
    # YAML turns `full-pcpus-only: true` into a bool; the kubelet takes strings.
    out = {}
    for k, x in _mapping(key, v).items():
        if isinstance(x, dict | list) or x is None:
            raise _Invalid(f"{key}.{k}", f"expected a string, got {_type_name(x)}")
        out[k] = str(x).lower() if isinstance(x, bool) else str(x)
    return out


def _quantities(milli: bool, trim: bool = False) -> Callable[[str, Any], dict[str, str]]:
    """A mapping of resource names to quantities. ``trim``: the kubelet decodes them as a
    v1.ResourceList (Quantity.UnmarshalJSON: blanks around one are dropped, as
    ``reservedMemory`` limits); otherwise as its map[string]string of
    ``kubeReserved``/``systemReserved``, each read by resource.ParseQuantity (no blanks)."""
    def check(key: str, v: Any) -> dict[str, str]:
        out = {}
        for k, x in _mapping(key, v).items():
            if isinstance(x, dict | list):  # (never str()'d: its text may be huge)
                raise _Invalid(key, f"{k}: expected a quantity, got {_type_name(x)} "
                                    f"({shown(x)})")
            s = str(x)
            try:
                parse_quantity(s.strip() if trim else s, milli=milli)
            except ValueError as e:
                raise _Invalid(key, f"{k}: {e}") from None
            out[k] = s
        return out
    return check


#: the resources ``kubeReserved``/``systemReserved`` may name (the kubelet's
#: parseResourceList, cmd/kubelet/app/server.go, v1.37.2: any other is "cannot reserve")
RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")


def _reserved(key: str, v: Any) -> dict[str, str]:
    """``kubeReserved``/``systemReserved``: :func:`_quantities` (milli) of the resources the
    kubelet reserves (:data:`RESERVABLE`), none negative."""
    for k in _mapping(key, v):
        if k not in RESERVABLE:
            raise _Invalid(key, f"{k}: cannot reserve {k!r} (the kubelet reserves "
                                f"{', '.join(RESERVABLE)}){did_you_mean(k, RESERVABLE)}")
    out = _quantities(milli=True)(key, v)
    for k, s in out.items():
        if parse_quantity(s, milli=True) < 0:
            raise _Invalid(key, f"{k}: {s!r} is negative (a reservation cannot be)")
    return out


def _strict_boolean(key: str, v: Any) -> bool:
    """A YAML boolean only: the kubelet decodes ``featureGates`` as map[string]bool, and a
    string (``"true"``) or a number there is a decoding error."""
    if isinstance(v, bool):
        return v
    kind = "a string" if isinstance(v, str) else _type_name(v)
    raise _Invalid(key, f"expected true or false, got {kind} ({shown(v)}); unquote it")


def _feature_gates(key: str, v: Any) -> dict[str, bool]:
    gates = {k: _strict_boolean(f"{key}.{k}", x) for k, x in _mapping(key, v).items()}
    unknown = sorted(set(gates) - KNOWN_FEATURE_GATES)
    if unknown:
        raise _Invalid(
            key, f"unknown feature gate(s) {unknown}; known: {sorted(KNOWN_FEATURE_GATES)}"
            f"{did_you_mean(unknown[0], KNOWN_FEATURE_GATES)}")
    # the kubelet refuses a gate on whose dependency is turned off (component-base
    # featuregate: "PodLevelResourceManagers is enabled, but depends on features that are
    # disabled: [PodLevelResources]", pkg/features kube_features.go dependencies, v1.37.2)
    if gates.get("PodLevelResourceManagers") and gates.get("PodLevelResources") is False:
        raise _Invalid(key, "PodLevelResourceManagers is enabled, but depends on features "
                            "that are disabled: [PodLevelResources]")
    return gates


def _string_map(key: str, v: Any) -> dict[str, str]:
    return {k: _string(f"{key}.{k}", x) for k, x in _mapping(key, v).items()}


#: the eviction signals the kubelet knows (eviction helpers.go signalToResource, v1.37.2:
#: any other is "unsupported eviction signal")
EVICTION_SIGNALS = ("memory.available", "allocatableMemory.available", "nodefs.available",
                    "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree",
                    "containerfs.available", "containerfs.inodesFree", "pid.available")


def _eviction_hard(key: str, v: Any) -> dict[str, str]:
    """``evictionHard``: each signal one the kubelet knows, each value a percentage of 0-100%
    or a positive quantity, as its ParseThresholdConfig reads them (eviction helpers.go
    parseThresholdStatement, v1.37.2), whatever the memory manager policy."""
    out = _string_map(key, v)
    for signal, value in out.items():
        if signal not in EVICTION_SIGNALS:
            raise _Invalid(key, f"{signal}: unsupported eviction signal (known: "
                                f"{', '.join(EVICTION_SIGNALS)})"
                                f"{did_you_mean(signal, EVICTION_SIGNALS)}")
        try:
            eviction_threshold_check(value)
        except ValueError as e:
            raise _Invalid(key, f"{signal}: {e}") from None
    return out


def _reserved_memory(key: str, v: Any) -> list[ReservedMemory]:
    """``reservedMemory``: a list of ``{numaNode, limits}``, whatever the
    ``memoryManagerPolicy``, with the kubelet's own checks of it (validateReservedMemory-
    Configuration, pkg/kubelet/apis/config/validation, v1.37.2): each limit ``memory`` or
    ``hugepages-<size>``, none zero, and one entry per NUMA node and resource."""
    if not isinstance(v, list):
        raise _Invalid(key, f"expected a list, got {_type_name(v)} ({shown(v)})")
    out = []
    seen: set[tuple[int, str]] = set()
    for i, entry in enumerate(v):
        where = f"{key}.{i}"
        entry = _mapping(where, entry)
        unknown = sorted(set(entry) - {"numaNode", "limits"})
        if unknown:
            raise _Invalid(f"{where}.{unknown[0]}",
                           "unknown key" + did_you_mean(str(unknown[0]), ("numaNode", "limits")))
        for required in ("numaNode", "limits"):
            if required not in entry:
                raise _Invalid(f"{where}.{required}", "required")
        node = entry["numaNode"]
        if isinstance(node, str) and re.fullmatch(r"[0-9]+", node):
            node = int(node)
        if not isinstance(node, int) or isinstance(node, bool):
            raise _Invalid(f"{where}.numaNode", f"expected a NUMA node number, got {shown(node)}")
        if node < 0:
            raise _Invalid(f"{where}.numaNode", f"{node} is negative")
        limits = _quantities(milli=False, trim=True)(f"{where}.limits", entry["limits"])
        for name, q in limits.items():
            at = f"{where}.limits.{name}"
            if name != "memory" and not name.startswith("hugepages-"):
                raise _Invalid(at, f"the limit type {name!r} for NUMA node {node} is not "
                                   "supported (the kubelet takes only memory and "
                                   "hugepages-<size>)")
            if parse_quantity(q.strip()) == 0:
                raise _Invalid(at, f"reserved memory may not be zero for NUMA node {node}, "
                                   "as the kubelet says (leave it out)")
            if (node, name) in seen:
                raise _Invalid(at, f"a second value for NUMA node {node} and {name!r} (the "
                                   "kubelet refuses a duplicate: one per node and resource)")
            seen.add((node, name))
        out.append(ReservedMemory(node, limits))
    return out


def _duration(key: str, v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v == 0:
        v = "0"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise _Invalid(key, f"a duration needs a unit: {v!r} (for example \"{v}s\" or "
                            f"\"{v}ms\")")
    v = _string(key, v)
    try:
        parse_duration(v)
    except ValueError as e:
        raise _Invalid(key, str(e)) from None
    return v


def _positive_int(key: str, v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise _Invalid(key, f"expected a whole number >= 1, got {shown(v)}")
    return v


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "pluginName": _plugin_name,
    "pluginIndex": _plugin_index,
    "socketPath": _socket_path,
    "stateDirectory": _state_directory,
    "logFile": _log_file,
    "metricsAddress": _metrics_address,
    "cpuManagerPolicy": _one_of("none", "static"),
    "cpuManagerPolicyOptions": _options,
    "reservedSystemCPUs": _cpu_list,
    "kubeReserved": _reserved,
    "systemReserved": _reserved,
    "featureGates": _feature_gates,
    "topologyManagerPolicy": _one_of("none", "best-effort", "restricted", "single-numa-node"),
    "topologyManagerScope": _one_of("container", "pod"),
    "topologyManagerPolicyOptions": _options,
    "memoryManagerPolicy": _one_of("None", "Static"),
    "reservedMemory": _reserved_memory,
    "evictionHard": _eviction_hard,
    "alignMemoryWithExclusiveCPUs": _boolean,
    "sharedPoolShrinkDelay": _duration,
    "sharedPoolGrowDelay": _duration,
    "sharedPoolUpdateBatchSize": _positive_int,
    "kubeletStateDirectory": _kubelet_state_directory,
    "explainDecisions": _boolean,
    "sharedPoolUpdateMode": _one_of("auto", "async", "cri", "reply"),
    "containerRuntimeEndpoint": _cri_endpoint,
    "podSpecSource": _one_of("none", "apiServer"),
    "apiServerURL": _string,
    "nodeName": _string,
    "podSpecWait": _duration,
}


def _yaml_error(e: Exception, source: str) -> str:
    """``<source>:<line>:<column>: not YAML: <problem> (<context>)``, 1-based positions."""
    mark = getattr(e, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    return f"invalid config {where}: not YAML: {problem}" + (f" ({context})" if context else "")


# The flat documents :func:`_flat_yaml` reads without PyYAML: ``key: scalar`` lines at
# column 0, comments and blank lines. A scalar is a quoted string without escapes, a decimal
# int without sign or leading zero, a duration ("500ms", "1m30s": a string, as PyYAML reads
# it), or a plain word that starts with a letter, '/' or '_'.
_FLAT_LINE = re.compile(
    r"""(?:[a-z][A-Za-z0-9]*):(?: +(?:"[^"\\]*"|'[^']*'|0|[1-9][0-9]*"""
    r"|(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s|m|h))+"
    r"|[A-Za-z/_](?:[A-Za-z0-9_./:-]*[A-Za-z0-9_./-])?))? *(?: #.*)?")
_FLAT_VALUE = re.compile(r"""([a-z][A-Za-z0-9]*): *("[^"]*"|'[^']*'|[^ ]*)""")
# YAML 1.1 plain scalars PyYAML's SafeLoader resolves to bool or None (resolver.py): exact
# spellings only ("tRue" is a string)
_YAML_WORDS: dict[str, Any] = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("null", "Null", "NULL"), None),
}


def _flat_yaml(text: str) -> dict[str, Any] | None:
    """``text`` as PyYAML's SafeLoader reads it when it is a flat mapping of plain keys to
    scalars (the usual config: ``cpuManagerPolicy: static``, ``reservedSystemCPUs: "0"``,
    comments, blank lines); None for anything else (nesting, lists, flow style, anchors,
    escapes, tabs, duplicate keys, a number that is not a plain decimal, a key PyYAML would
    not read as a string), which PyYAML then reads. Its import (~10-15 ms) is the largest
    part of reading a config before the plugin registers (issue 34)."""
    # tabs, CR, control and non-ASCII characters: anything but "\n" and 0x20-0x7e
    if not text.isascii() or not text.replace("\n", "").isprintable():
        return None
    doc: dict[str, Any] = {}
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if not _FLAT_LINE.fullmatch(line):
            return None
        m = _FLAT_VALUE.match(line)
        assert m is not None  # (the line matched _FLAT_LINE)
        key, raw = m.group(1), m.group(2)
        if key in doc or key in _YAML_WORDS:
            return None
        if raw[:1] in ("'", '"'):
            value: Any = raw[1:-1]
        elif raw.isdigit():
            value = int(raw)
        elif raw == "" or raw.startswith("#"):
            value = None
        else:
            value = _YAML_WORDS.get(raw, raw)
        doc[key] = value
    return doc


def parse_config(text: str, source: str = "<config>") -> Config:
    """Parse YAML text into a :class:`Config`. Raises :class:`ConfigError` (one line, naming
    the key, or the line:column of a YAML error) for YAML errors, unknown keys and invalid
    values. A flat document is read without PyYAML (:func:`_flat_yaml`, same result)."""
    if not text.strip():
        return Config.model_validate({})
    flat = _flat_yaml(text)
    if flat is not None:
        try:
            return Config.model_validate(flat)
        except ConfigError as e:
            raise with_source(e, source) from None
    import yaml

    try:
        doc = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(e, source)) from None
    except RecursionError:
        raise ConfigError(f"invalid config {source}: YAML nested too deeply") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping of keys")
    try:
        return Config.model_validate(doc)
    except ConfigError as e:
        raise with_source(e, source) from None


def load_config(path: str | Path | None) -> Config:
    """Load the config file (``None``: all defaults). Raises :class:`ConfigError`."""
    if path is None:
        return Config()
    p = normal(path)  # (pathlib's spelling of it, in the messages)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config {p}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"invalid config {p}: not UTF-8 text") from None
    return parse_config(text, p)


_FLOAT = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


def eviction_threshold_check(value: str) -> None:
    """Whether an ``evictionHard`` value is one the kubelet takes: a percentage of 0-100% or
    a positive quantity (eviction helpers.go parseThresholdStatement, v1.37.2). Raises
    ValueError (``invalid quantity 'abc'``, ``'-100Mi' must be positive``)."""
    if value.endswith("%"):
        if value not in ("0%", "100%"):
            _eviction_share(value)
        return
    if parse_quantity(value) <= 0:
        raise ValueError(f"{value!r} must be positive (a quantity above zero, or a "
                         "percentage)")


def _eviction_share(value: str) -> float:
    """The share (0-1) of a percentage ``value`` ("10%"), as the kubelet's float32. Raises
    ValueError."""
    import re
    import struct

    number = value[:-1]
    if not re.fullmatch(_FLOAT, number):
        raise ValueError(f"{value!r}: not a percentage")

    def f32(x: float) -> float:
        return struct.unpack("f", struct.pack("f", x))[0]  # type: ignore[no-any-return]

    try:
        share = f32(f32(float(number)) / 100)
    except OverflowError:
        share = float("inf")
    if share < 0:
        raise ValueError(f"{value!r}: must be >= 0%")
    if share > 1:
        raise ValueError(f"{value!r}: must be <= 100%")
    return share


def eviction_threshold_bytes(value: str, capacity: int) -> int:
    """The bytes an ``evictionHard`` ``memory.available`` value reserves on a node with
    ``capacity`` bytes of memory: a quantity as it is; a percentage as the kubelet takes
    it, parsed to a float32, divided by 100 in float32, times the capacity in float64,
    truncated ("0%" and "100%" set no threshold: 0). Raises ValueError for a malformed
    value or a percentage outside 0-100% (kubelet eviction helpers.go
    parseThresholdStatement, parsePercentage; eviction api GetThresholdQuantity; cm
    helpers.go hardEvictionReservation; v1.37.2)."""
    if not value.endswith("%"):
        return parse_quantity(value)
    if value in ("0%", "100%"):
        return 0
    try:
        share = _eviction_share(value)
    except ValueError as e:
        raise ValueError(f"evictionHard memory.available {e}") from None
    return int(float(capacity) * share)
