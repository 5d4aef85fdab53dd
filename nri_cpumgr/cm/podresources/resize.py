"""In-place resize of a container's exclusive CPUs (UpdateContainer with new resources), pure.

Rules (kubelet pkg/kubelet/allocation canResizePod and the static CPU policy's resize path
behind ``InPlacePodVerticalScalingExclusiveCPUs``; KEP-1287's "promised CPUs"; read at the
revisions the README section "In-place resize of exclusive CPUs" names):

* gate off: a Guaranteed pod's CPU resize under the static policy is *infeasible*: the
  kubelet marks the resize ``PodResizePending`` with reason ``Infeasible`` and the message
  ``Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"``; we
  refuse the UpdateContainer with that text, so nothing of it is applied;
* gate on, grow: the container keeps every CPU it has and takes the missing ones close to
  them (:func:`take_close`: free SMT siblings of its cores first, then its NUMA nodes,
  then anywhere, each step the static policy's topology-aware take);
* gate on, shrink: it keeps the CPUs it was admitted with (the "promised" CPUs) and, above
  them, the CPUs closest to them; shrinking below the promised count is refused
  (``prohibitedCPUAllocation Error``); so a 2-CPU container resized to 4 and back to 2 ends
  on its first two CPUs;
* gate on, from exclusive to shared (no longer a whole CPU count) or back: refused
  (``inconsistentCPUAllocation Error``);
* not enough free CPUs, or a count the SMT rule refuses: refused with NotEnoughCPUsError /
  SMTAlignmentError; the container keeps its CPUs.

The freed or taken CPUs go back to or come from the node's shared pool (the caller's
shared-pool sync moves the shared containers).
"""

from __future__ import annotations

from nri_cpumgr.cm.cpumanager.cpu_assignment import take_by_topology
from nri_cpumgr.cm.cpumanager.errors import NotEnoughCPUsError, SMTAlignmentError
from nri_cpumgr.cm.cpumanager.policy_static import StaticPolicy
from nri_cpumgr.cm.cpumanager.state import CPUManagerState
from nri_cpumgr.cpuset import CPUSet

#: The kubelet's message for a Guaranteed pod's CPU resize with the gate off
#: (pkg/kubelet/allocation, canResizePod).
TEXT_INFEASIBLE_GATE_OFF = (
    'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
)
REASON_INFEASIBLE = "Infeasible"


class ResizeRefused(Exception):
    """The resize cannot be applied; ``str()`` is ``"<reason>: <message>"`` as the kubelet
    reports it (reason ``Infeasible`` for the gate, the error kind otherwise)."""


def take_close(
    policy: StaticPolicy, held: CPUSet, available: CPUSet, count: int
) -> CPUSet:
    """``count`` CPUs of ``available`` close to ``held``: free siblings of ``held``'s cores,
    then CPUs of ``held``'s NUMA nodes, then any (each a topology-aware take). Raises
    NotEnoughCPUsError."""
    if count <= 0:
        return CPUSet()
    if count > len(available):
        raise NotEnoughCPUsError(count, len(available))
    topo, opts = policy.topology, policy.options
    details = topo.details
    out: set[int] = set()
    siblings = available & topo.cpus_in_cores({details[c].core for c in held if c in details})
    if siblings:
        n = min(count, len(siblings))
        out |= take_by_topology(topo, siblings, n, opts)
    if len(out) < count:
        nodes = {details[c].numa for c in held if c in details}
        near = (available - CPUSet(out)) & topo.cpus_in_numa_nodes(nodes)
        if near:
            n = min(count - len(out), len(near))
            out |= take_by_topology(topo, near, n, opts)
    if len(out) < count:
        out |= take_by_topology(topo, available - CPUSet(out), count - len(out), opts)
    return CPUSet(out)


def resize_exclusive(
    policy: StaticPolicy,
    state: CPUManagerState,
    pod_uid: str,
    name: str,
    new_count: int,
    promised: CPUSet,
) -> CPUSet:
    """Resize the exclusive CPUs of (``pod_uid``, ``name``) to ``new_count`` (gate on) and
    update ``state``; returns the new cpuset. ``promised``: the CPUs it was admitted with.
    Raises :class:`ResizeRefused`; the state is unchanged then."""
    current = state.get_cpuset(pod_uid, name)
    assert current is not None
    if new_count <= 0:
        raise ResizeRefused(
            "inconsistentCPUAllocation Error: Not allowed to move a container from "
            f"exclusively allocated pool to shared pool (requested CPUs = {new_count}, "
            f"allocated CPUs = {len(current)})")
    if new_count == len(current):
        return current
    if policy.options.full_pcpus_only:
        group = policy.cpu_group_size
        if group and new_count % group:
            raise ResizeRefused(str(SMTAlignmentError(new_count, group, 0, False)))
    if new_count > len(current):
        available = policy.available_cpus(state)
        try:
            add = take_close(policy, current, available, new_count - len(current))
        except NotEnoughCPUsError as e:
            raise ResizeRefused(f"NotEnoughCPUsError: {e}") from None
        new = current | add
        state.default_set = state.default_set - add
    else:
        keep = promised & current
        if new_count < len(keep):
            raise ResizeRefused(
                "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container "
                "exclusively allocated pool below promised, (requested CPUs = "
                f"{new_count}, allocated CPUs = {len(current)}, promised CPUs = "
                f"{len(keep)})")
        new = keep | take_close(policy, keep, current - keep, new_count - len(keep))
        state.default_set = state.default_set | (current - new)
    state.set_cpuset(pod_uid, name, new)
    return new
