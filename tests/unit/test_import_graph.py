"""The import graph of ``nri_cpumgr``: no import circles, and no module uses another package's
underscore names (the developer guide: "No import circles; use other packages' public names
only").

Every ``import`` statement counts, at module level or inside a function (a lazy import is
still a dependency), ``if TYPE_CHECKING:`` ones included. ``from a.b import c`` is an edge to
``a.b.c`` when that is a module, else to ``a.b``. A circle is a strongly connected component
of more than one module. An underscore name is ``_x`` (not ``__x__``) taken with ``from m
import _x`` or read as ``m._x`` off an imported module, where ``m`` lives in another package
than the importer (a package's own modules may share its private names).

Known exceptions are listed below by name, each with why it is still there; an exception that
no longer matches the code fails too, so the list only shrinks."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "nri_cpumgr"

# none left: an exception is added only with why it is still there
KNOWN_CIRCLES: dict[frozenset[str], str] = {}
KNOWN_PRIVATE: dict[tuple[str, str, str], str] = {}


@dataclass
class Graph:
    modules: dict[str, bool] = field(default_factory=dict)  # name -> is a package
    edges: dict[str, set[str]] = field(default_factory=dict)
    private: set[tuple[str, str, str]] = field(default_factory=set)  # importer, module, name


def _package_of(name: str, is_pkg: bool) -> str:
    return name if is_pkg else name.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def build_graph(pkg: Path = PKG) -> Graph:
    """The graph of the package at ``pkg`` (a directory named like the top package)."""
    g = Graph()
    files: dict[str, Path] = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_pkg else parts)
        g.modules[name] = is_pkg
        files[name] = path
    top = pkg.name
    for name, path in files.items():
        is_pkg = g.modules[name]
        mine = _package_of(name, is_pkg)
        out: set[str] = set()
        aliases: dict[str, str] = {}  # local name -> module imported under it

        def note_private(importer_target: str, attr: str, mine: str = mine,
                         name: str = name) -> None:
            target_pkg = _package_of(importer_target, g.modules.get(importer_target, False))
            if _private(attr) and target_pkg != mine:
                g.private.add((name, importer_target, attr))

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == top or a.name.startswith(top + "."):
                        out.add(a.name)
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = (name if is_pkg else mine).split(".")
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                if not (src == top or src.startswith(top + ".")):
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in g.modules:
                        out.add(sub)
                        aliases[a.asname or a.name] = sub
                        if _private(a.name) and src != mine:
                            g.private.add((name, src, a.name))
                    else:
                        out.add(src)
                        note_private(src, a.name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                note_private(aliases[node.value.id], node.attr)
        g.edges[name] = {m for m in out if m in g.modules and m != name}
    return g


def circles(g: Graph) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(g.edges):
        if start in index:
            continue
        work = [(start, iter(sorted(g.edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(frozenset(comp))
    return found


def _path_in(g: Graph, comp: frozenset[str]) -> str:
    """One cycle through ``comp``, as ``a -> b -> a``, for the failure message."""
    start = min(comp)
    prev: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(g.edges[v] & comp):
            if w == start:
                chain = [v]
                while chain[-1] != start:
                    chain.append(prev[chain[-1]])
                return " -> ".join([*reversed(chain), start])
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return ", ".join(sorted(comp))


@functools.cache
def _ours() -> Graph:
    return build_graph()


def test_no_import_circles() -> None:
    g = _ours()
    assert len(g.modules) > 50  # the walk found the package
    new = [c for c in circles(g) if c not in KNOWN_CIRCLES]
    assert not new, "import circles:\n" + "\n".join(_path_in(g, c) for c in new)


def test_no_module_imports_another_packages_underscore_names() -> None:
    g = _ours()
    new = sorted(g.private - set(KNOWN_PRIVATE))
    assert not new, "private names used across packages:\n" + "\n".join(
        f"{importer} uses {module}.{name}" for importer, module, name in new)


def test_known_exceptions_still_exist() -> None:
    """A fixed exception must leave the lists (they only shrink)."""
    g = _ours()
    stale = [", ".join(sorted(c)) for c in KNOWN_CIRCLES if c not in circles(g)]
    stale += [".".join(k[1:]) + f" in {k[0]}" for k in KNOWN_PRIVATE if k not in g.private]
    assert not stale, "fixed; remove from the test's known exceptions: " + "; ".join(stale)


# --- the check itself, on small packages written here ---------------------------------------

def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


def test_finds_a_lazy_circle_and_private_names(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg.b import g\n    return g\n",
        "b.py": "from pkg import a\n\ndef g():\n    return a.f\n",
        "c.py": "",
        "sub/__init__.py": "",
        "sub/d.py": "from pkg.c import _hidden\nimport pkg.a as mod\nx = mod._inner\n",
        "sub/e.py": "from pkg.sub.d import _ok\nfrom . import d\ny = d._fine\n",
    })
    g = build_graph(pkg)
    assert circles(g) == [frozenset({"pkg.a", "pkg.b"})]
    assert _path_in(g, frozenset({"pkg.a", "pkg.b"})) == "pkg.a -> pkg.b -> pkg.a"
    # same package (pkg.sub) may share private names; another package's may not
    assert g.private == {("pkg.sub.d", "pkg.c", "_hidden"), ("pkg.sub.d", "pkg.a", "_inner")}


def test_a_chain_is_not_a_circle(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {
        "__init__.py": "from pkg.a import x\n",
        "a.py": "from pkg.b import y as x\n",
        "b.py": "y = 1\n",
    })
    assert circles(build_graph(pkg)) == []
