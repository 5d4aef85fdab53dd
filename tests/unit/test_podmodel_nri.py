"""The pod model built from decoded real NRI requests (tests/data/nri-examples)."""

import json
import re

import pytest
from google.protobuf import json_format
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.podmodel import ContainerSpec, Pod, QOSClass, pod_qos
from nri_cpumgr.podmodel.nri import (
    container_info,
    hugepage_resource,
    qos_from_cgroup_parent,
    resources_from_nri,
)
from tests.conformance_data import nri_examples_dir

EXAMPLES = nri_examples_dir()


def _example(name: str) -> dict:
    path = EXAMPLES / name
    assert path.is_file(), f"missing {path}"
    return json.loads(path.read_text())["req"]


def test_create_container_request_from_real_containerd():
    req = json_format.ParseDict(
        _example("CreateContainer-request.json"), nri_pb2.CreateContainerRequest(),
        ignore_unknown_fields=True,
    )
    info = container_info(req.pod, req.container)
    assert info.pod_uid == "0b4a6c1e-1111-2222-3333-444455556666"
    assert info.name == "app"
    assert info.qos is QOSClass.GUARANTEED
    assert info.qos_source == "cgroup-parent"
    assert info.resources.cpu_request_milli == 2000
    assert info.resources.cpu_limit_milli == 2000
    assert info.resources.memory_limit == 209715200
    assert info.resources.integer_cpus == 2
    assert info.spec().guaranteed_cpus() == 2
    assert info.restart_count == 0


def test_synchronize_request_containers():
    req = json_format.ParseDict(
        _example("Synchronize-after-containerd-restart.json"), nri_pb2.SynchronizeRequest(),
        ignore_unknown_fields=True,
    )
    pods = {p.id: p for p in req.pods}
    infos = [container_info(pods[c.pod_sandbox_id], c) for c in req.containers]
    assert [(i.name, i.qos, i.resources.integer_cpus) for i in infos] == [
        ("app", QOSClass.GUARANTEED, 2)
    ]
    assert req.containers[0].state == nri_pb2.CONTAINER_RUNNING


@pytest.mark.parametrize(
    "parent, qos",
    [
        ("/kubepods/pod0b4a6c1e-1111", QOSClass.GUARANTEED),
        ("/kubepods/burstable/pod0b4a6c1e-1111", QOSClass.BURSTABLE),
        ("/kubepods/besteffort/pod0b4a6c1e-1111", QOSClass.BESTEFFORT),
        ("kubepods-pod0b4a6c1e_1111.slice", QOSClass.GUARANTEED),
        ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab_12.slice",
         QOSClass.BURSTABLE),
        ("kubepods-besteffort-podab_12.slice", QOSClass.BESTEFFORT),
        ("/system.slice/foo", None),
        ("", None),
        # "kubepods" again inside the pod's name: the last occurrence is not where it matches
        ("/kubepods/podkubepods", QOSClass.GUARANTEED),
        ("/kubepods/besteffort/pod-kubepods-x", QOSClass.BESTEFFORT),
        ("kubepods-burstable-podkubepods_1.slice", QOSClass.BURSTABLE),
        ("/kubepods/burstable/pod1/kubepods", None),
    ],
)
def test_qos_from_cgroup_parent(parent, qos):
    assert qos_from_cgroup_parent(parent) is qos


# the rule as two plain regex searches over the whole parent: the function matches at the
# last "kubepods" first, and must agree with this everywhere
_REF_CGROUPFS = re.compile(r"(?:^|/)kubepods(?:/(burstable|besteffort))?/pod[0-9A-Za-z_-]+/?$")
_REF_SYSTEMD = re.compile(r"kubepods(?:-(burstable|besteffort))?-pod[0-9A-Za-z_]+\.slice/?$")
_REF_QOS = {None: QOSClass.GUARANTEED, "burstable": QOSClass.BURSTABLE,
            "besteffort": QOSClass.BESTEFFORT}


def _reference_qos(parent: str) -> QOSClass | None:
    m = _REF_CGROUPFS.search(parent) or _REF_SYSTEMD.search(parent)
    return _REF_QOS[m.group(1)] if m else None


_PARTS = st.sampled_from(["/", "kubepods", "-", "burstable", "besteffort", "pod", "ab_1",
                          "kubepods-pod", ".slice", "/pod", "x", "kubepods/", "-pod"])


@settings(max_examples=600, deadline=None)
@given(st.lists(_PARTS, max_size=9).map("".join))
@example("/kubepods/podkubepods-pod")
def test_qos_from_cgroup_parent_agrees_with_the_plain_search(parent):
    assert qos_from_cgroup_parent(parent) is _reference_qos(parent)


def _res(shares=None, quota=None, period=None, mem=None):
    r = nri_pb2.LinuxResources()
    if shares is not None:
        r.cpu.shares.value = shares
    if quota is not None:
        r.cpu.quota.value = quota
        r.cpu.period.value = period or 100000
    if mem is not None:
        r.memory.limit.value = mem
    return r


