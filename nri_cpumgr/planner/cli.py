"""``nri-cpumgr plan``: read the inputs, run :class:`~nri_cpumgr.planner.plan.Planner`, print.

Exit status: 0 when the plan was made (refusals are part of a plan), 2 for bad input (config,
topology, state or manifest; one line naming the file and the problem).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nri_cpumgr.checkpoint import Checkpoint, CheckpointError, KubeletCheckpointFound

if TYPE_CHECKING:
    from nri_cpumgr.planner.manifest import PlannedPod
    from nri_cpumgr.topology import Machine

# the planner's modules are imported when `plan` runs: building the command line of
# `nri-cpumgr run` must not load them

CPU_STATE = "cpu_manager_state"
MEMORY_STATE = "memory_manager_state"


class InputError(Exception):
    """Bad input for the plan; the message names the file."""


def load_machine(sysfs_root: str | None, topology_json: str | None) -> Machine:
    """The machine of ``--topology`` (the JSON of ``nri-cpumgr topology --json``), else of
    the sysfs tree under ``sysfs_root``. Raises :class:`InputError` naming the file (a CPU
    or NUMA node given twice: the id and both places), SysfsError."""
    from nri_cpumgr.planner.plan import machine_from_json
    from nri_cpumgr.topology import TopologyError

    if topology_json:
        try:
            doc = json.loads(_read(topology_json))
            return machine_from_json(doc)
        except TopologyError as e:
            raise InputError(f"{machine_source(None, topology_json)}: {e}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{topology_json}: not the JSON of `nri-cpumgr topology --json`: "
                             f"{e}") from None
    from nri_cpumgr.sysfs import discover

    return discover(sysfs_root or "/")


def machine_source(sysfs_root: str | None, topology_json: str | None) -> str:
    """Where :func:`load_machine` reads the machine, for errors: the ``--topology`` file, else
    ``<root>/sys``."""
    if topology_json:
        return "stdin" if topology_json == "-" else topology_json
    return str(Path(sysfs_root or "/") / "sys")


def against_machine(e: Exception, config_file: str | None, machine: str) -> InputError:
    """A check of the config and state against the machine (the managers' build, as the
    plugin's start makes it: reserved CPUs not on the machine, reservedMemory on a missing
    NUMA node, a state of other CPUs) as an :class:`InputError` naming the files read:
    ``<error> (<config file>; machine: <machine>)``."""
    return InputError(f"{e} ({config_file or 'built-in defaults'}; machine: {machine})")


def load_state(path: str | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(cpu body, memory body)`` from the plugin's state directory (checkpoints verified),
    a checkpoint file, the output of ``nri-cpumgr status --json``, or the kubelet's own
    ``cpu_manager_state`` (v2 to v4, checksums verified: a node the kubelet still manages),
    given as the file or as its directory (``/var/lib/kubelet``, or the copy
    docs/operations/adopting.md makes). Raises :class:`InputError` naming the file."""
    if not path:
        return None, None
    p = Path(path)
    try:
        if p.is_dir():
            try:
                cpu = Checkpoint(p / CPU_STATE).load()
            except KubeletCheckpointFound:  # a kubelet's directory: its file, as given alone
                return load_state(str(p / CPU_STATE))
            if cpu is None:
                raise InputError(f"{p}: no {CPU_STATE} in this directory")
            return cpu, Checkpoint(p / MEMORY_STATE).load()
        doc = json.loads(_read(path))
    except CheckpointError as e:
        raise InputError(str(e)) from None
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}") from None
    except OSError as e:  # (is_dir: a parent it may not search)
        raise InputError(f"{path}: {e.strerror or e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a checkpoint or `status --json` output")
    # the kubelet's: a checksum and no data (v1-v3), or its data as a JSON string (v4,
    # kubelet 1.37); the plugin's own checkpoint keeps its data as an object
    kubelet = "checksum" in doc and (
        "data" not in doc or isinstance(doc["data"], str) or "dataChecksum" in doc)
    if "checksum" in doc and "data" in doc and not kubelet:
        try:
            return Checkpoint(p).load(), None
        except CheckpointError as e:
            raise InputError(str(e)) from None
    if kubelet:  # the kubelet's own cpu_manager_state
        from nri_cpumgr.adopt.kubelet import KubeletCheckpointError, load_cpu_state
        from nri_cpumgr.cm.podresources.manager import POD_ENTRY

        try:
            k = load_cpu_state(p)
        except KubeletCheckpointError as e:
            raise InputError(str(e)) from None
        assert k is not None
        if k.policy == "none":  # as adoption: no exclusive CPUs, the node is empty
            return None, None
        if k.policy != "static":
            raise InputError(f"kubelet checkpoint {path}: written by cpuManagerPolicy "
                             f"{k.policy!r}, which this plugin does not adopt (only static)")
        if k.version == 1:
            raise InputError(f"{path}: a v1 kubelet checkpoint (keyed by container id) "
                             "cannot be planned on")
        entries = {u: {n: str(c) for n, c in cs.items()} for u, cs in k.entries.items()
                   if u not in k.pod_entries}
        for u, bubble in k.pod_entries.items():  # a pod-level pod holds its whole bubble
            entries[u] = {POD_ENTRY: str(bubble)}
        return {"policyName": k.policy, "defaultCpuSet": str(k.default_set),
                "entries": entries}, None
    if "defaultCpuSet" not in doc:
        raise InputError(f"{path}: not a checkpoint or `status --json` output "
                         "(no defaultCpuSet)")
    why = status_shape_error(doc)
    if why is not None:  # (no checksum guards it: it may have been edited by hand)
        raise InputError(f"{path}: {why}")
    return doc, None


