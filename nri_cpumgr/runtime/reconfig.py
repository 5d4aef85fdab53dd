"""A config change at runtime (SIGHUP, or the config file changed): validate, plan, record,
apply, roll back (nri_cpumgr.reconfigure computes the plan; this module does the I/O).

:func:`reconfigure` runs on the event loop, never inside a reply to the runtime:

1. the new file's decision keys (:data:`~nri_cpumgr.reconfigure.plan.DECISION_KEYS`) are
   taken; another changed key is logged as needing a restart. An invalid config (the
   planner builds the new managers with the start-up checks) is logged as an ERROR and the
   plugin keeps serving with the old one;
2. the plan is recorded in the state directory (:data:`PLAN_NAME`, a checksummed checkpoint:
   the old and the new config, both states) BEFORE the first move; then the new states are
   written as ``cpu_manager_state`` / ``memory_manager_state`` and the plugin serves with
   the new managers;
3. the updates (:meth:`~nri_cpumgr.reconfigure.plan.ReconfigurationPlan.steps`) go through
   the shared-pool update path: CRI UpdateContainerResources calls on the CRI worker
   (``cri``) or the plugin's own UpdateContainers (``async``); under ``reply`` there is no
   such path and the change is refused (the plugin keeps the old config);
4. an update the runtime refuses (or leaves unanswered) rolls back: a plan from the new
   config back to the old one is applied the same way; said in the log (ERROR), in the
   metric ``nri_cpumgr_reconfigurations_total{result="rolled-back"}`` and in an event-like
   log line (logger ``nri_cpumgr.events``);
5. a plugin killed in the middle relaunches on the recorded plan (:func:`resume_state` in
   the plugin's setup: the new state when the config file is the new one, the old state when
   it is the old one again), and completes it after the runtime's Synchronize, with the
   updates sent by the same path after the reply (:func:`resume_updates`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from nri_cpumgr import aio as asyncio  # (asyncio at the first use: nri_cpumgr.aio)
from nri_cpumgr.checkpoint import Checkpoint, CheckpointError
from nri_cpumgr.config import Config, ConfigError
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.reconfigure.plan import (
    DECISION_KEYS,
    ReconfigurationPlan,
    config_changes,
    decision_values,
    plan_reconfiguration,
    pod_pools_of,
)

# the plugin (nri_cpumgr.runtime.plugin.Plugin) is typed Any here: it imports this module
Plugin = Any

log = logging.getLogger("nri_cpumgr.plugin")
events = logging.getLogger("nri_cpumgr.events")

#: the recorded plan in the state directory (removed once applied or rolled back; the
#: plugin's RECONFIGURATION_PLAN_NAME)
PLAN_NAME = "reconfiguration_plan"


def can_send(plugin: Plugin) -> bool:
    """Whether the plugin has an update path outside the replies (cri or async)."""
    return _sender(plugin) is not None


class ApplyError(Exception):
    """An update of the plan failed: the message says which container and why."""


def event(kind: str, reason: str, message: str) -> None:
    """An event-like log line, as ``kubectl get events`` shows one (type, reason, object,
    message), on logger ``nri_cpumgr.events``."""
    (events.warning if kind == "Warning" else events.info)(
        "event type=%s reason=%s object=node message=%r", kind, reason, message)


def effective(running: Config, new: Config) -> tuple[Config, list[str]]:
    """``running`` with the decision keys of ``new``, and the other keys that changed (they
    take effect at the next restart)."""
    upd = {k: getattr(new, k) for k in DECISION_KEYS}
    restart = [f.name for f in dataclasses.fields(Config)
               if f.name not in DECISION_KEYS and getattr(running, f.name) != getattr(new, f.name)]
    return dataclasses.replace(running, **upd), restart


def _sender(plugin: Plugin) -> Any:
    """``async (cpus, [(container id, mems, quota)]) -> {id: why}`` of failed updates, through the
    shared-pool update path, or None when the plugin has none (``reply``, not connected)."""
    sync = plugin.pool_sync
    mode = sync.mode if sync is not None else "reply"
    if mode == "cri" and plugin.cri is not None:
        cri = plugin.cri

        async def send_cri(cpus: CPUSet, items: list[tuple[Any, ...]]) -> dict[str, str]:
            out = await cri.send(str(cpus), items)
            bad = dict(out.failed)
            for cid in out.unanswered:
                bad[cid] = f"no answer ({out.error or 'timeout'})"
            return bad

        return send_cri
    if mode == "async" and plugin.sender is not None:
        from nri_cpumgr.poolsync.sync import encode_updates, update_body

        sender = plugin.sender

        async def send_nri(cpus: CPUSet, items: list[tuple[Any, ...]]) -> dict[str, str]:
            failed = await sender(encode_updates([
                (it[0], update_body(cpus, it[1], it[2] if len(it) > 2 else None))
                for it in items]))
            return {cid: "the runtime refused the update" for cid in failed}

        return send_nri
    return None


async def apply_steps(plugin: Plugin, plan: ReconfigurationPlan, send: Any,
                      done: set[str] | None = None) -> int:
    """Send the plan's updates in order, consecutive ones of the same phase and cpuset in
    one batch; ``done`` collects the ids of the containers updated. Returns how many.
    Raises :class:`ApplyError` when the runtime refuses one that still exists (a container
    removed meanwhile is not an error)."""
    done = set() if done is None else done
    steps = plan.steps()
    n = 0
    i = 0
    while i < len(steps):
        phase, _, cpus = steps[i]
        j = i
        items = []
        while j < len(steps) and steps[j][0] == phase and steps[j][2] == cpus:
            c = steps[j][1]
            items.append((c.id, str(c.mems_after) if c.mems_after is not None else "",
                          c.quota_after))
            j += 1
        ids = {it[0] for it in items}
        plugin.moving |= ids
        try:
            failed = await send(cpus, items)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # ConnectionError, TtrpcError, TimeoutError, OSError
            raise ApplyError(f"the update path failed: {e!r}") from None
        finally:
            plugin.moving -= ids
        failed = {cid: why for cid, why in failed.items() if cid in plugin.manager.containers}
        done.update(it[0] for it in items if it[0] not in failed)
        if failed:
            cid, why = next(iter(failed.items()))
            raise ApplyError(f"container {cid} ({phase}, cpus {cpus}): {why}")
        n += len(items)
        i = j
    return n


def record(plugin: Plugin, old: Config, new: Config, plan: ReconfigurationPlan) -> None:
    """Write the plan (before the first move). Raises OSError."""
    m = plan.manager
    assert m is not None
    old_m = plugin.manager
    Checkpoint(old.state_path(PLAN_NAME)).save({
        "oldConfig": decision_values(old),
        "newConfig": decision_values(new),
        "oldCpuState": _cpu_body(old_m.checkpoint()),
        "oldMemoryState": old_m.memory.state.to_dict() if old_m.memory is not None else None,
        "newCpuState": _cpu_body(m.checkpoint()),
        "newMemoryState": m.memory.state.to_dict() if m.memory is not None else None,
        "plan": plan.to_json(),
    })


def _cpu_body(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("policyName", "defaultCpuSet", "reservedCpuSet", "entries")
            if k in body}


def _switch(plugin: Plugin, config: Config, plan: ReconfigurationPlan) -> None:
    """Serve with the plan's managers under ``config`` and write their state now."""
    m = plan.manager
    assert m is not None
    plugin.config = config
    plugin.policy = m.policy
    plugin.manager = m
    if plugin.explainer is not None:
        from nri_cpumgr.explain.explainer import Explainer

        plugin.explainer = Explainer(m, config)
    plugin.checkpoint.save(m.checkpoint())
    if m.memory is not None:
        plugin.memory_checkpoint.save(m.memory.state.to_dict())


