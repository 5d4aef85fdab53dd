"""nri_cpumgr.podmodel.parse_quantity in integer arithmetic (issue 34: no fractions/decimal in
the process) gives what the exact rational computation gives: the value, the rounding up,
and the errors with their messages, on a corpus and on random quantities."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from nri_cpumgr.podmodel import parse_quantity
from nri_cpumgr.podmodel.model import _QTY, _SUFFIX

_SCALE = {k: Fraction(mul, div) for k, (mul, div) in _SUFFIX.items()}


def _rational(text: str, milli: bool) -> int:
    """The reference: the quantity as a Fraction, rounded up as the API server does."""
    m = _QTY.match(text.strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {text!r}")
    value = Fraction(m.group(1)) * _SCALE[m.group(2)] * (1000 if milli else 1)
    n = value.numerator // value.denominator
    return n + (1 if n * value.denominator != value.numerator and value > 0 else 0)


def _outcome(fn, text: str, milli: bool) -> tuple[str, object]:
    try:
        return "ok", fn(text, milli=milli)
    except ValueError as e:
        return "error", str(e)


CORPUS = ["0", "1", "2", "1500m", "250m", "0.5", "1.5Gi", "128Mi", "1e3", "1E3", "1e-3",
          "-1m", "-0.5", "+2", "0.0001", "2.5m", "1E", "5.", ".5", "+.5", "-.25Ki", "7e+2",
          "100k", "1.000000001", "3Pi", "1Ei", " 2 ", ".", "1.2.3", "+", "-", ".e5", "1e",
          "1x", "Mi", "", "1.5mi", "e5", "1..2", "0.0", "00012", "-0"]


@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("milli", [False, True])
def test_corpus(text: str, milli: bool) -> None:
    assert _outcome(parse_quantity, text, milli) == _outcome(_rational, text, milli)


def test_random_quantities() -> None:
    rng = random.Random(34)
    chars = "0123456789.+-eE"
    for _ in range(5000):
        body = "".join(rng.choice(chars) for _ in range(rng.randint(1, 8)))
        text = body + rng.choice(list(_SUFFIX) + ["x", "mi"])
        milli = rng.random() < 0.5
        assert _outcome(parse_quantity, text, milli) == _outcome(_rational, text, milli), text