@pytest.mark.parametrize(
    "kw, req_m, lim_m, integer",
    [
        (dict(shares=2), None, None, 0),  # BestEffort
        (dict(shares=1024, quota=100000, mem=1 << 20), 1000, 1000, 1),
        (dict(shares=1536, quota=150000, mem=1 << 20), 1500, 1500, 0),  # fractional
        (dict(shares=512), 500, None, 0),  # burstable 1/2
        (dict(shares=102), 100, None, 0),  # 100m -> 102 shares -> 100m back
        (dict(shares=2048, quota=400000, period=200000), 2000, 2000, 2),
    ],
)
def test_kubelet_resource_arithmetic_is_inverted(kw, req_m, lim_m, integer):
    r = resources_from_nri(_res(**kw))
    assert (r.cpu_request_milli, r.cpu_limit_milli, r.integer_cpus) == (req_m, lim_m, integer)


def test_hugepage_names():
    assert hugepage_resource("2MB") == "hugepages-2Mi"
    assert hugepage_resource("1GB") == "hugepages-1Gi"
    assert hugepage_resource("64KB") == "hugepages-64Ki"
    assert hugepage_resource("junk") is None


def _c(req: dict, lim: dict) -> ContainerSpec:
    return ContainerSpec("c", requests=req, limits=lim)


@pytest.mark.parametrize(
    "containers, qos",
    [
        ([_c({}, {})], QOSClass.BESTEFFORT),
        ([_c({}, {"memory": 200 << 20})], QOSClass.BURSTABLE),  # memory only
        ([_c({"cpu": 500}, {"cpu": 1000})], QOSClass.BURSTABLE),
        ([_c({"cpu": 1000, "memory": 1}, {"cpu": 1000, "memory": 1})], QOSClass.GUARANTEED),
        ([_c({"cpu": 1500, "memory": 1}, {"cpu": 1500, "memory": 1})], QOSClass.GUARANTEED),
        ([_c({}, {"cpu": 1000, "memory": 1})], QOSClass.GUARANTEED),  # limits only
        ([_c({}, {"cpu": 1000, "memory": 1}), _c({}, {})], QOSClass.BURSTABLE),
    ],
)
def test_pod_qos_docs_examples(containers, qos):
    assert pod_qos(Pod("u", containers=tuple(containers))) is qos


def test_guaranteed_cpus_integer_only():
    assert _c({"cpu": 2000}, {}).guaranteed_cpus() == 2
    assert _c({"cpu": 1500}, {}).guaranteed_cpus() == 0
    assert _c({}, {"cpu": 1000}).guaranteed_cpus() == 1


def test_spec_is_shared_by_containers_of_one_shape() -> None:
    """ContainerInfo.spec gives one ContainerSpec per (name, resources) shape: the same
    object for every container of that shape, the container's own for another name or other
    resources (the resources decode to one object per shape)."""
    from nri_cpumgr.podmodel import nri as nri_model

    def info(uid: str, name: str, milli: int):
        p = nri_pb2.PodSandbox(id="sb-" + uid, uid=uid, name=uid, namespace="ns")
        p.linux.cgroup_parent = f"/kubepods/pod{uid}"
        c = nri_pb2.Container(id="c-" + uid + name, pod_sandbox_id="sb-" + uid, name=name)
        c.linux.resources.cpu.shares.value = milli * 1024 // 1000
        c.linux.resources.cpu.quota.value = milli * 100
        c.linux.resources.cpu.period.value = 100000
        c.linux.resources.memory.limit.value = 1 << 30
        return container_info(p, c)

    a, b = info("a", "app", 2000), info("b", "app", 2000)
    assert a.resources is b.resources and a.spec() is b.spec()
    assert a.spec() == ContainerSpec("app", {"cpu": 2000}, {"cpu": 2000, "memory": 1 << 30})
    other = info("c", "side", 2000).spec()
    assert other.name == "side" and other is not a.spec()
    assert info("d", "app", 1000).spec().requests == {"cpu": 1000}
    for i in range(nri_model._SPECS_SIZE + 10):  # (bounded: cleared when full)
        info(f"x{i}", f"n{i}", 1000).spec()
    assert len(nri_model._SPECS) <= nri_model._SPECS_SIZE


def test_with_pod_spec_is_replace_of_that_one_field():
    """ContainerInfo.with_pod_spec copies every field but pod_spec (a field added to
    ContainerInfo and not to with_pod_spec fails here)."""
    import dataclasses

    from nri_cpumgr.podmodel.nri import ContainerInfo, Resources
    from nri_cpumgr.podmodel.spec import facts_from_pod

    facts = facts_from_pod({"metadata": {"uid": "u", "name": "p", "namespace": "ns"},
                            "spec": {"containers": [{"name": "c"}]}})
    other = facts_from_pod({"metadata": {"uid": "u", "name": "p", "namespace": "ns"},
                            "spec": {"containers": [{"name": "d"}]}})
    values = {f.name: object() for f in dataclasses.fields(ContainerInfo)}
    values["resources"] = Resources(2, 0, 0, 0, {})
    values["pod_spec"] = other
    info = ContainerInfo(**values)  # type: ignore[arg-type]
    got = info.with_pod_spec(facts)
    assert got == dataclasses.replace(info, pod_spec=facts)
    assert all(getattr(got, f.name) is getattr(info, f.name)
               for f in dataclasses.fields(ContainerInfo) if f.name != "pod_spec")
    assert got.pod_spec is facts and info.with_pod_spec(None).pod_spec is None
