"""Row terms of the score taken out of the per-score work (row_terms.py): the split is exact
(value == shifted + row at every q0), leaves per-score terms alone, and the kernels that use
it match the fp64 reference (outputs, lse, gradients, captured tensors' gradients)."""
import math

import pytest
import torch

from cherenkov.attention import alibi, alibi_slopes, attention, attention_math, mods
from cherenkov.attention.fold import scaled_mods
from cherenkov.attention.row_terms import split_rows
from cherenkov.attention.trace import depends_on, evaluate, topo_order, trace_mods

from tests.attention.test_api import check, make_qkv

ROW_BIAS = torch.randn(40, dtype=torch.float64)
HEAD_BIAS = torch.randn(3, dtype=torch.float64)
COL_BIAS = torch.randn(40, dtype=torch.float64)
SLOPES = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)


def _leaves(q0):
    B, H, Q, KV = 2, 3, 37, 40
    return {"score": torch.randn(B, H, Q, KV, dtype=torch.float64) * 20,
            "sm_scale": torch.tensor(0.125, dtype=torch.float64), "q0": torch.tensor(q0),
            "b": torch.arange(B).view(B, 1, 1, 1), "h": torch.arange(H).view(1, H, 1, 1),
            "q_idx": torch.arange(Q).view(1, 1, Q, 1), "kv_idx": torch.arange(KV).view(1, 1, 1, KV)}


SPLIT = {
    "alibi": mods.alibi(SLOPES),
    "head and row biases": lambda s, b, h, q, kv: s + HEAD_BIAS[h] - ROW_BIAS[q] * 0.5 + 3.0,
    "affine": lambda s, b, h, q, kv: 2.0 * s - (q - 2 * kv + 3 + h) * SLOPES[h],
    "int difference": lambda s, b, h, q, kv: s + (kv - q),
    "mixed": lambda s, b, h, q, kv: torch.tanh(s / 20.0) * 20.0 + SLOPES[h] * (q - kv)
    + COL_BIAS[kv],
}
KEPT = {
    "softcap": mods.tanh_softcap(30.0),
    "column bias": lambda s, b, h, q, kv: s + COL_BIAS[kv],
    "product": lambda s, b, h, q, kv: s * (kv - q) * 0.01,
    "none": None,
}


@pytest.mark.parametrize("name", sorted(SPLIT))
@pytest.mark.parametrize("q0", [0, 13, 36])
def test_split_is_exact(name, q0):
    traced = trace_mods(SPLIT[name], None)
    value, _ = scaled_mods(traced)
    shifted, row = split_rows(value)
    assert row is not None and "kv_idx" not in depends_on(row) and "score" not in depends_on(row)
    leaves, caps = _leaves(q0), traced.captured
    total = evaluate(shifted, leaves, caps) + evaluate(row, leaves, caps)
    torch.testing.assert_close(total.double().expand(2, 3, 37, 40),
                               evaluate(value, leaves, caps).double().expand(2, 3, 37, 40))


def _tile_ops(node):
    """Operations on whole tiles: those varying with the score, or with both q and kv."""
    return sum(1 for n in topo_order([node]) if n.args and n.op not in ("load", "cast")
               and ("score" in depends_on(n) or {"q_idx", "kv_idx"} <= depends_on(n)))


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_split_costs_fewer_tile_operations(name):
    value, _ = scaled_mods(trace_mods(SPLIT[name], None))
    assert _tile_ops(split_rows(value)[0]) < _tile_ops(value)


def test_alibi_tile_is_one_multiply_add_of_a_key_vector():
    """ALiBi's tile: score * c + slope * (kv - q0), the second a vector over the keys."""
    value, _ = scaled_mods(trace_mods(alibi(SLOPES), None))
    shifted, _ = split_rows(value)
    per_score = [n for n in topo_order([shifted]) if n.op != "const"
                 and {"score", "q_idx"} & depends_on(n) and n.op not in ("score", "q_idx")]
    assert "q_idx" not in depends_on(shifted)
    assert sorted(n.op for n in per_score) == ["add", "mul"]


