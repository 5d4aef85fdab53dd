"""nri_cpumgr.podmodel.parse_quantity in integer arithmetic (issue 34: no fractions/decimal in
the process) gives what the exact rational computation gives: the value, the rounding up,
and the errors with their messages, on a corpus and on random quantities; and it takes
the quantities of resource.Quantity's grammar only (no blanks around one, no exponent with a
unit suffix: k8s.io/apimachinery pkg/api/resource quantity.go, v0.37.2)."""

from __future__ import annotations

import random
import re
from fractions import Fraction

import pytest

from nri_cpumgr.podmodel import parse_quantity, parse_resource_list
from nri_cpumgr.podmodel.model import _SUFFIX

_MAX = 2**63 - 1  # resource.Quantity's maxAllowed: the plugin caps a quantity there

_SCALE = {k: Fraction(mul, div) for k, (mul, div) in _SUFFIX.items()}


#: the grammar of resource.Quantity's doc comment, written here from it: <signedNumber>
#: then a binarySI or decimalSI suffix, or "e"/"E" and a signed (whole) number
_NUMBER = r"[+-]?(?:[0-9]+|[0-9]+\.[0-9]+|[0-9]+\.|\.[0-9]+)"
_GRAMMAR = re.compile(rf"({_NUMBER})(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)")
#: a quantity's shape before its number is checked: the parser then says what Fraction says
_SHAPE = re.compile(r"([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))")


def _rational(text: str, milli: bool) -> int:
    """The reference: the quantity as a Fraction, rounded up as the API server does."""
    m = _GRAMMAR.fullmatch(text)
    if m is None:
        shape = _SHAPE.fullmatch(text)
        if shape is not None and (shape.group(3) or "") in _SUFFIX:
            Fraction(shape.group(1) + (shape.group(2) or ""))  # raises, with its message
        raise ValueError(f"invalid quantity {text!r}")
    value = Fraction(m.group(1) + (m.group(2) or "")) * _SCALE[m.group(3) or ""]
    if abs(value) > _MAX:
        value = _MAX if value > 0 else -_MAX
    value *= 1000 if milli else 1
    n = value.numerator // value.denominator
    return n + (1 if n * value.denominator != value.numerator and value > 0 else 0)


def _outcome(fn, text: str, milli: bool) -> tuple[str, object]:
    try:
        return "ok", fn(text, milli=milli)
    except ValueError as e:  # (the reason the parser adds to some: test_grammar_errors)
        return "error", re.sub(r": (blanks|an exponent) .*", "", str(e))


CORPUS = ["0", "1", "2", "1500m", "250m", "0.5", "1.5Gi", "128Mi", "1e3", "1E3", "1e-3",
          "-1m", "-0.5", "+2", "0.0001", "2.5m", "1E", "5.", ".5", "+.5", "-.25Ki", "7e+2",
          "100k", "1.000000001", "3Pi", "1Ei", " 2 ", ".", "1.2.3", "+", "-", ".e5", "1e",
          "1x", "Mi", "", "1.5mi", "e5", "1..2", "0.0", "00012", "-0", "100u", "1n", "-1n",
          "2.5u", "9223372036854775807", "9223372036854775808", "8Ei", "1e100", "-1e40",
          "1e-60", "-1e-60m", "0e99", "1U", "1N"]


# refused by resource.ParseQuantity (and its grammar); taken before
NOT_QUANTITIES = [" 2 ", "2 ", " 2", "\t2", "1 Gi", "1e3Mi", "1E3Ki", "1e-3m", "2e1k", "1.5e3n",
                  "1e3 ", "+1e3Mi", "Mi2", "1Mi3", "2e"]


@pytest.mark.parametrize("text", NOT_QUANTITIES)
@pytest.mark.parametrize("milli", [False, True])
def test_outside_the_grammar_refused(text: str, milli: bool) -> None:
    with pytest.raises(ValueError, match="^invalid quantity "):
        parse_quantity(text, milli=milli)
    assert _outcome(parse_quantity, text, milli) == _outcome(_rational, text, milli)


@pytest.mark.parametrize(("text", "message"), [
    (" 2 ", "invalid quantity ' 2 ': blanks around it (a Kubernetes quantity has none)"),
    ("1Gi ", "invalid quantity '1Gi ': blanks around it (a Kubernetes quantity has none)"),
    ("1e3Mi", "invalid quantity '1e3Mi': an exponent (e3) and a unit suffix together (a "
              "Kubernetes quantity has one or the other)"),
    ("-1.5E+2m", "invalid quantity '-1.5E+2m': an exponent (E+2) and a unit suffix together "
                 "(a Kubernetes quantity has one or the other)"),
    ("1 Gi", "invalid quantity '1 Gi'"),
    ("1x", "invalid quantity '1x'"),
])
def test_grammar_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as ei:
        parse_quantity(text)
    assert str(ei.value) == message


def test_resource_lists_drop_blanks_as_the_api_server():
    """A pod's requests and limits are decoded from JSON by Quantity.UnmarshalJSON, which
    trims the string first (strings.TrimSpace): the API server serves `cpu: " 2 "` as 2.
    Not the exponent with a suffix: ParseQuantity refuses it there too."""
    assert parse_resource_list({"cpu": " 2 ", "memory": "\t1Gi\n"}) == {
        "cpu": 2000, "memory": 2**30}
    with pytest.raises(ValueError, match="an exponent"):
        parse_resource_list({"memory": "1e3Mi"})


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


#: (quantity, milli) -> what the API server and the kubelet make of it (resource.Quantity:
#: MilliValue for CPU, Value otherwise; both round up), capped at 2**63-1 units (the API
#: server's cap of a binary-suffixed one; past it the kubelet's int64 overflows)
KUBERNETES = [
    (("1.5", True), 1500), (("500m", True), 500), (("1Gi", False), 2**30),
    (("1e3", False), 1000), (("0.0001", True), 1), (("1E", False), 10**18),
    (("-1m", True), -1), (("0.5", False), 1),
    # n and u are SI suffixes of resource.Quantity; the API server serves a CPU of 0.0001
    # as "100u"
    (("100u", True), 1), (("1n", True), 1), (("1n", False), 1), (("1500000u", True), 1500),
    (("2000000000n", True), 2000), (("-1n", True), -1), (("250000u", False), 1),
    # capped at 2**63-1 units
    (("9223372036854775807", False), _MAX), (("9223372036854775808", False), _MAX),
    (("8Ei", False), _MAX), (("8Ei", True), _MAX * 1000), (("-1e100000", False), -_MAX),
    (("1e100000", True), _MAX * 1000), (("1e-100000", True), 1), (("-1e-100000", False), -1),
    (("0e100000", True), 0),
]


@pytest.mark.parametrize(("args", "want"), KUBERNETES)
def test_kubernetes_semantics(args: tuple[str, bool], want: int) -> None:
    text, milli = args
    assert parse_quantity(text, milli=milli) == want


def test_huge_exponents_parse_at_once() -> None:
    """A quantity of 13 characters is no 10**999999999 to compute (minutes of CPU; the
    plugin's config and `plan`'s manifests took it as written). In a child process: a
    regression would hang this one."""
    import subprocess
    import sys

    code = ("from nri_cpumgr.podmodel import parse_quantity as p; "
            "print(p('1e999999999', milli=True), p('-1e-999999999'), p('0e999999999'), "
            "p('1.5e999999999'), p('1e99999999999999999999'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == [str(_MAX * 1000), "-1", "0", str(_MAX), str(_MAX)]
