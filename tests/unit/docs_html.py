"""Checks over the built docs site's HTML for what a strict mkdocs build lets through but a
reader sees broken (parsed with BeautifulSoup, no browser):

* ``command_paragraphs``: a shell command rendered as prose (a code block indented so that
  Markdown took it for a paragraph or list-item text): a line outside ``<code>`` that starts
  with one of the commands the docs use;
* ``unknown_tags``: text in angle brackets eaten as HTML (``<node>``, ``<pod on the node>``
  become tags the browser drops): an element that is not HTML or the theme's SVG;
* ``flattened_lists``: a nested bullet list that became items of the list around it
  (Python-Markdown nests only at 4 spaces): an ``<ol>`` item whose source line is a bullet
  (extra numbered steps), or a top-level item whose source line is an indented bullet.

Each returns a list of ``(page, what)`` findings; empty means clean."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag

# every element the built site may hold: HTML5's and the theme's inline SVG icons
HTML_ELEMENTS = frozenset("""
a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption
cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset
figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input
ins kbd label legend li link main map mark menu meta meter nav noscript object ol optgroup
option output p param picture pre progress q rp rt ruby s samp script search section select
slot small source span strong style sub summary sup table tbody td template textarea tfoot th
thead time title tr track u ul var video wbr
svg path g circle rect line polyline polygon ellipse defs use symbol title desc
""".split())

# the commands the docs' pages tell an operator or developer to type; a line outside code that
# starts with one and carries an option, ` -- `, a pipe or a trailing comment is a command
COMMANDS = ("kubectl", "helm", "crictl", "curl", "sudo", "systemctl", "journalctl", "make",
            "skopeo", "kustomize", "nri-cpumgr", "grep", "cat", "install", "cp", "rm", "mv",
            "buildah", "docker", "ctr", "git", "apt-get", "python3", "pip", "scripts/",
            ".venv/bin/", "export", "echo", "mkdir", "ln", "sed", "cd", "ls")
_COMMAND_LINE = re.compile(
    r"^\s*(?:\$ |#\s|(?:" + "|".join(re.escape(c) for c in COMMANDS) + r")(?=\s)"
    r".*(?:\s-{1,2}[A-Za-z]|\s--\s|\s#\s|\s\|\s))")


def _pages(site: Path) -> Iterable[tuple[str, BeautifulSoup]]:
    for p in sorted(site.rglob("*.html")):
        if p.name == "404.html":
            continue
        yield str(p.relative_to(site)), BeautifulSoup(p.read_text(), "html.parser")


def _content(soup: BeautifulSoup) -> Tag:
    return soup.find("article") or soup


def _own_text(tag: Tag, skip: tuple[str, ...] = ("code", "pre", "ul", "ol", "table")) -> str:
    """``tag``'s text with every element named in ``skip`` (by default code, nested lists and
    tables) replaced by a placeholder word, so only its own prose remains."""
    parts: list[str] = []
    for child in tag.children:
        if isinstance(child, NavigableString):
            parts.append(str(child))
        elif isinstance(child, Tag):
            parts.append("CODE" if child.name in skip else _own_text(child, skip))
    return "".join(parts)


def command_paragraphs(site: Path) -> list[tuple[str, str]]:
    found = []
    for page, soup in _pages(site):
        for tag in _content(soup).find_all(["p", "li"]):
            for line in _own_text(tag).splitlines():
                if _COMMAND_LINE.match(line):
                    finding = (page, f"command rendered as text: {line.strip()[:100]!r}")
                    if finding not in found:  # a <p> inside an <li>: reported once
                        found.append(finding)
    return found


def unknown_tags(site: Path) -> list[tuple[str, str]]:
    found = []
    for page, soup in _pages(site):
        for tag in soup.find_all(True):
            if tag.name not in HTML_ELEMENTS:
                eaten = " ".join([tag.name, *tag.attrs])
                found.append((page, f"<{eaten}> was taken for an HTML tag (its text vanished)"))
    return found


def _normalize(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](link) -> text
    text = text.replace("`", "").replace("**", "").replace("__", "")
    return " ".join(text.split())


def _source_lines(sources: Iterable[Path]) -> list[tuple[int, str, str]]:
    """``(indent, marker, normalized text)`` of every list-item line of the Markdown
    sources."""
    out = []
    for src in sources:
        for line in src.read_text().splitlines():
            m = re.match(r"^( *)([*+-]|\d+\.)\s+(.*)$", line)
            if m:
                out.append((len(m.group(1)), m.group(2), _normalize(m.group(3))))
    return out


def flattened_lists(site: Path, sources: Iterable[Path]) -> list[tuple[str, str]]:
    """A bullet list meant to nest (indented in the source) that Markdown flattened into the
    list around it: into a numbered list (the bullets become extra steps) or beside its
    parent items (in a top-level bulleted list)."""
    lines = _source_lines(sources)
    found = []
    for page, soup in _pages(site):
        for lst in _content(soup).find_all(["ol", "ul"]):
            if "md-nav__list" in (lst.get("class") or []) or lst.find_parent("nav"):
                continue
            nested = lst.find_parent("li") is not None
            for li in lst.find_all("li", recursive=False):
                text = _own_text(li, skip=("pre", "ul", "ol", "table")).strip()
                first = _normalize(text.splitlines()[0]) if text else ""
                key = first[:40]
                if len(key) < 12:
                    continue
                src = [(indent, m) for indent, m, t in lines if t.startswith(key)]
                if not src or not all(m in "*+-" for _, m in src):
                    continue
                if lst.name == "ol":
                    found.append((page, f"bullet became a numbered step: {first[:80]!r}"))
                elif not nested and all(indent > 0 for indent, _ in src):
                    found.append((page, f"nested bullet flattened: {first[:80]!r}"))
    return found
