"""From NRI requests to the pod model.

What NRI tells us (see ../shared/docs/nri-protocol.md and nri-examples/):

* the QoS class, through the cgroup parent the kubelet chose: cgroupfs ``/kubepods/pod<uid>``
  (Guaranteed), ``/kubepods/burstable/pod<uid>``, ``/kubepods/besteffort/pod<uid>``; systemd
  ``kubepods-pod<uid>.slice``, ``kubepods-burstable-pod<uid>.slice``,
  ``kubepods-besteffort-pod<uid>.slice`` (kubelet cm/qos_container_manager_linux.go);
* the container's resources as the kubelet computed them (kubelet cm/helpers_linux.go):
  ``cpu.shares = request_millicores * 1024 / 1000`` (minimum 2), ``cpu.quota = limit_millicores *
  period / 1000`` (absent or <= 0: no limit), ``memory.limit`` in bytes, hugepage limits. The
  memory *request* is not passed; for a Guaranteed pod it equals the limit.

The resources also give a QoS cross-check when the cgroup parent is not the kubelet's (a
container started by other means): see :func:`qos_from_resources`.

Pod-level resources (``pod.linux.pod_resources`` and ``pod.linux.pod_overhead``, NRI
``LinuxPodSandbox`` fields 2 and 1): the runtime copies them from the CRI RunPodSandbox
``linux.resources`` / ``linux.overhead`` (containerd ``GetPodLinuxResources`` /
``GetPodLinuxOverhead``, nri ``FromCRILinuxResources``: every CPU and memory field is set,
zero meaning "not given"). The kubelet fills both for every Linux pod (kuberuntime
``applySandboxResources``): ``resources`` from the pod's requests and limits summed over its
containers the way the scheduler counts them (init containers as a maximum, overhead
excluded), i.e. ``cpu.shares`` from the pod CPU request (minimum 2), ``cpu.quota``/``period``
from the pod CPU limit, ``memory.limit`` from the pod memory limit; ``overhead`` from the
RuntimeClass's ``pod.spec.overhead`` with request = limit (all zero without overhead). They are
decoded with :func:`resources_from_nri` into :attr:`ContainerInfo.pod_resources` and
:attr:`ContainerInfo.pod_overhead` (``None`` when the runtime did not pass the message).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.frozen import slot_init
from nri_cpumgr.podmodel.model import ContainerSpec, QOSClass
from nri_cpumgr.podmodel.spec import PodSpecFacts

LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
ANNOTATION_RESTART_COUNT = "io.kubernetes.container.restartCount"

MIN_SHARES = 2
SHARES_PER_CPU = 1024

# (the systemd driver's pattern and the full search: compiled at their first use, through
# re's cache, not at every start: ~1 M instructions each, issue 34)
_CGROUPFS = r"(?:^|/)kubepods(?:/(burstable|besteffort))?/pod[0-9A-Za-z_-]+/?$"
_SYSTEMD = r"kubepods(?:-(burstable|besteffort))?-pod[0-9A-Za-z_]+\.slice/?$"
# the same two patterns as one, matched where the last "kubepods" of the parent starts (the
# cgroupfs one there only after a "/" or at the start): a search tries every position of the
# string (1 us a container, 1,000 containers per Synchronize). Compiled at its first use.
_AT = (r"(?<![^/])kubepods(?:/(burstable|besteffort))?/pod[0-9A-Za-z_-]+/?$"
       r"|kubepods(?:-(burstable|besteffort))?-pod[0-9A-Za-z_]+\.slice/?$")
_at: re.Pattern[str] | None = None
_QOS_OF_GROUP = {None: QOSClass.GUARANTEED, "burstable": QOSClass.BURSTABLE,
                 "besteffort": QOSClass.BESTEFFORT}


def qos_from_cgroup_parent(parent: str) -> QOSClass | None:
    """QoS class encoded in the kubelet's pod cgroup parent, or ``None`` when ``parent`` is not
    a kubelet pod cgroup (cgroupfs or systemd driver): ``.../kubepods[/burstable|/besteffort]
    /pod<uid>`` or ``kubepods[-burstable|-besteffort]-pod<uid>.slice`` (kubelet
    pkg/kubelet/cm/qos_container_manager_linux.go, cgroup_manager_linux.go)."""
    global _at
    i = parent.rfind("kubepods")
    if i < 0:
        return None
    if _at is None:
        _at = re.compile(_AT)
    m = _at.match(parent, i)
    if m is not None:
        cgroupfs, systemd = m.groups()
        return _QOS_OF_GROUP[cgroupfs or systemd]
    # "kubepods" again inside the pod's own name: the full search decides
    m = re.compile(_CGROUPFS).search(parent) or re.compile(_SYSTEMD).search(parent)
    return _QOS_OF_GROUP[m.group(1)] if m is not None else None


_PAGE = r"^([0-9]+)([KMGT]?)B?$"  # (IGNORECASE; compiled at its first use, not at the start)
_BIN = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_RESOURCE_SUFFIX = {2**10: "Ki", 2**20: "Mi", 2**30: "Gi", 2**40: "Ti"}


def hugepage_resource(page_size: str) -> str | None:
    """Kubernetes resource name for a runtime hugepage size (``"2MB"`` -> ``"hugepages-2Mi"``;
    the runtime writes binary units with a decimal-looking suffix, as runc does)."""
    m = re.match(_PAGE, page_size.strip(), re.IGNORECASE)
    if not m:
        return None
    size = int(m.group(1)) * _BIN[m.group(2).upper()]
    for unit in (2**40, 2**30, 2**20, 2**10):
        if size % unit == 0:
            return f"hugepages-{size // unit}{_RESOURCE_SUFFIX[unit]}"
    return f"hugepages-{size}"


def _opt(msg: Any, field: str) -> int | None:
    """Value of an NRI Optional* wrapper field, or None when unset."""
    if msg is None or not msg.HasField(field):
        return None
    return int(getattr(msg, field).value)


@dataclass(frozen=True, slots=True)
class Resources:
    """The kubelet's view of a container's resources, recovered from NRI ``LinuxResources``.

    ``cpu_request_milli``: from ``cpu.shares`` (None for the minimum 2 shares, i.e. no
    request); ``cpu_limit_milli``: from quota/period (None without a quota);
    ``memory_limit``: bytes (None when unset); ``hugepages``: resource name -> bytes.
    ``shares`` is kept to tell whether the request is a whole number of CPUs;
    ``cpu_quota`` / ``cpu_period`` (microseconds) as the runtime reports them (None: unset;
    a quota of -1 means unlimited, as we set it for exclusive CPUs).
    """

    shares: int | None
    cpu_request_milli: int | None
    cpu_limit_milli: int | None
    memory_limit: int | None
    hugepages: dict[str, int]
    cpu_quota: int | None = None
    cpu_period: int | None = None

    @property
    def integer_cpus(self) -> int:
        """Whole CPUs requested (0 when the request is not an integer number of CPUs)."""
        if self.shares is None or self.shares < SHARES_PER_CPU or self.shares % SHARES_PER_CPU:
            return 0
        return self.shares // SHARES_PER_CPU


def resources_from_nri(res: Any) -> Resources:
    """Decode an NRI ``LinuxResources`` message (or None)."""
    shares = quota = period = mem = None
    huge: dict[str, int] = {}
    if res is not None:
        if res.HasField("cpu"):
            shares = _opt(res.cpu, "shares")
            quota = _opt(res.cpu, "quota")
            period = _opt(res.cpu, "period")
        if res.HasField("memory"):
            mem = _opt(res.memory, "limit")
        for h in res.hugepage_limits:
            name = hugepage_resource(h.page_size)
            if name and h.limit:
                huge[name] = int(h.limit)
    req = None
    if shares is not None and shares > MIN_SHARES:
        # inverse of shares = milli * 1024 // 1000, rounded up to the smallest such milli
        req = -(-shares * 1000 // SHARES_PER_CPU)
    lim = None
    if quota is not None and quota > 0:
        lim = quota * 1000 // (period or 100000)
    return Resources(
        shares=shares,
        cpu_request_milli=req,
        cpu_limit_milli=lim,
        memory_limit=mem if mem and mem > 0 else None,
        hugepages=huge,
        cpu_quota=quota,
        cpu_period=period,
    )


def qos_from_resources(r: Resources) -> QOSClass:
    """QoS cross-check from one container's resources (the pod may still differ: QoS is a pod
    property). Guaranteed: cpu limit == request and a memory limit; BestEffort: nothing set."""
    if r.cpu_request_milli is None and r.cpu_limit_milli is None and r.memory_limit is None:
        return QOSClass.BESTEFFORT
    if (
        r.cpu_limit_milli is not None
        and r.memory_limit is not None
        and (r.cpu_request_milli is None or abs(r.cpu_request_milli - r.cpu_limit_milli) <= 1)
    ):
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


def container_spec(name: str, r: Resources) -> ContainerSpec:
    """A :class:`ContainerSpec` for the managers. CPU request: exact whole CPUs when the
    shares say so, else the recovered millicores. Memory: NRI passes only the limit, which is
    also the request of a Guaranteed container."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    if r.integer_cpus:
        requests["cpu"] = r.integer_cpus * 1000
    elif r.cpu_request_milli is not None:
        requests["cpu"] = r.cpu_request_milli
    if r.cpu_limit_milli is not None:
        limits["cpu"] = r.cpu_limit_milli
    if r.memory_limit is not None:
        limits["memory"] = r.memory_limit
    for k, v in r.hugepages.items():
        limits[k] = v
    return ContainerSpec(name=name, requests=requests, limits=limits)


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class ContainerInfo:
    """What the plugin keeps of one container (copied out of the request: no references into
    protobuf messages, so a large request is freed as soon as it is handled)."""

    id: str
    pod_id: str
    pod_uid: str
    pod_name: str
    namespace: str
    name: str
    restart_count: int
    qos: QOSClass
    qos_source: str  # "cgroup-parent" or "resources"
    resources: Resources
    cpus: str  # the cpuset the runtime reports now ("" when unset)
    devices: tuple[tuple[str, int, int], ...]  # (type "c"/"b", major, minor)
    #: The pod's totals from ``pod.linux.pod_resources`` (None when not passed).
    pod_resources: Resources | None = None
    #: The pod's RuntimeClass overhead from ``pod.linux.pod_overhead`` (None when not passed).
    pod_overhead: Resources | None = None
    #: The pod's spec facts from a pod spec source (None: unknown, NRI alone decides;
    #: nri_cpumgr.podmodel.spec).
    pod_spec: PodSpecFacts | None = None

    @property
    def own_spec(self) -> ContainerSpec | None:
        """The container's own requests/limits from the pod spec (None when unknown)."""
        return self.pod_spec.container(self.name) if self.pod_spec is not None else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.name)

    def with_pod_spec(self, facts: PodSpecFacts | None) -> ContainerInfo:
        """This container with its pod's spec facts ``facts`` (``dataclasses.replace(self,
        pod_spec=facts)``, field by field: replace's generic copy costs a create ~10 us)."""
        return ContainerInfo(
            self.id, self.pod_id, self.pod_uid, self.pod_name, self.namespace, self.name,
            self.restart_count, self.qos, self.qos_source, self.resources, self.cpus,
            self.devices, self.pod_resources, self.pod_overhead, facts,
        )

    def spec(self) -> ContainerSpec:
        """:func:`container_spec` of the name and resources (the same object for the same
        name and :class:`Resources`: a node's containers share a handful of shapes, and
        :func:`_resources` gives one object per shape)."""
        r = self.resources
        key = (self.name, id(r))
        hit = _SPECS.get(key)
        if hit is not None and hit[0] is r:
            return hit[1]
        out = container_spec(self.name, r)
        if len(_SPECS) >= _SPECS_SIZE:
            _SPECS.clear()
        _SPECS[key] = (r, out)  # (r kept alive with it: its id is not reused meanwhile)
        return out


