"""Kubernetes Pod manifests -> the containers the runtime would show the plugin.

A manifest (YAML, several documents allowed; ``kind: Pod``, a ``List`` of them, or a workload
with a pod template: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) becomes a
:class:`PlannedPod` (``spec.replicas: N`` of a Deployment, StatefulSet, ReplicaSet or
ReplicationController: N of them, ``<name>-0`` .. ``<name>-N-1``): its QoS class and its
containers in the order the kubelet starts them
(kuberuntime ``computePodActions``: init containers one by one, a restartable init container
``restartPolicy: Always``, a sidecar, keeps running while the next starts; then the app
containers in spec order).

Each container is then turned into the NRI messages the runtime would send for it
(:func:`nri_messages`): the kubelet's cgroup parent for the QoS class
(cm/qos_container_manager_linux.go: ``/kubepods/pod<uid>``, ``/kubepods/burstable/...``,
``/kubepods/besteffort/...``) and the container's Linux resources as the kubelet computes them
(cm/helpers_linux.go: ``cpu.shares = request * 1024 / 1000`` (2 to 262144; a limit alone is
also the request, as the API server defaults it), ``cpu.quota = limit * period / 1000``
(minimum 1000 us, period 100000 us), ``memory.limit`` and hugepage limits in bytes). The
plugin's own :func:`~nri_cpumgr.podmodel.nri.container_info` then reads them, so a plan sees a
container exactly as the plugin does.

Errors: :class:`ManifestError` (one line naming the document and the field): every field
the reader uses is checked for its shape on the way down (``<file> document N: spec.containers:
expected a list, got an integer (5)``), and two pods with one namespace/name (the API server
never holds two) are refused with both places (:func:`check_unique_pods`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.podmodel.model import (
    ContainerSpec,
    Pod,
    QOSClass,
    ResourceListError,
    parse_resource_list,
    pod_qos,
)
from nri_cpumgr.podmodel.nri import (
    LABEL_CONTAINER_NAME,
    LABEL_POD_UID,
    ContainerInfo,
    container_info,
)
from nri_cpumgr.podmodel.spec import PodSpecFacts, facts_from_pod
from nri_cpumgr.shown import shown

MIN_SHARES = 2
MAX_SHARES = 262144  # kubelet cm.MaxShares: the shares of a request above 256 CPUs
SHARES_PER_CPU = 1024
#: the largest quota the field holds (the kubelet's int64 arithmetic overflows there)
MAX_QUOTA = 2**63 - 1
QUOTA_PERIOD = 100000  # us, the kubelet's default cpuCFSQuotaPeriod
MIN_QUOTA = 1000  # us, kubelet MinQuotaPeriod

_WORKLOADS = {
    "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController",
}


#: Workloads whose ``spec.replicas`` says how many pods they run.
_REPLICATED = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}

#: The most pods one plan takes (all manifests together): a plan is for one node, and a node
#: runs a few hundred pods at most (the kubelet's maxPods defaults to 110); a bigger count is
#: a typo that would otherwise build pods for ever.
MAX_PODS = 10_000


class ManifestError(ValueError):
    """A manifest the planner cannot read; the message names the document and the field,
    on one line whatever the manifest's names hold (a line break in one is shown ``\\n``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


@dataclass(frozen=True, slots=True)
class PlannedContainer:
    """One container of a planned pod. ``kind``: ``init`` (runs to completion before the
    next starts), ``sidecar`` (restartable init container: keeps running) or ``app``."""

    spec: ContainerSpec
    kind: str

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class PlannedPod:
    """A pod from a manifest: ``namespace``/``name``, ``uid`` (``metadata.uid``, else a
    stable one derived from namespace and name), its QoS class (the kubelet's rule,
    :func:`~nri_cpumgr.podmodel.model.pod_qos`) and its containers in start order."""

    namespace: str
    name: str
    uid: str
    qos: QOSClass
    containers: tuple[PlannedContainer, ...] = field(default_factory=tuple)
    source: str = ""
    #: The pod's spec facts (``.spec.resources``, each container's own resources), as a
    #: pod spec source gives them to the plugin (nri_cpumgr.podmodel.spec).
    facts: PodSpecFacts | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


