"""When to move which shared-pool containers: pure bookkeeping, no I/O, no clock of its own.

Why this exists: every container update the plugin sends becomes one ``runc update`` in the
runtime (about 10 ms), applied while the runtime holds the NRI lock that every other
container operation on the node also takes (containerd ``pkg/nri/nri.go``: the plugin's
UpdateContainers goes through ``updateFromPlugin`` -> ``applyUpdates`` under ``l.Lock()``). So
the number of updates is the cost, and when they are sent decides who waits for them.

Rules (the kubelet re-pins shared containers lazily, every ``cpuManagerReconcilePeriod``;
we do better on both lag and cost):

* A shared container is *stale* when the cpuset the runtime has for it differs from the
  shared pool now. Staleness is judged when a batch is planned, never per event, so an
  allocation and a release that leave the pool as it was cost no update at all.
* *Shrink* (a stale container still has CPUs that are now exclusive) is urgent: a pass starts
  once no newly exclusive container is still waiting for its start and nothing changed for
  ``quiet`` seconds, and at the latest ``shrink_delay`` after the first such change (so a
  burst of allocations is coalesced into one pass, and the pass does not hold the runtime's
  lock while the new container starts). After a pass, the next one waits ``shrink_delay``
  (at most one pass per ``shrink_delay`` in a long burst).
* *Grow* (stale containers only lack CPUs that were released) waits ``grow_delay``; a shrink
  pass in the meantime takes the growth along.
* A pass sends batches of at most ``batch_size`` updates, the containers longest on their
  cpuset first; each container is updated at most once per pass, to the pool as it is when
  its batch is planned.
* An update of a shared container that has not started yet may be lost: containerd 2.1's CRI
  applies an update of a container that is not running to its stored spec only, and a
  StartContainer that has already read the spec starts it with the old cpuset (seen with a
  real kubelet 1.37, which starts pods concurrently: the container's spec said the new pool,
  its cgroup the old one). So such a container counts as stale again at its
  PostStartContainer (``started``), or at the end of the call when it started during it, and
  the next pass sends its update once more (one extra
  update per container updated between its creation and its start).
* A container the runtime failed to update stays stale and is retried by the next pass; after
  ``max_failures`` failures the runtime answered it is dropped (it is most likely gone; the
  next Synchronize repairs the rest). A call the runtime did not answer in time is no such
  evidence (a slow or stuck runtime: seen with containerd 2.4.2 in a QEMU guest, where three
  10 s timeouts dropped live containers that then kept exclusive CPUs): it is retried by the
  next pass, without end, and never drops a container.

Times are seconds on the caller's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nri_cpumgr.cpuset import CPUSet


def _differs(a: CPUSet, b: CPUSet) -> bool:
    """``a != b`` from the two sets' masks: ``!=`` of two sets of the same size walks one of
    them (a 255-CPU pool against the shared containers' groups, at each event)."""
    return a is not b and a.mask != b.mask


def _beyond(cpus: CPUSet, pool: CPUSet) -> bool:
    """``cpus`` holds a CPU outside ``pool`` (a shrink is due), from the two sets' masks,
    which each set keeps: ``cpus - pool`` built a set of up to the node's CPUs, ten times
    per plan while a pool of 1,000 shared containers waits to shrink."""
    return bool(cpus.mask & ~pool.mask)


@dataclass(slots=True)
class _Shared:
    """A shared-pool container as the planner tracks it (a docstring of its own: a
    dataclass without one takes ``inspect.signature`` for it)."""

    applied: CPUSet  # the cpuset the runtime has for the container (as we last set it)
    mems: str  # cpuset.mems to keep in the update ("" = leave alone)
    failures: int = 0


@dataclass(slots=True)
class Batch:
    """Updates to send now: ``ids`` all go to ``cpus``; ``mems`` per id ("" = none)."""

    cpus: CPUSet
    ids: list[str]
    mems: dict[str, str]
    shrink: bool  # part of a shrink pass (some container was on exclusive CPUs)
    # ids of the batch that had not started when it was taken -> the cpuset they were
    # created with (a start during the call may leave the update in the spec only:
    # :meth:`PoolPlanner.done`)
    unstarted: dict[str, CPUSet] = field(default_factory=dict)
    # ids -> the cpuset the planner had for them when the batch was taken (an unanswered
    # call makes them stale on it again: :meth:`PoolPlanner.done`)
    prior: dict[str, CPUSet] = field(default_factory=dict)


@dataclass(slots=True)
class PoolPlanner:
    """Bookkeeping of the shared-pool containers and the target pool.

    ``shrink_delay``, ``grow_delay``, ``quiet``: seconds (see the module docstring);
    ``batch_size``: updates per UpdateContainers call (>= 1). Containers are grouped by the
    cpuset the runtime has for them (a handful of groups on any node), so events are O(1)
    and planning is O(groups + batch), never O(containers).
    """

    shrink_delay: float = 1.0
    grow_delay: float = 10.0
    batch_size: int = 10
    quiet: float = 0.25
    max_failures: int = 3
    target: CPUSet = field(default_factory=CPUSet)
    shared: dict[str, _Shared] = field(default_factory=dict)
    # applied cpuset -> container ids in the order they joined the group (oldest first)
    groups: dict[CPUSet, dict[str, None]] = field(default_factory=dict)
    pending_start: set[str] = field(default_factory=set)
    # shared containers created and not started yet -> the cpuset they were created with;
    # updated_unstarted: those of them updated since (resent at their start)
    unstarted: dict[str, CPUSet] = field(default_factory=dict)
    updated_unstarted: set[str] = field(default_factory=set)
    last_event: float = float("-inf")
    shrink_since: float | None = None
    grow_since: float | None = None
    last_pass: float = float("-inf")
    in_pass: set[str] = field(default_factory=set)  # ids already updated in this pass
    passes: int = 0
    sent: int = 0  # container updates handed out so far

    # ------------------------------------------------------------------ events (O(1))
    def reset(self, target: CPUSet, shared: dict[str, tuple[CPUSet, str]], now: float) -> None:
        """Start over after a Synchronize: ``shared`` maps container id -> (cpuset the runtime
        has after the Synchronize reply, mems)."""
        self.target = target
        self.shared.clear()
        self.groups.clear()
        # what add() does per container, in one pass (1,000 containers per Synchronize)
        entries, groups = self.shared, self.groups
        for cid, (cpus, mems) in shared.items():
            entries[cid] = _Shared(cpus, mems)
            group = groups.get(cpus)
            if group is None:
                group = groups[cpus] = {}
            group[cid] = None
        self.pending_start.clear()
        self.unstarted.clear()
        self.updated_unstarted.clear()
        self.in_pass.clear()
        self.shrink_since = self.grow_since = None
        self._note_staleness(now)

    def _join(self, cid: str, cpus: CPUSet) -> None:
        self.groups.setdefault(cpus, {})[cid] = None

    def _leave(self, cid: str, cpus: CPUSet) -> None:
        g = self.groups.get(cpus)
        if g is not None:
            g.pop(cid, None)
            if not g:
                del self.groups[cpus]

    def add(self, cid: str, cpus: CPUSet, mems: str, now: float,
            created: bool = False) -> None:
        """A shared container was created (``created``: not started yet) or updated with
        ``cpus`` in its reply."""
        if created:
            self.unstarted[cid] = cpus
        old = self.shared.get(cid)
        if old is not None:
            self._leave(cid, old.applied)
        self.shared[cid] = _Shared(cpus, mems)
        self._join(cid, cpus)
        if _differs(cpus, self.target):
            self._note_group(cpus, now)

    def discard(self, cid: str) -> None:
        """A container stopped, was removed, or became exclusive."""
        s = self.shared.pop(cid, None)
        if s is not None:
            self._leave(cid, s.applied)
        self.in_pass.discard(cid)
        self.pending_start.discard(cid)
        self.unstarted.pop(cid, None)
        self.updated_unstarted.discard(cid)

    def allocated(self, cid: str, now: float) -> None:
        """An exclusive container was admitted; a shrink waits for its start."""
        self.pending_start.add(cid)
        self.last_event = now

    def started(self, cid: str, now: float) -> bool:
        """A container started (PostStartContainer). True when that makes work: a shared
        container updated before its start is stale again (its update may be lost, see the
        module docstring), as if on the cpuset it was created with."""
        if cid in self.pending_start:
            self.pending_start.discard(cid)
            self.last_event = now
        created = self.unstarted.pop(cid, None)
        if cid not in self.updated_unstarted:
            return False
        self.updated_unstarted.discard(cid)
        s = self.shared.get(cid)
        if s is None or created is None:
            return False
        self._leave(cid, s.applied)
        s.applied = created
        self._join(cid, created)
        if _differs(created, self.target):
            self._note_group(created, now)
        return True

    def set_target(self, pool: CPUSet, now: float) -> None:
        """The shared pool is now ``pool``."""
        before, after = self.target.mask, pool.mask  # (the pool's masks: no set walked)
        if before == after:
            return
        lost, gained = before & ~after, after & ~before
        self.target = pool
        self.last_event = now
        if lost and self.shrink_since is None:
            self.shrink_since = now
        if gained and self.grow_since is None:
            self.grow_since = now

    # ------------------------------------------------------------------ planning
    def _note_group(self, cpus: CPUSet, now: float) -> None:
        if _beyond(cpus, self.target):
            if self.shrink_since is None:
                self.shrink_since = now
        elif self.grow_since is None:
            self.grow_since = now

    def _note_staleness(self, now: float) -> None:
        for cpus in self.groups:
            if _differs(cpus, self.target):
                self._note_group(cpus, now)

    def _due(self, urgent: bool) -> float:
        if urgent:
            since = self.shrink_since if self.shrink_since is not None else self.last_event
            due = since + self.shrink_delay
            if not self.pending_start:
                due = min(due, self.last_event + self.quiet)
            return max(due, self.last_pass + self.shrink_delay)
        since = self.grow_since if self.grow_since is not None else self.last_event
        return since + self.grow_delay

    def plan(self, now: float) -> tuple[Batch | None, float | None]:
        """``(batch, None)``: send it now; ``(None, t)``: nothing before time ``t``;
        ``(None, None)``: nothing to do until the next event."""
        target = self.target
        stale = [cpus for cpus in self.groups if cpus is not target and cpus != target]
        if not stale:
            if self.in_pass:
                self._end_pass(now)
            self.shrink_since = self.grow_since = None
            return None, None
        starting = not self.in_pass
        if starting:  # (when not due yet, no batch is gathered: a plan per pod event)
            pass_urgent = any(_beyond(cpus, target) for cpus in stale)
            due = self._due(pass_urgent)
            if now < due:
                return None, due
        ids: list[str] = []
        urgent = False
        for cpus in stale:  # oldest groups first
            beyond = _beyond(cpus, target)
            for cid in self.groups[cpus]:
                if cid in self.in_pass:
                    continue
                if len(ids) < self.batch_size:
                    ids.append(cid)
                    urgent = urgent or beyond
                else:
                    break
            if len(ids) >= self.batch_size:
                break
        if not ids:  # every stale container was updated in this pass: the pass is over
            self._end_pass(now)
            return self.plan(now)
        if starting:
            urgent = pass_urgent
            self.passes += 1
            self.shrink_since = self.grow_since = None
        self.in_pass.update(ids)
        self.sent += len(ids)
        return Batch(target, ids, {c: self.shared[c].mems for c in ids}, urgent,
                     {c: self.unstarted[c] for c in ids if c in self.unstarted},
                     {c: self.shared[c].applied for c in ids}), None

    def take_all(self, now: float) -> Batch | None:
        """Reply mode (no UpdateContainers of our own): every stale container at once, to
        ride on the reply being built, and counted as applied (the runtime applies a reply's
        updates and reports no failure back; the next Synchronize repairs any). A shrink is
        taken at once (the reply is the last moment: there is no later call of our own), a
        growth only once ``grow_delay`` has passed; None when there is nothing to take."""
        target = self.target
        stale = [cpus for cpus in self.groups if cpus is not target and cpus != target]
        if not stale:
            self.shrink_since = self.grow_since = None
            return None
        if not any(_beyond(cpus, target) for cpus in stale) and now < self._due(False):
            return None
        ids = [cid for cpus in stale for cid in self.groups[cpus]]
        batch = Batch(target, ids, {c: self.shared[c].mems for c in ids}, True)
        self.passes += 1
        self.sent += len(ids)
        self.shrink_since = self.grow_since = None
        self.last_pass = now
        self.done(batch, set(), now)
        return batch

    def _end_pass(self, now: float) -> None:
        self.in_pass.clear()
        self.last_pass = now
        # whatever is still stale changed during the pass: it is due from now on
        self._note_staleness(now)

    def done(self, batch: Batch, failed: set[str], now: float, *,
             answered: bool = True) -> list[str]:
        """The call for ``batch`` ended; ``failed``: ids the runtime could not update (all of
        them when ``answered`` is False: no answer in time, nothing known to be applied).
        Returns the ids dropped after ``max_failures`` answered failures; an unanswered call
        counts toward none (a slow runtime is no sign that a container is gone)."""
        if not answered:
            # each stays stale (in this pass's set): the next pass sends it again. The call
            # may still have reached the runtime: its UpdateContainer event then said the new
            # cpuset (PoolPlanner.add), though the update may have reached the spec only (a
            # container starting meanwhile) or been undone (the call cancelled at our
            # deadline: containerd resets the spec). So the cpuset from before the call (the
            # one of its creation for a container that started meanwhile) is what the next
            # pass compares with, and a container still not started is sent again at its
            # start: a real kubelet in the QEMU guest on containerd 2.1.9, a besteffort
            # container at spec 0-1, cgroup 0-7 for good after a 14 s call without an answer
            for cid in batch.ids:
                s = self.shared.get(cid)
                if s is None:
                    continue
                if cid in self.unstarted:
                    self.updated_unstarted.add(cid)
                before = batch.unstarted.get(cid, batch.prior.get(cid))
                if before is not None and _differs(before, s.applied):
                    self._leave(cid, s.applied)
                    s.applied = before
                    self._join(cid, before)
                    if _differs(before, self.target):
                        self._note_group(before, now)
            return []
        dropped = []
        for cid in batch.ids:
            s = self.shared.get(cid)
            if s is None:
                continue
            if cid in failed:
                s.failures += 1
                if s.failures >= self.max_failures:
                    dropped.append(cid)
                    self.discard(cid)
                continue
            s.failures = 0
            if cid in self.unstarted:
                self.updated_unstarted.add(cid)
            elif cid in batch.unstarted:
                # it started while the call was under way (a CRI call waits for the start:
                # 8 s seen with kubelet 1.37 in the QEMU guest): the update may have reached
                # its spec only (whatever an UpdateContainer event said meanwhile), so it is
                # stale again on the cpuset it was created with and this pass sends it again
                # (once: it has started, so the next batch does not count it unstarted)
                created = batch.unstarted[cid]
                self._leave(cid, s.applied)
                s.applied = created
                self._join(cid, created)
                self.in_pass.discard(cid)
                if _differs(created, self.target):
                    self._note_group(created, now)
                continue
            self._leave(cid, s.applied)
            s.applied = batch.cpus
            self._join(cid, batch.cpus)
        return dropped

    def abandon(self, batch: Batch) -> None:
        """``batch`` could not be sent (connection lost): nothing was applied."""
        for cid in batch.ids:
            self.in_pass.discard(cid)

    # ------------------------------------------------------------------ queries
    def stale_count(self) -> int:
        return sum(len(ids) for cpus, ids in self.groups.items()
                   if _differs(cpus, self.target))

    def overlapping(self, cpus: CPUSet) -> list[str]:
        """Shared containers the runtime still has on any of ``cpus``."""
        return [cid for g, ids in self.groups.items() if g & cpus for cid in ids]