def _plan(plugin: Plugin, new: Config,
          containers: Mapping[str, Any] | None = None) -> ReconfigurationPlan:
    plugin.attach_owed_pod_specs()  # (the running pods as a Synchronize with facts saw them)
    m = plugin.manager
    return plan_reconfiguration(
        plugin.machine, plugin.config, new, m.containers if containers is None else containers,
        m.shared_pool() if m.static else None,
        getattr(m.policy, "reserved_cpus", CPUSet()),
        m.memory.state.to_dict() if m.memory is not None else None,
        pod_pools_of(m.state.assignments))


async def reconfigure(plugin: Plugin, new: Config, source: str = "config file") -> str:
    """Change the running plugin's config to ``new`` (the module docstring). Returns the
    result (also counted in ``nri_cpumgr_reconfigurations_total``): ``applied``,
    ``unchanged``, ``invalid``, ``refused`` or ``rolled-back``. Never raises for a bad
    config or a failed update."""
    result = await _reconfigure(plugin, new, source)
    plugin.metrics.reconfiguration(result)
    return result


async def _reconfigure(plugin: Plugin, new: Config, source: str) -> str:
    if plugin.refused is not None or plugin.provisional or not plugin.synchronized:
        why = ("the plugin is not serving a runtime yet (the new config is read at the next "
               "start)")
        log.error("reconfiguration from %s refused: %s", source, why)
        event("Warning", "ReconfigurationRefused", why)
        return "refused"
    old = plugin.config
    target, restart = effective(old, dataclasses.replace(new, **plugin.overrides))
    if restart:
        log.warning("reconfiguration from %s: %s change only at the next restart", source,
                    ", ".join(restart))
    changes = config_changes(old, target)
    if not changes:
        log.info("reconfiguration from %s: no change to the resource managers", source)
        return "unchanged"
    try:
        plan = _plan(plugin, target)
    except ConfigError as e:
        log.error("reconfiguration from %s refused: %s; keeping the running config", source, e)
        event("Warning", "ReconfigurationInvalid", str(e))
        return "invalid"
    send = _sender(plugin)
    if send is None and plan.manager is not None and plan.manager.static \
            and plugin.runtime_id is not None:
        # from policy none: no update path was chosen at Configure; choose it now
        plugin._choose_update_mode(*plugin.runtime_id, static=True)
        send = _sender(plugin)
    if send is None and plan.moved:
        why = (f"{len(plan.moved)} container(s) must be updated and the shared pool update "
               f"mode is {plugin.pool_sync.mode if plugin.pool_sync else 'reply'}: "
               "reconfiguration needs the cri or async path")
        log.error("reconfiguration from %s refused: %s; keeping the running config", source,
                  why)
        event("Warning", "ReconfigurationRefused", why)
        return "refused"
    s = plan.summary()
    log.info("reconfiguration from %s: %s; plan: %s", source,
             ", ".join(f"{k} {o!r} -> {n!r}" for k, (o, n) in changes.items()),
             ", ".join(f"{k} {v}" for k, v in s.items()))
    for c in plan.containers:
        if c.changed:
            log.info("reconfiguration: %s %s %s: cpus %s -> %s%s", c.action, c.pod,
                     c.container, c.cpus_before, c.cpus_after,
                     f" ({c.reason})" if c.reason else "")
    for r in plan.refused:
        log.warning("reconfiguration: %s %s would be refused by the new config (%s); it "
                    "keeps running on the shared pool", r.pod, r.container, r.error)
    try:
        record(plugin, old, target, plan)
    except OSError as e:
        why = f"cannot record the plan in {old.stateDirectory}: {e.strerror or e}"
        log.error("reconfiguration from %s refused: %s", source, why)
        event("Warning", "ReconfigurationRefused", why)
        return "refused"
    sync = plugin.pool_sync
    if sync is not None:
        sync.disconnected()  # (its targets were the old pool's)
    _switch(plugin, target, plan)
    journal = Checkpoint(target.state_path(PLAN_NAME))
    done: set[str] = set()
    try:
        n = await apply_steps(plugin, plan, send, done)
    except ApplyError as e:
        log.error("reconfiguration from %s failed: %s; rolling back to the previous config",
                  source, e)
        event("Warning", "ReconfigurationRolledBack", f"{e}; back to the previous config")
        try:
            back = _plan(plugin, old, _as_applied(plugin, plan, done))
            _switch(plugin, old, back)
            await apply_steps(plugin, back, send)
        except (ApplyError, ConfigError, OSError) as e2:
            log.error("rollback incomplete: %s; the next Synchronize restores the state",
                      e2)
        _remove(journal)
        plugin._connect_pool_sync()
        return "rolled-back"
    _remove(journal)
    plugin._connect_pool_sync()
    log.info("reconfiguration from %s applied: %d container(s) updated, %d refused by the "
             "new config", source, n, len(plan.refused))
    event("Normal", "Reconfigured", f"{', '.join(changes)} changed; {n} container(s) updated")
    return "applied"


