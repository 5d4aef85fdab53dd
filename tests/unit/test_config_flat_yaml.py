"""The config reader's flat fast path (``config.model._flat_yaml``, issue 34: no PyYAML import
before the plugin registers) reads every document it accepts exactly as PyYAML's SafeLoader
does, and hands every other document to PyYAML (so YAML errors and their messages are
PyYAML's)."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.config import ConfigError, parse_config
from nri_cpumgr.config.model import _flat_yaml, _unique_key_loader


def pyyaml(text: str):
    return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506


FLAT = [
    'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\nsharedPoolUpdateMode: async\n',
    "# a comment\n\ncpuManagerPolicy: static   # trailing\n  # indented comment\n",
    "reservedSystemCPUs: 0\nsharedPoolUpdateBatchSize: 12\n",
    "explainDecisions: true\nalignMemoryWithExclusiveCPUs: Off\n",
    "logFile:\nmetricsAddress: ''\n",
    "logFile: null\nnodeName: NULL\n",
    "logFile: #nothing\n",
    "apiServerURL: http://127.0.0.1:8080\nstateDirectory: /var/lib/nri-cpumgr\n",
    "topologyManagerPolicy: single-numa-node\nmemoryManagerPolicy: Static\n",
    "pluginName: 'my plugin # not a comment'\npluginIndex: \"07\"\n",
    "cpuManagerPolicy: tRue\n",
    "sharedPoolShrinkDelay: 1s\npodSpecWait: 500ms\n",
    "a: _x\nb: a-b.c/d\n",
    "",
    "# only comments\n",
]

NOT_FLAT = [
    "cpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n",
    "reservedMemory:\n- numaNode: 0\n  limits: {memory: 1Gi}\n",
    "featureGates: {PodLevelResources: true}\n",
    "a: 1\na: 2\n",  # duplicate: PyYAML's error
    "a: 010\n",  # YAML 1.1 octal
    "a: 1_000\n",
    "a: 1:20\n",  # sexagesimal
    "a: -1\n",
    "a: 1.5\n",
    "a: .inf\n",
    "a: ~\n",
    "a: 2026-12-06\n",
    "a: \"esc\\\"aped\"\n",
    "a: 'it''s'\n",
    "a: b c\n",
    "a: b:\n",
    "a:b\n",
    "a: |\n  text\n",
    "a: &x y\nb: *x\n",
    "a: !!str 1\n",
    "---\na: b\n",
    "a: b\n...\n",
    "a:\tb\n",
    "a: b\r\n",
    "a: caf\u00e9\n",
    "a: \"\x07\"\n",
    "yes: 1\n",
    "Key: value\n",
    "a: [1, 2]\n",
    "a: b#c\n",
    "a: 'x'y\n",
    "a: \"unterminated\n",
    "  a: b\n",
]


@pytest.mark.parametrize("text", FLAT)
def test_flat_documents_read_as_pyyaml_reads_them(text: str) -> None:
    flat = _flat_yaml(text)
    assert flat is not None, text
    assert flat == (pyyaml(text) or {})
    assert [type(v) for v in flat.values()] == [type(v) for v in (pyyaml(text) or {}).values()]


@pytest.mark.parametrize("text", NOT_FLAT)
def test_other_documents_go_to_pyyaml(text: str) -> None:
    assert _flat_yaml(text) is None


def test_errors_are_the_same_either_way() -> None:
    """A flat document's invalid value and a non-flat one's are reported as before."""
    with pytest.raises(ConfigError) as flat:
        parse_config("cpuManagerPolicy: statik\n", "f.yaml")
    assert str(flat.value) == ("invalid config: cpuManagerPolicy: 'statik' is not one of "
                               "'none', 'static'; did you mean 'static'? (f.yaml)")
    with pytest.raises(ConfigError) as dup:
        parse_config("cpuManagerPolicy: static\ncpuManagerPolicy: none\n", "f.yaml")
    assert "duplicate key 'cpuManagerPolicy'" in str(dup.value)
    assert str(dup.value).startswith("invalid config f.yaml:2:1: not YAML")


_KEYS = st.sampled_from(["a", "cpuManagerPolicy", "yes", "on", "null", "x1", "aB"])
_VALUES = st.one_of(
    st.sampled_from(["", "0", "00", "07", "12", "1_0", "-1", "+1", "1.5", "1e3", ".5", ".inf",
                     "true", "True", "tRue", "off", "OFF", "no", "y", "n", "~", "null", "Null",
                     "nUll", "static", "/a/b", "_x", "a:b", "a: b", "http://h:1", "a:",
                     "'q'", "\"q\"", "''", "\"\"", "'a''b'", "\"a\\\"b\"", "#c", "a #c",
                     "a#c", "[1]", "{a: 1}", "&a x", "*a", "!!str x", "|", ">", "- x", "a b",
                     "2026-01-01", "12:30", "1s", "0s", "1.5m", "1m30s", "500ms", "1.s", "1e3s",
                     "0x1F", "0o7", "0b1", "1__", "=", "<<"]),
    st.text(alphabet="ab01:#'\"_ -./", max_size=6))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_KEYS, _VALUES, st.sampled_from(["", " ", "  # c", "\n#c"])),
                max_size=4))
def test_flat_reader_agrees_with_pyyaml(lines: list[tuple[str, str, str]]) -> None:
    """Random documents near the fast path's edges: whenever it accepts one, PyYAML reads
    the same mapping (values and their types)."""
    text = "".join(f"{k}: {v}{tail}\n" for k, v, tail in lines)
    flat = _flat_yaml(text)
    if flat is None:
        return
    want = pyyaml(text) or {}
    assert flat == want
    assert [type(v) for v in flat.values()] == [type(v) for v in want.values()]
