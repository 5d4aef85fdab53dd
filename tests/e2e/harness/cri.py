"""A CRI client that talks to containerd the way the kubelet does (grpcio, runtime.v1).

Stubs are generated from the upstream CRI schema by ``scripts/gen_cri.py`` on first use.
Resource arithmetic follows the kubelet (``pkg/kubelet/cm/helpers_linux.go``
``MilliCPUToShares`` / ``MilliCPUToQuota``, ``pkg/kubelet/qos/policy.go``
``GetContainerOOMScoreAdjust``, ``pkg/kubelet/kuberuntime/kuberuntime_container_linux.go``
``calculateLinuxResources``) with CPU CFS quota enabled and the cgroupfs driver.

Quantities: ``requests`` / ``limits`` dicts take ``"cpu"`` in millicores (int) or a Kubernetes
quantity string (``"1500m"``, ``"2"``), ``"memory"`` and ``"hugepages-<size>"`` in bytes (int) or a
quantity string (``"128Mi"``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import uuid as uuidlib
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from . import cgroups
from .images import BUSYBOX_IMAGE
from .paths import CRI_PROTO, REPO

QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
MIN_SHARES = 2  # kubelet cm.MinShares
MAX_SHARES = 262144  # kubelet cm.MaxShares
SHARES_PER_CPU = 1024
MILLI_PER_CPU = 1000
QUOTA_PERIOD = 100000  # us, kubelet cm.QuotaPeriod
MIN_QUOTA_PERIOD = 1000  # us, kubelet cm.MinQuotaPeriod
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000


def load_cri() -> tuple[ModuleType, ModuleType]:
    """Return ``(cri_api_pb2, cri_api_pb2_grpc)``, generating the stubs if missing or stale.

    Raises FileNotFoundError when the CRI schema has not been fetched.
    """
    spec = importlib.util.spec_from_file_location("_gen_cri", REPO / "scripts/gen_cri.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.ensure_cri_stubs(CRI_PROTO, REPO / "tests/e2e/_cri")
    pb2 = importlib.import_module("tests.e2e._cri.cri_api_pb2")
    grpc_mod = importlib.import_module("tests.e2e._cri.cri_api_pb2_grpc")
    return pb2, grpc_mod


# --------------------------------------------------------------------------- arithmetic


def _cpu_milli(v: int | str | None) -> int:
    if v is None:
        return 0
    if isinstance(v, int):
        return v
    from nri_cpumgr.podmodel import parse_quantity

    return parse_quantity(v, milli=True)


def _bytes(v: int | str | None) -> int:
    if v is None:
        return 0
    if isinstance(v, int):
        return v
    from nri_cpumgr.podmodel import parse_quantity

    return parse_quantity(v)


def milli_cpu_to_shares(milli: int) -> int:
    """cpu.shares for a CPU request in millicores (kubelet ``MilliCPUToShares``).

    0 -> 2 (MinShares); otherwise ``milli * 1024 // 1000`` clamped to [2, 262144].
    """
    if milli == 0:
        return MIN_SHARES
    shares = milli * SHARES_PER_CPU // MILLI_PER_CPU
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli: int, period: int = QUOTA_PERIOD) -> int:
    """cfs_quota_us for a CPU limit in millicores (kubelet ``MilliCPUToQuota``).

    0 -> 0 (no limit); otherwise ``milli * period // 1000`` with a floor of 1000 us.
    """
    if milli == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli * period // MILLI_PER_CPU)


def memory_capacity() -> int:
    """The node's memory capacity in bytes (``MemTotal`` of /proc/meminfo)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")


def oom_score_adj(qos: str, memory_request: int, capacity: int | None = None) -> int:
    """The kubelet's oom_score_adj for a container (``GetContainerOOMScoreAdjust``).

    Guaranteed -997, BestEffort 1000, Burstable ``1000 - 1000*request//capacity`` within
    [2, 999]. containerd started with ``restrict_oom_score_adj`` clamps negatives to its own.
    """
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    cap = capacity if capacity is not None else memory_capacity()
    adj = 1000 - (1000 * memory_request) // cap
    return min(999, max(2, adj))


