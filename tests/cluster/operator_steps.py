"""The operator's pages as the cluster test runs them: the ``sh`` blocks of
docs/operations/quick-start.md and docs/operations/upgrade.md, read here, their commands run on
the kubelet 1.37 cluster in the page's order (tests/cluster/test_modern.py), so a page cannot
drift from what works.

A command is either run (:func:`runnable`: ``kubectl`` and ``helm`` against the test cluster,
``scripts/build_image.sh``) with the test node's differences (:class:`Context`), or listed in
:data:`NOT_RUN` with the reason; ``tests/unit/test_operator_pages.py`` fails on a command that
is neither. Pure parsing and mapping here (no cluster): the unit test checks it; running is
:func:`run`'s, given a cluster.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
QUICK_START = REPO / "docs/operations/quick-start.md"
UPGRADE = REPO / "docs/operations/upgrade.md"
CHART_ARG = "deploy/helm/nri-cpumgr"
VALUES_ARG = "deploy/examples/values.yaml"
POD_ARG = "deploy/examples/guaranteed-pod.yaml"


@dataclass
class Block:
    """One ``sh`` block of a page: the headings above it (``## 4. Install the chart`` ->
    ``4. Install the chart``, the nearest ``##`` and ``###``) and its commands (continuation
    lines joined, comments and blank lines dropped)."""

    page: str
    section: str
    subsection: str
    commands: list[str] = field(default_factory=list)


def blocks(page: Path) -> list[Block]:
    out: list[Block] = []
    section = subsection = ""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section, subsection = line[3:].strip(), ""
        elif line.startswith("### "):
            subsection = line[4:].strip()
        elif line.strip() == "```sh":
            indent = line[: len(line) - len(line.lstrip())]
            body: list[str] = []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i][len(indent):])
                i += 1
            out.append(Block(page.name, section, subsection, _commands(body)))
        i += 1
    return out


def _commands(body: list[str]) -> list[str]:
    cmds: list[str] = []
    pending = ""
    for raw in body:
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line.strip()).strip()
        pending = ""
        line = re.sub(r"\s+#\s.*$", "", line)  # a trailing comment ("# or: ...")
        if line and not line.startswith("#"):
            cmds.append(line)
    return cmds


NOT_RUN: dict[str, str] = {
    "containerd config dump": "the machine's containerd config: the tests run their own "
                              "containerd; test_deploy_manifests.py checks deploy/'s NRI settings",
    "cp deploy/crio-nri.conf": "changes the machine's CRI-O config; test_deploy_manifests.py "
                               "checks the drop-in",
    "systemctl restart": "restarts the machine's runtime or kubelet: the tests start their own",
    "ls -l /var/run/nri/nri.sock": "the machine's NRI socket: the test node's is in its work dir",
    "grep -E 'cpuManagerPolicy": "the machine's kubelet config: the test node's kubelet runs "
                                 "cpuManagerPolicy none (tests/cluster/node.py)",
    "skopeo copy": "the test has no registry: the built archive is imported into the test "
                   "node's containerd instead (Cluster.import_image)",
    "kubectl drain": "would take the test's only node out of service",
    "kubectl label node": "(with the drain) the label's effect, no plugin pod on a node of a "
                          "group without an overlay, is checked by test_deploy_manifests.py",
    "rm -f /var/lib/kubelet/": "the machine's kubelet state",
    "rm -r /var/lib/nri-cpumgr": "the machine's plugin state: the test's is in its work dir",
}
"""Commands of the pages the cluster test does not run (prefix -> why)."""


def not_run_reason(command: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def runnable(command: str) -> bool:
    """A command the cluster test runs (when its block is in :data:`RUN_SECTIONS`)."""
    return (command.split()[0] in ("kubectl", "helm", "scripts/build_image.sh")
            and not_run_reason(command) is None)


RUN_SECTIONS: list[tuple[Path, str, str]] = [
    (QUICK_START, "3.", ""), (QUICK_START, "4.", ""),  # the fixture `deployed`
    (QUICK_START, "5.", ""),  # test_quick_start_check_commands
    (UPGRADE, "With Helm", "Upgrade, or change the configuration"),  # and the next two:
    (UPGRADE, "With Helm", "Roll back"),  # test_upgrade_rollback_uninstall_as_the_page_says
    (UPGRADE, "With Helm", "Uninstall"),
]
"""The page sections whose commands test_modern.py runs: (page, heading prefix, subheading
or "" for any)."""


def in_run_sections(page: Path, block: Block) -> bool:
    return any(p == page and block.section.startswith(sec) and (not sub or block.subsection == sub)
               for p, sec, sub in RUN_SECTIONS)


@dataclass
class Context:
    """What differs on the test node: the values file the helm commands get instead of
    ``deploy/examples/values.yaml`` (the page's values deep-merged with the test's), the pod
    manifest with the test's local image, and the names standing for ``<node>`` and
    ``<plugin pod>``."""

    chart: Path
    values_file: Path
    pod_manifest: str
    names: dict[str, str]


def page_values() -> dict[str, Any]:
    return yaml.safe_load((REPO / VALUES_ARG).read_text())


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class Step:
    """A page command mapped for the test: the program (``kubectl``, ``helm``, ``build``), its
    arguments, stdin, and the ``grep -E`` pattern a ``| grep -E '...'`` pipe applies to its
    output (done in Python)."""

    program: str
    args: list[str]
    stdin: str | None = None
    grep: str | None = None


def step(command: str, ctx: Context) -> Step:
    grep = None
    m = re.match(r"^(.*?)\s+\|\s+grep -E\s+(.+)$", command)
    if m:
        command, grep = m.group(1), shlex.split(m.group(2))[0]
    for placeholder, name in ctx.names.items():
        command = command.replace(f"<{placeholder}>", name)
    argv = shlex.split(command)
    if argv[0] == "scripts/build_image.sh":
        return Step("build", [])
    stdin = None
    if argv[0] == "kubectl" and POD_ARG in argv:
        argv[argv.index(POD_ARG)] = "-"
        stdin = ctx.pod_manifest
    if argv[0] == "helm":
        argv = [str(ctx.chart) if a == CHART_ARG else str(ctx.values_file) if a == VALUES_ARG
                else a for a in argv]
    return Step(argv[0], argv[1:], stdin, grep)


def run(c: Any, helm: Path, command: str, ctx: Context, build: Any) -> str:
    """Run one page command on cluster ``c`` (tests.cluster.harness.Cluster); returns its
    output (after the page's ``grep``). ``build`` builds the image (tests.e2e.image)."""
    s = step(command, ctx)
    if s.program == "build":
        build()
        return ""
    if s.program == "kubectl":
        out = c.kubectl(*s.args, input=s.stdin, timeout=300)
    else:
        out = c.helm(helm, *s.args)
    if s.grep:
        out = "".join(ln + "\n" for ln in out.splitlines() if re.search(s.grep, ln))
        assert out, f"{command!r}: grep found nothing"
    return out