def _as_applied(plugin: Plugin, plan: ReconfigurationPlan, done: set[str]) -> dict[str, Any]:
    """The tracked containers as the runtime has them after a partial apply: those of
    ``plan`` not updated (not in ``done``) where they were before it, the others (and
    containers created meanwhile) as the new manager has them."""
    rows = {c.id: c for c in plan.containers if c.changed}
    out = {}
    for cid, t in plugin.manager.containers.items():
        c = rows.get(cid)
        if c is not None and cid not in done:
            t = dataclasses.replace(
                t, exclusive=c.exclusive_before,
                applied=c.cpus_before if c.exclusive_before else None, mems=c.mems_before)
        out[cid] = t
    return out


def _remove(cp: Checkpoint) -> None:
    try:
        cp.path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.error("cannot remove %s: %s", cp.path, e.strerror or e)


# ------------------------------------------------------------------ after a crash
@dataclasses.dataclass(slots=True)
class Resume:
    """A recorded plan found at start-up: ``direction`` is ``forward`` (the config is the
    new one: the new state is restored) or ``back`` (the config is the old one again)."""

    path: Checkpoint
    direction: str
    cpu_body: dict[str, Any]
    memory_body: dict[str, Any] | None


def resume_state(config: Config) -> Resume | None:
    """The recorded plan of a reconfiguration a dead instance left unfinished, matched
    against ``config``; None when there is none. A recorded plan that matches neither its
    old nor its new config (the file changed again) is removed with a warning: the
    checkpoint is then restored as usual."""
    cp = Checkpoint(config.state_path(PLAN_NAME))
    try:
        doc = cp.load()
    except CheckpointError as e:
        log.error("%s; ignoring the interrupted reconfiguration", e)
        _remove(cp)
        return None
    if not doc:
        return None
    mine = decision_values(config)
    if mine == doc.get("newConfig"):
        return Resume(cp, "forward", doc["newCpuState"], doc.get("newMemoryState"))
    if mine == doc.get("oldConfig"):
        return Resume(cp, "back", doc["oldCpuState"], doc.get("oldMemoryState"))
    log.warning("an interrupted reconfiguration was recorded for another config: ignored")
    _remove(cp)
    return None