_SHAPES: dict[str, type] = {"mapping": Mapping, "list": list, "string": str}


_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
    (Mapping, "a mapping"), (list, "a list"))


def _describe(value: Any) -> str:
    """``value``'s YAML type and (short) value, for a message: ``an integer (5)``."""
    if value is None:
        return "null"
    # (bool before int: a YAML boolean is an int to isinstance; anything else, a YAML
    # timestamp, binary, ..., by its Python type's name)
    kind = next((name for t, name in _KINDS if isinstance(value, t)),
                f"a {type(value).__name__}")
    return f"{kind} ({shown(value, 40)})"


def _shaped(value: Any, shape: str, where: str, path: str) -> Any:
    """``value`` (the field at ``path`` of the object at ``where``) when it is a ``shape``
    (``mapping``, ``list`` or ``string``); ``None`` (the field unset or null) as the empty
    one (``{}``, ``[]``, ``""``). Raises :class:`ManifestError`
    ``<where>: <path>: expected a <shape>, got <type> (<value>)``."""
    if value is None:
        return {"mapping": {}, "list": [], "string": ""}[shape]
    if not isinstance(value, _SHAPES[shape]):
        raise ManifestError(f"{where}: {path}: expected a {shape}, got {_describe(value)}")
    return value


def _field(obj: Mapping[str, Any], key: str, shape: str, where: str, path: str) -> Any:
    """``obj[key]`` checked by :func:`_shaped` (``path``: ``obj``'s own path, ``""`` at the
    top of a document)."""
    return _shaped(obj.get(key), shape, where, f"{path}.{key}" if path else key)


def check_unique_pods(pods: Iterable[PlannedPod]) -> None:
    """Raises :class:`ManifestError` naming both places when two pods share a
    namespace/name or a uid: the API server never holds two such pods, and a plan would
    merge them (one pod's decisions shown for both)."""
    by_key: dict[str, PlannedPod] = {}
    by_uid: dict[str, PlannedPod] = {}
    for pod in pods:
        first = by_key.setdefault(pod.key, pod)
        if first is not pod:
            raise ManifestError(f"pod {pod.key} is given twice: {first.source} and "
                                f"{pod.source} (the API server holds one pod of a name in a "
                                "namespace)")
        first = by_uid.setdefault(pod.uid, pod)
        if first is not pod:
            raise ManifestError(f"pods {first.key} ({first.source}) and {pod.key} "
                                f"({pod.source}) have one metadata.uid {pod.uid!r}")


