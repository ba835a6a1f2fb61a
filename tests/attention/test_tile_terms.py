"""Terms of the score linear in the key index (tile_terms.py): the split is exact at every
tile start and q0, leaves other terms whole, makes ALiBi's per-score work one multiply-add,
and the rendered helpers the Gluon loops call (`_score_cols`, `_score_tile`, `_score_rest`,
`_score_rest_grad`, with `_row_shift`) add up to the whole score and its derivative in the
interpreter. (The Gluon kernels themselves run on the GPU: tests/gpu/.)"""
import pytest
import torch
import triton
import triton.language as tl

from cherenkov.attention import mods
from cherenkov.attention.codegen import load_kernels
from cherenkov.attention.fold import scaled_mods
from cherenkov.attention.row_terms import split_rows
from cherenkov.attention.tile_terms import has_tile_terms, split_tiles
from cherenkov.attention.trace import evaluate, topo_order, trace_mods

SLOPES = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
COL_BIAS = torch.randn(64, dtype=torch.float64)

SPLIT = {
    "alibi": mods.alibi(SLOPES),
    "affine": lambda s, b, h, q, kv: 2.0 * s - (q - 2 * kv + 3 + h) * SLOPES[h],
    "int difference": lambda s, b, h, q, kv: s + (kv - q),
    "tanh and a slope": lambda s, b, h, q, kv: torch.tanh(s / 20.0) * 20.0
    + SLOPES[h] * (q - kv),
    "and a column bias": lambda s, b, h, q, kv: s + SLOPES[h] * (kv - q) + COL_BIAS[kv],
}
KEPT = {
    "softcap": mods.tanh_softcap(30.0),
    "column bias": lambda s, b, h, q, kv: s + COL_BIAS[kv],
    "product": lambda s, b, h, q, kv: s * (kv - q) * 0.01,
    "row bias": lambda s, b, h, q, kv: s + SLOPES[h] * q,
}


def _leaves(q0, n0, B=2, H=3, Q=5, N=16):
    j = torch.arange(N)
    return {"score": torch.randn(B, H, Q, N, dtype=torch.float64) * 20,
            "sm_scale": torch.tensor(0.125, dtype=torch.float64), "q0": torch.tensor(q0),
            "n0": torch.tensor(n0), "j": j.view(1, 1, 1, N),
            "b": torch.arange(B).view(B, 1, 1, 1), "h": torch.arange(H).view(1, H, 1, 1),
            "q_idx": (q0 + torch.arange(Q)).view(1, 1, Q, 1), "kv_idx": (n0 + j).view(1, 1, 1, N)}


@pytest.mark.parametrize("name", sorted(SPLIT))
@pytest.mark.parametrize("q0, n0", [(0, 0), (13, 32), (40, 7)])
def test_split_is_exact(name, q0, n0):
    traced = trace_mods(SPLIT[name], None)
    shifted, _ = split_rows(scaled_mods(traced)[0])
    rest, cols, tile = split_tiles(shifted)
    leaves, caps = _leaves(q0, n0), traced.captured
    leaves["cols"] = evaluate(cols, leaves, caps)
    assert "q_idx" not in str(cols) and "n0" not in str(cols) and "j" not in str(tile)
    total = evaluate(rest, leaves, caps) + evaluate(tile, leaves, caps)
    torch.testing.assert_close(total.double().expand(2, 3, 5, 16),
                               evaluate(shifted, leaves, caps).double().expand(2, 3, 5, 16))
    assert has_tile_terms(traced)


@pytest.mark.parametrize("name", sorted(KEPT))
def test_other_terms_stay(name):
    traced = trace_mods(KEPT[name], None)
    assert split_tiles(split_rows(scaled_mods(traced)[0])[0]) is None
    assert not has_tile_terms(traced)
    assert not has_tile_terms(trace_mods(None, mods.causal))


def test_alibi_per_score_work_is_one_multiply_add():
    """ALiBi's rest: score * c + cols -- no index conversion or difference per score."""
    shifted, _ = split_rows(scaled_mods(trace_mods(mods.alibi(SLOPES), None))[0])
    rest, _, _ = split_tiles(shifted)
    ops = sorted(n.op for n in topo_order([rest]) if n.args and "score" in str(n))
    assert ops == ["add", "mul"] and "kv_idx" not in str(rest) and "cols" in str(rest)


K = None       # the generated module _probe reads (set by the test)