def resume_updates(plugin: Plugin, updates: list[Any]) -> None:
    """After the Synchronize reply of a resumed plan: send ``updates`` (NRI
    ``ContainerUpdate`` messages the Synchronize decided) through the update path, then
    remove the recorded plan (on the event loop; without one, now and synchronously)."""
    res = plugin.resume
    assert res is not None
    plugin.resume = None
    send = _sender(plugin)

    async def run() -> None:
        groups: dict[tuple[str, str, int | None], list[str]] = {}
        for u in updates:
            cpu = u.linux.resources.cpu
            quota = cpu.quota.value if cpu.HasField("quota") else None
            groups.setdefault((cpu.cpus, cpu.mems, quota), []).append(u.container_id)
        try:
            for (cpus, mems, quota), ids in groups.items():
                if send is None:
                    break
                plugin.moving |= set(ids)
                try:
                    failed = await send(CPUSet.parse(cpus),
                                        [(cid, mems, quota) for cid in ids])
                finally:
                    plugin.moving -= set(ids)
                for cid, why in failed.items():
                    log.error("resumed reconfiguration: container %s: %s", cid, why)
        finally:
            _remove(res.path)
        what = "completed" if res.direction == "forward" else "rolled back"
        log.info("interrupted reconfiguration %s after the restart: %d container(s) updated",
                 what, len(updates))
        event("Normal", "ReconfigurationResumed",
              f"interrupted reconfiguration {what}; {len(updates)} container(s) updated")
        plugin.metrics.reconfiguration("resumed")

    try:
        asyncio.get_running_loop().create_task(run())
    except RuntimeError:
        asyncio.run(run())
