"""A value of the user's input, shown in an error message without its whole text.

A config key or a manifest field given a large nested value (a YAML alias chain expands to
millions of items: nine levels of nine make a 300 MB ``repr``) must still get a one-line
error, at once: :func:`shown` builds ``repr``'s text piece by piece and stops at the limit,
so its cost is bounded by the limit, not by the value.
"""

from __future__ import annotations

from typing import Any

#: characters of a value an error message shows (then ``...``)
LIMIT = 60


def shown(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)`` when it has at most ``limit`` characters, else its first ``limit - 3``
    characters and ``...``. Lists and mappings (what YAML gives) are walked only as far as
    the limit; a scalar's ``repr`` is cut (a string of the input is as long as the input).
    ``shown([1, [2, 3]]) == '[1, [2, 3]]'``; ``shown('x' * 100, 10) == "'xxxxxx..."``."""
    parts: list[str] = []
    size = 0

    def put(text: str) -> bool:
        nonlocal size
        parts.append(text)
        size += len(text)
        return size <= limit

    def walk(v: Any) -> bool:
        if isinstance(v, list):
            if not put("["):
                return False
            for i, x in enumerate(v):
                if (i and not put(", ")) or not walk(x):
                    return False
            return put("]")
        if isinstance(v, dict):
            if not put("{"):
                return False
            for i, (k, x) in enumerate(v.items()):
                if (i and not put(", ")) or not walk(k) or not put(": ") or not walk(x):
                    return False
            return put("}")
        return put(repr(v)[:limit + 1])

    walk(value)
    text = "".join(parts)
    return text if len(text) <= limit else text[:limit - 3] + "..."
