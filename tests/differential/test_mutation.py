"""The differential runner can fail: genuine plugin errors injected into the plugin's own
answers (which stand in for the kubelet's) are flagged as undocumented mismatches, at least
95% of each kind (tests/differential/mutation.py; no oracle needed)."""

from __future__ import annotations

import pytest

from tests.differential import mutation as M

#: fixed seeds: ~400 scenarios whose config the plugin accepts
SEEDS = range(1, 601)


@pytest.fixture(scope="module")
def rates() -> dict[str, dict]:
    return M.flag_rates(SEEDS)


@pytest.mark.parametrize("kind", list(M.KINDS))
def test_injected_error_is_flagged(rates: dict[str, dict], kind: str) -> None:
    r = rates[kind]
    assert r["injected"] >= 90, f"too few scenarios to inject {kind!r} into: {r['injected']}"
    rate = r["flagged"] / r["injected"]
    assert rate >= 0.95, (f"{kind}: {r['flagged']}/{r['injected']} flagged ({rate:.1%}); "
                          f"missed (seed, filed under): {r['missed']}")