def host_hugepage_sizes() -> list[int]:
    """Huge page sizes the host supports, in bytes (from /sys/kernel/mm/hugepages)."""
    d = Path("/sys/kernel/mm/hugepages")
    sizes = []
    if d.is_dir():
        for e in d.iterdir():
            if e.name.startswith("hugepages-") and e.name.endswith("kB"):
                sizes.append(int(e.name[len("hugepages-"):-2]) * 1024)
    return sorted(sizes)


def cri_page_size(size: int) -> str:
    """A page size in bytes as the kubelet names it for CRI ("2MB", "1GB"; base 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:g}{unit}"
        size //= 1024
    raise AssertionError("unreachable")


def k8s_hugepage_resource(size: int) -> str:
    """The Kubernetes resource name for a page size in bytes (2 MiB -> "hugepages-2Mi")."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if size < 1024 or size % 1024 or unit == "Ti":
            return f"hugepages-{size}{unit}"
        size //= 1024
    raise AssertionError("unreachable")


def pod_level_set(pod_resources: dict[str, dict[str, Any]] | None) -> bool:
    """The pod's ``.spec.resources`` sets cpu, memory or hugepages (component-helpers
    resource ``IsPodLevelResourcesSet``)."""
    if not pod_resources:
        return False
    names = [*(pod_resources.get("requests") or {}), *(pod_resources.get("limits") or {})]
    return any(n in ("cpu", "memory") or n.startswith("hugepages-") for n in names)


