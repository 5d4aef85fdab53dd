"""nri_cpumgr.api._protobuf: the generated modules built on upb alone give the names, classes
and wire behaviour the stock protobuf builder gives, without loading protobuf's pure-Python
message implementation (issue 34); with the pure-Python runtime the stock modules serve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.internal import api_implementation

from nri_cpumgr.api import _protobuf, cri_pb2, nri_pb2, ttrpc_pb2

TOP = Path(__file__).resolve().parents[2]
upb = pytest.mark.skipif(api_implementation.Type() != "upb", reason="protobuf runtime not upb")


def _stock(module) -> dict[str, object]:
    from google.protobuf.internal import builder

    names: dict[str, object] = {}
    builder.BuildMessageAndEnumDescriptors(module.DESCRIPTOR, names)
    builder.BuildTopDescriptorsAndMessages(module.DESCRIPTOR, module.__name__.rpartition(".")[2],
                                           names)
    return names


def _shape(value: object) -> object:
    """What a built name is, comparable across two builds (classes differ by identity)."""
    if isinstance(value, type):
        nested = sorted((k, _shape(v)) for k, v in vars(value).items() if isinstance(v, type))
        return ("class", value.__name__, value.__qualname__, value.__module__,
                value.DESCRIPTOR.full_name, nested)
    if type(value).__name__ == "EnumTypeWrapper":
        return ("enum", value.DESCRIPTOR.full_name, sorted(value.items()))
    return value


@upb
@pytest.mark.parametrize("module", [nri_pb2, ttrpc_pb2, cri_pb2], ids=lambda m: m.__name__)
def test_same_names_as_the_stock_builder(module) -> None:
    stock = _stock(module)
    ours = {k: v for k, v in vars(module).items() if k in stock}
    assert ours.keys() == stock.keys()
    assert {k: _shape(v) for k, v in ours.items()} == {k: _shape(v) for k, v in stock.items()}
    assert nri_pb2.CONTAINER_RUNNING == nri_pb2.ContainerState.Value("CONTAINER_RUNNING") == 3


@upb
def test_messages_round_trip_and_register_lazily() -> None:
    c = nri_pb2.Container(id="c1", labels={"k": "v"})
    c.linux.resources.cpu.cpus = "2-3"
    again = nri_pb2.Container.FromString(c.SerializeToString())
    assert again == c and again.linux.resources.cpu.cpus == "2-3"
    assert 'cpus: "2-3"' in str(again)
    assert nri_pb2._sym_db.GetSymbol("nri.pkg.api.v1alpha1.Container") is nri_pb2.Container


def test_status_details_keep_the_any_wire_encoding() -> None:
    """details is google.rpc.Status's repeated Any, declared as bytes: an upstream status with
    a detail decodes, and encodes back to the same bytes."""
    detail = b"\n\x05t/url\x12\x02hi"  # Any{type_url: "t/url", value: "hi"}
    wire = b"\x08\x03\x12\x03bad\x1a" + bytes([len(detail)]) + detail
    st = ttrpc_pb2.Status.FromString(wire)
    assert (st.code, st.message, list(st.details)) == (3, "bad", [detail])
    assert st.SerializeToString() == wire


@upb
def test_plugin_start_does_not_load_the_python_runtime() -> None:
    code = ("import sys; import nri_cpumgr.transport.stub, nri_cpumgr.runtime.events; "
            "print(sorted(m for m in ('google.protobuf.internal.python_message', "
            "'google.protobuf.text_format', 'google.protobuf.descriptor_pool', 'pickle') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TOP, check=True).stdout
    assert out.strip() == "[]"


@upb
@pytest.mark.parametrize("later", [
    "from google.protobuf import timestamp_pb2, any_pb2",
    "import google.protobuf.internal.well_known_types; "
    "from google.protobuf import timestamp_pb2, any_pb2",
])
def test_well_known_types_deferred_yet_whole(later: str) -> None:
    """The plugin's schemas load without well_known_types (datetime, calendar, locale); a
    well-known type imported afterwards still gets its Python methods."""
    code = ("import sys; import nri_cpumgr.api.nri_pb2, nri_cpumgr.api.ttrpc_pb2; "
            "print(sorted(m for m in ('google.protobuf.internal.well_known_types', "
            "'datetime', 'calendar', 'locale') if m in sys.modules)); "
            f"{later}; t = timestamp_pb2.Timestamp(); t.FromSeconds(86400); "
            "print(t.ToJsonString()); a = any_pb2.Any(); a.Pack(t); print(a.TypeName()); "
            "print(type(sys.modules['google.protobuf.internal.well_known_types']"
            ".WKTBASES['google.protobuf.Duration']).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TOP, check=True).stdout
    assert out.splitlines() == ["[]", "1970-01-02T00:00:00Z", "google.protobuf.Timestamp",
                                "type"]


def test_pure_python_runtime_uses_the_stock_modules() -> None:
    code = ("from nri_cpumgr.api import _protobuf, nri_pb2; "
            "from google.protobuf.internal import builder; "
            "assert not _protobuf.UPB and _protobuf.builder is builder; "
            "c = nri_pb2.Container(id='x'); "
            "print(nri_pb2.Container.FromString(c.SerializeToString()).id)")
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TOP, env=env, check=True).stdout
    assert out.strip() == "x"
    assert _protobuf.UPB == (api_implementation.Type() == "upb")


@upb
def test_a_upb_that_differs_falls_back_to_the_stock_builder(monkeypatch) -> None:
    """Should upb's internals change under a later protobuf 6.x, the file is built by the
    stock builder instead of failing the plugin's start."""

    def broken(*_a: object, **_k: object) -> type:
        raise AttributeError("MessageMeta")

    monkeypatch.setattr(_protobuf, "_message_class", broken)
    names: dict[str, object] = {}
    _protobuf.builder.BuildMessageAndEnumDescriptors(ttrpc_pb2.DESCRIPTOR, names)
    _protobuf.builder.BuildTopDescriptorsAndMessages(ttrpc_pb2.DESCRIPTOR, "ttrpc_pb2", names)
    stock = _stock(ttrpc_pb2)
    assert names.keys() == stock.keys()
    assert {k: _shape(v) for k, v in names.items()} == {k: _shape(v) for k, v in stock.items()}
