"""The configuration reference, generated from the config model (``nri_cpumgr.config.model``).

Each key's type and default come from the :class:`~nri_cpumgr.config.model.Config` dataclass,
the accepted values of a closed choice from its check, what is refused from the check the key
uses; this module adds only what the model cannot say: what the key does (``description``) and
the KubeletConfiguration field it mirrors (``kubelet``, None for the plugin's own keys). The
docs site renders :func:`render_markdown` into ``docs/reference/configuration.md`` at build
time (``docs/hooks/config_reference.py``); ``tests/unit/test_config_reference.py`` fails when
a key of the model has no entry here, or an entry no key.

KubeletConfiguration field names: k8s.io/kubelet ``config/v1beta1/types.go``, v0.37.2.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from nri_cpumgr.config import model
from nri_cpumgr.config.model import KNOWN_FEATURE_GATES, Config


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """What the model does not hold about one key: ``description`` (Markdown, one paragraph
    or more), ``kubelet`` (the KubeletConfiguration field of the same meaning, or None),
    ``refused`` (refusals beyond the value check's: checks against the machine, the
    managers' own checks; Markdown, or "")."""

    description: str
    kubelet: str | None = None
    refused: str = ""


_DURATION_NOTE = ("A duration as the kubelet writes one (Go's `time.ParseDuration`: `500ms`, "
                  "`1s`, `1m30s`; `0`).")

#: Every key of :class:`Config`, in the model's order.
KEYS: dict[str, KeyDoc] = {
    "pluginName": KeyDoc(
        "The NRI plugin name the plugin registers under; with `pluginIndex` it makes the "
        "plugin's id (`90-cpumgr`). Launched by the runtime, the name and index the runtime "
        "gives (`NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`) are used."),
    "pluginIndex": KeyDoc(
        "Two digits that order NRI plugins (`\"00\"`-`\"99\"`): the runtime calls plugins in "
        "index order and a later plugin's adjustment of the same field wins or conflicts. "
        "Quote it: YAML reads `90` as a number."),
    "socketPath": KeyDoc(
        "The runtime's NRI socket the plugin dials, an absolute path (an external plugin; "
        "`--socket` overrides it). The runtime's own setting: containerd `socket_path`, "
        "CRI-O `nri_listen`."),
    "stateDirectory": KeyDoc(
        "Where the plugin keeps its checkpoints (`cpu_manager_state`, `memory_manager_state`, "
        "`explanations`) and, launched by the runtime, its log: an absolute path on the "
        "node's storage (not `/proc`, `/sys`, `/dev` or a cgroup tree). Start-up checks that "
        "it is writable; nothing is written before a runtime has configured the plugin. "
        "`--state-dir` overrides it (and is refused as the key is).",
        refused="a path that exists and is not a directory, or cannot be written (at start, "
                "one line naming the key)"),
    "logFile": KeyDoc(
        "The log file, an absolute path; a device or a pipe is written to as it is "
        "(`/proc/1/fd/1`: the container's stdout). Not set: stderr for `nri-cpumgr run`; "
        "launched by the runtime (which gives it no stderr), "
        "`<stateDirectory>/nri-cpumgr.log`.",
        refused="a file that cannot be opened for appending (at start: one line naming the "
                "config file, exit status 2)"),
    "metricsAddress": KeyDoc(
        "The HTTP listen address of `/metrics` (Prometheus), `/healthz` and `/readyz`: "
        "`host:port` (an IPv6 host in brackets, `[::1]:9109`), `:port` for every interface, "
        "`\"\"` for none. The DaemonSet's probes use "
        "`:9109`."),
    "cpuManagerPolicy": KeyDoc(
        "The CPU manager policy: `none` leaves every container on the runtime's cpuset, as "
        "the kubelet's default; `static` gives Guaranteed containers with an integer CPU "
        "request exclusive CPUs and everything else the shared pool.",
        kubelet="cpuManagerPolicy",
        refused="at start, a checkpoint written by another policy (as the kubelet: remove "
                "`cpu_manager_state` after draining the node)"),
    "cpuManagerPolicyOptions": KeyDoc(
        "Static policy options, as strings (`full-pcpus-only: \"true\"`): "
        "`full-pcpus-only`, `distribute-cpus-across-numa`, `align-by-socket`, "
        "`distribute-cpus-across-cores`, `strict-cpu-reservation`, "
        "`prefer-align-cpus-by-uncorecache`. Alpha options need the "
        "`CPUManagerPolicyAlphaOptions` gate, beta ones `CPUManagerPolicyBetaOptions` (on by "
        "default), as in the kubelet.",
        kubelet="cpuManagerPolicyOptions",
        refused="an unknown option (the closest name is suggested), one whose gate is off, "
                "options that exclude each other, a value that is not a boolean where one is "
                "expected; at start, `align-by-socket` with `single-numa-node` or on a machine "
                "with more sockets than NUMA nodes"),
    "reservedSystemCPUs": KeyDoc(
        "The CPUs kept for the system, as a CPU list (`\"0\"`, `\"0-1,8\"`). They stay in the "
        "shared pool (unless `strict-cpu-reservation`) and are never given exclusively. "
        "When empty, the count comes from `kubeReserved` + `systemReserved` cpu; when "
        "given, it overrides their cpu, as the kubelet's `--reserved-cpus` does (a WARNING "
        "when they count other CPUs).",
        kubelet="reservedSystemCPUs",
        refused="CPUs not on this machine; blanks in the list (`\"0, 1\"`: the kubelet's "
                "cpuset.Parse refuses them); every CPU reserved under "
                "`strict-cpu-reservation` (otherwise a WARNING)"),
    "kubeReserved": KeyDoc(
        "Resources reserved for Kubernetes system daemons (`cpu`, `memory`, "
        "`ephemeral-storage`, `pid`: those the kubelet reserves). Their `cpu` plus "
        "`systemReserved`'s, rounded up, is the number "
        "of reserved CPUs when `reservedSystemCPUs` is empty; `memory` counts in the Memory "
        "Manager's reservation. Each value is read as the kubelet reads it "
        "(resource.ParseQuantity): blanks around it are refused (`\" 2 \"`), as they are "
        "not in `reservedMemory`'s limits, which the kubelet decodes as a resource list.",
        kubelet="kubeReserved"),
    "systemReserved": KeyDoc(
        "Resources reserved for the operating system; counted as `kubeReserved` is.",
        kubelet="systemReserved"),
    "featureGates": KeyDoc(
        "The kubelet feature gates this plugin reads (any other name is refused): "
        + ", ".join(f"`{g}`" for g in sorted(KNOWN_FEATURE_GATES)) + ". Defaults as the "
        "kubelet's: the beta-options gates on, the alpha-options gates, the pod-level "
        "resource managers and the exclusive in-place resize gates off.",
        kubelet="featureGates"),
    "topologyManagerPolicy": KeyDoc(
        "The Topology Manager policy: `none` merges no hints; `best-effort`, `restricted` and "
        "`single-numa-node` admit every container the kubelet's way (CPU, memory and device "
        "hints merged; `restricted` and `single-numa-node` refuse with "
        "`TopologyAffinityError`).",
        kubelet="topologyManagerPolicy",
        refused="more NUMA nodes than `max-allowable-numa-nodes` (default 8) with a policy "
                "other than `none`"),
    "topologyManagerScope": KeyDoc(
        "`container`: each container is aligned on its own; `pod`: the hints of the pod's "
        "containers are merged (the runtime shows the containers one at a time: see "
        "[where we differ](../concepts/differences.md)).",
        kubelet="topologyManagerScope"),
    "topologyManagerPolicyOptions": KeyDoc(
        "Topology Manager options: `prefer-closest-numa-nodes` (NUMA distances from sysfs) "
        "and `max-allowable-numa-nodes` (default 8).",
        kubelet="topologyManagerPolicyOptions",
        refused="an unknown option, one whose gate is off, a `max-allowable-numa-nodes` "
                "below 8 or not a number, with a policy other than `none` (with `none` the "
                "options are not read, as the kubelet's NewManager does, v1.37.2)"),
    "memoryManagerPolicy": KeyDoc(
        "`None` leaves `cpuset.mems` alone; `Static` gives Guaranteed containers memory and "
        "hugepages from the fewest NUMA nodes and sets `cpuset.mems` (per-NUMA accounting "
        "with `reservedMemory`).",
        kubelet="memoryManagerPolicy",
        refused="`Static` without `reservedMemory` matching the node's reservation; at "
                "start, a checkpoint written by another policy"),
    "reservedMemory": KeyDoc(
        "Memory and hugepages reserved per NUMA node, "
        "`[{numaNode: 0, limits: {memory: 100Mi}}]`, for `memoryManagerPolicy: Static`. Per "
        "resource the sum must equal `kubeReserved` + `systemReserved` + the `evictionHard` "
        "`memory.available` threshold, as in the kubelet.",
        kubelet="reservedMemory",
        refused="a NUMA node the machine does not have; sums that differ from the "
                "reservation; whatever the policy, as the kubelet's validation: a limit other "
                "than `memory` and `hugepages-<size>`, a zero limit, a second entry for one "
                "NUMA node and resource"),
    "evictionHard": KeyDoc(
        "Validated as the kubelet does (its signals, percentages of 0-100%, positive "
        "quantities), whatever the `memoryManagerPolicy`. Only `memory.available` is read: "
        "its threshold counts in the memory the node "
        "reserves (for `reservedMemory`). A percentage is that share of the node's memory "
        "(the sum of its NUMA nodes'), computed as the kubelet does (float32); `0%` and "
        "`100%` set no threshold.",
        kubelet="evictionHard"),
    "alignMemoryWithExclusiveCPUs": KeyDoc(
        "With `memoryManagerPolicy: None`, pin an exclusive container's `cpuset.mems` to the "
        "NUMA nodes of its CPUs (the kubelet leaves mems alone)."),
    "sharedPoolShrinkDelay": KeyDoc(
        "The longest wait before shared containers leave CPUs that became exclusive (after "
        "the new container started and nothing changed for 250 ms; at most one pass per "
        "delay during a burst). " + _DURATION_NOTE + " See "
        "[the shared pool on a busy node](../concepts/shared-pool.md)."),
    "sharedPoolGrowDelay": KeyDoc(
        "The wait before released CPUs go back to the shared containers; an allocation that "
        "takes the same CPUs within it costs no update. The default is the kubelet's "
        "`cpuManagerReconcilePeriod`. " + _DURATION_NOTE),
    "sharedPoolUpdateBatchSize": KeyDoc(
        "Container updates per UpdateContainers call of a shared-pool pass (10 ms between "
        "calls, so another container operation waits at most one batch)."),
    "kubeletStateDirectory": KeyDoc(
        "With no checkpoint of its own, the plugin adopts the kubelet's `cpu_manager_state` "
        "and `memory_manager_state` found here (an absolute path); `\"\"` never. See "
        "[adopting a node](../operations/adopting.md)."),
    "explainDecisions": KeyDoc(
        "Record why each container got its CPUs (`nri-cpumgr explain`); also on with `-v`. "
        "Costs about 0.13 ms per Guaranteed CreateContainer."),
    "sharedPoolUpdateMode": KeyDoc(
        "`auto` (default): decided at Configure from the runtime's name and version: `async` "
        "on containerd 2.4.0 and later (NRI v0.12.1+, without the lock-order inversion), "
        "`cri` on every other runtime when its CRI socket (`containerRuntimeEndpoint`) "
        "answers a connect, `reply` when it does not (logged as a warning, with why); "
        "`cri`: the plugin moves shared containers with CRI `UpdateContainerResources` calls "
        "carrying only the cpuset, from a worker thread, as the kubelet's CPU manager does "
        "(the lock order of every CRI call: cannot hang the runtime); "
        "`async`: with its own NRI UpdateContainers calls after the replies (not honoured on "
        "a runtime known to have the inversion: `cri` or `reply` instead, logged as an "
        "error); `reply`: only in replies, never a call of its own (slower Guaranteed "
        "creations; released CPUs come back only with the next container operation of the "
        "node). See [the shared pool on a busy node](../concepts/shared-pool.md) and "
        "[the NRI lock order](../concepts/nri-lock-order.md)."),
    "containerRuntimeEndpoint": KeyDoc(
        "The runtime's CRI socket for `sharedPoolUpdateMode` `cri` (and `auto`), as seen in "
        "the plugin's container: a path or `unix:///path`; `\"\"`: the runtime's default by "
        "the name it sends at Configure (containerd `/run/containerd/containerd.sock`, CRI-O "
        "`/var/run/crio/crio.sock`). The deploy mounts it; access to it is access to every "
        "container of the node, as the NRI socket already is.",
        kubelet="containerRuntimeEndpoint",
        refused="a relative path or another scheme (`tcp://`, `npipe://`)"),
    "podSpecSource": KeyDoc(
        "Where the plugin learns the pod spec facts NRI cannot show (whether `.spec.resources` "
        "is set, each container's own requests and limits, sidecars): `none` decides from "
        "NRI alone; `apiServer` lists and watches this node's pods (`spec.nodeName`) with the "
        "service-account token, off the runtime's critical path. See "
        "[the pod spec source](../concepts/pod-spec-facts.md)."),
    "apiServerURL": KeyDoc(
        "The API server for `podSpecSource: apiServer`; `\"\"`: in-cluster "
        "(`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`, the mounted CA and token)."),
    "nodeName": KeyDoc(
        "This node's name for the pod watch's field selector; `\"\"`: `$NODE_NAME` (the "
        "DaemonSet sets it from `spec.nodeName`)."),
    "podSpecWait": KeyDoc(
        "The longest a Guaranteed container's creation waits for a pod the connected watch "
        "has not shown yet; with the watch disconnected there is no wait and the container is "
        "decided from NRI alone. " + _DURATION_NOTE),
}

# What each value check refuses, by the check's qualified name in nri_cpumgr.config.model.
_REFUSALS: dict[str, str] = {
    "_plugin_name": "not a string; empty, or characters other than letters, digits, `_`, `.`, "
                    "`-`",
    "_plugin_index": "anything but two digits as a string (an unquoted `90` is a number)",
    "_path": "not a string; an empty string",
    "_optional_string": "not a string",
    "_string": "not a string",
    "_metrics_address": "not `host:port` or `:port` (or `\"\"`; an IPv6 host in brackets: "
                        "`[::1]:9109`); a port above 65535",
    "_one_of.<locals>.check": "any other value (the closest accepted one is suggested)",
    "_options": "not a mapping; a value that is a list, a mapping or empty",
    "_cpu_list": "not a CPU list (`0-3,8`)",
    "_quantities.<locals>.check": "not a mapping; a value that is not a Kubernetes quantity "
                                  "(resource.Quantity's grammar: `2`, `1500m`, `1Gi`, `1e3`; "
                                  "not an exponent with a unit suffix, `1e3Mi`)",
    "_socket_path": "not a string; an empty string; a relative path (the runtime's socket is "
                    "absolute)",
    "_state_directory": "not a string; an empty string; a relative path (the plugin's "
                        "working directory is anyone's guess); a path on a pseudo filesystem "
                        "(proc, sysfs, devtmpfs, cgroup, cgroup2, ..., or a mount inside one: "
                        "the mount of the nearest existing ancestor in /proc/self/mountinfo)",
    "_log_file": "not a string; a relative path; a path on a pseudo filesystem (proc, sysfs, "
                 "devtmpfs, cgroup, cgroup2, ..., or a mount inside one), unless it is a "
                 "device or a pipe (`/dev/stderr`, `/proc/1/fd/1`); `null` or `\"\"`: no "
                 "log file",
    "_feature_gates": "not a mapping; a value that is not a boolean (a quoted `\"true\"` "
                      "too: the kubelet decodes booleans); a gate this plugin does not read",
    "_reserved": "not a mapping; a resource the kubelet does not reserve (it reserves `cpu`, "
                 "`memory`, `ephemeral-storage`, `pid`); a value that is not a Kubernetes "
                 "quantity (`2`, `1500m`, `1Gi`, `1e3`; not `1e3Mi`) or is negative",
    "_eviction_hard": "not a mapping of strings; a signal the kubelet does not know "
                      "(`memory.available`, `nodefs.available`, ...); a value that is not a "
                      "percentage of 0-100% or a positive Kubernetes quantity "
                      "(`abc`, `1e3Mi`, `-100Mi`, `0`); checked whatever the "
                      "`memoryManagerPolicy`",
    "_kubelet_state_directory": "not a string; a relative path (`\"\"`: never adopt)",
    "_string_map": "not a mapping of strings",
    "_reserved_memory": "not a list; an entry without `numaNode` or `limits`, with another "
                        "key, a `numaNode` that is negative or not a number, a limit that is "
                        "not a quantity",
    "_boolean": "anything but a boolean (`true`/`false`; `yes`/`no`, `on`/`off`, `1`/`0` are "
                "taken)",
    "_duration": "a number without a unit (`1` for `1s`); anything Go's duration parser "
                 "refuses (a duration above 2562047h47m16.854775807s, Go's int64 "
                 "nanoseconds, too)",
    "_positive_int": "anything but a whole number of at least 1",
    "_cri_endpoint": "not a string; a relative path, another scheme than `unix://`",
}

_TYPES = {
    "str": "string",
    "str | None": "string (optional)",
    "int": "integer",
    "bool": "boolean",
    "dict[str, str]": "mapping of string to string",
    "dict[str, bool]": "mapping of string to boolean",
    "list[ReservedMemory]": "list of `{numaNode: integer, limits: {resource: quantity}}`",
}


def fields(config: type = Config) -> list[dataclasses.Field[Any]]:
    """The keys of the model: ``config``'s dataclass fields (:class:`Config`), in order."""
    return list(dataclasses.fields(config))


def missing_entries(config: type = Config) -> list[str]:
    """What keeps the page from covering the model, one line each (empty when complete): a
    key without its :data:`KEYS` entry, a key without a value check, an entry or a check of
    no key, a check without a refusal text, a type without a name."""
    names = [f.name for f in fields(config)]
    out = [f"{n}: no entry in nri_cpumgr.config.reference.KEYS" for n in names if n not in KEYS]
    out += [f"{n}: in KEYS but not a key of the model" for n in KEYS if n not in names]
    table = checks()
    out += [f"{n}: no value check in the model" for n in names if n not in table]
    out += [f"{n}: a value check but not a key of the model" for n in table if n not in names]
    out += [f"{n}: no refusal text for its check {table[n].__qualname__}" for n in names
            if n in table and _check_name(table[n]) not in _REFUSALS]
    out += [f"{f.name}: no name for its type {f.type}" for f in fields(config)
            if str(f.type) not in _TYPES]
    return out


def _check_name(check: Callable[[str, Any], Any]) -> str:
    return check.__qualname__


def checks() -> dict[str, Callable[[str, Any], Any]]:
    """The value check of every key (``nri_cpumgr.config.model``'s table)."""
    return dict(model._CHECKS)


# types the value check says more precisely than the field's Python type
_CHECK_TYPES = {
    "_duration": "duration (string: `500ms`, `1s`, `1m30s`)",
    "_cpu_list": "CPU list (string: `\"0-1,8\"`)",
    "_quantities.<locals>.check": "mapping of resource name to quantity (`cpu: 500m`, "
                                  "`memory: 1Gi`)",
    "_metrics_address": "listen address (string: `host:port`)",
    "_reserved": "mapping of resource name to quantity (`cpu: 500m`, `memory: 1Gi`)",
}


def type_name(f: dataclasses.Field[Any]) -> str:
    """The key's type as the page says it; KeyError for a type this module does not know."""
    check = checks().get(f.name)
    if check is not None and _check_name(check) in _CHECK_TYPES:
        return _CHECK_TYPES[_check_name(check)]
    return _TYPES[str(f.type)]


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _yaml(v: Any) -> str:
    if v is None:
        return "not set"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, str):
        return f"`\"{v}\"`" if v == "" or v[0].isdigit() else f"`{v}`"
    if isinstance(v, int):
        return f"`{v}`"
    return f"`{json.dumps(v, separators=(', ', ': '))}`"


