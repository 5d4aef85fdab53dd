"""Our proto/nri.proto is wire-compatible with the upstream containerd/nri schema.

Upstream api.proto (NRI v0.6.1 from Debian trixie, v0.8.0 from sid) is extracted by
``scripts/fetch-runtime.sh`` (``make runtime``). For every message, field, enum value and RPC
that we declare, the field number, type, label and type name must equal upstream's; fields
missing from v0.6.1 are compared against v0.8.0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from nri_cpumgr.api import nri_pb2, ttrpc_pb2

TOP = Path(__file__).resolve().parents[2]
SCHEMA = TOP / ".runtime" / "schema"
API_REL = Path("usr/share/gocode/src/github.com/containerd/nri/pkg/api/api.proto")
FDP = descriptor_pb2.FieldDescriptorProto


def _upstream(version: str, tmp_dir: Path) -> descriptor_pb2.FileDescriptorProto:
    proto = SCHEMA / f"nri-{version}" / API_REL
    if not proto.is_file():
        pytest.fail(f"upstream NRI schema {proto} is missing: run `make runtime`")
    out = tmp_dir / f"nri-{version}.pb"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}",
         f"--descriptor_set_out={out}", proto.name],
        check=True,
        capture_output=True,
    )
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (fd,) = [f for f in fds.file if f.name == proto.name]
    return fd


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    tmp = tmp_path_factory.mktemp("nri-schema")
    return {v: _upstream(v, tmp) for v in ("0.6", "0.8")}


@pytest.fixture(scope="module")
def ours() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto()
    nri_pb2.DESCRIPTOR.CopyToProto(fd)
    return fd


def _messages(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, descriptor_pb2.DescriptorProto]:
    out: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, msgs) -> None:
        for m in msgs:
            name = f"{prefix}{m.name}"
            out[name] = m
            walk(name + ".", m.nested_type)

    walk("", fd.message_type)
    return out


def _sig(f: descriptor_pb2.FieldDescriptorProto) -> tuple:
    return (f.number, FDP.Type.Name(f.type), FDP.Label.Name(f.label), f.type_name)


def test_package_matches(upstream, ours) -> None:
    assert ours.package == upstream["0.6"].package == "nri.pkg.api.v1alpha1"


def test_required_messages_declared(ours) -> None:
    msgs = _messages(ours)
    required = {
        "RegisterPluginRequest", "UpdateContainersRequest", "UpdateContainersResponse",
        "ConfigureRequest", "ConfigureResponse", "SynchronizeRequest", "SynchronizeResponse",
        "CreateContainerRequest", "CreateContainerResponse", "UpdateContainerRequest",
        "UpdateContainerResponse", "StopContainerRequest", "StopContainerResponse",
        "StateChangeEvent", "Empty", "PodSandbox", "LinuxPodSandbox", "Container",
        "LinuxContainer", "LinuxResources", "LinuxCPU", "LinuxMemory", "HugepageLimit",
        "LinuxDevice", "ContainerAdjustment", "LinuxContainerAdjustment", "ContainerUpdate",
        "LinuxContainerUpdate", "ContainerEviction", "KeyValue", "OptionalString",
        "OptionalInt", "OptionalInt32", "OptionalUInt32", "OptionalInt64", "OptionalUInt64",
        "OptionalBool", "OptionalFileMode",
    }
    assert required <= set(msgs), sorted(required - set(msgs))
    fields = {
        "SynchronizeRequest": {"more"}, "SynchronizeResponse": {"more"},
        "ConfigureRequest": {"registration_timeout", "request_timeout"},
        "LinuxPodSandbox": {"pod_overhead", "pod_resources", "cgroup_parent", "cgroups_path",
                            "resources"},
        "Container": {"state", "pid", "labels", "annotations", "linux"},
    }
    for msg, names in fields.items():
        have = {f.name for f in msgs[msg].field}
        assert names <= have, (msg, names - have)


def test_every_declared_field_matches_upstream(upstream, ours) -> None:
    up = {v: _messages(fd) for v, fd in upstream.items()}
    compared = 0
    for name, msg in _messages(ours).items():
        assert name in up["0.8"] or name in up["0.6"], f"message {name} is not upstream"
        for f in msg.field:
            ref = None
            for v in ("0.6", "0.8"):  # the oldest version that has the field decides
                m = up[v].get(name)
                if m is not None:
                    ref = next((u for u in m.field if u.name == f.name), None)
                    if ref is not None:
                        break
            assert ref is not None, f"{name}.{f.name} is in neither upstream schema"
            assert _sig(f) == _sig(ref), f"{name}.{f.name}: ours {_sig(f)} upstream {_sig(ref)}"
            compared += 1
        assert msg.options.map_entry == (up["0.8"].get(name) or up["0.6"][name]).options.map_entry
    assert compared > 150  # the whole schema, not a handful


def test_v08_only_fields_are_really_v08(upstream, ours) -> None:
    """The v0.8 additions must be absent in v0.6.1 (so the 0.8 comparison was needed)."""
    up6 = _messages(upstream["0.6"])
    up8 = _messages(upstream["0.8"])
    for msg, field in [("SynchronizeRequest", "more"), ("SynchronizeResponse", "more"),
                       ("ConfigureRequest", "registration_timeout"),
                       ("ConfigureRequest", "request_timeout")]:
        assert field not in {f.name for f in up6[msg].field}
        assert field in {f.name for f in up8[msg].field}


def test_enums_match_upstream(upstream, ours) -> None:
    for enum in ours.enum_type:
        ref = {e.name: e for e in upstream["0.6"].enum_type}.get(enum.name) or {
            e.name: e for e in upstream["0.8"].enum_type}[enum.name]
        ref_values = {v.name: v.number for v in ref.value}
        for v in enum.value:
            assert ref_values.get(v.name) == v.number, (enum.name, v.name)
    assert {e.name for e in ours.enum_type} >= {"Event", "ContainerState"}


def test_services_match_upstream(upstream, ours) -> None:
    ref = {s.name: {m.name: (m.input_type, m.output_type) for m in s.method}
           for s in upstream["0.6"].service}
    for svc in ours.service:
        for m in svc.method:
            assert ref[svc.name][m.name] == (m.input_type, m.output_type), (svc.name, m.name)
    assert {s.name: {m.name for m in s.method} for s in ours.service} == {
        k: set(v) for k, v in ref.items()}


def test_ttrpc_envelope_wire_layout() -> None:
    """ttrpc request.proto + google.rpc.Status field numbers, checked by encoding bytes."""
    req = ttrpc_pb2.Request(service="s", method="m", payload=b"p", timeout_nano=5,
                            metadata=[ttrpc_pb2.KeyValue(key="k", value="v")])
    assert req.SerializeToString() == (
        b"\x0a\x01s" b"\x12\x01m" b"\x1a\x01p" b"\x20\x05" b"\x2a\x06\x0a\x01k\x12\x01v")
    resp = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=12, message="x"), payload=b"y")
    assert resp.SerializeToString() == b"\x0a\x05\x08\x0c\x12\x01x" b"\x12\x01y"
    # google.rpc.Status's `repeated google.protobuf.Any details`, declared as bytes: the same
    # wire encoding (field 3, length-delimited, each an encoded Any); the plugin never reads it
    details = ttrpc_pb2.Status.DESCRIPTOR.fields_by_name["details"]
    assert (details.number, details.type) == (3, details.TYPE_BYTES)
    assert details.is_repeated
    any_detail = b"\x0a\x01t\x12\x01v"  # Any{type_url: "t", value: "v"}
    st = ttrpc_pb2.Status(code=12, details=[any_detail])
    assert st.SerializeToString() == b"\x08\x0c" b"\x1a\x06" + any_detail


CRI_API = SCHEMA / "cri/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"


def test_cri_subset_matches_upstream(tmp_path) -> None:
    """proto/cri.proto (the CRI calls the plugin makes itself, sharedPoolUpdateMode cri):
    every declared field has upstream runtime.v1's number, type and label; each RPC has
    upstream's name and its messages' names (the package differs on purpose)."""
    import importlib.util

    from nri_cpumgr.api import cri_pb2

    if not CRI_API.is_file():
        pytest.fail(f"upstream CRI schema {CRI_API} is missing: run `make runtime`")
    spec = importlib.util.spec_from_file_location("gen_cri", TOP / "scripts" / "gen_cri.py")
    gen_cri = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(gen_cri)
    (tmp_path / "api.proto").write_text(gen_cri.strip_gogo(CRI_API.read_text()))
    out = tmp_path / "cri.pb"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}",
                    f"--descriptor_set_out={out}", "api.proto"], check=True,
                   capture_output=True)
    (up,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert up.package == "runtime.v1"
    mine = descriptor_pb2.FileDescriptorProto()
    cri_pb2.DESCRIPTOR.CopyToProto(mine)
    ups = _messages(up)
    compared = 0
    for name, msg in _messages(mine).items():
        ref = ups[name]
        for f in msg.field:
            u = next(x for x in ref.field if x.name == f.name)
            assert _sig(f)[:3] == _sig(u)[:3], f"{name}.{f.name}: {_sig(f)} vs {_sig(u)}"
            assert f.type_name.rsplit(".", 1)[-1] == u.type_name.rsplit(".", 1)[-1]
            compared += 1
    assert compared >= 14
    svc = {m.name: (m.input_type, m.output_type) for s in up.service for m in s.method
           if s.name == "RuntimeService"}
    for m in mine.service[0].method:
        assert tuple(t.rsplit(".", 1)[-1] for t in svc[m.name]) == (
            m.input_type.rsplit(".", 1)[-1], m.output_type.rsplit(".", 1)[-1])
    from nri_cpumgr.poolsync.cri import UPDATE_METHOD, VERSION_METHOD

    assert UPDATE_METHOD == f"/{up.package}.RuntimeService/UpdateContainerResources"
    assert VERSION_METHOD == f"/{up.package}.RuntimeService/Version"