@pytest.mark.parametrize("name", sorted(KEPT))
def test_per_score_terms_stay(name):
    value, _ = scaled_mods(trace_mods(KEPT[name], None))
    shifted, row = split_rows(value)
    assert row is None and shifted is value


def test_kernels_with_row_terms_match_the_reference():
    """Head, row and affine terms, captured tensors with gradients (a row bias's is 0 up to
    rounding: its scores' gradients sum to 0 along the row)."""
    rows = torch.randn(37).requires_grad_()
    heads = torch.randn(2).requires_grad_()
    slopes = alibi_slopes(2)

    def factory(rows, heads, slopes=slopes):
        return lambda s, b, h, q, kv: s + rows[q] - heads[h] + 0.25 * (q - 2 * kv + 3) \
            + slopes[h] * (kv - q)
    check(*make_qkv(1, 2, 2, 37, 45, 16), factory, mods.causal, captured=(rows, heads))


def test_kernels_with_row_terms_stored_ds_backward():
    """No captured gradients: the backward stores dS (launch_bwd.DS_STORE 'auto', score mods)."""
    slopes = alibi_slopes(4)
    check(*make_qkv(2, 4, 2, 33, 50, 16), lambda: alibi(slopes), mods.causal)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_row_term_that_is_not_finite_gives_that_row_nan(bad):
    """A row whose every score is +inf (or NaN): eager's softmax gives NaN there, and so do we
    (the row term is taken out of the tiles, its non-finiteness is not)."""
    bias = torch.zeros(20)
    bias[5] = bad
    q, k, v = make_qkv(1, 2, 2, 20, 24, 16, grad=False)
    mod = lambda s, b, h, qi, kv: s + bias[qi]
    out = attention(q, k, v, score_mod=mod)
    ref = attention_math(q.double(), k.double(), v.double(), mod)
    assert out[:, :, 5].isnan().all() and ref[:, :, 5].isnan().all()
    keep = torch.arange(20) != 5
    torch.testing.assert_close(out[:, :, keep].double(), ref[:, :, keep], rtol=1e-4, atol=1e-4)


def test_a_mod_not_reading_the_score_keeps_whole_tiles():
    """slope * (kv - q) alone (the score ignored): split, its tile part varies along kv only
    and is still a whole tile; outputs, lse and dV match the reference."""
    slopes = alibi_slopes(2).double()
    q, k, v = make_qkv(1, 2, 2, 21, 30, 16, dtype=torch.float64)
    mod = lambda s, b, h, qi, kv: slopes[h] * (kv - qi)          # noqa: E731
    out, lse = attention(q, k, v, score_mod=mod, mask_mod=mods.causal, return_lse=True)
    ref, ref_lse = attention_math(q, k, v, mod, mods.causal, return_lse=True)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-6, atol=1e-6)
    go = torch.randn_like(ref)
    dv, = torch.autograd.grad(out, (v,), go)
    ref_dv, = torch.autograd.grad(ref, (v,), go)
    torch.testing.assert_close(dv, ref_dv, rtol=1e-6, atol=1e-6)


def test_a_row_term_of_minus_inf_is_a_fully_masked_row():
    """Every score of a row -inf through a row term: output 0 and lse -inf, as for a row the
    mask_mod masks whole (and as the whole scores gave before the split); gradients 0."""
    bias = torch.zeros(20)
    bias[5] = -math.inf
    q, k, v = make_qkv(1, 2, 2, 20, 24, 16)
    mod = lambda s, b, h, qi, kv: s + bias[qi]                   # noqa: E731
    out, lse = attention(q, k, v, score_mod=mod, return_lse=True)
    assert torch.equal(out[:, :, 5], torch.zeros_like(out[:, :, 5]))
    assert torch.isneginf(lse[:, :, 5]).all() and torch.isfinite(lse[:, :, :5]).all()
    keep = torch.arange(20) != 5
    ref = attention_math(q.double(), k.double(), v.double(), mod)
    torch.testing.assert_close(out[:, :, keep].double(), ref[:, :, keep], rtol=1e-4, atol=1e-4)
    dq, = torch.autograd.grad(out, (q,), torch.randn_like(out))
    assert torch.equal(dq[:, :, 5], torch.zeros_like(dq[:, :, 5])) and dq.isfinite().all()
