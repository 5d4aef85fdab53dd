"""The protobuf runtime modules the generated ``*_pb2`` modules of this package import
(``scripts/gen_proto.py`` points their imports here), lighter on protobuf's upb runtime.

The stock generated code imports ``google.protobuf.descriptor_pool``, ``symbol_database``
and ``internal.builder``; each imports ``google.protobuf.internal.python_message``, the
pure-Python message implementation, with ``text_format``, the Python decoder and encoder,
``pickle`` and their modules, whichever runtime runs the messages. With upb (protobuf's
default runtime since 4.21, ``api_implementation.Type() == "upb"``) none of it is used:
~10 ms of CPU and ~1 MiB resident at the plugin's start before its first Synchronize
(issue 34). On upb this module gives the generated code the same calls built on the upb
extension alone:

* ``descriptor_pool.Default()``: upb's default pool (what the stock ``Default()`` returns
  on upb);
* ``builder.BuildMessageAndEnumDescriptors`` / ``BuildTopDescriptorsAndMessages``: the
  module names the stock builder sets (``_FOO`` / ``_FOO_BAR`` descriptors, enum wrappers
  and values, services, extensions, message classes with their nested classes), the
  classes made by upb's ``MessageMeta`` as ``reflection.GeneratedProtocolMessageType``
  makes them on upb;
* ``symbol_database.Default()``: the stock symbol database, imported when first used; the
  classes built here are registered in it then (the stock builder registers each at once).

The first message class upb makes imports ``google.protobuf.internal.well_known_types``
(upb takes its ``WKTBASES``, the Python bases of ``Any``, ``Timestamp``, ``Duration``,
``FieldMask``, ``Struct``...: once, it keeps that dict) and with it ``datetime``, ``calendar``
and ``locale``: ~15 M instructions, ~3 ms, before the plugin can answer Configure, for types
this package's schemas do not use. So the first class is made with a stand-in module whose
``WKTBASES`` is a dict of our own, empty (:func:`_hold_well_known_types`), and a meta path
finder fills that dict from the real module before any module that can make a well-known
type's class is imported (a ``google.protobuf.*_pb2`` module, ``message_factory``,
``json_format``, ``well_known_types`` itself: :func:`complete_well_known_types`): their
classes get their bases as with the stock import.

With the pure-Python or another runtime this module hands out the stock modules. Should
upb's internals differ in a later protobuf (an AttributeError or TypeError while building),
the stock builder builds that file instead. Raises what the stock calls raise
(``TypeError`` for a file the pool rejects, the version check's ``VersionError``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from google.protobuf import descriptor, runtime_version
from google.protobuf.internal import api_implementation

__all__ = ["builder", "descriptor", "descriptor_pool", "runtime_version", "symbol_database"]

UPB = api_implementation.Type() == "upb"

if not UPB:
    from google.protobuf import descriptor_pool, symbol_database
    from google.protobuf.internal import builder
else:
    from google._upb import _message as _upb
    from google.protobuf import message as _message_mod
    from google.protobuf.internal import enum_type_wrapper as _enums

    #: classes built here, registered in the stock symbol database when it is first used
    _built: list[type] = []

    _WKT = "google.protobuf.internal.well_known_types"
    #: the ``WKTBASES`` upb took from the stand-in (module doc); None: no stand-in given
    _wkt_bases: dict[str, Any] | None = None

    def _needs_well_known_types(name: str) -> bool:
        """Whether importing module ``name`` may make a well-known type's class."""
        return name in (_WKT, "google.protobuf.message_factory",
                        "google.protobuf.json_format") or (
            name.startswith("google.protobuf.") and name.endswith("_pb2"))

    class _WellKnownTypesFinder:
        """On ``sys.meta_path`` while :data:`_wkt_bases` is the stand-in's empty dict: finds
        nothing, but completes it before a module that may need it is imported."""

        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> None:
            if _needs_well_known_types(name):
                complete_well_known_types()

    def _hold_well_known_types() -> None:
        """Put the stand-in for ``well_known_types`` in ``sys.modules`` for the first class
        upb makes (module doc); :func:`_release_well_known_types` takes it out."""
        global _wkt_bases
        if _wkt_bases is not None or _WKT in sys.modules:
            return
        _wkt_bases = {}
        stand_in = types.ModuleType(_WKT)
        stand_in.WKTBASES = _wkt_bases  # type: ignore[attr-defined]
        sys.modules[_WKT] = stand_in
        sys.meta_path.insert(0, _WellKnownTypesFinder)  # type: ignore[arg-type]

    def _release_well_known_types() -> None:
        stand_in = sys.modules.get(_WKT)
        if stand_in is not None and getattr(stand_in, "__spec__", True) is None:
            del sys.modules[_WKT]  # (the stand-in: no spec, unlike an imported module)

    def complete_well_known_types() -> None:
        """Give upb the real bases of the well-known types if it holds the stand-in's dict
        (imports ``well_known_types``); no-op otherwise. Raises what that import raises."""
        global _wkt_bases
        if _wkt_bases is None or _wkt_bases:
            return
        try:
            sys.meta_path.remove(_WellKnownTypesFinder)  # type: ignore[arg-type]
        except ValueError:
            pass
        _release_well_known_types()
        from google.protobuf.internal import well_known_types

        _wkt_bases.update(well_known_types.WKTBASES)

    class _Pool:
        """``descriptor_pool`` on upb: ``Default()`` is upb's default pool."""

        @staticmethod
        def Default() -> Any:  # noqa: N802 - protobuf's name
            pool = getattr(_upb, "default_pool", None)
            if pool is None:  # (a upb without it: the stock module's)
                from google.protobuf import descriptor_pool as stock

                return stock.Default()
            return pool

    class _SymbolDatabase:
        """Stands for ``symbol_database.Default()`` in a generated module (``_sym_db``,
        which the generated code does not use): the stock database, imported and given the
        classes built here at the first attribute looked up."""

        def __getattr__(self, name: str) -> Any:
            from google.protobuf import symbol_database as stock

            db = stock.Default()
            while _built:
                db.RegisterMessage(_built.pop(0))
            return getattr(db, name)

    class _SymbolDatabaseModule:
        @staticmethod
        def Default() -> Any:  # noqa: N802 - protobuf's name
            return _SymbolDatabase()

    def _nested_descriptors(msg: Any, prefix: str, module: dict[str, Any]) -> None:
        for name, nested in msg.nested_types_by_name.items():
            key = prefix + name.upper()
            module[key] = nested
            _nested_descriptors(nested, key + "_", module)
        for enum in msg.enum_types:
            module[prefix + enum.name.upper()] = enum

    def _message_class(msg: Any, qualname: str, module_name: str) -> type:
        body: dict[str, Any] = {
            name: _message_class(nested, f"{qualname}.{name}", module_name)
            for name, nested in msg.nested_types_by_name.items()}
        body.update(DESCRIPTOR=msg, __module__=module_name, __qualname__=qualname)
        cls = _upb.MessageMeta(msg.name, (_message_mod.Message,), body)
        _built.append(cls)
        return cls

    class _Builder:
        """``internal.builder`` on upb (the two calls generated code makes)."""

        @staticmethod
        def BuildMessageAndEnumDescriptors(file: Any, module: dict[str, Any]) -> None:  # noqa: N802
            """``_NAME`` for each message, ``_NAME_NESTED`` for nested messages and enums."""
            try:
                _Builder._descriptors(file, module)
            except (AttributeError, TypeError):  # a protobuf whose upb differs: the stock
                from google.protobuf.internal import builder as stock

                stock.BuildMessageAndEnumDescriptors(file, module)

        @staticmethod
        def _descriptors(file: Any, module: dict[str, Any]) -> None:
            for name, msg in file.message_types_by_name.items():
                key = "_" + name.upper()
                module[key] = msg
                _nested_descriptors(msg, key + "_", module)

        @staticmethod
        def BuildTopDescriptorsAndMessages(  # noqa: N802
            file: Any, module_name: str, module: dict[str, Any]
        ) -> None:
            """Top-level enums (descriptor, wrapper, values), extensions, services and the
            message classes."""
            _hold_well_known_types()
            try:
                _Builder._top(file, module_name, module)
            except (AttributeError, TypeError):  # a protobuf whose upb differs: the stock
                complete_well_known_types()
                from google.protobuf.internal import builder as stock

                stock.BuildTopDescriptorsAndMessages(file, module_name, module)
            finally:
                _release_well_known_types()

        @staticmethod
        def _top(file: Any, module_name: str, module: dict[str, Any]) -> None:
            for name, enum in file.enum_types_by_name.items():
                module["_" + name.upper()] = enum
                module[name] = _enums.EnumTypeWrapper(enum)
                for value in enum.values:
                    module[value.name] = value.number
            for name, ext in file.extensions_by_name.items():
                module[name.upper() + "_FIELD_NUMBER"] = ext.number
                module[name] = ext
            for name, service in file.services_by_name.items():
                module["_" + name.upper()] = service
            for name, msg in file.message_types_by_name.items():
                module[name] = _message_class(msg, name, module_name)

    descriptor_pool = _Pool
    symbol_database = _SymbolDatabaseModule
    builder = _Builder
