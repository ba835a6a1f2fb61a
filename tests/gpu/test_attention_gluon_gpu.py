"""GPU: the warp-specialized Gluon forward (launch_gluon) and dQ kernel (launch_gluon_bwd) --
which calls take them, and that the forward's output, LSE and the gradients through it match
the Triton forward's, the dQ kernel's gradients the Triton dQ kernel's (sm_90 only)."""
import pytest
import torch

import cherenkov.attention as ca
from cherenkov.attention import launch_gluon, launch_gluon_bwd
from cherenkov.attention.codegen import gluon_hopper

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0)
    or not gluon_hopper(), reason="needs an sm_90 GPU and Triton's Gluon")


def _qkv(B, H, S, D=128, HK=None, dtype=torch.bfloat16, grad=True):
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(B, H, S, D), (B, HK or H, S, D), (B, HK or H, S, D)]
    return [torch.randn(s, device="cuda", dtype=dtype, generator=g).requires_grad_(grad)
            for s in shapes]


class _Count:
    """Counts the launches of a Gluon kernel -- `module.name`, launch_gluon.forward by default
    -- and lets the tests' small problems take it."""

    def __init__(self, monkeypatch, module=launch_gluon, name="forward"):
        monkeypatch.setattr(launch_gluon, "MIN_SCORES", 0)
        self.n, real = 0, getattr(module, name)

        def counted(*a, **kw):
            self.n += 1
            return real(*a, **kw)
        monkeypatch.setattr(module, name, counted)


def _run(q, k, v, do, **kw):
    out, lse = ca.attention(q, k, v, return_lse=True, **kw)
    grads = torch.autograd.grad(out, (q, k, v), do)
    return out, lse, *grads


def _compare(ours, ref, tol=2e-2):
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), ours, ref):
        fin = torch.isfinite(b)
        assert torch.equal(fin, torch.isfinite(a)), name
        scale = b.float()[fin].abs().max().clamp_min(1.0)
        err = ((a.float() - b.float())[fin].abs().max() / scale).item()
        assert err < tol, (name, err)


MODS = {
    "causal": dict(mask_mod=ca.causal),
    "window": dict(mask_mod=ca.sliding_window(300)),
    "prefix": dict(mask_mod=ca.prefix_lm(200)),
    "relative position": dict(score_mod=lambda s, b, h, q, kv: s + (q - kv).float() / 64,
                              mask_mod=ca.causal),
    "softcap": dict(score_mod=ca.tanh_softcap(20.0), mask_mod=ca.causal),
    "none": dict(),
    # rows 0..99 see no key: output 0, lse -inf (a partial 128 x 128 tile for them)
    "empty rows": dict(mask_mod=lambda b, h, q, kv: (q >= 100) & (kv <= q)),
}


@pytest.mark.parametrize("name, D, dtype, HK", [(n, 128, torch.bfloat16, None) for n in MODS]
                         + [(n, 128, torch.float16, 2) for n in ("causal", "relative position")]
                         + [("causal", 64, torch.bfloat16, None)])
def test_gluon_forward_matches_triton_forward(name, D, dtype, HK, monkeypatch):
    """Also the forms launch_gluon does not take by default (fp16, D=64: slower there)."""
    monkeypatch.setattr(launch_gluon, "DTYPES", (torch.bfloat16, torch.float16))
    monkeypatch.setattr(launch_gluon, "HEAD_DIMS", (64, 128))
    q, k, v = _qkv(2, 4, 512, D=D, HK=HK, dtype=dtype)
    do = torch.randn_like(q)
    kw = dict(MODS[name], enable_gqa=HK is not None)
    count = _Count(monkeypatch)
    ours = _run(q, k, v, do, **kw)
    assert count.n == 1, "the Gluon forward did not run"
    monkeypatch.setattr(launch_gluon, "GLUON_FWD", "off")
    ref = _run(q, k, v, do, **kw)
    assert count.n == 1
    _compare(ours, ref)
    if name == "empty rows":
        assert ours[0][:, :, :100].abs().max().item() == 0.0
        assert torch.isneginf(ours[1][:, :, :100]).all()


