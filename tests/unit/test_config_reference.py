"""The configuration reference (``docs/reference/configuration.md``, generated at build time by
``docs/hooks/config_reference.py`` from ``nri_cpumgr.config.reference``) covers every key of
the config model: a key added to ``Config`` without its entry fails here (and the docs build
fails). The built page itself is checked by ``test_docs_build.py``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from nri_cpumgr.config import Config, parse_config
from nri_cpumgr.config.reference import (
    KEYS,
    default_of,
    fields,
    missing_entries,
    render_markdown,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_key_of_the_model_has_its_entry() -> None:
    assert missing_entries() == []
    assert [f.name for f in fields()] == list(KEYS)  # the page follows the model's order


def test_a_key_added_without_its_entry_is_caught() -> None:
    @dataclasses.dataclass(frozen=True)
    class Grown(Config):
        cpuManagerReconcilePeriod: str = "10s"

    assert missing_entries(Grown) == [
        "cpuManagerReconcilePeriod: no entry in nri_cpumgr.config.reference.KEYS",
        "cpuManagerReconcilePeriod: no value check in the model",
    ]


def test_mirrored_keys_carry_the_kubelets_name() -> None:
    mirrored = {k for k, d in KEYS.items() if d.kubelet}
    assert all(KEYS[k].kubelet == k for k in mirrored)  # KubeletConfiguration naming
    assert {"cpuManagerPolicy", "reservedSystemCPUs", "topologyManagerPolicy",
            "memoryManagerPolicy", "reservedMemory", "featureGates"} <= mirrored
    assert "sharedPoolShrinkDelay" not in mirrored and "socketPath" not in mirrored


def _section(page: str, key: str) -> str:
    m = re.search(rf"^### `{key}`\n(.*?)(?=^### |\Z)", page, re.S | re.M)
    assert m, f"no section for {key}"
    return m.group(1)


def test_the_page_has_every_key_with_type_default_mirror_and_refusals() -> None:
    page = render_markdown()
    for f in fields():
        body = _section(page, f.name)
        assert "- **type**: " in body and "- **refused**: " in body
        mirror = KEYS[f.name].kubelet
        assert f"- **KubeletConfiguration**: {f'`{mirror}`' if mirror else 'the plugin' }" \
            in body
        assert f"[`{f.name}`](#{f.name.lower()})" in page  # the summary table
    cpu = _section(page, "cpuManagerPolicy")
    assert "- **default**: `none`" in cpu and "- **values**: `none`, `static`" in cpu
    assert "- **default**: `\"1s\"`" in _section(page, "sharedPoolShrinkDelay")
    assert "duration" in _section(page, "sharedPoolShrinkDelay")
    assert "- **default**: `10`" in _section(page, "sharedPoolUpdateBatchSize")
    assert default_of(dataclasses.fields(Config)[0]) == "cpumgr"


def test_render_refuses_an_incomplete_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    from nri_cpumgr.config import reference

    monkeypatch.delitem(reference.KEYS, "explainDecisions")
    with pytest.raises(KeyError, match="explainDecisions: no entry"):
        reference.render_markdown()


def _blocks(page: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", page, re.S)


def key_block(page: str) -> str:
    """The first YAML block under ``## The keys`` of docs/configuration.md."""
    return _blocks(page.split("\n## The keys\n", 1)[1])[0]


def test_the_configuration_pages_key_block_lists_every_key_at_its_default() -> None:
    """docs/configuration.md's key block names every key of the model, in its order, each
    at its default (a key added to ``Config`` without its line fails here). The test it
    replaces only checked that the names in the block were keys (``named <= set(KEYS)``),
    never the reverse, and took commented-out lines for listed ones: the block had lost
    systemReserved, topologyManagerPolicyOptions, reservedMemory, evictionHard and
    alignMemoryWithExclusiveCPUs unseen."""
    block = key_block((DOCS / "configuration.md").read_text())
    doc = yaml.safe_load(block)
    assert list(doc) == [f.name for f in fields()]  # every key, the model's order, no other
    assert parse_config(block, "docs/configuration.md") == Config()  # each at its default
    assert not re.findall(r"^#", block, re.M)  # no key only in a comment


def test_a_key_missing_from_the_block_is_caught() -> None:
    block = key_block((DOCS / "configuration.md").read_text())
    fewer = "\n".join(ln for ln in block.splitlines() if not ln.startswith("evictionHard:"))
    assert list(yaml.safe_load(fewer)) != [f.name for f in fields()]


def test_the_configuration_pages_static_example_is_a_valid_config() -> None:
    page = (DOCS / "configuration.md").read_text()
    (example,) = _blocks(page.split("\n## The keys\n", 1)[1])[1:]
    config = parse_config(example, "docs/configuration.md")
    assert config.cpuManagerPolicy == "static" and config.reservedSystemCPUs == "0"
    assert config.cpuManagerPolicyOptions == {"full-pcpus-only": "true"}