@triton.jit
def _probe(SCORE, OUT, sm_scale, b, h, q0, n0, C0, C0_s0, C0_n0, M: tl.constexpr,
           N: tl.constexpr):
    """The whole score and d/dscore, then the split pieces' sum and derivative."""
    rows = tl.arange(0, M)
    j = tl.arange(0, N)
    q_idx = (q0 + rows)[:, None]
    kv_idx = (n0 + j)[None, :]
    at = rows[:, None] * N + j[None, :]
    score = tl.load(SCORE + at)
    whole, d_whole = K._score_mod_grad(score, sm_scale, b, h, q_idx, kv_idx, C0, C0_s0, C0_n0)
    cols = K._score_cols(sm_scale, b, h, j[None, :], q0, C0, C0_s0, C0_n0)
    rest, d_rest = K._score_rest_grad(score, sm_scale, b, h, q_idx, kv_idx, q0, cols, C0,
                                      C0_s0, C0_n0)
    fwd = K._score_rest(score, sm_scale, b, h, q_idx, kv_idx, q0, cols, C0, C0_s0, C0_n0)
    tile = K._score_tile(sm_scale, b, h, n0, q0, C0, C0_s0, C0_n0)
    row = K._row_shift(sm_scale, b, h, q0 + rows, q0, C0, C0_s0, C0_n0)
    q0_form = K._score_mod_q0(score, sm_scale, b, h, q_idx, kv_idx, q0, C0, C0_s0, C0_n0)
    tl.store(OUT + at, whole)
    tl.store(OUT + M * N + at, rest + tile + row[:, None])
    tl.store(OUT + 2 * M * N + at, d_whole)
    tl.store(OUT + 3 * M * N + at, d_rest)
    tl.store(OUT + 4 * M * N + at, q0_form)
    tl.store(OUT + 5 * M * N + at, fwd + tile)


@pytest.mark.parametrize("name", ["alibi", "affine", "tanh and a slope"])
@pytest.mark.parametrize("q0, n0", [(0, 0), (16, 48)])
def test_rendered_helpers_add_up_to_the_score(name, q0, n0, monkeypatch):
    slopes = SLOPES.float()
    mod = {"alibi": mods.alibi(slopes),
           "affine": lambda s, b, h, q, kv: 2.0 * s - (q - 2 * kv + 3 + h) * slopes[h],
           "tanh and a slope": lambda s, b, h, q, kv: torch.tanh(s / 20.0) * 20.0
           + slopes[h] * (q - kv)}[name]
    traced = trace_mods(mod, mods.causal)
    monkeypatch.setitem(globals(), "K", load_kernels(traced, interpret=True))
    M, N = 4, 16
    score = torch.randn(M, N) * 8
    out = torch.empty(6, M, N)
    for h in range(3):
        _probe[(1,)](score, out, 0.125, 1, h, q0, n0, slopes, slopes.stride(0), 3, M, N)
        whole, split, d_whole, d_rest, q0_form, fwd = out
        torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(d_rest, d_whole, rtol=0, atol=0)
        torch.testing.assert_close(fwd, q0_form, rtol=1e-5, atol=1e-4)


HEADS = torch.tensor([0.3, -0.2, 0.1, 0.0])


@pytest.mark.parametrize("name, taken", [("alibi", True), ("affine", True),
                                         ("head bias", True), ("row table", False)])
@pytest.mark.parametrize("ds_store", ["auto", "off"])
def test_dkdv_kernel_takes_the_terms_out_where_rows_come_from_offsets(name, taken, ds_store,
                                                                      monkeypatch):
    """The dK/dV kernel's loop over query tiles (launch_bwd.DKDV_TILE_TERMS): key-linear terms
    and rows linear in q_idx (or not reading it) made once per program; a per-row table keeps
    the per-score form. Odd lengths, GQA, stored dS or not: gradients match fp64."""
    from cherenkov.attention import launch_bwd
    from tests.attention.test_api import check, make_qkv
    monkeypatch.setattr(launch_bwd, "DS_STORE", ds_store)
    monkeypatch.setattr(launch_bwd, "DKDV_TILE_TERMS", True)     # off by default (slower)
    seen = []
    real = launch_bwd._dkdv_decision

    def spy(*a, **kw):
        d = real(*a, **kw)
        seen.append(d.constexprs["TILE_TERMS"])
        return d
    monkeypatch.setattr(launch_bwd, "_dkdv_decision", spy)
    slopes = mods.alibi_slopes(4)
    table = torch.randn(37)
    factory = {
        "alibi": lambda: mods.alibi(slopes),
        "affine": lambda: lambda s, b, h, q, kv: 2.0 * s - (q - 2 * kv + 3 + h) * slopes[h],
        "head bias": lambda: lambda s, b, h, q, kv: s + HEADS[h] + slopes[h] * (kv - q),
        "row table": lambda: lambda s, b, h, q, kv: s + table[q] + slopes[h] * (kv - q),
    }[name]
    check(*make_qkv(2, 4, 2, 37, 50, 16), factory, mods.causal)
    assert seen and all(t == taken for t in seen)
