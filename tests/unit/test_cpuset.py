import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_cpumgr.cpuset import CPUSet, CPUSetError, format_cpulist


@pytest.mark.parametrize(
    "text, ids",
    [("", set()), ("  ", set()), ("0", {0}), ("0-3,8", {0, 1, 2, 3, 8}), ("1,0", {0, 1}),
     ("2-2", {2}), (" 0 - 1 ", {0, 1})],
)
def test_parse(text, ids):
    if ids is None:
        with pytest.raises(CPUSetError):
            CPUSet.parse(text)
    else:
        assert CPUSet.parse(text) == ids


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", "1;2", "0x1"])
def test_parse_errors(text):
    with pytest.raises(CPUSetError):
        CPUSet.parse(text)


def test_huge_ids_are_refused_before_expanding():
    for text in ("0-99999999", "0-999999999", "70000"):
        with pytest.raises(CPUSetError, match="above 65535"):
            CPUSet.parse(text)


def test_format_kubelet_style():
    assert format_cpulist([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([0, 1]) == "0-1"
    assert str(CPUSet()) == ""
    assert isinstance(CPUSet({1, 2}) - {1}, CPUSet)


@given(st.frozensets(st.integers(0, 300)))
def test_roundtrip(ids):
    assert CPUSet.parse(format_cpulist(ids)) == ids
