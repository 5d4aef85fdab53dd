"""What the plugin needs of a pod's spec and NRI cannot show it (pure, no I/O).

A kubelet with ``PodLevelResources`` (on by default) sends a container without its own
resources, in a pod with ``.spec.resources``, the **pod's** limits (kuberuntime
kuberuntime_container_linux.go ``getCPULimit`` / ``getMemoryLimit``, then
``calculateLinuxResources``: shares from the limit when there is no request; v1.37.2). So
from NRI alone such a container looks like one asking for the whole pod budget, and a
one-container pod with ``.spec.resources`` looks exactly like one whose container asks for
the same itself. The kubelet decides from the spec: whether ``.spec.resources`` is set
(component-helpers resource ``IsPodLevelResourcesSet``), each container's own requests and
limits (cm/qos ``IsContainerEquivalentQOSGuaranteed``), restartable init containers.

:class:`PodSpecFacts` holds those facts; :func:`facts_from_pod` reads them from a
``v1.Pod`` as the API server serves it (JSON decoded into dicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nri_cpumgr.frozen import slot_init
from nri_cpumgr.podmodel.model import ContainerSpec, ResourceListError, parse_resource_list

#: Annotation of a mirror pod naming its static pod's UID (kubelet types ConfigMirrorAnnotationKey).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class PodSpecFacts:
    """The spec facts of one pod.

    ``pod_level``: ``.spec.resources`` sets a request or limit of cpu, memory or hugepages
    (component-helpers resource IsPodLevelResourcesSet, v0.37.2). ``pod_requests`` /
    ``pod_limits``: those values (millicores for cpu, bytes otherwise). ``containers``: every
    init and app container's own requests/limits, by name (``restartable`` for init
    containers with ``restartPolicy: Always``); ``init_containers``: the init containers'
    names in order. ``aliases``: other UIDs the runtime may know the pod by (a mirror pod's
    static pod UID).
    """

    uid: str
    namespace: str
    name: str
    pod_level: bool
    pod_requests: Mapping[str, int]
    pod_limits: Mapping[str, int]
    containers: Mapping[str, ContainerSpec]
    init_containers: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    def container(self, name: str) -> ContainerSpec | None:
        """The container's own spec (None: the pod has no container of that name)."""
        return self.containers.get(name)


def _is_pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _quantities(doc: Any, where: str) -> dict[str, int]:
    try:
        return parse_resource_list(doc)
    except ResourceListError as e:
        at = where if e.key is None else f"{where}.{e.key}"
        raise ValueError(f"{at}: {e}") from None


def _container(doc: Any, where: str, init: bool) -> ContainerSpec:
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise ValueError(f"{where}: a container needs a name")
    res = doc.get("resources") or {}
    if not isinstance(res, dict):
        raise ValueError(f"{where}.resources: expected a mapping")
    name = doc["name"]
    limits = _quantities(res.get("limits"), f"{where}.resources.limits")
    # a limit alone implies an equal request (the API server's defaulting; idempotent on
    # the defaulted pods it serves)
    requests = {**limits, **_quantities(res.get("requests"), f"{where}.resources.requests")}
    return ContainerSpec(
        name=name,
        requests=requests,
        limits=limits,
        restartable=init and doc.get("restartPolicy") == "Always",
    )


def facts_from_pod(pod: Any) -> PodSpecFacts:
    """The facts of a ``v1.Pod`` (decoded JSON). Raises ValueError naming the field for a
    malformed object (no uid, a quantity that does not parse)."""
    if not isinstance(pod, dict):
        raise ValueError("pod: expected an object")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str) or not uid or not isinstance(spec, dict):
        raise ValueError("pod: no metadata.uid or spec")
    res = spec.get("resources") or {}
    if not isinstance(res, dict):
        raise ValueError("spec.resources: expected a mapping")
    limits = _quantities(res.get("limits"), "spec.resources.limits")
    requests = {**limits, **_quantities(res.get("requests"), "spec.resources.requests")}
    pod_level = any(_is_pod_level_resource(k) for k in (*requests, *limits))
    containers: dict[str, ContainerSpec] = {}
    init: list[str] = []
    for i, c in enumerate(spec.get("initContainers") or ()):
        cs = _container(c, f"spec.initContainers[{i}]", True)
        containers[cs.name] = cs
        init.append(cs.name)
    for i, c in enumerate(spec.get("containers") or ()):
        cs = _container(c, f"spec.containers[{i}]", False)
        containers[cs.name] = cs
    ann = meta.get("annotations") or {}
    mirror = ann.get(MIRROR_ANNOTATION) if isinstance(ann, dict) else None
    return PodSpecFacts(
        uid=uid,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        pod_level=pod_level,
        pod_requests=requests,
        pod_limits=limits,
        containers=containers,
        init_containers=tuple(init),
        aliases=(mirror,) if isinstance(mirror, str) and mirror and mirror != uid else (),
    )


def qualifies_for_slice(c: ContainerSpec) -> bool:
    """A container of a pod with ``.spec.resources`` that may take exclusive CPUs: its own
    cpu and memory requests equal its own limits and the CPU request is a positive whole
    number (kubelet cm/qos IsContainerEquivalentQOSGuaranteed; cpumanager policy_static.go
    guaranteedCPUs with PodLevelResourceManagers, v1.37.2)."""
    return c.equivalent_guaranteed() and c.requests["cpu"] % 1000 == 0
