"""The start's dataclasses from committed code (nri_cpumgr.dataclass_cache, issue 34): the
committed module is up to date, every method it gives is what ``exec`` of the stdlib's text
gives, a start takes all of its dataclasses from it and gives ``_create_fn`` back."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nri_cpumgr import dataclass_cache

TOP = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not dataclass_cache.supported(), reason="CPython 3.11 only")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter on this tree (nothing of the plugin imported yet)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=TOP,
                          capture_output=True, text=True, timeout=120, check=False)


def test_committed_code_is_up_to_date() -> None:
    res = subprocess.run([sys.executable, str(TOP / "scripts" / "gen_dataclass_code.py"),
                          "--check"], cwd=TOP, capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "up to date" in res.stdout


#: compares the function the committed code gives with the stdlib's for every text the start's
#: imports compile; prints one line per difference, then the counts
_COMPARE = r'''
import dataclasses, sys, types
sys.path.insert(0, "scripts")
from gen_dataclass_code import START_MODULES
from nri_cpumgr import dataclass_cache as dc

SKIP = {"co_filename", "co_firstlineno", "co_linetable", "co_lines", "co_positions",
        "co_lnotab", "replace"}

def code_diff(a, b, where):
    out = []
    for attr in dir(a):
        if not attr.startswith("co_") or attr in SKIP:
            continue
        x, y = getattr(a, attr), getattr(b, attr)
        if attr == "co_consts":
            if len(x) != len(y):
                out.append(f"{where}: {attr} length")
                continue
            for i, (p, q) in enumerate(zip(x, y)):
                if isinstance(p, types.CodeType):
                    out += code_diff(p, q, f"{where}.co_consts[{i}]")
                elif p != q or type(p) is not type(q):
                    out.append(f"{where}: co_consts[{i}] {p!r} != {q!r}")
        elif x != y:
            out.append(f"{where}: {attr} {x!r} != {y!r}")
    return out

def fn_diff(f, g, where):
    out = code_diff(f.__code__, g.__code__, where)
    for attr in ("__name__", "__qualname__", "__module__", "__defaults__", "__kwdefaults__",
                 "__annotations__", "__doc__"):
        if getattr(f, attr) != getattr(g, attr):
            out.append(f"{where}: {attr} {getattr(f, attr)!r} != {getattr(g, attr)!r}")
    if f.__globals__ is not g.__globals__:
        out.append(f"{where}: __globals__")
    cf = [c.cell_contents for c in f.__closure__ or ()]
    cg = [c.cell_contents for c in g.__closure__ or ()]
    if len(cf) != len(cg) or any(p is not q for p, q in zip(cf, cg)):
        out.append(f"{where}: closure {cf!r} != {cg!r}")
    return out

original = dataclasses._create_fn
dc.install()
assert dataclasses._create_fn is dc._create_fn
misses, calls, diffs = [], 0, []
taken = dc._original
def miss(name, args, body, **kw):
    misses.append(name)
    return taken(name, args, body, **kw)
dc._original = miss

def both(name, args, body, *, globals=None, locals=None, return_type=dataclasses.MISSING):
    global calls
    calls += 1
    ref = original(name, args, body, globals=globals, locals=dict(locals or {}),
                   return_type=return_type)
    got = dc._create_fn(name, args, body, globals=globals, locals=dict(locals or {}),
                        return_type=return_type)
    diffs.extend(fn_diff(ref, got, f"{globals.get('__name__')}:{name}"))
    return ref

dataclasses._create_fn = both
for m in START_MODULES:
    __import__(m)
for d in diffs:
    print("DIFF", d)
print("calls", calls, "misses", len(misses), "diffs", len(diffs))
'''


def test_every_method_is_what_exec_of_the_text_gives() -> None:
    res = _python(_COMPARE)
    assert res.returncode == 0, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    calls, misses, diffs = (int(w) for w in last.split()[1::2])
    assert calls >= 100, res.stdout  # (the start's ~30 dataclasses: all of them seen)
    assert (misses, diffs) == (0, 0), res.stdout


def test_the_comparison_sees_a_difference() -> None:
    """The check above fails on a method that is not what the text gives (a wrong code
    object for one text)."""
    broken = _COMPARE.replace(
        "dc.install()\n",
        "dc.install()\n"
        "k = next(t for t in dc._code if 'def __repr__' in t)\n"
        "dc._code = dict(dc._code)\n"
        "dc._code[k] = next(c for t, c in dc._code.items() if 'def __eq__' in t)\n", 1)
    res = _python(broken)
    assert res.returncode == 0, res.stderr
    assert "DIFF" in res.stdout and not res.stdout.strip().endswith("diffs 0")


def test_a_start_takes_its_dataclasses_from_the_code_and_gives_create_fn_back() -> None:
    """``nri-cpumgr run``'s entry point installs it before the plugin's build imports its
    modules (none of their dataclasses compiled), the build's release_gc removes it."""
    res = _python('''
        import dataclasses
        original = dataclasses._create_fn
        compiled = []
        def count(*a, **k):
            compiled.append(a[0])
            return original(*a, **k)
        dataclasses._create_fn = count
        from nri_cpumgr import boot, dataclass_cache as dc
        import nri_cpumgr.cli as cli  # (the test's own: its dataclasses are compiled)
        boot._register = lambda argv: None  # (no runtime here)
        seen = {}
        def run(args):
            seen["installed"] = dataclasses._create_fn is dc._create_fn
            before = len(compiled)
            import nri_cpumgr.runtime.plugin, nri_cpumgr.transport.stub, nri_cpumgr.metrics
            import nri_cpumgr.cm.podresources.resizer, nri_cpumgr.cm.podresources.gates
            seen["compiled in the build"] = len(compiled) - before
            boot.release_gc()  # (what the build does)
            seen["given back"] = dataclasses._create_fn is count
            return 0
        cli.cmd_run = run
        status = boot.main(["run", "--socket", "/nonexistent"])
        print(status, sorted(seen.items()), len(compiled))
    ''')
    assert res.returncode == 0, res.stderr
    status, seen, compiled = res.stdout.strip().split(" ", 1)[0], *res.stdout.strip().split(
        " ", 1)[1].rsplit(" ", 1)
    assert status == "0", res.stdout
    assert seen == ("[('compiled in the build', 0), ('given back', True), "
                    "('installed', True)]"), res.stdout
    assert int(compiled) > 0  # (cli's, before the entry point: the count counts)


