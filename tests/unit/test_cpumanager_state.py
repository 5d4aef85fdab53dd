"""The CPU manager state's default set kept as a bitmask between an allocation and its next
read (nri_cpumgr.cm.cpumanager.state)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.cm.cpumanager.state import CPUManagerState
from nri_cpumgr.cpuset import CPUSet


def test_take_from_default_builds_the_set_when_next_read() -> None:
    s = CPUManagerState(default_set=CPUSet.parse("0-255"))
    s.take_from_default(CPUSet.parse("3,128"))
    assert s._default is None  # (nothing built yet)
    assert s.default_mask == ((1 << 256) - 1) & ~(1 << 3 | 1 << 128)
    s.take_from_default(CPUSet.parse("4"))
    got = s.default_set
    assert got == CPUSet(set(range(256)) - {3, 4, 128}) and str(got) == "0-2,5-127,129-255"
    assert s.default_set is got  # (built once)
    s.default_set = got | {4}
    assert s.default_mask == got.mask | 1 << 4


def test_equality_and_copy_follow_the_contents() -> None:
    a = CPUManagerState(assignments={"p": {"c": CPUSet.parse("1")}},
                        default_set=CPUSet.parse("0-3"))
    b = a.copy()
    a.take_from_default(CPUSet.parse("1"))
    assert a != b
    b.default_set = CPUSet.parse("0,2-3")
    assert a == b
    assert repr(a) == ("CPUManagerState(assignments={'p': {'c': CPUSet('1')}}, "
                       "default_set=CPUSet('0,2-3'))")
    assert CPUManagerState() == CPUManagerState(assignments={}, default_set=CPUSet())


def test_the_set_is_built_from_the_last_one_minus_what_was_taken() -> None:
    s = CPUManagerState(default_set=CPUSet.parse("0-7"))
    s.take_from_default(CPUSet.parse("1"))
    s.take_from_default(CPUSet.parse("5-6"))
    assert s.default_set == CPUSet.parse("0,2-4,7") and s.default_mask == 0b10011101
    s.default_set = CPUSet.parse("0-3")  # (a new set: what was taken before is forgotten)
    s.take_from_default(CPUSet.parse("2"))
    assert s.default_set == CPUSet.parse("0-1,3")
    assert str(s.default_set) == "0-1,3"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sets(st.integers(0, 40), max_size=6),
                          st.booleans()), max_size=25))
def test_takes_gives_and_reads_in_any_order_match_a_plain_set(steps) -> None:
    """take_from_default / give_to_default kept as masks, the set built at a read (or
    found among the recent pools, state._POOLS): always the plain set's contents, its own
    mask, and a CPUSet."""
    s = CPUManagerState(default_set=CPUSet(range(0, 41, 2)))
    ref = set(range(0, 41, 2))
    for take, cpus, read in steps:
        if take:
            s.take_from_default(CPUSet(cpus))
            ref -= cpus
        else:
            s.give_to_default(CPUSet(cpus))
            ref |= cpus
        assert s.default_mask == sum(1 << c for c in ref)
        if read:
            got = s.default_set
            assert type(got) is CPUSet and got == ref and got.mask == s.default_mask
            assert str(got) == str(CPUSet(ref))
    assert s.default_set == ref