def status_shape_error(doc: dict[str, Any]) -> str | None:
    """What is wrong with the fields the planner reads of a ``nri-cpumgr status --json``
    document (``policyName`` a string; ``defaultCpuSet`` a CPU list; ``entries``: pod uid ->
    container name -> CPU list), as ``<field>: <why>``, or None when they fit. Other fields
    (``containers``, ``reservedCpuSet``) are not read."""
    from nri_cpumgr.cpuset import CPUSet, CPUSetError
    from nri_cpumgr.shown import shown

    def cpus(field: str, v: Any) -> str | None:
        if not isinstance(v, str):
            return f"{field}: expected a CPU list (a string), got {shown(v)}"
        try:
            CPUSet.parse(v)
        except CPUSetError as e:
            return f"{field}: {e}"
        return None

    if "policyName" in doc and not isinstance(doc["policyName"], str):
        return f"policyName: expected a string, got {shown(doc['policyName'])}"
    if (why := cpus("defaultCpuSet", doc["defaultCpuSet"])) is not None:
        return why
    entries = doc.get("entries", {})
    if not isinstance(entries, dict):
        return f"entries: expected a mapping of pod uid to containers, got {shown(entries)}"
    for uid, containers in entries.items():
        if not isinstance(containers, dict):
            return (f"entries.{uid}: expected a mapping of container name to CPUs, got "
                    f"{shown(containers)}")
        for name, v in containers.items():
            if (why := cpus(f"entries.{uid}.{name}", v)) is not None:
                return why
    return None