#: ContainerInfo.spec's answers by (name, id of the Resources), with that Resources
_SPECS: dict[tuple[str, int], tuple[Resources, ContainerSpec]] = {}
_SPECS_SIZE = 512


_RESOURCES_CACHE_SIZE = 256


@functools.lru_cache(maxsize=_RESOURCES_CACHE_SIZE)
def _resources_of_bytes(data: bytes) -> Resources:
    msg = nri_pb2.LinuxResources.FromString(data)
    return resources_from_nri(msg)


@functools.lru_cache(maxsize=_RESOURCES_CACHE_SIZE)
def _container_resources_of_bytes(data: bytes) -> tuple[Resources, str]:
    return _resources_of_bytes(data), nri_pb2.LinuxResources.FromString(data).cpu.cpus


def _resources(res: Any) -> Resources:
    """:func:`resources_from_nri` of a ``LinuxResources`` message, decoded once per distinct
    serialized form: a node's containers carry a handful of distinct resource blocks (every
    BestEffort container of a pool the same), and the :class:`Resources` are immutable."""
    return _resources_of_bytes(res.SerializeToString())


def pod_level_resources(pod: Any) -> tuple[Resources | None, Resources | None]:
    """``(pod_resources, pod_overhead)`` of an NRI ``PodSandbox``, each decoded with
    :func:`resources_from_nri`, or ``None`` where the runtime did not pass that message (see
    the module docstring for what the kubelet puts there)."""
    if not pod.HasField("linux"):
        return None, None
    return _pod_level(pod.linux)


