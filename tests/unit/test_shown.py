"""A large value of the user's input in an error message (``nri_cpumgr.shown``): the config's
and ``plan``'s one-line errors show at most a few dozen characters of it, and never build
its whole text (a YAML alias chain expands to millions of items: nine levels of nine gave a
312 MB error line, 14 s and 1.5 GB, before)."""

from __future__ import annotations

import pytest

from nri_cpumgr.cli import main
from nri_cpumgr.config import ConfigError, parse_config
from nri_cpumgr.shown import shown

#: a YAML alias chain: 9**6 'lol's, 5 MB of repr, from 7 lines
CHAIN = "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 6)])
LAST = "*a5"


def test_shown_cuts_a_value_at_the_limit():
    assert shown([1, [2, 3]]) == "[1, [2, 3]]"
    assert shown({"numaNode": 0}) == "{'numaNode': 0}"
    assert shown("x" * 100, 10) == "'xxxxxx..."
    assert shown(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5..."
    nested: list = []
    for _ in range(10_000):  # (deeper than the recursion limit: walked only to the limit)
        nested = [nested]
    assert shown(nested, 12) == "[[[[[[[[[..."


@pytest.mark.parametrize("text, needle", [
    (f"featureGates: {{PodLevelResources: {LAST}}}",
     "featureGates.PodLevelResources: expected true or false, got a list ([[[[[['lol', "),
    (f"cpuManagerPolicy: {LAST}", "cpuManagerPolicy: [[[[[['lol', "),
    (f"kubeReserved: {{cpu: {LAST}}}", "kubeReserved: cpu: expected a quantity, got a list "),
    (f"reservedMemory: [{{numaNode: {LAST}, limits: {{memory: 1Gi}}}}]",
     "expected a NUMA node number, got [[[[[["),
    (f"sharedPoolUpdateBatchSize: {LAST}", "expected a whole number >= 1, got [[[[[["),
])
def test_a_config_key_given_a_huge_value_is_one_short_line(text, needle):
    with pytest.raises(ConfigError) as ei:
        parse_config(CHAIN.replace("a0:", "x-a0:", 1).replace("\na", "\nx-a") + "\n" + text)
    msg = str(ei.value)
    assert needle in msg, msg
    assert "...)" in msg or "..." in msg
    # 6 unknown keys, then the key's error: a few hundred characters, not megabytes
    assert len(msg) < 600, len(msg)


@pytest.mark.parametrize("spec, needle", [
    ("{containers: [{name: a, resources: {limits: {cpu: %s}}}]}",
     "resources.limits.cpu: invalid quantity [[[[[['lol', "),
    ("{replicas: %s, template: {spec: {containers: [{name: a}]}}}",
     "spec.replicas [[[[[['lol', "),
])
def test_a_manifest_field_given_a_huge_value_is_one_short_line(tmp_path, capsys, spec, needle):
    kind = "Deployment" if "replicas" in spec else "Pod"
    f = tmp_path / "m.yaml"
    f.write_text(f"kind: {kind}\nmetadata:\n  name: p\n  annotations:\n"
                 + "\n".join("    " + line for line in CHAIN.splitlines())
                 + f"\nspec: {spec % LAST}\n")
    assert main(["plan", str(f)]) == 2
    err = capsys.readouterr().err
    assert needle in err, err[:300]
    assert len(err) < 300, len(err)
