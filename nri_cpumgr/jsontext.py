"""Canonical JSON text: sorted keys, no blanks (the form a checkpoint's checksum covers).

Pure functions, no I/O: the managers use them to keep the encoded rows of a checkpoint, the
checkpoint store to write and verify one.
"""

from __future__ import annotations

from typing import Any


class RawJSON:
    """Canonical JSON text of one value, embedded as it is by :func:`canonical` (a value of
    the top-level object only), given as pieces whose concatenation is that text (kept by
    reference: a checkpoint's rows are hundreds of KB, and its writer checksums and writes
    them piece by piece, never joined). The producer promises the text is exactly what
    ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` would give: the checksum is
    verified on load against the parsed value re-encoded."""

    __slots__ = ("parts",)

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJSON) and bytes(self) == bytes(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RawJSON({bytes(self)!r})"


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"))``'s encoder, made at the first
#: :func:`encode` (``json`` is not imported before: the plugin's first checkpoint is written
#: after its first Synchronize answer, issue 34): dumps builds one per call with these
#: arguments (a string costs 1.5 us that way, 0.1 us here). Its encode keeps no state between
#: calls (threads may share it).
_ENCODER: Any = None


def encode(value: Any) -> bytes:
    """``value`` as canonical JSON text (UTF-8, non-ASCII escaped): what ``json.dumps(value,
    sort_keys=True, separators=(",", ":"))`` gives, encoded."""
    encoder = _ENCODER
    if encoder is None:
        encoder = _encoder()
    return encoder.encode(value).encode()


def _encoder() -> Any:
    global _ENCODER
    import json

    _ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
    return _ENCODER


def canonical_parts(body: dict[str, Any]) -> list[bytes]:
    """:func:`canonical` of ``body`` as pieces whose concatenation is that text: a
    :class:`RawJSON` value's pieces as they are, never copied (a checkpoint's rows are
    hundreds of KB: the checksum and the write go over the pieces)."""
    if not any(isinstance(v, RawJSON) for v in body.values()):
        return [encode(body)]
    parts: list[bytes] = []
    for k, v in sorted(body.items()):
        parts.append((b"{" if not parts else b",") + encode(str(k)) + b":")
        if isinstance(v, RawJSON):
            parts.extend(v.parts)
        else:
            parts.append(encode(v))
    parts.append(b"}")
    return parts


def canonical(body: dict[str, Any]) -> bytes:
    """The canonical JSON text of the object ``body``, whose values may be :class:`RawJSON`
    (the encoding of everything else is the same as :func:`encode`)."""
    return b"".join(canonical_parts(body))