def test_calls_it_cannot_take_run_the_triton_forward(monkeypatch):
    count = _Count(monkeypatch)
    for S, D, dtype in ((500, 128, torch.bfloat16), (512, 80, torch.bfloat16),
                        (512, 64, torch.bfloat16), (512, 128, torch.float32)):
        q, k, v = _qkv(1, 2, S, D=D, dtype=dtype, grad=False)
        ref = ca.attention_math(q.double(), k.double(), v.double(), mask_mod=ca.causal)
        out = ca.attention(q, k, v, mask_mod=ca.causal)
        assert (out.double() - ref).abs().max().item() < 3e-2
    q, k, v = _qkv(1, 2, 512, grad=False)
    ca.attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, mask_mod=ca.causal)
    ids = torch.arange(512, device="cuda") // 100                # a mask reading a tensor
    ca.attention(q, k, v, mask_mod=ca.document(ids))
    table = torch.randn(2 * 512 - 1, device="cuda")     # a score mod reading one per score
    ca.attention(q, k, v, score_mod=ca.relative_bias(table), mask_mod=ca.causal)
    assert count.n == 0
    ca.attention(q, k, v, mask_mod=ca.causal)
    assert count.n == 1
    slopes = ca.alibi_slopes(2, device="cuda")    # one per (b, h), loaded once: it takes it
    ca.attention(q, k, v, score_mod=ca.alibi(slopes), mask_mod=ca.causal)
    assert count.n == 2


def test_small_calls_keep_the_triton_forward(monkeypatch):
    count = _Count(monkeypatch)
    monkeypatch.setattr(launch_gluon, "MIN_SCORES", 1 << 26)
    q, k, v = _qkv(1, 2, 512, grad=False)                   # 2**19 scores
    ca.attention(q, k, v, mask_mod=ca.causal)
    assert count.n == 0
    q, k, v = _qkv(1, 16, 2048, grad=False)                 # 2**26
    ca.attention(q, k, v, mask_mod=ca.causal)
    assert count.n == 1


def _count_dq(monkeypatch):
    """Counts the Gluon dQ kernel's launches."""
    return _Count(monkeypatch, launch_gluon_bwd, "dq")


DQ_CASES = [(n, 128, None, False) for n in ("causal", "window", "prefix", "none", "empty rows")] \
    + [("causal", 64, None, False), ("window", 64, 2, False), ("causal", 128, 4, True),
       ("softcap", 128, None, False), ("relative position", 64, None, False)]


@pytest.mark.parametrize("name, D, HK, lse_grad", DQ_CASES)
def test_gluon_dq_matches_triton_dq(name, D, HK, lse_grad, monkeypatch):
    """dQ (and the dK, dV that read its delta) against the Triton dQ kernel's run; lse_grad:
    a gradient reaching the lse too (delta read, not computed). Score mods reach the Gluon
    dQ only without stored dS (DS_STORE off)."""
    from cherenkov.attention import launch_bwd
    monkeypatch.setattr(launch_bwd, "DS_STORE", "off")
    q, k, v = _qkv(2, 4, 512, D=D, HK=HK)
    do = torch.randn_like(q)
    dlse = torch.randn(2, 4, 512, device="cuda") if lse_grad else None
    kw = dict(MODS[name], enable_gqa=HK is not None)

    def run():
        out, lse = ca.attention(q, k, v, return_lse=True, **kw)
        outs = (out, lse) if lse_grad else (out,)
        grads = torch.autograd.grad(outs, (q, k, v), (do, dlse) if lse_grad else (do,))
        return out, lse, *grads
    count = _count_dq(monkeypatch)
    ours = run()
    assert count.n == 1, "the Gluon dQ did not run"
    monkeypatch.setattr(launch_gluon_bwd, "DQ", "off")
    ref = run()
    assert count.n == 1
    _compare(ours, ref)


def test_calls_it_cannot_take_run_the_triton_dq(monkeypatch):
    count = _count_dq(monkeypatch)
    for S, D, dtype in ((500, 128, torch.bfloat16), (512, 80, torch.bfloat16),
                        (512, 128, torch.float16), (512, 128, torch.float32)):
        q, k, v = _qkv(1, 2, S, D=D, dtype=dtype)
        out = ca.attention(q, k, v, mask_mod=ca.causal)
        torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    q, k, v = _qkv(1, 2, 512)
    table = torch.randn(2 * 512 - 1, device="cuda")     # a score mod reading one per score
    out = ca.attention(q, k, v, score_mod=ca.relative_bias(table), mask_mod=ca.causal)
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    out = ca.attention(q, k, v, score_mod=ca.tanh_softcap(20.0), mask_mod=ca.causal)
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))   # stored dS (DS_STORE auto)
    assert count.n == 0
    out = ca.attention(q, k, v, mask_mod=ca.causal)
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert count.n == 1
    slopes = ca.alibi_slopes(2, device="cuda")    # one per (b, h): "auto" gives it this dQ
    out = ca.attention(q, k, v, score_mod=ca.alibi(slopes), mask_mod=ca.causal)
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert count.n == 2