def _pod_level(lin: Any) -> tuple[Resources | None, Resources | None]:
    res = _resources(lin.pod_resources) if lin.HasField("pod_resources") else None
    ovh = _resources(lin.pod_overhead) if lin.HasField("pod_overhead") else None
    return res, ovh


_NO_RESOURCES = resources_from_nri(None)


def plain_shared(pod: Any, ctr: Any) -> tuple[str, str, str] | None:
    """``(pod uid, container name, cpuset)`` of a container that can only be in the shared
    pool, as :func:`container_info` would read them: its pod's cgroup parent says Burstable or
    BestEffort and it has no devices. None for any other container (Guaranteed, devices, no
    kubelet cgroup parent): decode it with :func:`container_info`. A fraction of the cost of
    :func:`container_info`, for Synchronize's thousand containers."""
    # (an unset message field reads as its empty default: no cgroup parent, no devices,
    # no cpuset, as the HasField checks of container_info conclude)
    qos = qos_from_cgroup_parent(pod.linux.cgroup_parent)
    if qos is None or qos is QOSClass.GUARANTEED:
        return None
    lin = ctr.linux
    if len(lin.devices):
        return None
    cpus = lin.resources.cpu.cpus
    uid = pod.uid or pod.labels.get(LABEL_POD_UID, "") or pod.id
    name = ctr.labels.get(LABEL_CONTAINER_NAME, "") or ctr.name
    return uid, name, cpus