def test_install_is_scoped_and_a_miss_compiles_as_before() -> None:
    original = dataclasses._create_fn
    dataclass_cache.install()
    try:
        assert dataclasses._create_fn is dataclass_cache._create_fn
        dataclass_cache.install()  # (once)
        assert dataclass_cache._original is original

        @dataclasses.dataclass(frozen=True)
        class NotInTheCode:  # a text the committed code does not hold
            xyzzy_a: int
            xyzzy_b: str = "b"

        v = NotInTheCode(1)
        assert (v, repr(v), hash(v) == hash(NotInTheCode(1, "b"))) == (
            NotInTheCode(1, "b"), "test_install_is_scoped_and_a_miss_compiles_as_before."
            "<locals>.NotInTheCode(xyzzy_a=1, xyzzy_b='b')", True)
        with pytest.raises(dataclasses.FrozenInstanceError):
            v.xyzzy_a = 2  # type: ignore[misc]
    finally:
        dataclass_cache.uninstall()
    assert dataclasses._create_fn is original
    assert "nri_cpumgr._dataclass_code" not in sys.modules  # (its texts are let go)
    assert v == NotInTheCode(1) and repr(v).endswith("(xyzzy_a=1, xyzzy_b='b')")
    dataclass_cache.uninstall()  # (no-op)
    assert dataclasses._create_fn is original


def test_not_installed_where_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = dataclasses._create_fn
    monkeypatch.setattr(dataclass_cache, "supported", lambda: False)
    dataclass_cache.install()
    assert dataclasses._create_fn is original and dataclass_cache._original is None


def test_not_installed_without_the_committed_code(monkeypatch: pytest.MonkeyPatch) -> None:
    original = dataclasses._create_fn
    monkeypatch.setitem(sys.modules, "nri_cpumgr._dataclass_code", None)  # (import fails)
    dataclass_cache.install()
    assert dataclasses._create_fn is original and dataclass_cache._original is None


def test_dataclasses_come_without_inspect_until_a_class_needs_it() -> None:
    """Imported first by this module, ``dataclasses`` has a stand-in for ``inspect``: the
    start's classes (each with a docstring) never load it; a class without a docstring
    does, and gets the signature as its doc as before; ``import inspect`` elsewhere gets the
    real module."""
    res = _python("""
        import sys
        from nri_cpumgr import dataclass_cache
        import dataclasses
        assert "inspect" not in sys.modules and "ast" not in sys.modules
        @dataclasses.dataclass
        class Documented:
            '''Has a doc.'''
            a: int
        print("inspect" in sys.modules, Documented.__doc__)
        @dataclasses.dataclass
        class Bare:
            a: int
            b: str = "x"
        import inspect
        print("inspect" in sys.modules, Bare.__doc__, dataclasses.inspect is inspect,
              type(inspect).__name__)
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["False Has a doc.",
                                       "True Bare(a: int, b: str = 'x') True module"]