def _read(path: str) -> str:
    """The text of ``path`` (``-``: stdin), UTF-8 as Kubernetes' YAML and JSON are. Raises
    :class:`InputError` for a file that cannot be read or is not UTF-8 text."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise InputError(f"{'stdin' if path == '-' else path}: not UTF-8 text (byte "
                         f"{e.start}: {e.reason})") from None


def load_manifests(paths: list[str]) -> list[PlannedPod]:
    from nri_cpumgr.planner.manifest import check_pod_count, check_unique_pods, load_pods

    pods: list[PlannedPod] = []
    for path in paths:
        source = "stdin" if path == "-" else path
        pods += load_pods(_read(path), source)
        check_pod_count(len(pods), source)  # (all the files together)
    check_unique_pods(pods)  # (a pod in two files, or one file given twice)
    return pods


def cmd_scenario(path: str) -> int:
    """``plan --scenario FILE``: each scenario of FILE (one JSON document, or one per line)
    through the plugin's managers; one result JSON document per line (the kubelet oracle's
    shape, nri_cpumgr.planner.scenario)."""
    from nri_cpumgr.planner.manifest import ManifestError
    from nri_cpumgr.planner.scenario import run_scenario

    try:
        text = _read(path)
        stripped = text.strip()
        try:
            docs = [json.loads(stripped)] if stripped else []
        except ValueError:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        for n, doc in enumerate(docs, 1):
            if not isinstance(doc, dict):
                raise InputError(f"{path}: scenario {n} is not a JSON object")
            print(json.dumps(run_scenario(doc)), flush=True)
    except ValueError as e:
        print(f"nri-cpumgr plan: {path}: not a scenario (JSON): {e}", file=sys.stderr)
        return 2
    except (InputError, ManifestError) as e:
        print(f"nri-cpumgr plan: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_reconfigure(args: argparse.Namespace) -> int:
    """``plan --reconfigure NEW.yaml``: the plan from the node's config (``--config``) and
    state (``--state``, default: the config's stateDirectory) to NEW.yaml; nothing is
    applied. Manifests, when given, are the running pods' (their CPU requests, which a
    checkpoint written under policy none does not hold)."""
    from nri_cpumgr.config import ConfigError, load_config
    from nri_cpumgr.locations import config_path
    from nri_cpumgr.planner.manifest import ManifestError
    from nri_cpumgr.planner.plan import Planner
    from nri_cpumgr.reconfigure import (
        format_reconfiguration,
        plan_reconfiguration,
        pod_pools_of,
    )
    from nri_cpumgr.reconfigure.rows import node_rows
    from nri_cpumgr.sysfs import SysfsError

    try:
        config_file = config_path(args.config)
        config = load_config(config_file)
        if not Path(args.reconfigure).is_file():
            raise InputError(f"{args.reconfigure}: " + (
                "not a file (a directory?)" if Path(args.reconfigure).exists()
                else "no such file"))
        new = load_config(args.reconfigure)
        machine = load_machine(args.sysfs_root, args.topology)
        where = args.state or config.stateDirectory
        cpu, mem = load_state(where)
        if cpu is None:
            raise InputError(f"{where}: no state to plan on")
        try:  # the state must fit the machine and the config it was written under, as
            # for plain `plan --state` (another node's state is no plan)
            Planner(config, machine, cpu, mem, state_source=str(where))
        except ConfigError as e:
            raise against_machine(e, config_file, machine_source(args.sysfs_root,
                                                                 args.topology)) from None
        pods = load_manifests(args.manifests) if args.manifests else []
        try:
            rows = node_rows(cpu, mem, pods)
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{where}: {e}") from None
        try:
            pools = pod_pools_of(cpu.get("entries") or {})
        except (ValueError, AttributeError) as e:
            raise InputError(f"{where}: {e}") from None
        plan = plan_reconfiguration(machine, config, new, rows.containers, rows.shared_pool,
                                    rows.reserved, mem, pools)
    except (InputError, ManifestError) as e:
        print(f"nri-cpumgr plan: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"nri-cpumgr plan: {args.reconfigure}: {e}", file=sys.stderr)
        return 2
    except SysfsError as e:
        print(f"nri-cpumgr plan: cannot read the topology: {e}", file=sys.stderr)
        return 2
    if rows.unknown:
        print(f"nri-cpumgr plan: {len(rows.unknown)} Guaranteed container(s) of a policy-none "
              "state have no known CPU request (planned as shared): give the running pods' "
              "manifests", file=sys.stderr)
    if args.json:
        print(json.dumps(plan.to_json(), indent=1))
    else:
        print(format_reconfiguration(plan), end="")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.reconfigure:
        if args.scenario or args.explain:
            print("nri-cpumgr plan: --reconfigure takes no --scenario or --explain",
                  file=sys.stderr)
            return 2
        return cmd_reconfigure(args)
    if args.scenario:
        if args.manifests:
            print("nri-cpumgr plan: --scenario takes no manifests (the pods are in it)",
                  file=sys.stderr)
            return 2
        return cmd_scenario(args.scenario)
    if not args.manifests:
        print("nri-cpumgr plan: give pod manifests (or --scenario FILE)", file=sys.stderr)
        return 2
    from nri_cpumgr.config import ConfigError, load_config
    from nri_cpumgr.planner.manifest import ManifestError
    from nri_cpumgr.planner.plan import Planner, format_plan
    from nri_cpumgr.sysfs import SysfsError

    try:
        from nri_cpumgr.locations import config_path

        config_file = config_path(args.config)
        config = load_config(config_file)
        machine = load_machine(args.sysfs_root, args.topology)
        cpu, mem = load_state(args.state)
        pods = load_manifests(args.manifests)
        try:  # the config's and the state's checks against the machine
            planner = Planner(config, machine, cpu, mem, explain=args.explain,
                              state_source=args.state or "(given state)")
        except ConfigError as e:
            raise against_machine(e, config_file, machine_source(args.sysfs_root,
                                                                 args.topology)) from None
        result = planner.plan(pods)
    except (InputError, ManifestError, ConfigError) as e:
        print(f"nri-cpumgr plan: {e}", file=sys.stderr)
        return 2
    except SysfsError as e:  # a --sysfs-root that is no sysfs tree: bad input too
        print(f"nri-cpumgr plan: cannot read the topology: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(format_plan(result), end="")
    return 0


def add_parser(sub: Any) -> None:
    """The ``plan`` sub-command (called by nri_cpumgr.cli.build_parser)."""
    p = sub.add_parser(
        "plan", help="dry run: what the plugin would give some pods on a node",
        description="Dry run: the plugin's managers decide for the pods of the manifests on "
        "the machine (and state) given. No runtime, nothing written.")
    p.add_argument("manifests", nargs="*", metavar="MANIFEST",
                   help="Pod manifests (YAML, several documents allowed; - for stdin)")
    p.add_argument("--config", help="the plugin's config file (default: "
                   "/etc/nri-cpumgr/config.yaml if present, else the built-in defaults)")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--sysfs-root", help="read the machine from DIR/sys (default: /)")
    m.add_argument("--topology", metavar="JSON",
                   help="the machine as `nri-cpumgr topology --json` printed it on the node")
    p.add_argument("--state", metavar="DIR|FILE",
                   help="the node's current state: the plugin's state directory, the "
                   "output of `nri-cpumgr status --json`, or the kubelet's cpu_manager_state "
                   "(the file or its directory) (default: an empty node)")
    p.add_argument("--reconfigure", metavar="NEW.yaml",
                   help="the plan from the node's config (--config) and state (--state, "
                   "default: its stateDirectory) to the config NEW.yaml: what moves, what "
                   "stays, what the new config would refuse; nothing is applied (the daemon "
                   "applies the same plan on SIGHUP or a change of its config file). "
                   "MANIFESTs, if given, are the running pods'")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--explain", action="store_true", help="say why, for each container")
    p.add_argument("--scenario", metavar="JSON",
                   help="a differential-testing scenario (machine, config, pod adds, exits, "
                   "deletes; one JSON document or one per line; - for stdin): print, per "
                   "scenario, one JSON line in the kubelet oracle's shape "
                   "(docs/development/differential.md); --config/--topology/--state are not used")
    p.set_defaults(func=cmd_plan)
