"""The operator's pages (docs/operations/quick-start.md, upgrade.md) cannot drift from what the
cluster test runs: every command of their ``sh`` blocks is either run by
tests/cluster/test_modern.py (through tests/cluster/operator_steps.py) or listed there as not
run, with the reason; the sections the cluster test runs hold the commands it expects; and the
mapping of a page command to the test node's (values file, chart path, example pod, names) is
what the cluster test relies on. No cluster needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import operator_steps as ops

PAGES = [ops.QUICK_START, ops.UPGRADE]


def _all_commands() -> list[tuple[str, str]]:
    return [(b.page, cmd) for page in PAGES for b in ops.blocks(page) for cmd in b.commands]


def test_every_page_command_is_run_or_says_why_not() -> None:
    """A command is run (kubectl/helm/the image build, in a section the cluster test runs) or
    listed in NOT_RUN; a new command, or a command in a new section, fails here until the
    cluster test runs it or the reason is written down."""
    n = 0
    for page in PAGES:
        for b in ops.blocks(page):
            for cmd in b.commands:
                n += 1
                if ops.not_run_reason(cmd):
                    continue
                assert ops.runnable(cmd), (page.name, cmd, "neither run nor excused")
                assert ops.in_run_sections(page, b), (page.name, b.section, b.subsection, cmd,
                                                      "in a section the cluster test skips")
    assert n >= 20, n


def test_the_sections_the_cluster_test_runs() -> None:
    def cmds(page: Path, section: str, sub: str = "") -> list[str]:
        return [c for b in ops.blocks(page) if b.section.startswith(section)
                and (not sub or b.subsection == sub) for c in b.commands if ops.runnable(c)]

    install = cmds(ops.QUICK_START, "3.") + cmds(ops.QUICK_START, "4.")
    assert install[0] == "scripts/build_image.sh"
    assert [c.split()[:2] for c in install[1:]] == [
        ["kubectl", "create"], ["kubectl", "label"], ["helm", "install"], ["kubectl", "-n"]]
    assert "pod-security.kubernetes.io/enforce=privileged" in install[2]
    assert "--create-namespace" not in " ".join(install) and "--set " not in " ".join(install)
    check = cmds(ops.QUICK_START, "5.")
    assert check[-1] == "kubectl delete pod guaranteed-1cpu"
    assert any("Cpus_allowed_list" in c for c in check)
    assert [c.split()[:2] for c in cmds(ops.UPGRADE, "With Helm",
                                        "Upgrade, or change the configuration")] == [
        ["helm", "upgrade"], ["kubectl", "-n"], ["helm", "history"]]
    assert [c.split()[:2] for c in cmds(ops.UPGRADE, "With Helm", "Roll back")] == [
        ["helm", "rollback"], ["kubectl", "-n"]]
    assert [c.split()[:2] for c in cmds(ops.UPGRADE, "With Helm", "Uninstall")] == [
        ["helm", "uninstall"], ["kubectl", "get"]]


@pytest.fixture
def ctx(tmp_path: Path) -> ops.Context:
    return ops.Context(chart=Path("/chart"), values_file=tmp_path / "v.yaml",
                       pod_manifest="{}", names={"node": "node-0", "plugin pod": "nri-x"})


def test_a_page_command_mapped_for_the_test_node(ctx: ops.Context) -> None:
    s = ops.step("helm install nri-cpumgr deploy/helm/nri-cpumgr --namespace nri-cpumgr "
                 "--values deploy/examples/values.yaml", ctx)
    assert (s.program, s.args) == ("helm", ["install", "nri-cpumgr", "/chart", "--namespace",
                                            "nri-cpumgr", "--values", str(ctx.values_file)])
    s = ops.step("kubectl -n nri-cpumgr logs ds/nri-cpumgr -c nri-cpumgr | grep -E "
                 "'registered|shared pool update mode'", ctx)
    assert s.args[-1] == "nri-cpumgr" and s.grep == "registered|shared pool update mode"
    s = ops.step("kubectl apply -f deploy/examples/guaranteed-pod.yaml", ctx)
    assert s.args == ["apply", "-f", "-"] and s.stdin == "{}"
    s = ops.step("kubectl -n nri-cpumgr exec <plugin pod> -c nri-cpumgr -- nri-cpumgr status", ctx)
    assert s.args[3] == "nri-x"
    for _, cmd in _all_commands():
        if ops.runnable(cmd):
            step = ops.step(cmd, ctx)
            assert not any(a.startswith("<") for a in step.args), cmd  # no placeholder left


def test_blocks_join_continuations_and_drop_comments(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("## 1. A\n\n```sh\n# a comment\nhelm install x \\\n    y\n"
                    "systemctl restart containerd        # or: crio\n```\n\n### B\n\n"
                    "    ```sh\n    kubectl get pods\n    ```\n")
    got = [(b.section, b.subsection, b.commands) for b in ops.blocks(page)]
    assert got == [("1. A", "", ["helm install x y", "systemctl restart containerd"]),
                   ("1. A", "B", ["kubectl get pods"])]


def test_the_example_values_install_what_the_page_says() -> None:
    v = ops.page_values()
    assert v["config"]["reservedSystemCPUs"] == "0,1"  # the comma --set cannot carry
    assert v["image"]["repository"] == "registry.example/nri-cpumgr"
    merged = ops.merge(v, {"config": {"reservedSystemCPUs": "0", "x": 1}})
    assert merged["config"] == {"reservedSystemCPUs": "0", "x": 1}
    assert merged["image"] == v["image"]