def linux_resources(requests: dict[str, Any] | None, limits: dict[str, Any] | None,
                    qos: str, *, capacity: int | None = None,
                    hugepage_sizes: list[int] | None = None,
                    pod_resources: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The kubelet's ``LinuxContainerResources`` for a container, as a plain dict.

    Keys: cpu_shares, cpu_period (100000), cpu_quota (0 = unlimited), memory_limit_in_bytes
    (0 = unlimited), oom_score_adj, hugepage_limits [(page size name, bytes)]. A CPU request
    defaults to the CPU limit when only the limit is given (API-server defaulting).

    ``pod_resources``: the pod's ``.spec.resources`` (``{"requests", "limits"}``). When it
    is set (kubelet with ``PodLevelResources``, on by default), a container without its own
    cpu / memory limit gets the pod's, and without a cpu request its shares come from that
    limit (kuberuntime getCPULimit / getMemoryLimit, calculateLinuxResources, v1.37.2;
    tests/e2e/test_kubelet_requests.py checks this against the kubelet's own code).
    """
    requests = dict(requests or {})
    limits = dict(limits or {})
    # the OOM score follows the container's own memory request (GetContainerOOMScoreAdjust;
    # a Burstable pod's unrequested pod-level memory share is not modelled here)
    mem_request = _bytes(requests.get("memory", limits.get("memory")))
    if pod_level_set(pod_resources):
        assert pod_resources is not None
        plim = pod_resources.get("limits") or {}
        if not _cpu_milli(limits.get("cpu")) and plim.get("cpu") is not None:
            limits["cpu"] = plim["cpu"]
        if not _bytes(limits.get("memory")) and plim.get("memory") is not None:
            limits["memory"] = plim["memory"]
    cpu_limit = _cpu_milli(limits.get("cpu"))
    cpu_request = _cpu_milli(requests.get("cpu", limits.get("cpu")))
    mem_limit = _bytes(limits.get("memory"))
    sizes = host_hugepage_sizes() if hugepage_sizes is None else hugepage_sizes
    hp = [(cri_page_size(s), _bytes(limits.get(k8s_hugepage_resource(s)))) for s in sizes]
    return {
        "cpu_shares": milli_cpu_to_shares(cpu_request),
        "cpu_period": QUOTA_PERIOD,
        "cpu_quota": milli_cpu_to_quota(cpu_limit),
        "memory_limit_in_bytes": mem_limit,
        "oom_score_adj": oom_score_adj(qos, mem_request, capacity),
        "hugepage_limits": hp,
    }


def oracle_resources(pb: ModuleType, r: dict[str, Any]) -> Any:
    """A CRI ``LinuxContainerResources`` from the kubelet-cri oracle's JSON form
    (oracle/cmd/kubelet-cri: cpuPeriod, cpuQuota, cpuShares, memoryLimitInBytes, oomScoreAdj,
    cpusetCpus, cpusetMems, hugepageLimits [{pageSize, limit}], unified)."""
    return pb.LinuxContainerResources(
        cpu_period=r["cpuPeriod"], cpu_quota=r["cpuQuota"], cpu_shares=r["cpuShares"],
        memory_limit_in_bytes=r["memoryLimitInBytes"], oom_score_adj=r["oomScoreAdj"],
        cpuset_cpus=r["cpusetCpus"], cpuset_mems=r["cpusetMems"],
        hugepage_limits=[pb.HugepageLimit(page_size=h["pageSize"], limit=h["limit"])
                         for h in r["hugepageLimits"]],
        unified=dict(r["unified"]))


def cgroup_parent(qos: str, uid: str, kubepods: str = cgroups.KUBEPODS,
                  driver: str = "cgroupfs") -> str:
    """The pod cgroup the kubelet gives a pod of ``qos`` (QoS class name), under the harness's
    own ``kubepods`` (default :data:`cgroups.KUBEPODS`, not the node's ``/kubepods``).

    ``driver="cgroupfs"``: ``<kubepods>/pod<uid>``, ``<kubepods>/burstable/pod<uid>``, ...
    ``driver="systemd"``: the same path as one slice name, each component's ``-`` escaped to
    ``_`` and the components joined by ``-`` (kubelet cm/cgroup_manager_linux.go
    ``ToSystemd``): ``..._test-run_42-kubepods-burstable-pod<uid with _>.slice``.
    Raises ValueError for an unknown QoS class or driver.
    """
    if qos == "Guaranteed":
        path = f"{kubepods}/pod{uid}"
    elif qos == "Burstable":
        path = f"{kubepods}/burstable/pod{uid}"
    elif qos == "BestEffort":
        path = f"{kubepods}/besteffort/pod{uid}"
    else:
        raise ValueError(f"unknown QoS class {qos!r}; expected one of {QOS_CLASSES}")
    if driver == "cgroupfs":
        return path
    if driver == "systemd":
        parts = [p.replace("-", "_") for p in path.split("/") if p]
        return "-".join(parts) + ".slice"
    raise ValueError(f"unknown cgroup driver {driver!r}; expected cgroupfs or systemd")


# --------------------------------------------------------------------------- client


class CRIClient:
    """Kubelet-like CRI client bound to one containerd CRI socket.

    Remembers the sandbox config and QoS class of every pod it runs (CreateContainer needs the
    sandbox config again) and the pods' cgroup parents for :meth:`cleanup`. gRPC errors surface
    as ``grpc.RpcError`` (``.code()``, ``.details()``).
    """

    def __init__(self, socket: str | Path, *, log_root: Path | None = None,
                 timeout: float = 30.0, cgroup_driver: str = "cgroupfs",
                 hugepage_sizes: list[int] | None = None,
                 kill_before_stop_pod: bool = False,
                 min_oom_score_adj: int | None = None) -> None:
        self.pb, grpc_mod = load_cri()
        #: the lowest oom_score_adj sent (the kubelet's value is raised to it): what
        #: containerd's ``restrict_oom_score_adj`` does on its side, for a runtime without it
        #: on a host where lowering the score is not allowed (no CAP_SYS_RESOURCE)
        self.min_oom_score_adj = min_oom_score_adj
        #: StopPodSandbox after a StopContainer (grace 0) of each running container, as the
        #: kubelet stops a pod; CRI-O's StopPodSandbox gives each container its stop timeout
        #: (at least 30 s), containerd's kills them at once
        self.kill_before_stop_pod = kill_before_stop_pod
        #: page sizes (bytes) the containers' hugepage limits name; None: the host's, as the
        #: kubelet sends them (see :meth:`Crio.cri_client` for a runtime that needs fewer)
        self.hugepage_sizes = hugepage_sizes
        self.cgroup_driver = cgroup_driver  # the pod cgroup parent form (see cgroup_parent)
        self.socket = str(socket)
        self.timeout = timeout
        self.log_root = Path(log_root) if log_root is not None else None
        self.channel = grpc.insecure_channel(
            f"unix://{self.socket}",
            options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
        )
        self.runtime = grpc_mod.RuntimeServiceStub(self.channel)
        self.images = grpc_mod.ImageServiceStub(self.channel)
        self.pods: dict[str, Any] = {}  # pod id -> PodSandboxConfig
        self.pod_qos: dict[str, str] = {}  # pod id -> QoS class
        #: pod id -> the pod's ``.spec.resources`` (containers follow the kubelet's rules)
        self.pod_resources: dict[str, dict[str, dict[str, Any]]] = {}
        self.cgroup_parents: list[str] = []  # every pod cgroup this client created
        self._capacity: int | None = None

    # -- plumbing
    def close(self) -> None:
        """Close the gRPC channel."""
        self.channel.close()

    def __enter__(self) -> CRIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _restricted(self, res: dict[str, Any]) -> dict[str, Any]:
        if self.min_oom_score_adj is not None:
            res["oom_score_adj"] = max(res["oom_score_adj"], self.min_oom_score_adj)
        return res

    def version(self) -> Any:
        """``VersionResponse`` (runtime_name, runtime_version, runtime_api_version)."""
        return self.runtime.Version(self.pb.VersionRequest(), timeout=self.timeout)

    def has_image(self, ref: str) -> bool:
        """Whether the runtime's CRI image service knows ``ref`` (ImageStatus)."""
        resp = self.images.ImageStatus(
            self.pb.ImageStatusRequest(image=self.pb.ImageSpec(image=ref)), timeout=self.timeout)
        return resp.HasField("image") and bool(resp.image.id)

    # -- pods
    def run_pod(self, name: str, qos: str, uid: str | None = None, namespace: str = "e2e", *,
                labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None, attempt: int = 0,
                pod_resources: dict[str, dict[str, Any]] | None = None,
                sandbox: dict[str, Any] | None = None) -> str:
        """RunPodSandbox for a host-network pod of QoS class ``qos``; returns the pod id.

        ``sandbox``: the kubelet's own sandbox request for the pod as the kubelet-cri oracle
        prints it (``{"resources": R|None, "overhead": R|None}``), sent as it is instead of
        the resources computed from ``pod_resources``.

        ``pod_resources`` (``{"requests": {...}, "limits": {...}}``, the pod's
        ``.spec.resources``) becomes the sandbox's ``linux.resources`` as the kubelet sends
        it (kuberuntime applySandboxResources: cpu shares from the request, quota/period from
        the limit, the memory limit); containerd passes it to NRI plugins as
        ``pod.linux.pod_resources``. Without it no sandbox resources are sent.

        Metadata {name, uid, namespace, attempt}; labels ``io.kubernetes.pod.{name,namespace,
        uid}`` plus ``labels``; ``linux.cgroup_parent`` from :func:`cgroup_parent`; namespace
        options {network NODE, pid CONTAINER, ipc POD}; hostname empty (runc refuses a hostname
        in the host UTS namespace). ``uid`` defaults to a fresh UUID4.
        """
        pb = self.pb
        uid = uid or str(uuidlib.uuid4())
        parent = cgroup_parent(qos, uid, driver=self.cgroup_driver)
        lbl = {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
               "io.kubernetes.pod.uid": uid, **(labels or {})}
        ann = {"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "e2e",
               **(annotations or {})}
        log_dir = ""
        if self.log_root is not None:
            d = self.log_root / f"{namespace}_{name}_{uid}"
            d.mkdir(parents=True, exist_ok=True)
            log_dir = str(d)
        ns = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace,
                                           attempt=attempt),
            hostname="",
            log_directory=log_dir,
            labels=lbl,
            annotations=ann,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=parent,
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns),
            ),
        )
        if pod_resources is not None:
            r = linux_resources(pod_resources.get("requests"), pod_resources.get("limits"), qos,
                                hugepage_sizes=[])
            config.linux.resources.CopyFrom(pb.LinuxContainerResources(
                cpu_period=r["cpu_period"], cpu_quota=r["cpu_quota"],
                cpu_shares=r["cpu_shares"], memory_limit_in_bytes=r["memory_limit_in_bytes"]))
        if sandbox is not None:  # the kubelet's own request (tests/e2e/harness/kubelet_cri.py)
            config.linux.ClearField("resources")
            config.linux.ClearField("overhead")
            if sandbox.get("resources") is not None:
                config.linux.resources.CopyFrom(oracle_resources(pb, sandbox["resources"]))
            if sandbox.get("overhead") is not None:
                config.linux.overhead.CopyFrom(oracle_resources(pb, sandbox["overhead"]))
        self.cgroup_parents.append(parent)
        resp = self.runtime.RunPodSandbox(pb.RunPodSandboxRequest(config=config),
                                          timeout=self.timeout)
        self.pods[resp.pod_sandbox_id] = config
        self.pod_qos[resp.pod_sandbox_id] = qos
        if pod_resources is not None:
            self.pod_resources[resp.pod_sandbox_id] = pod_resources
        return resp.pod_sandbox_id

    def stop_pod(self, pod_id: str) -> None:
        """StopPodSandbox (stops every container of the pod; with ``kill_before_stop_pod``
        first a StopContainer with grace 0 for each of its running containers)."""
        if self.kill_before_stop_pod:
            for c in self.list_containers(pod_id):
                if c.state == self.pb.CONTAINER_RUNNING:
                    self.stop_container(c.id, timeout=0)
        self.runtime.StopPodSandbox(self.pb.StopPodSandboxRequest(pod_sandbox_id=pod_id),
                                    timeout=self.timeout)

    def remove_pod(self, pod_id: str) -> None:
        """RemovePodSandbox (removes its containers too). The pod cgroup stays: see cleanup."""
        self.runtime.RemovePodSandbox(self.pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id),
                                      timeout=self.timeout)
        self.pods.pop(pod_id, None)
        self.pod_qos.pop(pod_id, None)
        self.pod_resources.pop(pod_id, None)

    def list_pods(self) -> list[Any]:
        """ListPodSandbox: every ``PodSandbox`` the runtime knows."""
        return list(self.runtime.ListPodSandbox(self.pb.ListPodSandboxRequest(),
                                                timeout=self.timeout).items)

    # -- containers
    def container_config(self, pod_id: str, name: str, requests: dict[str, Any] | None = None,
                         limits: dict[str, Any] | None = None,
                         command: list[str] | tuple[str, ...] = ("/bin/sleep", "inf"),
                         restart_count: int = 0, image: str = BUSYBOX_IMAGE,
                         labels: dict[str, str] | None = None,
                         annotations: dict[str, str] | None = None,
                         qos: str | None = None,
                         kubelet: dict[str, Any] | None = None) -> Any:
        """The ``ContainerConfig`` the kubelet would send (see :meth:`create_container`);
        ``kubelet``: the kubelet's own ``LinuxContainerResources`` for it as the kubelet-cri
        oracle prints them, sent as they are."""
        pb = self.pb
        sandbox = self.pods[pod_id]
        qos = qos or self.pod_qos[pod_id]
        meta = sandbox.metadata
        if self._capacity is None:
            self._capacity = memory_capacity()
        res = self._restricted(linux_resources(
            requests, limits, qos, capacity=self._capacity, hugepage_sizes=self.hugepage_sizes,
            pod_resources=self.pod_resources.get(pod_id)))
        lbl = {"io.kubernetes.container.name": name, "io.kubernetes.pod.name": meta.name,
               "io.kubernetes.pod.namespace": meta.namespace, "io.kubernetes.pod.uid": meta.uid,
               **(labels or {})}
        digest = zlib.crc32(repr((name, tuple(command), image)).encode())
        ann = {"io.kubernetes.container.hash": f"{digest:08x}",
               "io.kubernetes.container.restartCount": str(restart_count),
               "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
               "io.kubernetes.container.terminationMessagePolicy": "File",
               "io.kubernetes.pod.terminationGracePeriod": "30",
               **(annotations or {})}
        log_path = ""
        if sandbox.log_directory:
            (Path(sandbox.log_directory) / name).mkdir(parents=True, exist_ok=True)
            log_path = f"{name}/{restart_count}.log"
        ns = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        resources = (oracle_resources(pb, kubelet) if kubelet is not None else
                     pb.LinuxContainerResources(
                         cpu_period=res["cpu_period"], cpu_quota=res["cpu_quota"],
                         cpu_shares=res["cpu_shares"],
                         memory_limit_in_bytes=res["memory_limit_in_bytes"],
                         oom_score_adj=res["oom_score_adj"],
                         hugepage_limits=[pb.HugepageLimit(page_size=p, limit=n)
                                          for p, n in res["hugepage_limits"]]))
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=restart_count),
            image=pb.ImageSpec(image=image, user_specified_image=image),
            command=list(command),
            working_dir="/",
            labels=lbl,
            annotations=ann,
            log_path=log_path,
            linux=pb.LinuxContainerConfig(
                resources=resources,
                security_context=pb.LinuxContainerSecurityContext(namespace_options=ns),
            ),
        )

    def create_container(self, pod_id: str, name: str, requests: dict[str, Any] | None = None,
                         limits: dict[str, Any] | None = None,
                         command: list[str] | tuple[str, ...] = ("/bin/sleep", "inf"),
                         restart_count: int = 0, image: str = BUSYBOX_IMAGE, *,
                         labels: dict[str, str] | None = None,
                         annotations: dict[str, str] | None = None,
                         qos: str | None = None,
                         kubelet: dict[str, Any] | None = None) -> str:
        """CreateContainer in pod ``pod_id`` (run by this client); returns the container id.
        ``kubelet``: see :meth:`container_config`.

        Resources per :func:`linux_resources` using the pod's QoS class (or ``qos``);
        labels ``io.kubernetes.container.name`` and ``io.kubernetes.pod.*``; annotation
        ``io.kubernetes.container.restartCount`` = ``restart_count`` (also the attempt).
        Raises KeyError for a pod this client did not run, grpc.RpcError on a CRI error
        (e.g. an NRI plugin refusing the container).
        """
        config = self.container_config(pod_id, name, requests, limits, command, restart_count,
                                       image, labels, annotations, qos, kubelet)
        resp = self.runtime.CreateContainer(
            self.pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=config,
                                           sandbox_config=self.pods[pod_id]),
            timeout=self.timeout)
        return resp.container_id

    def start_container(self, cid: str) -> None:
        """StartContainer."""
        self.runtime.StartContainer(self.pb.StartContainerRequest(container_id=cid),
                                    timeout=self.timeout)

    def stop_container(self, cid: str, timeout: int = 0) -> None:
        """StopContainer; ``timeout`` seconds of grace before SIGKILL (0 = kill at once)."""
        self.runtime.StopContainer(
            self.pb.StopContainerRequest(container_id=cid, timeout=timeout),
            timeout=self.timeout + timeout)

    def remove_container(self, cid: str) -> None:
        """RemoveContainer."""
        self.runtime.RemoveContainer(self.pb.RemoveContainerRequest(container_id=cid),
                                     timeout=self.timeout)

    def update_container_resources(self, cid: str, requests: dict[str, Any] | None,
                                   limits: dict[str, Any] | None, qos: str,
                                   cpuset_cpus: str = "", cpuset_mems: str = "") -> None:
        """UpdateContainerResources as the kubelet sends it (resize, or its CPU manager).

        ``cpuset_cpus``/``cpuset_mems`` are what the kubelet's own CPU manager would write.
        """
        pb = self.pb
        res = self._restricted(linux_resources(requests, limits, qos, capacity=self._capacity,
                                               hugepage_sizes=self.hugepage_sizes))
        self.runtime.UpdateContainerResources(
            pb.UpdateContainerResourcesRequest(
                container_id=cid,
                linux=pb.LinuxContainerResources(
                    cpu_period=res["cpu_period"], cpu_quota=res["cpu_quota"],
                    cpu_shares=res["cpu_shares"],
                    memory_limit_in_bytes=res["memory_limit_in_bytes"],
                    oom_score_adj=res["oom_score_adj"],
                    cpuset_cpus=cpuset_cpus, cpuset_mems=cpuset_mems)),
            timeout=self.timeout)

    def list_containers(self, pod_id: str | None = None) -> list[Any]:
        """ListContainers, optionally of one pod."""
        flt = self.pb.ContainerFilter(pod_sandbox_id=pod_id or "")
        return list(self.runtime.ListContainers(self.pb.ListContainersRequest(filter=flt),
                                                timeout=self.timeout).containers)

    def container_status(self, cid: str, verbose: bool = False) -> Any:
        """ContainerStatusResponse (``.status``, and ``.info`` when ``verbose``)."""
        return self.runtime.ContainerStatus(
            self.pb.ContainerStatusRequest(container_id=cid, verbose=verbose),
            timeout=self.timeout)

    # -- inspection
    def inspect(self, cid: str) -> tuple[int, dict[str, Any]]:
        """``(pid, OCI runtime spec)`` from ContainerStatus(verbose).info["info"].

        pid is 0 for a container that was created but not started.
        """
        info = json.loads(self.container_status(cid, verbose=True).info["info"])
        return int(info.get("pid") or 0), info["runtimeSpec"]

    def cgroups_path(self, cid: str) -> str:
        """The spec's ``linux.cgroupsPath`` (cgroupfs or systemd form)."""
        return self.inspect(cid)[1]["linux"]["cgroupsPath"]

    def spec_cpus(self, cid: str) -> str:
        """``linux.resources.cpu.cpus`` of the OCI spec, "" when unset."""
        return _spec_cpu_field(self.inspect(cid)[1], "cpus")

    def spec_mems(self, cid: str) -> str:
        """``linux.resources.cpu.mems`` of the OCI spec, "" when unset."""
        return _spec_cpu_field(self.inspect(cid)[1], "mems")

    def cgroup_cpus(self, cid: str) -> str:
        """The container cgroup's cpuset (v1 ``cpuset.cpus``, v2 ``cpuset.cpus.effective``)."""
        return cgroups.read_cgroup_file("cpuset", self.cgroups_path(cid), "cpuset.cpus")

    def cgroup_mems(self, cid: str) -> str:
        """The container cgroup's mems (v1 ``cpuset.mems``, v2 ``cpuset.mems.effective``)."""
        return cgroups.read_cgroup_file("cpuset", self.cgroups_path(cid), "cpuset.mems")

    def cgroup_cfs_quota(self, cid: str) -> int:
        """``cpu.cfs_quota_us`` of the container's cgroup (-1 = unlimited), microseconds."""
        return cgroups.cpu_quota_us(self.cgroups_path(cid))

    def cgroup_cpu_shares(self, cid: str) -> int:
        """``cpu.shares`` of the container's cgroup (v2: see :func:`cgroups.cpu_shares`)."""
        return cgroups.cpu_shares(self.cgroups_path(cid))

    def cgroup_cpu_weight_or_shares(self, cid: str) -> int:
        """v1 ``cpu.shares`` / v2 ``cpu.weight`` of the container's cgroup, as read (see
        :func:`cgroups.expected_cpu_weight_or_shares`)."""
        return cgroups.cpu_weight_or_shares(self.cgroups_path(cid))

    def _pid(self, cid: str) -> int:
        pid = self.inspect(cid)[0]
        if pid <= 0:
            raise RuntimeError(f"container {cid} has no process (not started?)")
        return pid

    def proc_cpus(self, cid: str) -> str:
        """``Cpus_allowed_list`` of the container's init process (raises if not running)."""
        return cgroups.proc_status_field(self._pid(cid), "Cpus_allowed_list")

    def proc_mems(self, cid: str) -> str:
        """``Mems_allowed_list`` of the container's init process (raises if not running)."""
        return cgroups.proc_status_field(self._pid(cid), "Mems_allowed_list")

    # -- cleanup
    def cleanup(self, remove_cgroups: bool = True) -> list[str]:
        """Stop and remove every pod this client ran, then rmdir their pod cgroups.

        Errors are collected, not raised; returns them as strings (empty = clean).
        """
        errors: list[str] = []
        for pod_id in list(self.pods):
            for op in (self.stop_pod, self.remove_pod):
                try:
                    op(pod_id)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        errors.append(f"{op.__name__}({pod_id}): {e.code()} {e.details()}")
            self.pods.pop(pod_id, None)
        if remove_cgroups:
            left = cgroups.remove_pod_cgroups(
                [cgroups.expand_slice(p) if p.endswith(".slice") else p
                 for p in self.cgroup_parents])
            errors += [f"cgroup still in use: {p}" for p in left]
            if not left:
                self.cgroup_parents.clear()
        return errors


def _spec_cpu_field(spec: dict[str, Any], key: str) -> str:
    return (((spec.get("linux") or {}).get("resources") or {}).get("cpu") or {}).get(key) or ""
