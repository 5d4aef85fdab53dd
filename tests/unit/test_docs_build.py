"""The docs site builds strictly (``mkdocs build --strict``, as ``make docs``): a broken link or
anchor, a page missing from the nav, a missing snippet or an incomplete configuration reference
fails it; the build prints no warning; the generated configuration reference has every key of
the model; and the built HTML reads as the source meant it (``docs_html``: no command rendered
as prose, no ``<placeholder>`` eaten as a tag, no nested list flattened into extra steps).
Needs the ``docs`` extra (mkdocs, mkdocs-material, beautifulsoup4; ``make venv`` installs it):
skipped with the reason without it, failed when ``CI`` is set."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nri_cpumgr.config.reference import fields

from . import docs_html

REPO = Path(__file__).resolve().parents[2]


def _require_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material", "bs4") if importlib.util.find_spec(m) is None]
    if missing:
        msg = (f"python module(s) {', '.join(missing)} not installed (the docs extra: "
               "pip install -e '.[docs]', or make venv)")
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set: the docs build is required)", pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    _require_mkdocs()
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    return out, log


def test_the_site_builds_strictly_without_warnings(site: tuple[Path, str]) -> None:
    out, log = site
    assert "WARNING" not in log, log
    for page in ("index.html", "getting-started.html", "reference/configuration.html",
                 "operations/troubleshooting.html", "operations/upgrade.html",
                 "development/index.html"):
        assert (out / page).is_file(), page


def test_the_built_reference_has_every_key(site: tuple[Path, str]) -> None:
    html = (site[0] / "reference" / "configuration.html").read_text()
    ids = set(re.findall(r'<h3 id="([^"]+)"', html))
    assert {f.name.lower() for f in fields()} <= ids
    assert "generated: nri_cpumgr.config.reference" not in html  # the marker was replaced


def test_deploy_readme_sections_are_included(site: tuple[Path, str]) -> None:
    """The operations pages include ``deploy/README.md``'s sections (one source), markers
    stripped."""
    upgrade = (site[0] / "operations" / "upgrade.html").read_text()
    deploy = (site[0] / "operations" / "deploy.html").read_text()
    assert "rollout undo ds/nri-cpumgr" in upgrade
    assert "Prepare the nodes" in deploy
    assert "8&lt;" not in upgrade + deploy and "--8<--" not in upgrade + deploy


# the Markdown sources the site is built from (deploy/README.md is included by the operations
# pages), for docs_html.flattened_lists
SOURCES = [*sorted((REPO / "docs").rglob("*.md")), REPO / "deploy" / "README.md"]


def _report(findings: list[tuple[str, str]]) -> str:
    return "\n".join(f"{page}: {what}" for page, what in findings)


def test_no_command_is_rendered_as_prose(site: tuple[Path, str]) -> None:
    found = docs_html.command_paragraphs(site[0])
    assert not found, _report(found)


def test_no_angle_bracket_text_is_eaten_as_a_tag(site: tuple[Path, str]) -> None:
    found = docs_html.unknown_tags(site[0])
    assert not found, _report(found)


def test_no_nested_list_is_flattened(site: tuple[Path, str]) -> None:
    found = docs_html.flattened_lists(site[0], SOURCES)
    assert not found, _report(found)


def test_the_html_checks_catch_each_defect(tmp_path: Path) -> None:
    """Each check finds its defect in a page made the way the broken pages were (a code block
    indented 7 spaces under a numbered item, placeholders in it, bullets nested by 3 and 2
    spaces), and nothing in the same page written right."""
    _require_mkdocs()
    import markdown

    bad = """1. Prepare:
   * containerd 1.7: merge the drop-in into the config;
   * CRI-O 1.26+: copy the drop-in to crio.conf.d;
2. Check it worked:

       kubectl -n nri-cpumgr rollout status daemonset/nri-cpumgr
       kubectl exec <your guaranteed pod> -- grep Cpus_allowed_list /proc/self/status

The update modes:

* Which path moves them:
  * async: the plugin's own calls to the runtime;
"""
    good = """1. Prepare:
    * containerd 1.7: merge the drop-in into the config;
    * CRI-O 1.26+: copy the drop-in to crio.conf.d;
2. Check it worked:

        kubectl -n nri-cpumgr rollout status daemonset/nri-cpumgr
        kubectl exec <your guaranteed pod> -- grep Cpus_allowed_list /proc/self/status

The update modes:

* Which path moves them:
    * async: the plugin's own calls to the runtime;
"""
    found = {}
    for name, text in (("bad", bad), ("good", good)):
        site = tmp_path / name
        site.mkdir()
        src = site / "page.md"
        src.write_text(text)
        body = markdown.markdown(text, extensions=["pymdownx.superfences"])
        (site / "page.html").write_text(f"<html><body><article>{body}</article></body></html>")
        found[name] = (docs_html.command_paragraphs(site), docs_html.unknown_tags(site),
                       docs_html.flattened_lists(site, [src]))
    commands, tags, lists = found["bad"]
    assert [w for _, w in commands] == [
        "command rendered as text: 'kubectl -n nri-cpumgr rollout status daemonset/nri-cpumgr'",
        "command rendered as text: 'kubectl exec  -- grep Cpus_allowed_list /proc/self/status'"]
    assert [w for _, w in tags] == [
        "<your guaranteed pod> was taken for an HTML tag (its text vanished)"]
    assert [w.split(":")[0] for _, w in lists] == [
        "bullet became a numbered step", "bullet became a numbered step",
        "nested bullet flattened"]
    assert found["good"] == ([], [], [])
