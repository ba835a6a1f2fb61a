"""The score mods as the kernels take them (fold.py): raw qk in, log2-domain score out,
constant factors folded; same values as the traced mod, fewer per-score multiplies."""
import math

import pytest
import torch

from cherenkov.attention import mods
from cherenkov.attention.fold import LOG2E, scaled_mods
from cherenkov.attention.trace import evaluate, topo_order, trace_mods

SCALE = 0.125


def _leaves(shape=(2, 3, 5, 7)):
    B, H, Q, KV = shape
    return {"score": torch.randn(shape, dtype=torch.float64) * 20,
            "sm_scale": torch.tensor(SCALE, dtype=torch.float64),
            "b": torch.arange(B).view(B, 1, 1, 1), "h": torch.arange(H).view(1, H, 1, 1),
            "q_idx": torch.arange(Q).view(1, 1, Q, 1), "kv_idx": torch.arange(KV).view(1, 1, 1, KV)}


def _per_score_ops(node, op):
    """How many `op` nodes vary per score (what costs an instruction per score)."""
    return sum(1 for n in topo_order([node]) if n.op == op
               and {"score", "q_idx", "kv_idx"} & {m.op for m in topo_order([n])})


CASES = [
    mods.tanh_softcap(30.0),
    mods.alibi(torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)),
    lambda s, b, h, q, kv: -(s * 2.0) / 3.0 + (kv - q) * 0.5,
    lambda s, b, h, q, kv: torch.where(q >= kv, s * s / 4.0, torch.exp(s / 8.0) * 3.0),
    lambda s, b, h, q, kv: torch.sigmoid(-s) * (h + 1.0) - 2.0 * (s / 7.0),
    lambda s, b, h, q, kv: s,
    lambda s, b, h, q, kv: s * 0.0 + (h + 1.0),          # folds to a per-head value
]


@pytest.mark.parametrize("score_mod", CASES)
def test_folded_value_and_derivative_match_the_traced_mod(score_mod):
    leaves = _leaves()
    t = trace_mods(score_mod, None)
    value, d = scaled_mods(t)
    scaled = leaves["score"] * SCALE
    natural = {**leaves, "score": scaled}
    expected = evaluate(t.score, natural, t.captured) * LOG2E
    got = torch.broadcast_to(evaluate(value, leaves, t.captured), expected.shape)
    torch.testing.assert_close(got.double(), expected.double(), rtol=1e-12, atol=1e-12)
    d_traced = t.score_derivative()
    if d_traced is None:                    # the mod does not read the score
        assert d.op == "const" and d.value == 0.0
    else:
        want = torch.broadcast_to(evaluate(d_traced, natural, t.captured), expected.shape)
        got = torch.broadcast_to(evaluate(d, leaves, t.captured), expected.shape)
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-12, atol=1e-12)


def test_softcap_costs_two_multiplies_and_its_derivative_none():
    t = trace_mods(mods.tanh_softcap(30.0), None)
    value, d = scaled_mods(t)
    # qk * (sm_scale / 30) -> tanh -> * (30 log2 e): traced, it was five per-score multiplies
    assert _per_score_ops(value, "mul") == 2 and _per_score_ops(value, "div") == 0
    assert any(n.op == "const" and math.isclose(n.value, 30 * LOG2E)
               for n in topo_order([value]))
    # 30 * (1 - t*t) * (1/30) -> 1 - t*t
    assert str(d).startswith("sub(1.0, mul(tanh(")
    assert _per_score_ops(d, "mul") == 2     # t*t, and the qk * coefficient it shares with value


def test_alibi_folds_log2e_into_the_slope():
    slopes = torch.tensor([0.5, 0.25])
    value, d = scaled_mods(trace_mods(mods.alibi(slopes), None))
    assert d.op == "const" and d.value == 1.0
    # qk * (sm_scale log2 e) + (kv - q) * (slope log2 e): two per-score products, one add
    assert _per_score_ops(value, "mul") == 2 and _per_score_ops(value, "add") == 1


@pytest.mark.parametrize("score_mod, body", [
    (mods.tanh_softcap(30.0), "ds * dsdx"),                      # 1 - t*t: finite
    (mods.alibi(torch.tensor([0.5, 0.25])), "ds"),               # d = 1
    (None, "ds"),
    (lambda s, b, h, q, kv: s * 0.5, "ds * dsdx"),               # d = 0.5
    # 0.5 / sqrt(0) where masked: the guard keeps 0 * inf from making NaN
    (lambda s, b, h, q, kv: s + torch.sqrt((kv <= q) * s * s), "tl.where(p == 0.0, 0.0, ds * dsdx)"),
    (lambda s, b, h, q, kv: torch.exp(s / 4.0), "tl.where(p == 0.0, 0.0, ds * dsdx)"),
])
def test_score_gradient_guard_only_where_the_derivative_may_be_infinite(score_mod, body):
    from cherenkov.attention.render import render_mods
    text = render_mods(trace_mods(score_mod, mods.causal), "cuda")
    assert f"def _scale_ds(ds, p, dsdx):\n    return {body}\n" in text
