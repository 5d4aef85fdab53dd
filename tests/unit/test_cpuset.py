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


_IDS = st.frozensets(st.integers(0, 300)) | st.frozensets(st.integers(0, 3000), max_size=40)


@given(_IDS, _IDS)
def test_masks_follow_the_set_operators(a, b):
    """A set's mask, whether computed from its ids, built from a mask or carried through
    an operator from its operands' masks, is the mask of its ids; so is its text."""
    x, y = CPUSet(a), CPUSet(b)
    assert x.mask == sum(1 << i for i in a) and y.mask == sum(1 << i for i in b)
    z = CPUSet.from_mask(x.mask)
    assert z == a and z.mask == x.mask and str(z) == format_cpulist(a) == str(x)
    for op in ("__or__", "__and__", "__sub__", "__xor__"):
        got = getattr(x, op)(y)  # both masks known: the result's mask is derived
        want = getattr(frozenset(a), op)(frozenset(b))
        assert got == want and isinstance(got, CPUSet)
        assert got.mask == sum(1 << i for i in want), op
        assert str(got) == format_cpulist(want)
        plain = getattr(CPUSet(a), op)(set(b))  # no mask on either side: computed when asked
        assert plain == want and plain.mask == got.mask and str(plain) == str(got)


def test_mask_text_in_runs():
    assert str(CPUSet.from_mask(0)) == ""
    assert str(CPUSet.from_mask(0b1011_1101)) == "0,2-5,7"
    assert str(CPUSet.from_mask((1 << 256) - 2)) == "1-255"
    assert repr(CPUSet.parse("1-3")) == "CPUSet('1-3')"


def test_only_ascii_digits_are_ids_as_in_gos_atoi():
    """int() takes other scripts' digits and underscores; the kubelet's strconv.Atoi does
    not: every cpulist (config, checkpoints, sysfs) is read the kubelet's way."""
    for text in ("١", "0-١", "1_0", "٣-4", "99999999999999999999999"):
        with pytest.raises(CPUSetError):
            CPUSet.parse(text)
    assert CPUSet.parse("0-2,07") == CPUSet({0, 1, 2, 7})
    assert CPUSet.parse(" 1 - 2 \n") == CPUSet({1, 2})
