"""Frozen slots dataclasses built at half the cost (issue 34: the create's records).

A frozen dataclass's generated ``__init__`` stores each field with
``object.__setattr__(self, name, value)`` (CPython 3.11 dataclasses ``_field_assign``): a
generic attribute store that looks the name up in the class, through a wrapper call that
copies its arguments into tuples, ~150 ns a field. A 15-field :class:`ContainerInfo` then cost
2.5 us to build, and the records of one CreateContainer (two infos, two pods, an admission)
were a third of the create's instructions (callgrind).

:func:`slot_init` gives such a class an ``__init__`` that stores each field through its slot's
own descriptor (``member_descriptor.__set__``, what ``object.__setattr__`` ends up calling for
a slot): same signature, defaults and default factories, same instance; half the cost (1.2 us
for a ContainerInfo). The class stays frozen (its ``__setattr__`` / ``__delattr__`` still
raise ``FrozenInstanceError``).

The function is made by ``dataclasses._create_fn`` where the interpreter has it (3.11), so a
start with :mod:`nri_cpumgr.dataclass_cache` installed takes its committed code like any
dataclass method; elsewhere by ``exec`` of the same text.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_FACTORY = "__slot_init_factory__"  # (the sentinel default of a field with a default factory)


def slot_init(cls: T) -> T:
    """Give the frozen slots dataclass ``cls`` (decorate the class
    ``@dataclass(frozen=True, slots=True, init=False)`` returned: an ``__init__`` of its own
    would only be replaced, after costing the start its making) an ``__init__`` storing each
    field through its slot descriptor. Raises TypeError for a class this does not cover:
    not a frozen dataclass with slots, a ``__post_init__``, an ``InitVar`` or a field with
    ``init=False``."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: __post_init__ is not supported")
    if any(f._field_type is dataclasses._FIELD_INITVAR
           for f in cls.__dataclass_fields__.values()):
        raise TypeError(f"{cls.__name__}: InitVar fields are not supported")
    fields = dataclasses.fields(cls)
    if not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__}: init=False fields are not supported")
    local: dict[str, Any] = {_FACTORY: dataclasses._HAS_DEFAULT_FACTORY}
    args, keywords, body = ["self"], [], []
    for f in fields:
        setter = f"_set_{f.name}"
        local[setter] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            local[f"_dflt_{f.name}"] = f.default
            arg = f"{f.name}=_dflt_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            local[f"_dflt_{f.name}"] = f.default_factory
            arg = f"{f.name}={_FACTORY}"
            body.append(f"if {f.name} is {_FACTORY}: {f.name} = _dflt_{f.name}()")
        else:
            arg = f.name
        (keywords if f.kw_only else args).append(arg)
        body.append(f"{setter}(self, {f.name})")
    if keywords:
        args += ["*", *keywords]
    fn = _function("__init__", args, body or ["pass"], local)
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = fn  # type: ignore[misc]
    return cls


def _function(name: str, args: list[str], body: list[str], local: dict[str, Any]) -> Any:
    """``dataclasses._create_fn(name, args, body, locals=local)`` (3.11: the committed code
    of :mod:`nri_cpumgr.dataclass_cache` when installed), else the same text compiled here."""
    create = getattr(dataclasses, "_create_fn", None)
    if create is not None:
        return create(name, args, body, globals={}, locals=local, return_type=None)
    lines = "\n".join(f"  {b}" for b in body)
    text = (f"def __create_fn__({', '.join(local)}):\n"
            f" def {name}({','.join(args)})->None:\n{lines}\n return {name}")
    scope: dict[str, Any] = {}
    exec(text, {}, scope)  # noqa: S102 - our own text, as dataclasses makes its methods
    return scope["__create_fn__"](**local)
