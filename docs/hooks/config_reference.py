"""MkDocs hook: fills ``docs/reference/configuration.md`` with the configuration reference
generated from the config model (``nri_cpumgr.config.reference.render_markdown``), at every
build, so the page cannot drift from the model. A key without its entry fails the build."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- generated: nri_cpumgr.config.reference -->"
PAGE = "reference/configuration.md"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    from nri_cpumgr.config.reference import render_markdown

    if MARKER not in markdown:
        raise ValueError(f"{PAGE}: the marker {MARKER!r} is missing")
    return markdown.replace(MARKER, render_markdown())
