"""Standard modules imported with stand-ins for modules they import but use only on rare
paths (issue 34: launch -> synchronized).

``logging`` imports ``traceback``, which imports ``linecache`` (with ``tokenize``) and
``textwrap`` at its top (CPython 3.11) but uses them only to format a traceback (source
lines) or an exception group (indentation): ~9 M instructions, ~2 ms, before the plugin can
answer Configure, for work a healthy start never does. :func:`import_with` imports a module
while a :class:`StandIn` takes the place of each such module in ``sys.modules``; the first
attribute looked up on a stand-in imports the real module and puts it, in the globals of
every module that took the stand-in, in its place. Anything importing those modules after
:func:`import_with` returned gets the real module at once.

Used by :mod:`nri_cpumgr.boot` for ``run``, and by :mod:`nri_cpumgr.podsource` (``urllib.parse``
without ``ipaddress``; ``http.client`` without its date and message-id modules in the early
LIST's child); what the stand-ins defer is imported as before at the first use that needs it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable


class StandIn(types.ModuleType):
    """Stands for the module of its name until an attribute is looked up (module doc)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        #: the globals (dicts) holding this stand-in, and under which name
        self._holders: list[tuple[dict[str, object], str]] = []

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") or attr == "_holders":
            raise AttributeError(attr)
        name = self.__name__
        if sys.modules.get(name) is self:  # (looked up while import_with runs)
            del sys.modules[name]
        __import__(name)
        real = sys.modules[name]
        for holder, key in self._holders:
            if holder.get(key) is self:
                holder[key] = real
        return getattr(real, attr)


def import_with(name: str, stand_ins: Iterable[str]) -> types.ModuleType:
    """Import top-level module ``name`` with a :class:`StandIn` for each of ``stand_ins``
    (top-level modules) not imported yet (module doc); returns the module. When ``name`` is
    imported already, just returns it. Raises what the import raises."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    before = set(sys.modules)
    made = {}
    for s in stand_ins:
        if s not in sys.modules:
            made[s] = sys.modules[s] = StandIn(s)
    try:
        __import__(name)
    finally:
        for s, stand_in in made.items():
            if sys.modules.get(s) is stand_in:
                del sys.modules[s]
    for key in set(sys.modules) - before:  # the modules this import brought
        globs = getattr(sys.modules[key], "__dict__", None)
        if globs is None:
            continue
        for var, value in globs.items():
            if isinstance(value, StandIn) and made.get(value.__name__) is value:
                value._holders.append((globs, var))
    return sys.modules[name]
