"""The NRI plugin's request handlers (the glue between transport and managers).

Each handler copies what it needs out of the request (:func:`container_info`), asks the
:class:`~nri_cpumgr.cm.container_manager.ContainerManager` for a decision, turns it into NRI
messages, logs one line, and schedules a checkpoint write for after the reply (after a crash
the runtime's Synchronize shows what the lost write had, so the write is off the critical
path), except for a release, which the runtime cannot show: written before its reply
(docs/concepts/crash-after-a-change.md).

A reply carries what the container being created needs, never updates of other containers:
when the shared pool changes, :class:`~nri_cpumgr.poolsync.SharedPoolSync` moves the
shared-pool containers later, coalesced, through CRI UpdateContainerResources calls on a
worker thread (``cri``) or the plugin's own UpdateContainers calls (``async``), as
``sharedPoolUpdateMode`` and the runtime decide (``sharedPoolShrinkDelay``,
``sharedPoolGrowDelay``, ``sharedPoolUpdateBatchSize``; ``reply``: in replies).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nri_cpumgr import aio as asyncio  # (asyncio at the first use: nri_cpumgr.aio)
from nri_cpumgr.adopt import kubelet_state_absent
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.checkpoint import (
    BackgroundWriter,
    Checkpoint,
    CheckpointError,
    KubeletCheckpointFound,
)
from nri_cpumgr.cm.container_manager import AdmissionError, Decision
from nri_cpumgr.config import Config, ConfigError, parse_config
from nri_cpumgr.config.model import with_source
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.managers import (  # noqa: F401 - shared with the planner, re-exported
    build_container_manager,
    build_memory_manager,
    build_policy,
    build_topology_manager,
    restore_memory_state,
    restore_state,
)
from nri_cpumgr.metrics import Metrics
from nri_cpumgr.paths import exists
from nri_cpumgr.podmodel import GUARANTEED, QOSClass
from nri_cpumgr.podmodel.nri import (
    ContainerInfo,
    container_info,
    plain_shared,
    pod_identity,
    qos_from_resources,
)
from nri_cpumgr.podmodel.spec import PodSpecFacts
from nri_cpumgr.poolsync import (
    NodeActivity,
    SharedPoolSync,
    choose_update_mode,
    cri_endpoint,
    nri_lock_inversion,
)
from nri_cpumgr.runtime.events import EVENTS  # noqa: F401 - re-exported
from nri_cpumgr.sysfs import device_numa_node
from nri_cpumgr.topology import Machine
from nri_cpumgr.transport.stub import PluginError

log = logging.getLogger("nri_cpumgr.plugin")

CHECKPOINT_NAME = "cpu_manager_state"
MEMORY_CHECKPOINT_NAME = "memory_manager_state"
#: the shared containers of a CRI batch under way (nri_cpumgr.poolsync.cri.take_in_flight)
CRI_JOURNAL_NAME = "shared_pool_cri_in_flight"
#: a config change being applied (nri_cpumgr.runtime.reconfig.PLAN_NAME)
RECONFIGURATION_PLAN_NAME = "reconfiguration_plan"
# seconds a checkpoint write waits to gather a burst of decisions (lost on a crash in that
# window: the runtime's Synchronize restores the truth on restart)
CHECKPOINT_LINGER = 0.2
# seconds after a release's write before its reply (page cache only) until the background
# writer writes it again fsync'd: after the rest of the pod's deletion (StopPodSandbox,
# RemovePodSandbox follow within ~0.3 s), so its fsyncs do not compete with the runtime's
RELEASE_DURABLE_DELAY = 1.0
# seconds a Synchronize with Guaranteed containers waits at most for the pod spec source's
# first LIST (once per connection; below the runtime's 2 s request budget)
SYNC_SPEC_WAIT = 1.0

_LIVE_STATES = (
    nri_pb2.CONTAINER_CREATED,
    nri_pb2.CONTAINER_RUNNING,
    nri_pb2.CONTAINER_PAUSED,
    nri_pb2.CONTAINER_UNKNOWN,
)

#: ``async (UpdateContainersRequest bytes) -> failed container ids`` (the stub's
#: ``update_containers``).
Sender = Callable[[bytes], Awaitable[set[str]]]


def load_own_checkpoint(config: Config, checkpoint: Checkpoint) -> dict[str, Any] | None:
    """``checkpoint.load()`` of the plugin's CPU checkpoint in ``stateDirectory``, refusing a
    directory where the plugin would write over the kubelet's own checkpoints: the kubelet's
    state directory (:meth:`Config.kubelet_state_conflict`) or one holding the kubelet's
    ``cpu_manager_state``. Raises :class:`ConfigError` for those, :class:`CheckpointError`
    for a checkpoint that cannot be used (the start rebuilds). Used by the start and by
    ``run --check-config`` alike."""
    why = config.kubelet_state_conflict()
    if why is not None:
        raise ConfigError(f"invalid config: stateDirectory {config.stateDirectory}: {why}")
    try:
        return checkpoint.load()
    except KubeletCheckpointFound as e:  # (never written over: the kubelet's)
        raise ConfigError(f"invalid config: stateDirectory {config.stateDirectory}: {e}; the "
                          "plugin would write over it; give the plugin a directory of its "
                          "own") from None


class Plugin:
    """NRI handlers for the resource managers (see nri_cpumgr.transport.stub.Handlers)."""

    def __init__(
        self,
        config: Config,
        machine: Machine,
        *,
        accept_runtime_config: bool = False,
        sysfs_root: str = "/",
        metrics: Metrics | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        """``accept_runtime_config``: take the configuration from the runtime's Configure
        request when it carries one (a plugin launched by the runtime gets its
        ``plugin_config_path/NN-name.conf`` there). Raises :class:`ConfigError`."""
        self.machine = machine
        self.sysfs_root = sysfs_root
        self.metrics = metrics if metrics is not None else Metrics()
        self.accept_runtime_config = accept_runtime_config
        self.overrides = dict(overrides or {})
        #: How shared-pool updates reach the runtime (set by whoever owns the connection).
        self.sender: Sender | None = None
        self.pool_sync: SharedPoolSync | None = None
        #: The CRI client of ``cri`` mode (nri_cpumgr.poolsync.cri), else None.
        self.cri: Any = None
        #: ``(socket path) -> why it cannot be used, or None`` (nri_cpumgr.poolsync.cri.probe;
        #: tests replace it)
        self.cri_probe: Callable[[str], str | None] | None = None
        #: when the last pod operation was answered: a ``cri`` pass holds its next call until
        #: the node is quiet (bounded; nri_cpumgr.poolsync.activity)
        self.pod_activity = NodeActivity()
        self._save_scheduled = False
        #: work a handler left for after its answer is written (:meth:`defer_after_reply`);
        #: None: no transport runs it, the handler does it before it returns
        self._after: list[Callable[[], None]] | None = None
        #: (pod, container) messages of the last Synchronize's plain shared containers whose
        #: records are still to be built (see _finish_synchronize)
        self._plain_rest: list[tuple[nri_pb2.PodSandbox, nri_pb2.Container]] | None = None
        self._writer: BackgroundWriter | None = None
        self.synchronized = False
        #: A runtime has configured the plugin (it registered): the checkpoints may be written
        #: from then on, never by a plugin that has not met a runtime.
        self.registered = False
        # launched by the runtime, the real config arrives with Configure: until then the
        # setup is provisional and touches no checkpoint
        self.provisional = accept_runtime_config
        #: Why the plugin is inert (the runtime's config was refused), else None: it then
        #: answers every request with no adjustment and writes no checkpoint.
        self.refused: str | None = None
        #: Called with the effective config once Configure set it up (the command line
        #: starts the metrics server there when only the runtime's config names one).
        self.on_configured: Callable[[Config], None] | None = None
        #: Pod spec facts (nri_cpumgr.podsource), when ``podSpecSource`` names a source.
        self.pod_specs: Any = None
        self._pod_source: Any = None
        self._spec_wait = 0.0
        self._said_no_spec: set[str] = set()
        #: pods admitted at their sandbox whose first container has not come yet: the shared
        #: pool's shrink waits for them (_sandbox_started)
        self._sandbox_pending: set[str] = set()
        #: a Synchronize did not wait for the pod spec source: its records get the facts
        #: later (attach_owed_pod_specs)
        self._specs_owed = False
        #: a reconfiguration a dead instance left unfinished (nri_cpumgr.runtime.reconfig),
        #: completed after the runtime's Synchronize
        self.resume: Any = None
        #: (runtime name, version) of the runtime's Configure
        self.runtime_id: tuple[str, str] | None = None
        #: containers a reconfiguration is updating now (their UpdateContainer is our own
        #: CRI call: not a resize)
        self.moving: set[str] = set()
        self._setup(config, provisional=self.provisional)

    def _setup(self, config: Config, provisional: bool = False) -> None:
        """Build the managers for ``config`` and restore their checkpoints. Raises
        :class:`ConfigError` (bad config, checkpoint of another policy, unwritable state
        directory)."""
        policy = build_policy(config, self.machine)
        tm = build_topology_manager(config, self.machine)
        memory = build_memory_manager(config, self.machine)
        self.config = config
        self.policy = policy
        # (state_file: path text, pathlib not imported before the first Synchronize answer)
        self.checkpoint = Checkpoint(config.state_file(CHECKPOINT_NAME))
        self.memory_checkpoint = Checkpoint(config.state_file(MEMORY_CHECKPOINT_NAME))
        body = None
        corrupt: CheckpointError | None = None
        if not provisional:
            try:
                body = load_own_checkpoint(config, self.checkpoint)
            except CheckpointError as e:
                corrupt = e  # said once the setup is known to go on (not before a fatal exit)
        self.resume = None
        try:
            recorded = not provisional and exists(config.state_file(RECONFIGURATION_PLAN_NAME))
        except OSError:  # (a state directory it cannot search: the probe below says so)
            recorded = False
        if recorded:
            from nri_cpumgr.runtime.reconfig import resume_state

            self.resume = resume_state(config)
            if self.resume is not None:  # (the plan's state: the checkpoint may predate it)
                body, corrupt = self.resume.cpu_body, None
                log.info("an interrupted reconfiguration was recorded: resuming it (%s)",
                         self.resume.direction)
        # no checkpoint of our own: start from the kubelet's (nri_cpumgr.adopt)
        self.adoption = None
        kubelet_memory = None
        if body is None and corrupt is None and not provisional:
            body, kubelet_memory, self.adoption = adopt_seed(
                config.kubeletStateDirectory, config.cpuManagerPolicy, config.memoryManagerPolicy)
        state = restore_state(self.policy, body, self.checkpoint.file)
        if self.adoption is not None and body and body["entries"] and not state.assignments:
            self.adoption = None  # the policy rejected it (logged): the runtime is the truth
        if memory is not None:
            from nri_cpumgr.cm.memorymanager.state import MemoryState

            if provisional:
                memory.start(MemoryState())
            elif self.resume is not None and self.resume.memory_body is not None:
                memory.start(MemoryState.from_dict(self.resume.memory_body))
            elif kubelet_memory is not None:
                from nri_cpumgr.adopt.adopt import adopt_memory

                adopt_memory(memory, kubelet_memory)
            else:
                restore_memory_state(memory, self.memory_checkpoint)
        self.manager = build_container_manager(config, self.policy, state, tm, memory)
        # explanations (nri_cpumgr.explain): only when asked, written with the snapshots
        self.explainer = None
        if config.explainDecisions or log.isEnabledFor(logging.DEBUG):
            from nri_cpumgr.explain.explainer import EXPLANATIONS_NAME, Explainer

            self.explanations = Checkpoint(config.state_path(EXPLANATIONS_NAME))
            self.explainer = Explainer(self.manager, config)
        self.manager.resizer.restore(body)  # promised CPUs of resized containers
        self.manager.restore_admissions(body)  # pods admitted whole (their later containers)
        if self.pool_sync is not None:
            self.pool_sync.close()
        self.pool_sync = SharedPoolSync(
            shrink_delay=config.duration("sharedPoolShrinkDelay"),
            grow_delay=config.duration("sharedPoolGrowDelay"),
            batch_size=config.sharedPoolUpdateBatchSize,
            # "auto" is decided at Configure (the runtime's name and version); until then
            # the path that cannot deadlock any runtime
            mode="reply" if config.sharedPoolUpdateMode == "auto" else config.sharedPoolUpdateMode,
        )
        if provisional:
            return
        # the state directory must be writable, but nothing is written before a runtime has
        # configured the plugin: one started with no runtime listening leaves no checkpoint
        # behind (one of its policy would refuse the next config of another policy)
        try:
            _probe_writable(self.checkpoint)
        except OSError as e:
            where = self.checkpoint.path.parent
            try:
                not_dir = where.exists() and not where.is_dir()
            except OSError:  # (one it cannot search: the write's error says it)
                not_dir = False
            reason = "it is not a directory" if not_dir else \
                f"cannot write {self.checkpoint.path.name}: {e.strerror or e}"
            raise ConfigError(
                f"invalid config: stateDirectory {config.stateDirectory}: {reason}"
            ) from None
        self._start_pod_source(config)
        if corrupt is not None:  # (the setup goes on: a fatal error above says it alone)
            log.error("%s; rebuilding the state from the runtime's Synchronize", corrupt)
        if config.cpuManagerPolicy == "none" and config.memoryManagerPolicy == "None":
            log.warning("cpuManagerPolicy none and memoryManagerPolicy None: containers are "
                        "tracked but nothing is pinned")
        override = config.reserved_cpus_override()
        if override is not None:
            log.warning("%s", override)
        log.info(
            "policy=%s reserved=%s shared-pool=%s cpus=%s topology-manager=%s/%s memory=%s",
            self.config.cpuManagerPolicy,
            getattr(self.policy, "reserved_cpus", ""),
            self.manager.shared_pool(),
            self.machine.topology.cpus(),
            tm.policy_name,
            tm.scope_name,
            config.memoryManagerPolicy,
        )

    async def reconfigure(self, config: Config, source: str = "config file") -> str:
        """Change the config at runtime (SIGHUP, the config file changed): validate, plan,
        record, apply, roll back on failure (nri_cpumgr.runtime.reconfig.reconfigure).
        Returns the result (applied, unchanged, invalid, refused, rolled-back)."""
        from nri_cpumgr.runtime.reconfig import reconfigure

        return await reconfigure(self, config, source)

    def _device_numa(self, info: ContainerInfo) -> frozenset[int]:
        """NUMA nodes of the PCI devices behind the container's device nodes (sysfs)."""
        if not info.devices:
            return _NO_NODES
        nodes = set()
        for kind, major, minor in info.devices:
            n = _device_node(self.sysfs_root, kind, major, minor)
            if n is not None:
                nodes.add(n)
        return frozenset(nodes)

    # ------------------------------------------------------------------ after the answer
    def defer_after_reply(self) -> Callable[[], None]:
        """Called by the transport (nri_cpumgr.transport.stub) that calls the function it
        returns after each answer is written and before it reads the next request. From then
        on a handler's work that its answer does not need (the metrics, the decision's log
        line, the shared pool's re-plan in the ``async`` and ``cri`` modes, the checkpoint's
        scheduling) runs there: the runtime, waiting for the answer under its locks, does not
        wait for it (issue 34: CreateContainer within 1.2x of a Go plugin that decides
        nothing). Without such a transport (tests driving the handlers) it runs before the
        handler returns."""
        if self._after is None:
            self._after = []
        return self.after_reply

    def after_reply(self) -> None:
        """Run the work handlers left for after their answers, in the order it was left (a
        piece that fails is logged with its traceback; the rest still runs), then prepare
        the next exclusive take for the CPUs free now (ContainerManager.take_ahead) and run
        a collection that is nearly due (:func:`collect_early`)."""
        work = self._after
        while work:
            batch = work[:]
            work.clear()
            for fn in batch:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - the answer is out: log, keep going
                    log.exception("work left for after an answer failed")
        if self.synchronized and self._plain_rest is None and self.refused is None:
            try:  # (a dict lookup when no CPU was taken or released since the last answer)
                self.manager.take_ahead()
            except Exception:  # noqa: BLE001 - a create still takes its own CPUs
                log.exception("preparing the next take failed")
        collect_early()

    def _defer(self, fn: Callable[[], None]) -> None:
        if self._after is None:
            fn()
        else:
            self._after.append(fn)

    # ------------------------------------------------------------------ persistence
    def _snapshots(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        out = [(self.checkpoint, self.manager.checkpoint(encoded=True))]
        if self.manager.memory is not None:
            out.append((self.memory_checkpoint, self.manager.memory.state.to_dict()))
        if self.explainer is not None:
            out.append((self.explanations, self.explainer.snapshot()))
        return out

    def save(self, durable: bool = True) -> None:
        """Write the checkpoints now (disconnect, shutdown; a release before its reply).
        ``durable=False``: not fsync'd (nri_cpumgr.checkpoint.Checkpoint.save), safe
        against the death of this process only; the caller schedules the durable write."""
        if self._plain_rest is not None:
            self._finish_synchronize(connect=False)
        if self._after:
            self.after_reply()
        if self.provisional or self.refused is not None or not self.registered:
            return
        if self._writer is not None:
            self._writer.flush()
        for cp, body in self._snapshots():
            try:
                cp.save(body, durable)
            except OSError as e:
                _write_failed(cp, e)

    def _start_pod_source(self, config: Config) -> None:
        """(Re)start the pod spec source ``podSpecSource`` names (nri_cpumgr.podsource).
        Raises ConfigError when it cannot be set up (no API server URL or node name)."""
        self._stop_pod_source()
        self._spec_wait = config.duration("podSpecWait")
        if config.podSpecSource != "apiServer":
            from nri_cpumgr import early_list

            early_list.drop()  # (a child boot started for a document it read otherwise)
            return
        from nri_cpumgr.podsource import APIServerPodSource, PodSpecStore

        store = PodSpecStore()
        try:
            source = APIServerPodSource(store, config.apiServerURL, config.nodeName)
        except ValueError as e:
            raise ConfigError(f"invalid config: {e}") from None
        if not self.synchronized:  # (its stream after the first Synchronize's answer)
            store.answered.clear()
        source.start()
        self.pod_specs, self._pod_source = store, source
        log.info("pod spec source: watching the pods of node %s at %s (wait up to %s)",
                 source.node, source.url.geturl(), config.podSpecWait)

    def _stop_pod_source(self) -> None:
        if self._pod_source is not None:
            self._pod_source.stop()
        self.pod_specs = self._pod_source = None

    def _spec_facts(self, pod_uid: str, qos: QOSClass) -> PodSpecFacts | None:
        """The spec facts of the pod ``pod_uid`` of a container being created, when a source
        has them (only a Guaranteed container under the static CPU or Memory Manager policy
        can be decided differently with them: its pod is admitted whole); waits at most
        ``podSpecWait`` for a pod the connected watch has not shown yet. For
        :func:`container_info`, which asks once it knows the uid and QoS class."""
        store = self.pod_specs
        if self._specs_owed:
            self.attach_owed_pod_specs()
        if store is None or qos is not GUARANTEED or not self.manager.managed:
            return None
        return store.wait(pod_uid, self._spec_wait)

    def _no_spec_facts(self, info: ContainerInfo) -> None:
        """``info``, Guaranteed, got no spec facts from the source: it is decided from NRI
        alone, container by container (said once per pod)."""
        if info.pod_uid in self._said_no_spec or self.pod_specs is None:
            return
        if len(self._said_no_spec) > 4096:
            self._said_no_spec.clear()
        self._said_no_spec.add(info.pod_uid)
        log.warning("pod %s/%s: no pod spec from the %s source (%s); deciding from NRI "
                    "alone", info.namespace, info.pod_name, self.config.podSpecSource,
                    "not connected" if not self.pod_specs.connected else
                    f"not shown within {self.config.podSpecWait}")

    def attach_owed_pod_specs(self) -> None:
        """After a Synchronize that did not wait for the pod spec source (see
        :meth:`_with_pod_specs`): once its first LIST is in, the tracked Guaranteed
        containers get their pods' facts (a later reconfiguration plans with them)."""
        store = self.pod_specs
        if not self._specs_owed or store is None or store.synced_at is None:
            return
        self._specs_owed = False
        n = self.manager.attach_pod_specs(store.get)
        log.debug("pod spec source: facts attached to %d containers of the last "
                  "synchronize", n)

    def _with_pod_specs(self, infos: list[ContainerInfo]) -> list[ContainerInfo]:
        """A Synchronize's Guaranteed containers with their pods' spec facts (the watch's
        first LIST awaited at most ``podSpecWait`` or :data:`SYNC_SPEC_WAIT`), so that a
        restarted plugin does not admit a pod-level pod's shared containers as exclusive
        ones."""
        store = self.pod_specs
        if not self.manager.static or not any(
                i.qos is QOSClass.GUARANTEED for i in infos):
            return infos
        if self.adoption is None and store.synced_at is None \
                and not self.manager.needs_pod_specs(infos):
            # a restart: the checkpoint gives every Guaranteed container its assignment
            # back, which no fact changes; the records get the facts after the first LIST
            log.debug("synchronize: the state knows every Guaranteed container; not waiting "
                      "for the %s source's first LIST", self.config.podSpecSource)
            self._specs_owed = True
            return infos
        if not store.wait_synced(max(self._spec_wait, SYNC_SPEC_WAIT)):
            log.warning("synchronize: no pod spec from the %s source yet; deciding from NRI "
                        "alone", self.config.podSpecSource)
            return infos
        source = self._pod_source
        if store.listed_early and source is not None and any(
                i.qos is QOSClass.GUARANTEED and store.get(i.pod_uid) is None for i in infos):
            # the LIST made at the start lacks a pod: created since? A fresh LIST, as
            # without that one (its facts are used for the others if it does not come)
            source.refresh()
            store.wait_synced(max(self._spec_wait, SYNC_SPEC_WAIT))
        out = []
        for i in infos:
            f = store.get(i.pod_uid) if i.qos is QOSClass.GUARANTEED else None
            out.append(i.with_pod_spec(f) if f is not None else i)
        return out

    def close(self) -> None:
        """Write the final state and stop the background writer."""
        self._stop_pod_source()
        self.save()
        if self.cri is not None:
            self.cri.close()
            self.cri = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _changed(self, delay: float = CHECKPOINT_LINGER) -> None:
        """Persist after the reply has gone out: the snapshot is taken on the event loop
        once the handler returned, the write (fsync) happens on the writer thread. Without
        an event loop (tests), write now."""
        if self._save_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.save()
            return
        self._save_scheduled = True
        if self._writer is None:
            self._writer = BackgroundWriter(_write_failed)

        def snapshot() -> None:
            self._save_scheduled = False
            if self._writer is not None:
                for cp, body in self._snapshots():
                    self._writer.submit(cp, body)

        # one snapshot per burst: taking it costs O(tracked containers) on the event loop
        loop.call_later(delay, snapshot)

    # ------------------------------------------------------------------ NRI handlers
    def configure(self, req: nri_pb2.ConfigureRequest) -> None:
        """Take the runtime's config when launched by it. A config it refuses does not fail
        Configure (containerd 1.7 exits when a plugin fails it: one typo would take the
        node's runtime down): the refusal is logged as an ERROR and the plugin stays inert
        (:attr:`refused`: no adjustment, no checkpoint, /readyz 503)."""
        if self.accept_runtime_config:
            try:
                if req.config.strip():
                    source = _runtime_config_source()
                    cfg = parse_config(req.config, source)
                    try:
                        self._setup(cfg.model_copy(update=self.overrides))
                    except ConfigError as e:
                        raise with_source(e, source) from None
                    log.info("configuration taken from the runtime's Configure request")
                elif self.provisional:
                    self._setup(self.config)
                self.provisional = False
                self.refused = None
                if self.on_configured is not None:
                    self.on_configured(self.config)
                # containerd 1.7 sends a launched plugin no Synchronize: the state (restored,
                # adopted or empty) is on disk right after the reply all the same
                self.registered = True
                self._changed(delay=0.0)
            except ConfigError as e:
                self.refused = str(e)
                log.error("%s; the plugin stays inert (pins nothing, writes no state) until "
                          "the config is fixed and the runtime restarts it", e)
        extra = ""
        if req.request_timeout:
            extra = f" registration-timeout={req.registration_timeout}ms " \
                    f"request-timeout={req.request_timeout}ms"
        log.info("configure runtime=%s %s%s", req.runtime_name, req.runtime_version, extra)
        self.runtime_id = (req.runtime_name, req.runtime_version)
        self._choose_update_mode(req.runtime_name, req.runtime_version)
        if self.refused is None:
            self.registered = True
            if self._writer is None:  # its thread starts here, not inside Synchronize
                self._writer = BackgroundWriter(_write_failed)
        self.metrics.connection(True, False)

    def _choose_update_mode(self, runtime_name: str, runtime_version: str,
                            static: bool | None = None) -> None:
        """The shared-pool update path for this runtime (nri_cpumgr.poolsync.runtimes): the
        CRI socket (``containerRuntimeEndpoint``, else the runtime's default) is checked
        with one ``connect`` unless the mode is ``reply``. ``static``: decide as for the
        static policy whatever the running one (a reconfiguration from policy none)."""
        if self.pool_sync is None or self.refused is not None or not (
                self.manager.static if static is None else static):
            return
        configured = self.config.sharedPoolUpdateMode
        endpoint = cri_endpoint(self.config.containerRuntimeEndpoint, runtime_name)
        why_not: str | None = "not checked (reply)"
        if configured in ("auto", "async") \
                and nri_lock_inversion(runtime_name, runtime_version) is False:
            # async whatever the socket says (containerd 2.4+): no probe, no CRI module
            why_not = "not checked (async)"
        elif configured != "reply":
            if endpoint is None:
                why_not = (f"no CRI socket known for runtime {runtime_name or '?'} "
                           f"(containerRuntimeEndpoint {self.config.containerRuntimeEndpoint!r})")
            else:
                probe = self.cri_probe
                if probe is None:
                    from nri_cpumgr.poolsync.cri import probe
                why_not = probe(endpoint)
        choice = choose_update_mode(configured, runtime_name, runtime_version, why_not)
        if self.cri is not None and (choice.mode != "cri" or self.cri.endpoint != endpoint):
            self.cri.close()
            self.cri = None
        if choice.mode == "cri" and self.cri is None:
            from nri_cpumgr.poolsync.cri import CRIUpdater

            self.cri = CRIUpdater(endpoint, journal=self.config.state_path(CRI_JOURNAL_NAME),
                                  activity=self.pod_activity)
            self.cri.warm()  # grpcio's import and the channel, on the worker thread
        self.pool_sync.set_mode(choice.mode)
        where = f" on {endpoint}" if choice.mode == "cri" else ""
        if choice.overruled:
            log.error("shared pool update mode %s%s, not %s as configured (%s)", choice.mode,
                      where, configured, choice.reason)
        elif choice.hazard:
            log.warning("shared pool update mode async (%s): under container churn this "
                        "runtime can hang for good, every container operation of the node "
                        "with it; use sharedPoolUpdateMode auto, cri or reply", choice.reason)
        elif choice.degraded:
            log.warning("shared pool update mode reply (%s): every shared container's update "
                        "rides in a Guaranteed container's creation, and released CPUs come "
                        "back only with the next container operation of the node; mount the "
                        "runtime's CRI socket (or set containerRuntimeEndpoint) for the cri "
                        "path", choice.reason)
        else:
            log.info("shared pool update mode %s%s (%s)", choice.mode, where, choice.reason)

    def synchronize(
        self, pods: Sequence[nri_pb2.PodSandbox], containers: Sequence[nri_pb2.Container]
    ) -> list[nri_pb2.ContainerUpdate]:
        if self.refused is not None:
            return []
        t0 = time.perf_counter()
        self._plain_rest = None  # (a Synchronize replaces the state, and what was pending)
        specs = self.pod_specs
        if specs is not None and not (specs.answered.is_set() and specs.needed.is_set()):
            # the watch's first LIST once this answer is out (unless a wait asks sooner),
            # its stream then too
            self._defer(lambda: (specs.needed.set(), specs.answered.set()))
        by_id = {p.id: p for p in pods}
        infos, stopped = [], []
        # the containers that can only be shared (most of a node) are decided from four
        # strings; their records are built after the reply (_finish_synchronize): the
        # runtime holds its NRI lock, for every container operation of the node, until then
        plain: list[tuple[str, str, str, str]] = []
        rest: list[tuple[nri_pb2.PodSandbox, nri_pb2.Container]] = []
        manager = self.manager
        fast = self.adoption is None and manager.plain_shared_possible()
        pinned = manager.pinned_pods() if fast else set()
        # thousands of new objects, none of them garbage yet: no collection while they are
        # built (one would walk them all, several times over)
        paused = gc.isenabled()
        gc.disable()
        try:
            for c in containers:
                p = by_id.get(c.pod_sandbox_id)
                if p is None:
                    continue
                if c.state not in _LIVE_STATES:
                    stopped.append(container_info(p, c))
                    continue
                if fast:
                    got = plain_shared(p, c)
                    if got is not None and got[0] not in pinned:
                        plain.append((c.id, *got))
                        rest.append((p, c))
                        continue
                infos.append(container_info(p, c))
            if self.pod_specs is not None:
                infos = self._with_pod_specs(infos)
            return self._synchronize(t0, pods, containers, infos, stopped, plain, rest)
        finally:
            if paused:
                gc.enable()

    def _finish_synchronize(self, connect: bool = True) -> None:
        """The second half of a Synchronize, after its reply: the records of the ``plain``
        containers, the shared-pool sync, the checkpoint. Runs right after the reply went out
        (call_soon: before the next request is read), or first thing in the next handler."""
        rest, self._plain_rest = self._plain_rest, None
        if rest is None:
            return
        paused = gc.isenabled()
        gc.disable()
        try:
            self.manager.track_plain([container_info(p, c) for p, c in rest])
        finally:
            if paused:
                gc.enable()
        if connect:  # (not when the plugin is shutting down: no event loop then)
            self._connect_pool_sync()
            self._changed(delay=0.0)  # the rebuilt state is on disk right after the reply

    def _synchronize(
        self,
        t0: float,
        pods: Sequence[nri_pb2.PodSandbox],
        containers: Sequence[nri_pb2.Container],
        infos: list[ContainerInfo],
        stopped: list[ContainerInfo],
        plain: list[tuple[str, str, str, str]],
        rest: list[tuple[nri_pb2.PodSandbox, nri_pb2.Container]],
    ) -> list[nri_pb2.ContainerUpdate]:
        live_pods = {p.uid or p.id for p in pods}
        devices = {i.id: self._device_numa(i) for i in infos if i.devices}
        if self.adoption is not None:  # the kubelet's assignments meet the runtime's truth
            self.adoption.reconcile(self.manager.state, infos, stopped, live_pods)
            self.adoption = None
        updates = self.manager.synchronize(infos, devices, live_pods=live_pods, stopped=stopped,
                                           plain=plain)
        self.synchronized = True
        self.registered = True  # (a Synchronize comes from a runtime, after its Configure)
        shapes: dict[tuple, nri_pb2.ContainerUpdate] = {}  # (most: the one shared pool)
        reply = [_update(d, shapes) for d in updates.values()]
        if self.resume is not None:  # an interrupted reconfiguration: its updates after the
            from nri_cpumgr.runtime.reconfig import can_send, resume_updates  # reply

            if can_send(self):
                resume_updates(self, reply)
                reply = []
            else:
                resume_updates(self, [])
        self._plain_rest = rest
        try:
            asyncio.get_running_loop().call_soon(self._finish_synchronize)
        except RuntimeError:  # no event loop (tests): now
            self._finish_synchronize()
        _after_large_request(len(containers))
        self._observe("Synchronize", t0)
        self.metrics.connection(True, True)
        log.info(
            "synchronize pods=%d containers=%d updates=%d shared-pool=%s exclusive=%s (%.2f ms)",
            len(pods), len(infos) + len(plain), len(updates), self.manager.shared_pool(),
            self.manager.state.assigned_cpus(), (time.perf_counter() - t0) * 1e3,
        )
        return reply

    def _connect_pool_sync(self) -> None:
        """After a Synchronize reply every shared container is on the shared pool."""
        if self.pool_sync is None or not self.manager.static:
            return
        send: Any = self.sender
        if self.pool_sync.mode == "cri":  # (its client exists once a runtime configured us)
            send = self.cri.send if self.cri is not None else None
        if send is None:
            return
        pool = self.manager.shared_pool()
        entry = (pool, "")  # most shared containers: the pool's cpuset, mems left alone
        shared = {
            cid: (pool, _mems_text(t.mems)) if t.mems is not None else entry
            for cid, t in self.manager.containers.items()
            if t.shared and not t.stopped
        }
        if self.pool_sync.mode == "cri" and self.cri is not None \
                and self.cri.journal is not None:
            from nri_cpumgr.poolsync.cri import take_in_flight

            # a batch a dead instance left unfinished: the runtime may show a cpuset its
            # cgroup does not have (a canceled call), so they are sent again, as a shrink
            unknown = CPUSet.from_mask(pool.mask | 1 << 4095)
            again = [cid for cid in take_in_flight(self.cri.journal) if cid in shared]
            for cid in again:
                shared[cid] = (unknown, shared[cid][1])
            if again:
                log.info("shared pool: %d containers of an interrupted CRI batch are sent "
                         "again", len(again))
        self.pool_sync.connected(send, pool, shared)

    def _pool_changed(self) -> None:
        if self.pool_sync is not None and self.manager.static:
            self.pool_sync.set_target(self.manager.shared_pool())

    def create_container(
        self, req: nri_pb2.CreateContainerRequest
    ) -> nri_pb2.CreateContainerResponse:
        if self._plain_rest is not None:
            self._finish_synchronize()
        if self._after:  # (an answer that could not be written: its work is still due)
            self.after_reply()
        if self.refused is not None:
            return nri_pb2.CreateContainerResponse()
        t0 = time.perf_counter()
        if self.pod_specs is None:
            info = container_info(req.pod, req.container)
        else:  # (the facts asked for while the info is built: one ContainerInfo, not two)
            info = container_info(req.pod, req.container, self._spec_facts)
            if info.pod_spec is None and info.qos is GUARANTEED \
                    and self.manager.managed:
                self._no_spec_facts(info)
        if info.qos is GUARANTEED and _contradicts_guaranteed(info):
            log.warning(
                "pod %s/%s container %s: the kubelet's cgroup parent says Guaranteed but the "
                "resources say %s (cpu request %sm, limit %sm, memory limit %s); following the "
                "cgroup parent", info.namespace, info.pod_name, info.name,
                qos_from_resources(info.resources), info.resources.cpu_request_milli,
                info.resources.cpu_limit_milli, info.resources.memory_limit,
            )
        if info.pod_resources is not None and log.isEnabledFor(logging.DEBUG):
            log.debug("pod %s/%s pod-resources=%s overhead=%s", info.namespace,
                      info.pod_name, info.pod_resources, info.pod_overhead)
        try:
            admit = self.explainer.admit if self.explainer is not None else self.manager.admit
            d = admit(info, self._device_numa(info) if info.devices else _NO_NODES)
        except AdmissionError as e:
            self._count(info, False, time.perf_counter() - t0)
            log.warning(
                "create pod=%s/%s container=%s qos=%s refused: %s",
                info.namespace, info.pod_name, info.name, info.qos, e,
            )
            # the kubelet's reason and text, then which container: the runtime's log of a
            # failed CreateContainer shows only this text
            raise PluginError(f"{e} (pod {info.namespace}/{info.pod_name}, uid {info.pod_uid}, "
                              f"container {info.name})") from None
        admitted_s = time.perf_counter() - t0
        ps = self.pool_sync
        if ps is not None and not self.manager.static:
            ps = None
        if d.pod_updates or (ps is not None and ps.mode == "reply"):
            resp = _create_answer(d.cpus, d.exclusive, d.mems)  # (an answer of its own)
            for u in d.pod_updates:  # pod-level: the pod's shared containers follow its pool
                resp.update.append(_update(u))
        else:  # the adjustment alone: a message shared by every answer that gives it
            resp = _shared_create_answer(d.cpus, d.exclusive, d.mems)
        if ps is not None:
            if ps.mode == "reply":  # (the answer carries the due updates)
                self._pool_after_create(ps, info, d)
                ps.into_reply(resp)
            else:  # (a timer sends them, after the answer anyway)
                self._defer(lambda: self._pool_after_create(ps, info, d))
        handled_s = time.perf_counter() - t0
        self._defer(lambda: self._after_create(info, d, admitted_s, handled_s))
        return resp

    def _pool_after_create(self, ps: SharedPoolSync, info: ContainerInfo, d: Decision) -> None:
        """The shared pool's sync learns of a created container (exclusive: it leaves the
        pool; shared: it follows the pool) and of the pool after it."""
        if self._sandbox_pending:
            self._sandbox_done(ps, info.pod_uid)
        if d.exclusive:
            ps.discard(info.id)
            ps.allocated(info.id)
        elif d.cpus is not None and self.manager.is_shared(info.id):
            # (a pod-level pod's shared containers follow their pod's pool instead)
            ps.add(info.id, d.cpus, _mems_text(d.mems), created=True)
        self._pool_changed()

    def _after_create(self, info: ContainerInfo, d: Decision, admitted_s: float,
                      handled_s: float) -> None:
        """A created container's counters, log lines, checkpoint and request duration."""
        self._count(info, True, admitted_s)
        self._log_decision("create", info, d)
        if self.manager.pod_level is not None:
            self.manager.pod_level.log_decision(info, d)
        self._changed()
        self._observed("CreateContainer", handled_s)

    def update_container(
        self, req: nri_pb2.UpdateContainerRequest
    ) -> nri_pb2.UpdateContainerResponse:
        if self._plain_rest is not None:
            self._finish_synchronize()
        if self._after:  # (an answer that could not be written: its work is still due)
            self.after_reply()
        if self.refused is not None:
            return nri_pb2.UpdateContainerResponse()
        t0 = time.perf_counter()
        resp = nri_pb2.UpdateContainerResponse()
        cid = req.container.id
        d = self._resize(req)
        if d is not None:
            resp.update.append(_update(d))
            if self.pool_sync is not None and self.manager.is_shared(cid) and d.cpus:
                self.pool_sync.add(cid, d.cpus, _mems_text(d.mems))
        if self.pool_sync is not None and self.manager.static:
            self.pool_sync.into_reply(resp)
        self._observe("UpdateContainer", t0)
        return resp

    def _resize(self, req: nri_pb2.UpdateContainerRequest) -> Decision | None:
        """The manager's answer to an UpdateContainer, resizing exclusive CPUs when the new
        resources ask for it (nri_cpumgr.cm.podresources); a refused resize fails the call
        with the kubelet's reason, so the runtime applies none of it."""
        from nri_cpumgr.cm.podresources.resize import ResizeRefused
        from nri_cpumgr.podmodel.nri import resources_from_nri

        cid = req.container.id
        new = resources_from_nri(req.linux_resources) if req.HasField("linux_resources") \
            and cid not in self.moving else None
        t = self.manager.containers.get(cid)
        before = t.applied if t is not None else None
        try:
            d = self.manager.update(cid, new)
        except ResizeRefused as e:
            if t is not None:
                log.warning("resize pod=%s/%s container=%s refused, keeps cpus=%s: %s",
                            t.info.namespace, t.info.pod_name, t.info.name, before, e)
            raise PluginError(str(e)) from None
        if t is not None and d is not None and t.exclusive and before != t.applied:
            log.info("resize pod=%s/%s container=%s cpus=%s -> %s shared-pool=%s",
                     t.info.namespace, t.info.pod_name, t.info.name, before, t.applied,
                     self.manager.shared_pool())
            self._pool_changed()
            self._changed()
        return d

    def stop_container(self, req: nri_pb2.StopContainerRequest) -> nri_pb2.StopContainerResponse:
        if self._plain_rest is not None:
            self._finish_synchronize()
        if self._after:  # (an answer that could not be written: its work is still due)
            self.after_reply()
        if self.refused is not None:
            return nri_pb2.StopContainerResponse()
        t0 = time.perf_counter()
        self.manager.stop(req.container.id)
        resp = nri_pb2.StopContainerResponse()
        if self.pool_sync is not None:
            self.pool_sync.discard(req.container.id)
            if self.manager.static:
                self.pool_sync.into_reply(resp)
        self._observe("StopContainer", t0)
        return resp

    def state_change(self, req: nri_pb2.StateChangeEvent) -> None:
        if self._plain_rest is not None:
            self._finish_synchronize()
        if self._after:  # (an answer that could not be written: its work is still due)
            self.after_reply()
        if self.refused is not None:
            return
        t0 = time.perf_counter()
        try:
            self._state_change(req)
        finally:
            self._observe("StateChange", t0)

    def _state_change(self, req: nri_pb2.StateChangeEvent) -> None:
        ps = self.pool_sync
        if req.event == nri_pb2.POST_START_CONTAINER:
            if ps is not None:
                ps.started(req.container.id)
            return
        if req.event == nri_pb2.RUN_POD_SANDBOX:
            self._sandbox_started(req.pod)
            return
        before = self.manager.shared_pool()
        t = self.manager.containers.get(req.container.id)
        uid = t.info.pod_uid if t is not None else req.pod.uid
        held = self._held(uid)
        if req.event == nri_pb2.REMOVE_CONTAINER:
            self.manager.remove(req.container.id)
            if ps is not None:
                ps.discard(req.container.id)
            what = (f"remove pod={req.pod.namespace}/{req.pod.name} "
                    f"container={req.container.name}")
        elif req.event in (nri_pb2.STOP_POD_SANDBOX, nri_pb2.REMOVE_POD_SANDBOX):
            if ps is not None:
                for cid in self.manager.pod_container_ids(uid):
                    ps.discard(cid)
                if self._sandbox_pending:
                    self._sandbox_done(ps, uid)
            self.manager.remove_pod(uid)
            if self.explainer is not None:
                self.explainer.forget_pod(uid)
            what = f"{nri_pb2.Event.Name(req.event).lower()} pod={req.pod.namespace}/{req.pod.name}"
        else:
            return
        after = self.manager.shared_pool()
        moved = after.mask != before.mask  # (the masks: != of two 255-CPU sets walks one)
        if req.event != nri_pb2.REMOVE_POD_SANDBOX and self._held(uid) != held:
            # a release a Synchronize could not show after a crash (the runtime lists no
            # exited container, and a stopped pod sandbox until it is removed): in the file
            # before the reply, as the kubelet's state store does. Not fsync'd here: the
            # page cache keeps it through a crash of this process (the case: a machine's
            # crash takes the containers along); two fsyncs on the pod's deletion path
            # (5-30 ms under load) are made later, by the background writer
            self.save(durable=False)
            self._changed(RELEASE_DURABLE_DELAY)
        elif moved or req.event == nri_pb2.REMOVE_CONTAINER:
            self._changed()
        if moved:
            log.info("%s released: shared-pool=%s (shared containers follow)", what, after)
            self._pool_changed()

    def _sandbox_started(self, pod: nri_pb2.PodSandbox) -> None:
        """A pod's sandbox started (RunPodSandbox): a Guaranteed pod whose spec the pod spec
        source already shows is admitted whole now, as the kubelet admits a pod before it
        creates its sandbox (ContainerManager.admit_sandbox); its containers then get the
        recorded decisions. Nothing is waited for: a spec not shown yet leaves the pod to
        its first container."""
        store = self.pod_specs
        if store is None or not self.manager.managed or not self.synchronized:
            return
        uid, qos = pod_identity(pod)
        if qos is not GUARANTEED:
            return
        spec = store.get(uid)
        if spec is None:
            return
        before = self.manager.shared_pool().mask
        ex = self.explainer
        rec = (ex.admit_sandbox if ex is not None else self.manager.admit_sandbox)(
            uid, pod.name, pod.namespace, qos, spec)
        if rec is None:
            return
        if self.manager.shared_pool().mask != before:
            log.info("pod %s/%s admitted at its sandbox: shared-pool=%s", pod.namespace,
                     pod.name, self.manager.shared_pool())
            ps = self.pool_sync
            if ps is not None and self.manager.static:
                # the shrink waits for the pod as for an exclusive container's start (its
                # creation and start keep the runtime's lock free of the pass): until its
                # first container comes, its sandbox goes, or shrinkDelay bounds it
                if len(self._sandbox_pending) > 4096:
                    self._sandbox_pending.clear()
                self._sandbox_pending.add(uid)
                ps.allocated(_sandbox_key(uid))
            self._defer(self._pool_changed)
        self._changed()

    def _sandbox_done(self, ps: SharedPoolSync, pod_uid: str) -> None:
        """The pod admitted at its sandbox no longer holds the shrink back (its first
        container came, or its sandbox went)."""
        if pod_uid in self._sandbox_pending:
            self._sandbox_pending.discard(pod_uid)
            ps.discard(_sandbox_key(pod_uid))

    def _held(self, pod_uid: str) -> int:
        """How many CPU and memory assignments the pod holds (the pod-level bubble too)."""
        n = len(self.manager.state.assignments.get(pod_uid, ()))
        if self.manager.memory is not None:
            n += len(self.manager.memory.state.get_memory_assignments().get(pod_uid, ()))
        return n

    def disconnected(self) -> None:
        if self._plain_rest is not None:
            self._finish_synchronize()
        if self._after:  # (an answer that could not be written: its work is still due)
            self.after_reply()
        self.synchronized = False
        if self.pool_sync is not None:
            self.pool_sync.disconnected()
        self.metrics.connection(False, False)
        log.warning("disconnected from the runtime; state will be rebuilt on reconnect")
        self.save()

    # ------------------------------------------------------------------ metrics
    def _observe(self, method: str, t0: float) -> None:
        self._observed(method, time.perf_counter() - t0)

    def _observed(self, method: str, seconds: float) -> None:
        self.metrics.observe_request(method, seconds)
        if method not in ("UpdateContainer", "Synchronize"):  # (a pass's calls cause the former)
            self.pod_activity.touch()  # a pod operation answered: the pass yields to it

    def _count(self, info: ContainerInfo, ok: bool, seconds: float) -> None:
        """The kubelet's resource-manager counters for one admission that took ``seconds``."""
        guaranteed = info.qos is GUARANTEED
        if self.manager.static and guaranteed and info.resources.integer_cpus:
            self.metrics.pinning(ok)
        if self.manager.memory is not None and guaranteed:
            self.metrics.memory_pinning(ok)
        if self.manager.tm.policy_name != "none":
            self.metrics.admission(ok, seconds * 1e3)
        if ok and self.manager.static:
            pool = self.manager.shared_pool()
            self.metrics.set_pools(len(pool) * 1000, self.manager.state.assigned_count())

    # ------------------------------------------------------------------ logging
    def _log_decision(self, what: str, info: Any, d: Decision) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        pool = self.manager.shared_pool()
        args = (
            "%s pod=%s/%s container=%s qos=%s cpus=%s exclusive=%s shared-pool=%s (%d cpus)",
            what, info.namespace, info.pod_name, info.name, info.qos,
            d.cpus if d.cpus is not None else "-", str(d.exclusive).lower(), pool, len(pool),
        )
        try:  # after the reply is written: a record and its queueing cost ~15 us
            asyncio.get_running_loop().call_soon(log.info, *args)
        except RuntimeError:  # no loop (tests driving the handlers directly)
            log.info(*args)


def _runtime_config_source() -> str:
    """Where the runtime's config came from: its ``plugin_config_path/IDX-NAME.conf``."""
    name, idx = os.environ.get("NRI_PLUGIN_NAME"), os.environ.get("NRI_PLUGIN_IDX")
    if name and idx:
        return f"from the runtime's Configure: plugin_config_path/{idx}-{name}.conf"
    return "from the runtime's Configure"


def _mems_text(mems: CPUSet | None) -> str:
    """cpuset.mems as the shared-pool updates carry it ("" = leave alone)."""
    return str(mems) if mems else ""


def _update(d: Decision, shapes: dict[tuple, nri_pb2.ContainerUpdate] | None = None
            ) -> nri_pb2.ContainerUpdate:
    """An update keeping everything we decided for the container: cpus, no CFS quota when
    exclusive (or the kubelet's quota restored when it left exclusive CPUs), mems when
    pinned. ``shapes``: the updates already built for other containers, by (cpus,
    exclusive, quota, mems), filled as it goes: a Synchronize's hundreds of shared
    containers get copies of one message (a third of the cost of building each, issue 34)."""
    if shapes is None:
        u = _update_shape(d)
    else:
        key = (d.cpus, d.exclusive, d.quota, d.mems)
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _update_shape(d)
        u = nri_pb2.ContainerUpdate()
        u.CopyFrom(shape)
    u.container_id = d.container_id
    return u


def _update_shape(d: Decision) -> nri_pb2.ContainerUpdate:
    """:func:`_update` without the container's id."""
    u = nri_pb2.ContainerUpdate(ignore_failure=True)
    cpu = u.linux.resources.cpu
    if d.cpus:
        cpu.cpus = str(d.cpus)
    if d.exclusive:
        cpu.quota.value = -1
    elif d.quota is not None:
        cpu.quota.value = d.quota
    if d.mems:
        cpu.mems = str(d.mems)
    return u


def _create_answer(cpus: CPUSet | None, exclusive: bool,
                   mems: CPUSet | None) -> nri_pb2.CreateContainerResponse:
    """A CreateContainer answer setting the container's cpuset ``cpus`` (None: left alone),
    with no CFS quota when ``exclusive`` (kubelet >= 1.32), and its cpuset.mems ``mems``
    (None or empty: left alone)."""
    resp = nri_pb2.CreateContainerResponse()
    cpu = resp.adjust.linux.resources.cpu
    if cpus is not None:
        cpu.cpus = str(cpus)
        if exclusive:
            cpu.quota.value = -1
    if mems:
        cpu.mems = str(mems)
    return resp


#: :func:`_create_answer`, one message per adjustment, for the answers that carry nothing
#: else: the transport only serializes it, and no one changes it (a create's answer built
#: and serialized costs ~2 us; a lookup, a fifth: issue 34)
_shared_create_answer = functools.lru_cache(maxsize=256)(_create_answer)


_NO_NODES: frozenset[int] = frozenset()  # (the NUMA nodes of a container without devices)


#: the share of the collector's first threshold (new objects) past which :func:`collect_early`
#: collects
GC_EARLY = 0.75


def collect_early() -> None:
    """A collection of the young generations that is nearly due, now: called after an answer
    is written, before the next request is read, so that the collector's automatic runs
    (CPython's thresholds: every 700 new objects the collector tracks, about every 45 create
    cycles on a node of 1,000 containers, 150-400 us each) come between requests instead of inside
    a handler, where the runtime waits under its locks (issue 34: p99). Collects the
    generation the automatic run would (the first, or the first two when the second is
    due); the oldest generation is left to the automatic runs. Nothing while the collector
    is off (the start)."""
    if not gc.isenabled():
        return
    new, collections, _ = gc.get_count()
    first, second, _ = gc.get_threshold()
    if new >= first * GC_EARLY:
        gc.collect(1 if collections >= second else 0)


def _contradicts_guaranteed(info: ContainerInfo) -> bool:
    """The resources contradict a Guaranteed cgroup parent: a CPU limit that differs from
    the request, or no memory limit. (No CPU quota at all is not a contradiction: the
    kubelet's ``cpuCFSQuota: false`` drops every limit.)"""
    r = info.resources
    if r.memory_limit is None:
        return True
    return (
        r.cpu_limit_milli is not None
        and r.cpu_request_milli is not None
        and abs(r.cpu_limit_milli - r.cpu_request_milli) > 1
    )


_TRIM_AFTER = 200  # containers in a Synchronize worth giving the request's memory back for


def adopt_seed(directory: str, cpu_policy: str,
               memory_policy: str) -> tuple[Any, Any, Any]:
    """:func:`nri_cpumgr.adopt.adopt.seed`, imported only when ``directory`` holds a kubelet
    checkpoint (issue 34: a node without one starts without the adoption code)."""
    if kubelet_state_absent(directory):
        return None, None, None
    from nri_cpumgr.adopt.adopt import seed

    return seed(directory, cpu_policy, memory_policy)


def _after_large_request(containers: int) -> None:
    """Once a large Synchronize request is freed, hand the freed heap back to the system
    (glibc ``malloc_trim``): decoding 1,000 containers grows the heap by megabytes that
    the allocator would otherwise keep for the process's whole life."""
    if containers < _TRIM_AFTER:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_later(0.05, _malloc_trim)


def _malloc_trim() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _probe_writable(cp: Checkpoint) -> None:
    """Create (and remove) a file beside ``cp``'s path, creating its directory. Raises
    OSError."""
    os.makedirs(cp.directory, exist_ok=True)
    probe = os.path.join(cp.directory, f".{os.path.basename(cp.file)}.probe")
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    os.unlink(probe)


def _write_failed(cp: Checkpoint, e: OSError) -> None:
    log.error("cannot write checkpoint %s: %s", cp.path, e)


@functools.lru_cache(maxsize=1024)
def _device_node(root: str, kind: str, major: int, minor: int) -> int | None:
    return device_numa_node(root, kind, major, minor)


def _sandbox_key(pod_uid: str) -> str:
    """The pool sync's pending-start key of a pod admitted at its sandbox (no container id
    has a slash)."""
    return "sandbox/" + pod_uid