def refusal_of(key: str) -> str:
    """What the key's value check refuses (KeyError for a check without a text)."""
    return _REFUSALS[_check_name(checks()[key])]


def allowed_of(key: str) -> tuple[str, ...] | None:
    """The accepted values of a closed choice (``cpuManagerPolicy``: none, static), else
    None."""
    return getattr(checks()[key], "allowed", None)


def render_markdown() -> str:
    """The reference as Markdown: one ``### `key``` section per key of the model, with its
    type, default, accepted values, the KubeletConfiguration field it mirrors, what is
    refused, and the description. Raises KeyError naming what is missing
    (:func:`missing_entries`) when a key lacks its entry, its check a refusal text or its type
    a name: the docs build fails."""
    missing = missing_entries()
    if missing:
        raise KeyError("configuration reference incomplete: " + "; ".join(missing))
    out = ["| key | type | default | KubeletConfiguration |", "|---|---|---|---|"]
    sections = []
    for f in fields():
        doc = KEYS[f.name]
        mirror = f"`{doc.kubelet}`" if doc.kubelet else "the plugin's own"
        default = _yaml(default_of(f))
        out.append(f"| [`{f.name}`](#{f.name.lower()}) | {type_name(f)} | {default} | "
                   f"{mirror} |")
        lines = [f"### `{f.name}`", "", doc.description, "",
                 f"- **type**: {type_name(f)}",
                 f"- **default**: {default}"]
        allowed = allowed_of(f.name)
        if allowed:
            lines.append("- **values**: " + ", ".join(f"`{a}`" for a in allowed))
        lines.append(f"- **KubeletConfiguration**: {mirror}")
        refused = refusal_of(f.name) + (f"; {doc.refused}" if doc.refused else "")
        lines += [f"- **refused**: {refused}", ""]
        sections.append("\n".join(lines))
    return "\n".join(out) + "\n\n" + "\n".join(sections)
