"""Why a container got its CPUs (or was refused): compact structured records.

An :class:`Explainer` wraps :meth:`ContainerManager.admit
<nri_cpumgr.cm.container_manager.ContainerManager.admit>`: before the admission it gathers
each hint provider's hints and the policy's merge on the same state the admission sees
(the scope's own ``accumulate_providers_hints`` and the policy's ``merge``), after it
describes the result against the topology. A record (plain JSON data) holds:

* ``qos`` and ``qosSource`` (the kubelet's cgroup parent, or the resources), the
  container's resources as the runtime passed them, and the exclusive CPUs asked for;
* ``config``: the policies and options in force;
* ``free``: free (allocatable, not exclusive) CPUs per NUMA node before the admission;
* ``hints``: per provider and resource, the NUMA masks (``preferred`` marked), or
  ``"no preference"``; ``affinity``: the merged hint and the policy's verdict;
* ``take``: the CPUs given, grouped by socket, NUMA node and L3 group, with what is whole
  (socket, NUMA node, L3 group, full cores, single threads), by ascending ids: the result
  described against the topology table, not a trace of the allocator; ``options``: for each
  CPU manager option in force, the CPUs the same take gives without it on the state before
  the admission (``"same CPUs without it"`` when the option changed nothing);
* ``decision`` (exclusive / shared / refused), ``cpus``, ``mems``, and ``reason``.

Bounded: records are kept for containers the manager still tracks (pruned with each
checkpoint snapshot) and for the last :data:`MAX_REFUSALS` refusals (a refused container is
retried by the kubelet: ``explain`` says why it keeps failing). Off the hot path unless
asked: the plugin builds an Explainer only with ``explainDecisions: true`` or at debug
level (``-v``), and the records are written with the checkpoint snapshot, after the reply.
Pure apart from logging.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from nri_cpumgr.cm.container_manager import (
    AdmissionError,
    ContainerManager,
    Decision,
    PodAdmission,
)
from nri_cpumgr.cm.cpumanager import StaticPolicy
from nri_cpumgr.cm.records import memory_unsatisfiable_text
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.podmodel import QOSClass
from nri_cpumgr.podmodel.nri import ContainerInfo
from nri_cpumgr.podmodel.spec import PodSpecFacts
from nri_cpumgr.topology import CPUTopology

log = logging.getLogger("nri_cpumgr.explain")

MAX_REFUSALS = 64
#: pods admitted at their sandbox whose hints are kept for their containers' records
MAX_SANDBOX_PODS = 256
EXPLANATIONS_NAME = "explanations"


class Explainer:
    """Explained admissions on ``manager``. ``config`` (a
    :class:`~nri_cpumgr.config.Config`) gives the options in force and builds the
    counterfactual policies (one per CPU manager option, built on first use)."""

    def __init__(self, manager: ContainerManager, config: Any) -> None:
        self.manager = manager
        self.config = config
        self.live: dict[str, dict[str, Any]] = {}
        self.refusals: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._alt: dict[str, StaticPolicy | None] = {}
        #: pod UID -> container name -> (the providers' hints, the merge) as the pod's
        #: admission at its sandbox saw them (:meth:`admit_sandbox`), for its containers'
        #: records; bounded (:data:`MAX_SANDBOX_PODS`), dropped with the pod
        self._sandbox_hints: OrderedDict[str, dict[str, tuple[Any, Any]]] = OrderedDict()

    # ------------------------------------------------------------------ admission
    def admit_sandbox(self, pod_uid: str, pod_name: str, namespace: str, qos: QOSClass,
                      spec: PodSpecFacts) -> PodAdmission | None:
        """:meth:`ContainerManager.admit_sandbox`, keeping the providers' hints and the
        policy's merge that admission computes for each of the pod's containers (container
        scope: each after the containers before it took their CPUs; pod scope: one for the
        pod): their records show them when the containers come (:meth:`admit`). Returns
        what it returns."""
        m = self.manager
        scope = m.tm.scope
        seen: dict[str, tuple[Any, Any]] = {}
        gather = getattr(scope, "accumulate_providers_hints", None)
        if gather is not None:

            def recorded(pod: Any, *name: str) -> Any:
                gathered = gather(pod, *name)
                both = self._format_hints(scope, gathered)
                for n in name or [c.name for c in pod.init_containers + pod.containers]:
                    seen[n] = both
                return gathered

            scope.accumulate_providers_hints = recorded  # (this call only: its own hints)
        try:
            rec = m.admit_sandbox(pod_uid, pod_name, namespace, qos, spec)
        finally:
            if gather is not None:
                del scope.accumulate_providers_hints
        if rec is not None and seen:
            self._sandbox_hints[pod_uid] = seen
            self._sandbox_hints.move_to_end(pod_uid)
            while len(self._sandbox_hints) > MAX_SANDBOX_PODS:
                self._sandbox_hints.popitem(last=False)
        return rec

    def admit(self, info: ContainerInfo, device_numa: frozenset[int] = frozenset()) -> Decision:
        """:meth:`ContainerManager.admit`, recording why. Raises what it raises."""
        m = self.manager
        rec = self._head(info)
        pre = None
        path, pod = m.admission_path(info) if m.managed else ("per-container", None)
        if path != "per-container":
            assert pod is not None
            names = [c.name for c in pod.init_containers + pod.containers]
            rec["admission"] = (
                f"whole pod at its first container ({len(names)} containers in the "
                f"kubelet's order: {', '.join(names)})" if path == "whole-pod" else
                "recorded at the pod's admission (its sandbox)" if _at_sandbox(m, info) else
                "recorded at the pod's admission (its first container)")
        if path == "recorded":
            aff = m.tm.get_affinity(info.pod_uid, info.name)
            h = _hint(aff)
            seen = self._sandbox_hints.get(info.pod_uid, {}).get(info.name)
            if seen is not None:  # (the hints that admission saw, at the sandbox)
                rec["hints"] = seen[0]
            rec["affinity"] = {**h, "note": f"affinity NUMA {h['numa'] or '-'}: merged at the "
                                            "pod's admission"}
        elif m.managed and (info.qos is QOSClass.GUARANTEED or info.devices):
            # what admit does first (idempotent): finished containers of the pod give back
            # their CPUs, so the hints below see the state the admission sees
            m._release_stopped_of_pod(info.pod_uid, keep=info.name)
            if device_numa:
                m.devices.current[info.key] = frozenset(device_numa)
            pre = m.state.copy() if m.static else None
            rec["free"] = self._free(pre)
            if path == "whole-pod":  # the Memory Manager's hints as the admission sees them
                with m.kubelet_memory_hints():
                    rec["hints"], rec["affinity"] = self._hints(info, pod)
            else:
                rec["hints"], rec["affinity"] = self._hints(info, pod)
        try:
            d = m.admit(info, device_numa)
        except AdmissionError as e:
            rec["decision"] = "refused"
            rec["reason"] = str(e)
            self.refusals[info.key] = rec
            self.refusals.move_to_end(info.key)
            while len(self.refusals) > MAX_REFUSALS:
                self.refusals.popitem(last=False)
            adm = m.admissions.get(info.pod_uid)
            why = (memory_unsatisfiable_text(adm.unsatisfiable, m.tm.policy_name)
                   if adm is not None and adm.unsatisfiable else _refusal_why(rec))
            if why:
                rec["why"] = why
            self._log(rec)
            raise
        self.refusals.pop(info.key, None)
        rec["decision"] = "exclusive" if d.exclusive else ("shared" if d.cpus is not None
                                                            else "unpinned")
        rec["cpus"] = str(d.cpus) if d.cpus is not None else ""
        rec["mems"] = str(d.mems) if d.mems else ""
        if d.exclusive and d.cpus:
            topo = m.policy.topology
            rec["take"] = take_steps(d.cpus, topo)
            if pre is not None:
                rec["options"] = self._counterfactuals(info, pre, d.cpus)
            rec["reason"] = (f"Guaranteed with {info.resources.integer_cpus} whole CPU(s): "
                             "exclusive CPUs")
        else:
            rec["reason"] = _shared_reason(info, d)
        self.live[info.id] = rec
        self._log(rec)
        return d

    def _head(self, info: ContainerInfo) -> dict[str, Any]:
        r = info.resources
        c = self.config
        return {
            "pod": f"{info.namespace}/{info.pod_name}",
            "podUID": info.pod_uid,
            "container": info.name,
            "containerID": info.id,
            "qos": str(info.qos),
            "qosSource": info.qos_source,
            "resources": {"cpuRequestMilli": r.cpu_request_milli,
                          "cpuLimitMilli": r.cpu_limit_milli, "memoryLimit": r.memory_limit,
                          "exclusiveCpusAsked": r.integer_cpus if info.qos is
                          QOSClass.GUARANTEED else 0},
            "config": {"cpuManagerPolicy": c.cpuManagerPolicy,
                       "cpuManagerPolicyOptions": dict(c.cpuManagerPolicyOptions),
                       "reservedCpus": str(getattr(self.manager.policy, "reserved_cpus", "")),
                       "topologyManagerPolicy": self.manager.tm.policy_name,
                       "topologyManagerScope": self.manager.tm.scope_name,
                       "memoryManagerPolicy": c.memoryManagerPolicy},
        }

    def _free(self, state: Any) -> dict[str, str]:
        m = self.manager
        if not m.static or state is None:
            return {}
        free = m.policy.available_cpus(state)
        topo = m.policy.topology
        out: dict[str, str] = {}
        for n in topo.numa_nodes():
            out[str(n)] = str(free & topo.cpus_in_numa_nodes([n]))
        return out

    def _hints(self, info: ContainerInfo, pod: Any = None
               ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The providers' hints and the policy's merge for ``info`` on the pod its admission
        sees (``pod``: the whole pod of a whole-pod admission; default, the per-container
        one)."""
        m = self.manager
        pod = pod if pod is not None else m._admission_pod(info)
        scope = m.tm.scope
        if m.tm.policy_name == "none":
            return {}, {"numa": "", "preferred": False, "admit": True,
                        "note": "topologyManagerPolicy none: no hints are merged"}
        if m.tm.scope_name == "pod":
            gathered = scope.accumulate_providers_hints(pod)  # type: ignore[attr-defined]
        else:
            gathered = scope.accumulate_providers_hints(pod, info.name)  # type: ignore[attr-defined]
        return self._format_hints(scope, gathered)

    def _format_hints(self, scope: Any, gathered: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The providers' hints ``gathered`` (in ``scope``'s provider order) and the
        policy's merge of them, as records hold them."""
        m = self.manager
        out: dict[str, Any] = {}
        for provider, hints in zip(scope.hint_providers, gathered or [], strict=False):
            pname = type(provider).__name__.removesuffix("Provider").lower()
            if not hints:
                out[pname] = "no preference"
                continue
            out[pname] = {res: [_hint(h) for h in hs] for res, hs in hints.items()}
        best, admit = m.tm.policy.merge(gathered or [])
        aff = _hint(best)
        aff["admit"] = admit
        aff["policy"] = m.tm.policy_name
        return out, aff

    def _counterfactuals(self, info: ContainerInfo, pre: Any, got: CPUSet) -> dict[str, str]:
        """For each CPU manager option in force: the CPUs the take gives without it."""
        out: dict[str, str] = {}
        m = self.manager
        opts = dict(self.config.cpuManagerPolicyOptions)
        hint = m.tm.get_affinity(info.pod_uid, info.name)
        numa = hint.numa
        num = len(got)
        for name, value in opts.items():
            if str(value).lower() != "true":
                continue
            alt = self._alt_policy(name)
            if alt is None:
                out[name] = "(not evaluated)"
                continue
            try:
                cpus = alt.allocate_cpus(pre.copy(), num, numa, CPUSet())
            except Exception as e:  # noqa: BLE001 - the counterfactual may fail
                out[name] = f"without it: {type(e).__name__}"
                continue
            out[name] = "same CPUs without it" if cpus == got else f"without it: {cpus}"
        return out

    def _alt_policy(self, option: str) -> StaticPolicy | None:
        if option not in self._alt:
            from nri_cpumgr.managers import build_policy

            cfg = self.config.model_copy(update={"cpuManagerPolicyOptions": {
                k: v for k, v in self.config.cpuManagerPolicyOptions.items() if k != option}})
            try:
                pol = build_policy(cfg, _MachineView(self.manager.policy.topology))
                self._alt[option] = pol if isinstance(pol, StaticPolicy) else None
            except Exception:  # noqa: BLE001 - an option another one requires
                self._alt[option] = None
        return self._alt[option]

    def _log(self, rec: Mapping[str, Any]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("explain %s", "; ".join(render(rec)))

    # ------------------------------------------------------------------ bounds, persistence
    def forget_pod(self, pod_uid: str) -> None:
        self._sandbox_hints.pop(pod_uid, None)
        for k in [k for k in self.refusals if k[0] == pod_uid]:
            del self.refusals[k]

    def snapshot(self) -> dict[str, Any]:
        """The records to persist: live containers' (others are dropped now) and the last
        refusals."""
        tracked = self.manager.containers
        for cid in [c for c in self.live if c not in tracked]:
            del self.live[cid]
        return {"containers": dict(self.live), "refusals": list(self.refusals.values())}


class _MachineView:
    """The topology alone, as :func:`nri_cpumgr.managers.build_policy` reads a machine."""

    def __init__(self, topology: CPUTopology) -> None:
        self.topology = topology
        self.numa_nodes: dict[int, Any] = {}


def _hint(h: Any) -> dict[str, Any]:
    return {"numa": str(CPUSet(h.numa)) if h.numa is not None else "any",
            "preferred": bool(h.preferred)}


def _refusal_why(rec: Mapping[str, Any]) -> str:
    """A reader's reason for a TopologyAffinityError: no single NUMA node (or no NUMA set
    the policy accepts) holds the request, with the free CPUs per node before it."""
    if "TopologyAffinityError" not in rec.get("reason", ""):
        return ""
    asked = rec.get("resources", {}).get("exclusiveCpusAsked") or 0
    free = {n: len(CPUSet.parse(c)) for n, c in (rec.get("free") or {}).items()}
    per = ", ".join(f"NUMA {n}: {k}" for n, k in free.items())
    policy = rec.get("config", {}).get("topologyManagerPolicy", "")
    if asked and free and max(free.values()) < asked:
        return (f"{policy} needs one NUMA node with {asked} free CPUs; free CPUs per node: "
                f"{per}")
    hints = rec.get("hints") or {}
    short = [f"{p}/{r}" for p, hs in hints.items() if isinstance(hs, dict)
             for r, lst in hs.items() if not any(h["preferred"] and "-" not in h["numa"]
                                                  and "," not in h["numa"] for h in lst)]
    if short:
        return (f"{policy}: no single NUMA node can hold {', '.join(short)} (no preferred "
                f"one-node hint); free CPUs per node: {per}")
    return f"{policy}: the providers' preferred NUMA nodes do not meet; free CPUs per node: {per}"


def _shared_reason(info: ContainerInfo, d: Decision) -> str:
    if d.cpus is None:
        return "cpuManagerPolicy none: the cpuset is left alone"
    if info.qos is not QOSClass.GUARANTEED:
        return f"{info.qos}: runs on the shared pool"
    r = info.resources
    return (f"Guaranteed with a CPU request of {r.cpu_request_milli}m, not a whole number of "
            "CPUs: runs on the shared pool")


def take_steps(cpus: CPUSet, topo: CPUTopology) -> list[dict[str, Any]]:
    """The CPUs of a take grouped by socket, NUMA node and L3 group (ascending ids): each
    group says which unit it fills whole (``"socket"``, ``"NUMA node"``,
    ``"L3 group"``), its full cores (all SMT siblings taken) and single threads. Pure."""
    d = topo.details
    groups: dict[tuple[int, int, int], list[int]] = {}
    for c in cpus:
        i = d[c]
        groups.setdefault((i.socket, i.numa, i.uncore), []).append(c)
    got = set(cpus)
    out = []
    for (sock, numa, l3), cs in sorted(groups.items()):
        part = CPUSet(cs)
        whole = ""
        if topo.cpus_in_sockets([sock]) <= got:
            whole = "socket"
        elif topo.cpus_in_numa_nodes([numa]) <= got:
            whole = "NUMA node"
        elif CPUSet(x for x, i in d.items() if i.uncore == l3) <= got:
            whole = "L3 group"
        cores = {d[c].core for c in cs}
        full = sorted(k for k in cores if topo.cpus_in_cores([k]) <= got)
        threads = [c for c in cs if d[c].core not in full]
        out.append({"socket": sock, "numa": numa, "l3": l3, "cpus": str(part),
                    "count": len(part), "whole": whole, "fullCores": len(full),
                    "threads": str(CPUSet(threads)) if threads else ""})
    return out


# ------------------------------------------------------------------ text
def render(rec: Mapping[str, Any]) -> list[str]:
    """A record as short text lines (what ``explain`` and ``plan --explain`` print)."""
    lines = []
    res = rec.get("resources", {})
    src = {"cgroup-parent": "the kubelet's cgroup parent"}.get(rec.get("qosSource", ""),
                                                                "the resources")

    def milli(v: Any) -> str:
        return f"{v}m" if v is not None else "-"

    lines.append(f"qos {rec.get('qos')} (from {src}); cpu request "
                 f"{milli(res.get('cpuRequestMilli'))} limit {milli(res.get('cpuLimitMilli'))}; "
                 f"exclusive CPUs asked {res.get('exclusiveCpusAsked')}")
    cfg = rec.get("config", {})
    opts = ",".join(k for k, v in cfg.get("cpuManagerPolicyOptions", {}).items()
                    if str(v).lower() == "true") or "-"
    lines.append(f"config: cpuManagerPolicy {cfg.get('cpuManagerPolicy')} (options {opts}, "
                 f"reserved {cfg.get('reservedCpus') or '-'}), topologyManagerPolicy "
                 f"{cfg.get('topologyManagerPolicy')}/{cfg.get('topologyManagerScope')}, "
                 f"memoryManagerPolicy {cfg.get('memoryManagerPolicy')}")
    if rec.get("admission"):
        lines.append(f"admission: {rec['admission']}")
    if rec.get("free"):
        lines.append("free before: " + ", ".join(
            f"NUMA {n}: {c or '-'} ({len(CPUSet.parse(c))})" for n, c in rec["free"].items()))
    for prov, hs in (rec.get("hints") or {}).items():
        if isinstance(hs, str):
            lines.append(f"hints {prov}: {hs}")
            continue
        for res_name, lst in hs.items():
            txt = " ".join(f"{h['numa']}{'*' if h['preferred'] else ''}" for h in lst) or \
                "none (cannot be satisfied)"
            lines.append(f"hints {prov}/{res_name}: {txt}  (* = preferred)")
    aff = rec.get("affinity")
    if aff:
        if aff.get("note"):
            lines.append(aff["note"])
        else:
            lines.append(f"merged affinity: NUMA {aff['numa']} "
                         f"{'preferred' if aff['preferred'] else 'not preferred'}; "
                         f"{aff['policy']} {'admits' if aff['admit'] else 'refuses'}")
    for i, s in enumerate(rec.get("take") or []):
        what = f"whole {s['whole']}, " if s["whole"] else ""
        parts = []
        if s["fullCores"]:
            parts.append(f"{s['fullCores']} full core(s)")
        if s["threads"]:
            parts.append(f"thread(s) {s['threads']}")
        lines.append(f"{'take' if i == 0 else 'then'}: socket {s['socket']} NUMA {s['numa']} "
                     f"L3 {s['l3']}: CPUs {s['cpus']} ({s['count']}: {what}"
                     f"{', '.join(parts)})")
    if len(rec.get("take") or []) > 1:
        per: dict[int, int] = {}
        for st in rec["take"]:
            per[st["numa"]] = per.get(st["numa"], 0) + st["count"]
        lines.append("per NUMA node: " + ", ".join(f"NUMA {n}: {k}" for n, k in
                                                    sorted(per.items())))
    for opt, effect in (rec.get("options") or {}).items():
        lines.append(f"option {opt}: {effect}")
    if rec.get("why"):
        lines.append(f"why: {rec['why']}")
    decision = rec.get("decision", "")
    tail = f" cpus {rec['cpus']}" if rec.get("cpus") else ""
    tail += f" mems {rec['mems']}" if rec.get("mems") else ""
    lines.append(f"decision: {decision}{tail}: {rec.get('reason', '')}")
    return lines


def find(records: Mapping[str, Any], pod: str, container: str | None) -> list[dict[str, Any]]:
    """Records (live ones, then refusals) of ``pod`` (``ns/name``, ``name`` or pod uid),
    one container or all of them."""
    def match(r: Mapping[str, Any]) -> bool:
        ns_name = r.get("pod", "")
        ok = pod in (ns_name, ns_name.split("/", 1)[-1], r.get("podUID"))
        return ok and (container is None or r.get("container") == container)

    live: Iterable[dict[str, Any]] = (records.get("containers") or {}).values()
    return [r for r in live if match(r)] + [r for r in records.get("refusals") or []
                                             if match(r)]


def _at_sandbox(m: ContainerManager, info: ContainerInfo) -> bool:
    """Whether ``info``'s pod was admitted when its sandbox started."""
    rec = m.admissions.get(info.pod_uid)
    return rec is not None and rec.at_sandbox
