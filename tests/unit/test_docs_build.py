"""The docs site builds strictly (``mkdocs build --strict``, as ``make docs``): a broken link or
anchor, a page missing from the nav, a missing snippet or an incomplete configuration reference
fails it; the build prints no warning; the generated configuration reference has every key of
the model. Needs the ``docs`` extra (mkdocs, mkdocs-material; ``make venv`` installs it):
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

REPO = Path(__file__).resolve().parents[2]


def _require_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
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
