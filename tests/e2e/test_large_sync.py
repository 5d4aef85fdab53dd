"""A Synchronize larger than ttrpc's 4 MiB message limit, on a real containerd.

60 pods whose sandboxes carry 80 KiB annotations (about 4.9 MB of state) exist before the
plugin connects, each with one container created but not started (containerd lists every
non-exited container in Synchronize: nri ``ListContainers`` skips only EXITED and UNKNOWN).

* containerd 2.1 (NRI v0.8): the runtime's ttrpc client refuses to send a message over 4 MiB
  (``OversizedMessageErr``, code ResourceExhausted) and nri pkg/adaptation/plugin.go
  ``synchronize`` retries with fewer objects per message (factor min(0.9, max/len)), sending
  ``more = true`` on every part but the last. Each intermediate part must be answered
  ``more = true`` with no updates, else the runtime drops the plugin ("plugin does not handle
  split sync requests").
* containerd 1.7 (NRI v0.6.1): no splitting; the whole state arrives as one message over
  4 MiB, which the plugin must accept.

Either way the plugin stays connected and the next containers are placed as usual. The
Guaranteed container's CreateContainer reply then carries an update for each of the 60 shared
containers, more than one 4096-byte multiplexer frame: containerd drops a connection that sends
a larger frame, so the pinning (and the 60 moved containers) also prove the frame splitting.

Also here: the pod-level resources (CRI ``LinuxPodSandboxConfig.resources`` / ``overhead``,
which the kubelet fills for every pod) reach the plugin as NRI ``pod.linux.pod_resources`` /
``pod_overhead`` in Synchronize, RunPodSandbox and CreateContainer on both versions, and
decode into :attr:`ContainerInfo.pod_resources` / ``pod_overhead``.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.podmodel.nri import ContainerInfo, container_info, pod_level_resources
from nri_cpumgr.transport.stub import Stub, event_mask
from tests.e2e.harness import cgroup_parent, milli_cpu_to_quota, milli_cpu_to_shares
from tests.e2e.plugin_run import eventually, start_plugin

PODS = 60
ANNOTATION_BYTES = 80 * 1024  # under the Kubernetes limit of 256 KiB per object
TTRPC_MAX = 4 << 20
MEM = "200Mi"
G1 = {"cpu": "1", "memory": MEM}

_PART = re.compile(r"synchronize part (\d+): (\d+) pods, (\d+) containers, (\d+) bytes; more")
_DONE = re.compile(r"synchronize with (\d+) pods, (\d+) containers, (\d+) bytes in (\d+) part")


def test_synchronize_over_4mib(containerd, cri, e2e_workdir):
    t0 = time.monotonic()
    big = {f"e2e.example.com/blob-{i}": chr(ord("a") + i) * (ANNOTATION_BYTES // 4)
           for i in range(4)}
    pods = []
    for i in range(PODS):
        pod = cri.run_pod(f"big-{i:02d}", "BestEffort", annotations=big)
        pods.append((pod, cri.create_container(pod, "app")))
    t_setup = time.monotonic() - t0

    live_pods = len(cri.list_pods())
    live_ctrs = sum(c.state != cri.pb.CONTAINER_EXITED for c in cri.list_containers())
    assert live_pods >= PODS and live_ctrs >= PODS

    since = containerd.log_offset()
    t1 = time.monotonic()
    # the shipped sharedPoolUpdateMode (auto: cri before containerd 2.4.0, async from it on)
    plugin = start_plugin(containerd, e2e_workdir)
    t_sync = time.monotonic() - t1
    try:
        log = plugin.log_text()
        done = _DONE.search(log)
        assert done, log[-3000:]
        n_pods, n_ctrs, size, n_parts = (int(g) for g in done.groups())
        assert (n_pods, n_ctrs) == (live_pods, live_ctrs)
        assert size > TTRPC_MAX  # the whole state is over ttrpc's limit
        parts = [tuple(int(g) for g in m.groups()) for m in _PART.finditer(log)]
        ctrd_log = containerd.log_text(since)
        if containerd.version == "1.7":
            # NRI v0.6.1: one message over 4 MiB, accepted; Configure carries no timeouts
            assert (n_parts, parts) == (1, [])
            assert "no timeouts given: request timeout assumed 2000 ms" in log
        else:
            # NRI v0.8: Configure carries the harness's 5 s / 2 s as milliseconds
            assert "registration timeout 5000 ms, request timeout 2000 ms" in log
            # NRI v0.8: several parts, each under 4 MiB, every pod and container once
            assert n_parts >= 2 and [p[0] for p in parts] == list(range(1, n_parts)), log
            assert all(p[3] <= TTRPC_MAX for p in parts)
            assert sum(p[1] for p in parts) < n_pods and sum(p[2] for p in parts) < n_ctrs
            assert "plugin does not handle split sync requests" not in ctrd_log
            assert re.search(r'plugin \\?"90-cpumgr\\?" connected and synchronized', ctrd_log)
        assert "failed to synchronize plugin" not in ctrd_log
        assert ctrd_log.count("synchronizing plugin") == 1  # no drop and resync
        # the handler saw every container once, and its reply put the created-but-not-started
        # containers (no cpuset: created while no plugin was there) on the shared pool
        assert f"synchronize pods={live_pods} containers={live_ctrs} updates=" in log
        ours = [cid for _, cid in pods]
        assert [cri.spec_cpus(c) for c in ours] == ["0-1"] * PODS

        # still connected: the next containers are placed; the shared containers then move
        # off the Guaranteed container's CPU through CRI UpdateContainerResources calls (cri)
        # or the plugin's own UpdateContainers calls (async; batches of
        # sharedPoolUpdateBatchSize), after its start, never in its reply
        gid = cri.create_container(cri.run_pod("g", "Guaranteed"), "app", requests=G1,
                                   limits=G1)
        cri.start_container(gid)
        assert (cri.spec_cpus(gid), cri.cgroup_cpus(gid), cri.proc_cpus(gid)) == ("1",) * 3
        be = cri.create_container(cri.run_pod("be", "BestEffort"), "app")
        cri.start_container(be)
        assert eventually(lambda: (cri.cgroup_cpus(be), cri.proc_cpus(be)),
                          ("0", "0")) == ("0", "0")
        assert cri.spec_cpus(be) == "0"
        # the synchronized containers left CPU 1 soon after (1 s bound + about 10 ms each)
        assert eventually(lambda: [cri.spec_cpus(c) for c in ours], ["0"] * PODS,
                          timeout=15) == ["0"] * PODS
        # the pass logs once its last call is answered: the specs can be seen first
        moved = re.compile(r"shared pool: \d+ containers moved to 0 in \d+ "
                           r"(CRI UpdateContainerResources|UpdateContainers) calls")
        assert eventually(lambda: bool(moved.search(plugin.log_text())), True, timeout=10), \
            plugin.log_text()[-3000:]
        assert "in the reply" not in plugin.log_text()
        assert plugin.running
        assert "connection to the runtime lost" not in plugin.log_text()
    finally:
        plugin.stop()
    print(f"\ncontainerd {containerd.version}: {PODS} pods set up in {t_setup:.1f}s; "
          f"synchronize {size} bytes in {n_parts} part(s), intermediate parts "
          f"(pods, containers, bytes) {[p[1:] for p in parts]}; plugin registered "
          f"{t_sync:.2f}s after start")


class _Recorder:
    """Stub handlers that decode what the runtime sends with the pod model (event loop thread)."""

    def __init__(self) -> None:
        self.synced: dict[str, tuple] = {}  # pod name -> pod_level_resources(pod)
        self.run: dict[str, tuple] = {}
        self.created: dict[str, ContainerInfo] = {}  # pod name -> info

    def configure(self, req: nri_pb2.ConfigureRequest) -> None:
        pass

    def synchronize(self, pods, containers):
        for p in pods:
            self.synced[p.name] = pod_level_resources(p)
        return []

    def create_container(self, req):
        self.created[req.pod.name] = container_info(req.pod, req.container)
        return nri_pb2.CreateContainerResponse()

    def update_container(self, req):
        return nri_pb2.UpdateContainerResponse()

    def stop_container(self, req):
        return nri_pb2.StopContainerResponse()

    def state_change(self, req):
        if req.event == nri_pb2.RUN_POD_SANDBOX:
            self.run[req.pod.name] = pod_level_resources(req.pod)

    def disconnected(self) -> None:
        pass


def _run_pod_with_resources(cri, name: str, req_m: int, lim_m: int, mem: int,
                            ovh_m: int, ovh_mem: int) -> str:
    """RunPodSandbox with ``linux.resources`` and ``linux.overhead`` as the kubelet computes
    them (kuberuntime applySandboxResources; overhead with request == limit)."""
    pb = cri.pb
    uid = str(uuid.uuid4())
    parent = cgroup_parent("Burstable", uid)
    ns = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)

    def res(request: int, limit: int, memory: int):
        return pb.LinuxContainerResources(
            cpu_shares=milli_cpu_to_shares(request), cpu_quota=milli_cpu_to_quota(limit),
            cpu_period=100000, memory_limit_in_bytes=memory)

    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="e2e"),
        labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "e2e",
                "io.kubernetes.pod.uid": uid},
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=parent,
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns),
            resources=res(req_m, lim_m, mem), overhead=res(ovh_m, ovh_m, ovh_mem)))
    cri.cgroup_parents.append(parent)
    pod_id = cri.runtime.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg),
                                       timeout=cri.timeout).pod_sandbox_id
    cri.pods[pod_id] = cfg  # cleaned up by the cri fixture
    cri.pod_qos[pod_id] = "Burstable"
    return pod_id


def test_runtime_passes_pod_level_resources(containerd, cri):
    mi = 1 << 20
    req_m, lim_m, mem, ovh_m, ovh_mem = 1500, 2000, 300 * mi, 250, 120 * mi
    _run_pod_with_resources(cri, "pr-before", req_m, lim_m, mem, ovh_m, ovh_mem)
    rec = _Recorder()
    loop = asyncio.new_event_loop()
    stub = Stub(rec, name="podres", idx="50", socket_path=str(containerd.nri_socket),
                events=event_mask(nri_pb2.RUN_POD_SANDBOX, nri_pb2.CREATE_CONTAINER))
    since = containerd.log_offset()
    thread = threading.Thread(target=loop.run_until_complete, args=(stub.run(),), daemon=True)
    thread.start()
    try:
        containerd.wait_plugin_ready("podres", "50", timeout=15, since=since)
        after = _run_pod_with_resources(cri, "pr-after", req_m, lim_m, mem, ovh_m, ovh_mem)
        cri.create_container(after, "app", requests={"cpu": "500m"}, limits={"cpu": "1"})
        assert eventually(lambda: "pr-after" in rec.created, True)
    finally:
        loop.call_soon_threadsafe(stub.stop)
        thread.join(10)
        loop.close()
    assert not thread.is_alive()

    def values(r):
        return (r.cpu_request_milli, r.cpu_limit_milli, r.memory_limit)

    for where, (res, ovh) in (("synchronize", rec.synced["pr-before"]),
                              ("run-pod-sandbox", rec.run["pr-after"])):
        assert res is not None and ovh is not None, where
        assert values(res) == (req_m, lim_m, mem), where
        assert values(ovh) == (ovh_m, ovh_m, ovh_mem), where
    info = rec.created["pr-after"]
    assert info.pod_resources is not None and info.pod_overhead is not None
    assert values(info.pod_resources) == (req_m, lim_m, mem)
    assert values(info.pod_overhead) == (ovh_m, ovh_m, ovh_mem)
    assert (info.resources.cpu_request_milli, info.resources.cpu_limit_milli) == (500, 1000)
