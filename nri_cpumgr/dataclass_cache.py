"""The start's dataclasses without compiling their methods (issue 34: launch -> synchronized).

``@dataclass`` writes each generated method (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, a frozen class's ``__setattr__``/``__delattr__``) as source text and compiles it
with its own ``exec`` (CPython 3.11 ``dataclasses._create_fn``): about 150 compilations for
the ~30 dataclasses the plugin defines before its first Synchronize answer, a fifth of its
modules' import time. The same texts, compiled once, are committed as
``nri_cpumgr/_dataclass_code.py`` (written by ``scripts/gen_dataclass_code.py``, cached as
bytecode like any module); while :func:`install` is in effect, a text found there is made
into its function from that code object with the class's module globals, exactly what
``exec`` of the text would give (same bytecode, constants, names, defaults, annotations:
tests/unit/test_dataclass_cache.py); any other text goes to the stdlib's ``_create_fn``.

Only on CPython 3.11 (whose ``_create_fn`` writes the texts as
:func:`_text` does: 3.11.2 and 3.11.7 alike); elsewhere :func:`install` does nothing. The
command's entry point (:mod:`nri_cpumgr.boot`) installs it for ``run`` and the build removes
it (:func:`uninstall`) with the collector's release: nothing else runs with it.

(No ``from __future__ import annotations`` here: this module never compiles a text itself.)
"""

import sys
import types


class _LazyInspect(types.ModuleType):
    """Stands for :mod:`inspect` in :mod:`dataclasses` until an attribute of it is looked
    up: ``dataclasses`` imports ``inspect`` (with ``ast``, ``dis``, ``tokenize``: ~30 M
    instructions, ~6 ms, issue 34) for one call, ``inspect.signature``, made only for a class
    without a docstring (the start's dataclasses all have one). The first attribute looked
    up imports the real module and puts it in ``dataclasses`` in place of this one."""

    def __getattr__(self, name):
        import inspect as real  # (this stand-in is no longer in sys.modules)

        dc = sys.modules.get("dataclasses")
        if dc is not None and dc.__dict__.get("inspect") is self:
            dc.inspect = real
        return getattr(real, name)


def _import_dataclasses():
    """:mod:`dataclasses`; when imported here first, with :class:`_LazyInspect` for its
    ``inspect`` (only for the import of ``dataclasses`` itself: anything importing ``inspect``
    afterwards gets the real module)."""
    if "dataclasses" in sys.modules or "inspect" in sys.modules:
        import dataclasses

        return dataclasses
    stand_in = sys.modules["inspect"] = _LazyInspect("inspect")
    try:
        import dataclasses
    finally:
        if sys.modules.get("inspect") is stand_in:
            del sys.modules["inspect"]
    return dataclasses


dataclasses = _import_dataclasses()

_original = None
_code = None


def _text(name, args, body, locals, return_type):
    """The source text CPython 3.11's ``dataclasses._create_fn`` compiles (and the
    ``locals`` it passes, with ``_return_type`` added as it adds it)."""
    return_annotation = ""
    if return_type is not dataclasses.MISSING:
        locals["_return_type"] = return_type
        return_annotation = "->_return_type"
    args = ",".join(args)
    body = "\n".join(f"  {b}" for b in body)
    txt = f" def {name}({args}){return_annotation}:\n{body}"
    local_vars = ", ".join(locals.keys())
    return f"def __create_fn__({local_vars}):\n{txt}\n return {name}"


def _create_fn(name, args, body, *, globals=None, locals=None,
               return_type=dataclasses.MISSING):
    """``dataclasses._create_fn`` from the committed code when it holds the text."""
    if locals is None:
        locals = {}
    code = _code.get(_text(name, args, body, dict(locals), return_type))
    if code is None:
        return _original(name, args, body, globals=globals, locals=locals,
                         return_type=return_type)
    if return_type is not dataclasses.MISSING:
        locals["_return_type"] = return_type
    return types.FunctionType(code, globals if globals is not None else {})(**locals)


def supported():
    """True where the committed texts are what ``dataclasses`` writes (CPython 3.11)."""
    return sys.version_info[:2] == (3, 11) and sys.implementation.name == "cpython"


def install():
    """Take the committed code for the dataclasses defined from now on (no-op where not
    :func:`supported` or already installed)."""
    global _original, _code
    if _original is not None or not supported():
        return
    try:
        from nri_cpumgr._dataclass_code import CODE
    except ImportError:  # (a tree without it: everything compiles as usual)
        return
    _code = CODE
    _original = dataclasses._create_fn
    dataclasses._create_fn = _create_fn


def uninstall():
    """Back to the stdlib's ``_create_fn`` (no-op if not installed); the committed code's
    module is let go (the methods made from it keep their own code objects)."""
    global _original, _code
    if _original is None:
        return
    if dataclasses._create_fn is _create_fn:
        dataclasses._create_fn = _original
    _original = _code = None
    sys.modules.pop("nri_cpumgr._dataclass_code", None)
    package = sys.modules.get("nri_cpumgr")
    if package is not None and hasattr(package, "_dataclass_code"):
        del package._dataclass_code