def pod_identity(pod: Any) -> tuple[str, QOSClass | None]:
    """``(pod uid, QoS class from its cgroup parent)`` of an NRI ``PodSandbox``, read as
    :func:`container_info` reads them (the class is None without a kubelet cgroup parent)."""
    return (pod.uid or pod.labels.get(LABEL_POD_UID, "") or pod.id,
            qos_from_cgroup_parent(pod.linux.cgroup_parent))


def container_info(
    pod: Any, ctr: Any,
    spec_facts: Callable[[str, QOSClass], PodSpecFacts | None] | None = None,
) -> ContainerInfo:
    """Build a :class:`ContainerInfo` from NRI ``PodSandbox`` and ``Container`` messages.
    ``spec_facts(pod uid, QoS class)``: its pod's spec facts (or None), asked once the two
    are known, for :attr:`ContainerInfo.pod_spec` (the record is built once, with them:
    building it a second time cost each create ~2.5 us, issue 34)."""
    uid = pod.uid or pod.labels.get(LABEL_POD_UID, "") or pod.id
    name = ctr.labels.get(LABEL_CONTAINER_NAME, "") or ctr.name
    count = ctr.annotations.get(ANNOTATION_RESTART_COUNT)
    try:
        restarts = int(count) if count else 0
    except ValueError:
        restarts = 0
    # (an unset message field reads as its empty default, read-only: no linux message
    # reads as no resources, no devices, no cgroup parent and no pod-level resources, as
    # the presence checks on it concluded; one HasField per message less)
    lin = ctr.linux
    if lin.HasField("resources"):  # (its Resources and cpuset, decoded once per form)
        r, cpus = _container_resources_of_bytes(lin.resources.SerializeToString())
    else:
        r, cpus = _NO_RESOURCES, ""  # (an unset cpu message reads "")
    plin = pod.linux
    qos = qos_from_cgroup_parent(plin.cgroup_parent)
    source = "cgroup-parent"
    if qos is None:
        qos, source = qos_from_resources(r), "resources"
    devices = (
        tuple((d.type, int(d.major), int(d.minor)) for d in lin.devices)
        if len(lin.devices)
        else ()
    )
    pod_res = _resources(plin.pod_resources) if plin.HasField("pod_resources") else None
    pod_ovh = _resources(plin.pod_overhead) if plin.HasField("pod_overhead") else None
    # positional: a frozen dataclass's keyword call costs a third more (1,000 per Synchronize)
    return ContainerInfo(
        ctr.id, pod.id, uid, pod.name, pod.namespace, name, restarts, qos, source, r, cpus,
        devices, pod_res, pod_ovh, spec_facts(uid, qos) if spec_facts is not None else None,
    )