def load_pods(text: str, source: str = "<manifest>") -> list[PlannedPod]:
    """Every pod of a YAML stream (see the module docstring). Raises :class:`ManifestError`
    (a malformed field, two pods of one namespace/name, ...)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ManifestError(f"{source}: not YAML: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise ManifestError(f"{source}: not a pod manifest: YAML nested too deeply") from None
    pods: list[PlannedPod] = []
    for n, doc in enumerate(docs, 1):
        where = f"{source} document {n}"
        pods += _pods_of(doc, where)
        check_pod_count(len(pods), where)
    if not pods:
        raise ManifestError(f"{source}: no Pod in it")
    check_unique_pods(pods)
    return pods


def check_pod_count(n: int, where: str) -> None:
    """Raises :class:`ManifestError` when ``n`` pods (the plan's so far, up to ``where``)
    are more than :data:`MAX_PODS`."""
    if n > MAX_PODS:
        raise ManifestError(f"{where}: the manifests make more than {MAX_PODS} pods: a plan "
                            "is for one node (the kubelet's maxPods defaults to 110)")


def _pods_of(doc: Any, where: str) -> list[PlannedPod]:
    if not isinstance(doc, Mapping):
        raise ManifestError(f"{where}: not a Kubernetes object (expected a mapping, got "
                            f"{_describe(doc)})")
    kind = doc.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise ManifestError(f"{where}: kind: expected a string, got {_describe(kind)}")
    if kind == "List":
        out: list[PlannedPod] = []
        for i, item in enumerate(_field(doc, "items", "list", where, "")):
            out += _pods_of(item, f"{where} item {i + 1}")
        return out
    meta = _field(doc, "metadata", "mapping", where, "")
    if kind == "Pod":
        return [pod_from_spec(meta, doc.get("spec"), where)]
    if kind in _WORKLOADS or kind == "CronJob":
        _meta_strings(meta, where, "metadata")
        at = "spec"
        spec = _field(doc, "spec", "mapping", where, "")
        if kind == "CronJob":
            spec = _field(_field(spec, "jobTemplate", "mapping", where, at), "spec", "mapping",
                          where, f"{at}.jobTemplate")
            at = "spec.jobTemplate.spec"
        tmpl = _field(spec, "template", "mapping", where, at)
        at = f"{at}.template"
        tmeta = dict(_field(tmpl, "metadata", "mapping", where, at))
        tmeta.setdefault("name", meta.get("name", ""))
        tmeta.setdefault("namespace", meta.get("namespace", "default"))
        what = f"{where} ({kind} template)"
        if kind not in _REPLICATED or "replicas" not in spec:
            return [pod_from_spec(tmeta, tmpl.get("spec"), what, path=at)]
        replicas = spec["replicas"]
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ManifestError(f"{where}: spec.replicas {shown(replicas)} is not a count")
        if replicas > MAX_PODS:
            raise ManifestError(f"{where}: spec.replicas {replicas} is more than {MAX_PODS} "
                                "pods: a plan is for one node (the kubelet's maxPods "
                                "defaults to 110)")
        _meta_strings(tmeta, where, f"{at}.metadata")
        # one pod per replica, named <name>-0..N-1 (a StatefulSet's names; the random
        # suffixes of a Deployment's or ReplicaSet's pods are unknown before they exist)
        base = str(tmeta.get("name") or "")
        return [pod_from_spec({**tmeta, "name": f"{base}-{i}", "uid": None},
                              tmpl.get("spec"), f"{what} replica {i}", path=at)
                for i in range(replicas)]
    raise ManifestError(f"{where}: kind {kind!r} has no pod (expected Pod, List or a workload)")


def _meta_strings(meta: Mapping[str, Any], where: str, path: str) -> None:
    """The ``metadata`` fields the planner reads are strings, as the API server requires."""
    for key in ("name", "generateName", "namespace", "uid"):
        _field(meta, key, "string", where, path)


def pod_from_spec(meta: Any, spec: Any, where: str, path: str = "") -> PlannedPod:
    """One pod from its ``metadata`` and ``spec`` (``path``: where they sit in the
    document, ``spec.template`` in a Deployment; ``""``: a Pod's own). Raises
    :class:`ManifestError` for a missing or malformed field, naming its path."""
    at = f"{path}." if path else ""
    meta = _shaped(meta, "mapping", where, f"{at}metadata")
    _meta_strings(meta, where, f"{at}metadata")
    name = meta.get("name") or meta.get("generateName") or ""
    if not name:
        raise ManifestError(f"{where}: metadata.name is missing")
    namespace = meta.get("namespace") or "default"
    if spec is None:
        raise ManifestError(f"{where}: pod {name}: {at}spec is missing")
    spec = _shaped(spec, "mapping", where, f"{at}spec")
    uid = meta.get("uid") or _uid(namespace, name)
    inits: list[ContainerSpec] = []
    planned: list[PlannedContainer] = []
    for i, c in enumerate(_field(spec, "initContainers", "list", where, f"{at}spec")):
        s = _container(c, f"{where}: pod {name} initContainers", where,
                       f"{at}spec.initContainers[{i}]")
        sidecar = c.get("restartPolicy") == "Always"
        s = ContainerSpec(s.name, s.requests, s.limits, restartable=sidecar)
        inits.append(s)
        planned.append(PlannedContainer(s, "sidecar" if sidecar else "init"))
    apps = [_container(c, f"{where}: pod {name} containers", where, f"{at}spec.containers[{i}]")
            for i, c in enumerate(_field(spec, "containers", "list", where, f"{at}spec"))]
    if not apps:
        raise ManifestError(f"{where}: pod {name}: spec.containers is empty")
    planned += [PlannedContainer(s, "app") for s in apps]
    names = [p.name for p in planned]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ManifestError(f"{where}: pod {name}: container name(s) used twice: {sorted(dup)}")
    res = _field(spec, "resources", "mapping", where, f"{at}spec")
    try:
        facts = facts_from_pod({"metadata": {"uid": uid, "name": name, "namespace": namespace},
                                "spec": dict(spec)})
    except ValueError as e:
        raise ManifestError(f"{where}: pod {name}: {e}") from None
    if res:  # pod-level resources: the same rules
        at = f"{where}: pod {name}: spec.resources"
        check_api_rules(res, _quantities(res.get("requests"), f"{at}.requests"),
                        _quantities(res.get("limits"), f"{at}.limits"), at)
    if facts.pod_level:
        # with .spec.resources the pod's QoS class is that of its pod-level resources
        # (kubelet apis/core/v1/helper/qos ComputePodQOS, PodLevelResources, v1.37.2)
        qos = pod_qos(Pod(uid=uid, containers=(ContainerSpec(
            "<pod>", dict(facts.pod_requests), dict(facts.pod_limits)),)))
    else:
        qos = pod_qos(Pod(uid=uid, name=name, namespace=namespace, containers=tuple(apps),
                          init_containers=tuple(inits)))
    return PlannedPod(namespace, name, uid, qos, tuple(planned), where, facts)


def _uid(namespace: str, name: str) -> str:
    h = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _container(c: Any, where: str, doc: str, path: str) -> ContainerSpec:
    """``where``: the messages' prefix for a quantity; ``doc`` and ``path``: the document
    and the container's path in it, for a malformed shape."""
    c = _shaped(c, "mapping", doc, path)
    name = _field(c, "name", "string", doc, path)
    if not name:
        raise ManifestError(f"{where}: a container without a name")
    res = _field(c, "resources", "mapping", doc, path)
    requests = _quantities(res.get("requests"), f"{where}: {name}: resources.requests")
    limits = _quantities(res.get("limits"), f"{where}: {name}: resources.limits")
    check_api_rules(res, requests, limits, f"{where}: {name}: resources")
    # API server defaulting: a limit without a request is also the request
    for k, v in limits.items():
        requests.setdefault(k, v)
    return ContainerSpec(name=name, requests=requests, limits=limits)


def check_api_rules(res: Mapping[str, Any], requests: Mapping[str, int],
                    limits: Mapping[str, int], where: str) -> None:
    """The API server's rules for a resource requirement (``res``: the manifest's
    ``resources`` with ``requests`` and ``limits`` parsed as :func:`_quantities` gives
    them): no quantity is negative and no request is more than its limit (kubernetes
    pkg/apis/core/validation ValidateResourceRequirements, v1.37.2). Raises
    :class:`ManifestError` naming ``where``.FIELD.RESOURCE and the quantity as written."""
    def written(field_: str, k: str) -> str:
        return next(str(v) for n, v in res[field_].items() if str(n) == k)

    for field_, parsed in (("requests", requests), ("limits", limits)):
        for k, v in parsed.items():
            if v < 0:
                raise ManifestError(f"{where}.{field_}.{k}: {written(field_, k)!r} is "
                                    "negative (the API server rejects it)")
    for k, v in requests.items():
        if k in limits and v > limits[k]:
            raise ManifestError(
                f"{where}.requests.{k}: {written('requests', k)!r} is more than its limit "
                f"{written('limits', k)!r} (the API server rejects it)")


def _quantities(m: Any, where: str) -> dict[str, int]:
    try:
        return parse_resource_list(m)
    except ResourceListError as e:
        if e.key is None:
            raise ManifestError(f"{where}: expected a mapping, got {_describe(m)}") from None
        if isinstance(e.value, str):  # (the parser's message: why, for some)
            raise ManifestError(f"{where}.{e.key}: {e}") from None
        raise ManifestError(f"{where}.{e.key}: invalid quantity {shown(e.value)}") from None


# ------------------------------------------------------------------ to NRI
def cgroup_parent(qos: QOSClass, uid: str) -> str:
    """The kubelet's pod cgroup (cgroupfs driver) for a QoS class."""
    if qos is QOSClass.GUARANTEED:
        return f"/kubepods/pod{uid}"
    return f"/kubepods/{'burstable' if qos is QOSClass.BURSTABLE else 'besteffort'}/pod{uid}"


def linux_resources(spec: ContainerSpec,
                    pod_limits: Mapping[str, int] | None = None) -> nri_pb2.LinuxResources:
    """The container's resources as the kubelet passes them to the runtime (see the module
    docstring for the formulas). ``pod_limits``: the pod's ``.spec.resources`` limits when
    it sets pod-level resources: a container without its own cpu / memory limit gets the
    pod's, and without a cpu request its shares come from that limit (kuberuntime
    getCPULimit / getMemoryLimit, calculateLinuxResources, v1.37.2; checked against the
    kubelet's own code by tests/e2e/test_kubelet_requests.py)."""
    r = nri_pb2.LinuxResources()
    lim = spec.limits.get("cpu")
    mem = spec.limits.get("memory")
    req = spec.requests.get("cpu") or 0
    if pod_limits is not None:
        if not lim:
            lim = pod_limits.get("cpu")
        if not mem:
            mem = pod_limits.get("memory")
        if "cpu" not in spec.requests:
            req = lim or 0
    shares = (min(MAX_SHARES, max(MIN_SHARES, req * SHARES_PER_CPU // 1000)) if req
              else MIN_SHARES)
    r.cpu.shares.value = shares
    if lim:
        r.cpu.quota.value = min(MAX_QUOTA, max(MIN_QUOTA, lim * QUOTA_PERIOD // 1000))
        r.cpu.period.value = QUOTA_PERIOD
    if mem:
        r.memory.limit.value = mem
    for k, v in sorted(spec.limits.items()):
        if k.startswith("hugepages-"):
            r.hugepage_limits.add(page_size=_page_size(k[len("hugepages-"):]), limit=v)
    return r


def _page_size(size: str) -> str:
    """``"2Mi"`` -> ``"2MB"`` (the runtime's spelling, as runc's)."""
    for suffix, out in (("Ki", "KB"), ("Mi", "MB"), ("Gi", "GB"), ("Ti", "TB")):
        if size.endswith(suffix):
            return size[: -len(suffix)] + out
    return size


def nri_messages(
    pod: PlannedPod, c: PlannedContainer, container_id: str
) -> tuple[nri_pb2.PodSandbox, nri_pb2.Container]:
    """The ``PodSandbox`` and ``Container`` messages of a CreateContainer for ``c``."""
    p = nri_pb2.PodSandbox(id=f"sandbox-{pod.uid}", name=pod.name, uid=pod.uid,
                           namespace=pod.namespace)
    p.labels[LABEL_POD_UID] = pod.uid
    p.linux.cgroup_parent = cgroup_parent(pod.qos, pod.uid)
    ctr = nri_pb2.Container(id=container_id, pod_sandbox_id=p.id, name=c.name)
    ctr.labels[LABEL_CONTAINER_NAME] = c.name
    facts = pod.facts
    pod_level = facts is not None and facts.pod_level
    if pod_level:
        assert facts is not None
        # the sandbox's resources from .spec.resources (kuberuntime applySandboxResources)
        p.linux.pod_resources.CopyFrom(linux_resources(ContainerSpec(
            "<pod>", dict(facts.pod_requests), dict(facts.pod_limits))))
    ctr.linux.resources.CopyFrom(linux_resources(
        c.spec, facts.pod_limits if pod_level and facts is not None else None))
    return p, ctr


def nri_resources_from_cri(r: Mapping[str, Any], *, sandbox: bool = False
                           ) -> nri_pb2.LinuxResources:
    """An NRI ``LinuxResources`` from a CRI ``LinuxContainerResources`` in the JSON form of
    oracle/cmd/kubelet-cri (``cpuPeriod``, ``cpuQuota``, ``cpuShares``,
    ``memoryLimitInBytes``, ``cpusetCpus``, ``cpusetMems``, ``hugepageLimits`` [{``pageSize``,
    ``limit``}]: what the kubelet sends), as the runtime passes it on: for a container the
    OCI spec's fields, each only when the CRI value is non-zero (containerd's
    ``WithResources``); for a sandbox (``sandbox=True``, ``pod.linux.pod_resources``) every
    CPU and memory field, zero included (nri ``FromCRILinuxResources``). Raises KeyError /
    TypeError / ValueError on another shape."""
    out = nri_pb2.LinuxResources()
    for key, msg, fld in (("cpuShares", out.cpu, "shares"), ("cpuQuota", out.cpu, "quota"),
                          ("cpuPeriod", out.cpu, "period"),
                          ("memoryLimitInBytes", out.memory, "limit")):
        v = int(r.get(key) or 0)
        if v or sandbox:
            getattr(msg, fld).value = v
    if r.get("cpusetCpus"):
        out.cpu.cpus = str(r["cpusetCpus"])
    if r.get("cpusetMems"):
        out.cpu.mems = str(r["cpusetMems"])
    for h in r.get("hugepageLimits") or []:
        out.hugepage_limits.add(page_size=str(h["pageSize"]), limit=int(h["limit"]))
    return out


def container_infos(pod: PlannedPod, ids: Iterable[str],
                    cri: Mapping[str, Any] | None = None) -> list[ContainerInfo]:
    """The plugin's view of each container of ``pod`` (in start order), read by the plugin's
    own :func:`~nri_cpumgr.podmodel.nri.container_info`. ``cri``: the kubelet's own CRI
    requests for the pod (``{"sandbox": {"resources": R | None}, "containers": {name: R}}``,
    R as :func:`nri_resources_from_cri` takes it, from oracle/cmd/kubelet-cri) instead of
    this module's model of them. Raises :class:`ManifestError` when ``cri`` lacks a
    container of the pod."""
    out = []
    for c, cid in zip(pod.containers, ids, strict=True):
        sb, ctr = nri_messages(pod, c, cid)
        if cri is not None:
            r = (cri.get("containers") or {}).get(c.name)
            if r is None:
                raise ManifestError(f"pod {pod.name}: the CRI requests lack container {c.name}")
            ctr.linux.ClearField("resources")
            ctr.linux.resources.CopyFrom(nri_resources_from_cri(r))
            sb.linux.ClearField("pod_resources")
            pr = (cri.get("sandbox") or {}).get("resources")
            if pr is not None:
                sb.linux.pod_resources.CopyFrom(nri_resources_from_cri(pr, sandbox=True))
        out.append(container_info(sb, ctr))
    if pod.facts is not None:  # the plan knows the spec, as a pod spec source does
        out = [dataclasses.replace(i, pod_spec=pod.facts) for i in out]
    return out