def test_gluon_dq_with_a_score_mod_reading_a_tensor(monkeypatch):
    """ALiBi (its slopes loaded per head) through the Gluon dQ where SCORE_LOADS lets it."""
    from cherenkov.attention import launch_bwd
    monkeypatch.setattr(launch_bwd, "DS_STORE", "off")
    monkeypatch.setattr(launch_gluon_bwd, "SCORE_LOADS", True)
    q, k, v = _qkv(2, 4, 512)
    do = torch.randn_like(q)
    kw = dict(score_mod=ca.alibi(ca.alibi_slopes(4, device="cuda")), mask_mod=ca.causal)
    count = _count_dq(monkeypatch)
    ours = _run(q, k, v, do, **kw)
    assert count.n == 1
    monkeypatch.setattr(launch_gluon_bwd, "DQ", "off")
    _compare(ours, _run(q, k, v, do, **kw))


@pytest.mark.parametrize("name", ["causal", "window", "prefix", "none", "empty rows", "softcap"])
def test_split_tile_loops_match_one_loop(name, monkeypatch):
    """SPLIT_TILES (partial tiles' loop apart from the full ones', both Gluon kernels): the
    mask left out only where it keeps every score (not bit for bit: without the select
    between them, the compiler fuses the scale and the max's subtraction into one FMA)."""
    from cherenkov.attention import launch_bwd
    monkeypatch.setattr(launch_bwd, "DS_STORE", "off")
    q, k, v = _qkv(2, 4, 512)
    do = torch.randn_like(q)
    fwd, dq = _Count(monkeypatch), _count_dq(monkeypatch)
    ref = _run(q, k, v, do, **MODS[name])
    monkeypatch.setattr(launch_gluon, "SPLIT_TILES", True)
    monkeypatch.setattr(launch_gluon_bwd, "SPLIT_TILES", True)
    ours = _run(q, k, v, do, **MODS[name])
    assert fwd.n == 2 and dq.n == 2
    _compare(ours, ref)


@pytest.mark.parametrize("name", ["alibi", "relative position", "affine"])
def test_tile_terms_match_the_per_score_form(name, monkeypatch):
    """The score's key-linear terms out of both Gluon loops and the dK/dV kernel's (TILE_TERMS,
    DKDV_TILE_TERMS; tile_terms.py) against the same kernels computing them per score:
    outputs, lse and gradients."""
    from cherenkov.attention import launch_bwd
    monkeypatch.setattr(launch_bwd, "DS_STORE", "off")
    monkeypatch.setattr(launch_gluon_bwd, "SCORE_LOADS", True)
    monkeypatch.setattr(launch_bwd, "DKDV_TILE_TERMS", True)     # off by default (slower)
    slopes = ca.alibi_slopes(4, device="cuda")
    score_mod = {"alibi": ca.alibi(slopes),
                 "relative position": MODS["relative position"]["score_mod"],
                 "affine": lambda s, b, h, q, kv: s - (q - 2 * kv + 3 + h) * slopes[h] * 0.5
                 }[name]
    q, k, v = _qkv(2, 4, 512)
    do = torch.randn_like(q)
    forwards, dqs = _Count(monkeypatch), _count_dq(monkeypatch)
    ours = _run(q, k, v, do, score_mod=score_mod, mask_mod=ca.causal)
    assert forwards.n == 1 and dqs.n == 1
    monkeypatch.setattr(launch_gluon, "TILE_TERMS", False)
    monkeypatch.setattr(launch_gluon_bwd, "TILE_TERMS", False)
    monkeypatch.setattr(launch_bwd, "DKDV_TILE_TERMS", False)
    ref = _run(q, k, v, do, score_mod=score_mod, mask_mod=ca.causal)
    assert forwards.n == 2 and dqs.n == 2
    _compare(ours, ref, tol=1e-2)
