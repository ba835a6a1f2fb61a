"""Mods mean what they mean in torch: floor division and remainder, logical ops, keyword
arguments, negative indices, integer powers, float functions of integers, and the dtypes the
kernels cannot run (found by a fuzzing session; each case was wrong or crashed before)."""
import pytest
import torch

from cherenkov.attention import attention, attention_math
from cherenkov.attention.trace import TraceError, trace_mods

TABLE = torch.randn(1, 40)


def _plus_many(x, n=17):
    """x + 1048575 + ... (n times): past 2**24 after 16 terms."""
    for _ in range(n):
        x = x + 1048575
    return x

BUCKETS = torch.arange(40) // 10

MODS = {
    # integer // and % floor, as in torch (Triton's truncate): (-1) // 8 is -1, not 0
    "int floordiv": (None, lambda b, h, q, kv: (q - kv) // 8 == 0),
    "int remainder": (None, lambda b, h, q, kv: (kv - q) % 4 == 1),
    "logical_and of ints": (None, lambda b, h, q, kv: torch.logical_and(q % 2, kv % 3)),
    # int64 in torch: the kernels widen their int32 indices when the arithmetic may overflow
    "hash mask past int32": (None, lambda b, h, q, kv: (q * 1103515245 + kv * 12345) % 7 < 3),
    "float remainder": (lambda s, b, h, q, kv: s % 1.0, None),
    "float floordiv": (lambda s, b, h, q, kv: s // 0.5, None),
    "sub alpha": (lambda s, b, h, q, kv: torch.sub(s, kv, alpha=0.05), None),
    "div rounding floor": (lambda s, b, h, q, kv: s + torch.div(kv - q, 7, rounding_mode="floor"),
                           None),
    "negative index wraps": (lambda s, b, h, q, kv: s + TABLE[h, kv - q], None),
    "odd integer power": (lambda s, b, h, q, kv: s + 0.001 * s ** 5, None),
    "negative integer power": (lambda s, b, h, q, kv: s + 0.01 * (s * s + 1.0) ** -2, None),
    "methods": (lambda s, b, h, q, kv: s.clamp_min(-0.5) + s.sin() + BUCKETS[q].long() * 0.1,
                None),
    "float functions of integers": (
        lambda s, b, h, q, kv: s - torch.log(kv + 1) + torch.exp(-(q - kv).abs())
        - torch.sqrt(torch.abs(q - kv)), None),
    "constant base, traced exponent": (lambda s, b, h, q, kv: s * 0.9 ** (q - kv).abs(), None),
    "small tanh argument": (lambda s, b, h, q, kv: 1e4 * torch.tanh(s / 1e4), None),
    "bitwise not of an integer": (None, lambda b, h, q, kv: (~(q - kv)) < -3),
    "integer base, traced power": (lambda s, b, h, q, kv: s + 2 ** -(q - kv).abs(), None),
    # an integer divided by 3 stays a division (a reciprocal product could land just under
    # the exact quotient and floor one lower); by 4 it multiplies, exactly
    "floor of integer true division": (None, lambda b, h, q, kv: torch.floor(kv / 3)
                                       == torch.floor(q / 3) + torch.floor(kv / 4) % 2),
    # an integer-valued float divided by 41 is exactly 1 at 41 (a reciprocal product gave
    # 0.99999994 and flipped the comparison against the block mask's exact division)
    "float of integers over 41": (lambda s, b, h, q, kv: s + ((kv + q) * 1.0 / 41).int() * 5,
                                  lambda b, h, q, kv: (kv + q).float() / 41 < 1),
    # float32 partial sums of many large constants would round: kept in integers
    "index sum with many constants": (
        lambda s, b, h, q, kv: s + (_plus_many(kv) - _plus_many(q)) * 1.0, None),
    # the CPU interpreter could not | a scalar bool from a float comparison with a tile
    "float test of the head or a tile test": (None, lambda b, h, q, kv: (torch.exp(h * 0.5) >= 3)
                                              | (kv <= q)),
    "bool over a constant": (lambda s, b, h, q, kv: s + (q > kv) / 3, None),
    "integer powers stay integers": (None, lambda b, h, q, kv: ((q - kv) ** 2 + (kv ** 0 | q)) % 3
                                     == 0),
}


def qkv(requires_grad=False):
    torch.manual_seed(0)
    return [torch.randn(1, 1, 40, 16, requires_grad=requires_grad) for _ in range(3)]


def close(a, b, tol=1e-4):
    return (a.double() - b.double()).abs().max().item() <= tol * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("name", sorted(MODS))
def test_mod_matches_torch(name):
    score_mod, mask_mod = MODS[name]
    q, k, v = qkv()
    ours = attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod)
    ref = attention_math(q.double(), k.double(), v.double(), score_mod, mask_mod)
    assert close(ours, ref)


def test_unsupported_keywords_and_methods_fall_back_not_crash():
    q, k, v = qkv()
    for mod in (lambda s, b, h, q_, kv: torch.div(s, 3, rounding_mode="trunc"),
                lambda s, b, h, q_, kv: s.erf(),
                lambda s, b, h, q_, kv: s ** (q_ % 2 + 1)):
        with pytest.raises(TraceError):
            trace_mods(mod, None)
        ours = attention(q, k, v, score_mod=mod)           # the math implementation
        assert close(ours, attention_math(q.double(), k.double(), v.double(), mod))


def test_gradient_of_a_table_indexed_by_the_score():
    """An index that depends on the score varies per element: no summing over the tile."""
    q, k, v = qkv()
    table = torch.randn(8, requires_grad=True)
    mod = lambda t: lambda s, b, h, q_, kv: s + t[((s * 2).to(torch.int64) + 4).clamp(0, 7)]
    out = attention(q, k, v, score_mod=mod(table))
    go = torch.randn_like(out)
    g, = torch.autograd.grad(out, table, go)
    t64 = table.detach().double().requires_grad_()
    ref = attention_math(q.double(), k.double(), v.double(), mod(t64))
    g64, = torch.autograd.grad(ref, t64, go.double())
    assert close(out, ref) and close(g, g64)


def test_scalar_capture_keeps_its_gradient_after_a_no_grad_call():
    q, k, v = qkv()
    temp = torch.tensor(1.5, requires_grad=True)
    mod = lambda s, b, h, q_, kv: s * temp
    with torch.no_grad():
        attention(q, k, v, score_mod=mod)
    out = attention(q, k, v, score_mod=mod)
    go = torch.randn_like(out)
    (out * go).sum().backward()
    t64 = temp.detach().double().requires_grad_()
    ref = attention_math(q.double(), k.double(), v.double(), lambda s, b, h, q_, kv: s * t64)
    (ref * go.double()).sum().backward()
    assert temp.grad is not None and close(temp.grad, t64.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_dtypes_the_interpreter_cannot_multiply(dtype):
    """16-bit inputs run on float32 copies on the CPU; float64 runs the math implementation
    (its gradients were garbage through fp32-accumulated dots)."""
    q, k, v = (t.to(dtype).requires_grad_() for t in qkv())
    out = attention(q, k, v, mask_mod=lambda b, h, q_, kv: q_ >= kv)
    assert out.dtype == dtype
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = attention_math(q64, k64, v64, None, lambda b, h, q_, kv: q_ >= kv)
    refs = torch.autograd.grad(ref, (q64, k64, v64), go.double())
    tol = 1e-9 if dtype == torch.float64 else 2e-2
    assert close(out, ref, tol) and all(close(a, b, tol) for a, b in zip(grads, refs))


def _grads(mod_of, params, requires=(True, True, True)):
    """Output and gradients (q, k, v, then params) of ours against the fp64 math reference."""
    q, k, v = qkv()
    qkv_ = [t.clone().requires_grad_(r) for t, r in zip((q, k, v), requires)]
    out = attention(*qkv_, score_mod=mod_of(*params))
    go = torch.randn_like(out)
    wrt = [t for t in qkv_ if t.requires_grad] + list(params)
    got = torch.autograd.grad(out, wrt, go)
    p64 = [p.detach().double().requires_grad_() for p in params]
    r64 = [t.detach().double().requires_grad_(r) for t, r in zip((q, k, v), requires)]
    ref = attention_math(*r64, mod_of(*p64))
    want = torch.autograd.grad(ref, [t for t in r64 if t.requires_grad] + p64, go.double())
    return close(out, ref) and all(close(a, b) for a, b in zip(got, want))


def test_gradients_through_remainder_and_a_learned_decay_exponent():
    assert _grads(lambda: (lambda s, b, h, q, kv: s % 0.7), [])
    decay = torch.tensor(0.3, requires_grad=True)
    assert _grads(lambda d: (lambda s, b, h, q, kv: s * 0.9 ** (d * (q - kv).abs())), [decay])


def test_a_bound_method_mod_reads_the_attribute_of_each_call():
    """self.score_mod reading self.bias, recomputed every forward: no stale capture."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([0.5]))

        def score_mod(self, s, b, h, q_idx, kv_idx):
            return s + self.bias[h, q_idx - kv_idx + 40]

        def forward(self, q, k, v):
            self.bias = self.w[:, None] * torch.linspace(-3, 3, 80)[None, :]
            return attention(q, k, v, score_mod=self.score_mod)

    m = Model()
    q, k, v = qkv()
    for step in range(2):
        out = m(q, k, v)
        out.sum().backward()
        ref = attention_math(q.double(), k.double(), v.double(), m.score_mod)
        assert close(out, ref), step
        with torch.no_grad():
            m.w.mul_(3.0)
            m.w.grad = None


def test_bad_inputs_and_double_backward_raise_clearly():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="float16, bfloat16"):
        attention(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match="one device"):
        attention(q, k.to("meta"), v)
    qg = q.clone().requires_grad_()
    out = attention(qg, k, v)
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad(out.sum(), qg, create_graph=True)


def test_constant_divisors_multiply_where_exact_enough():
    from cherenkov.attention.render import render_mods
    mod = lambda s, b, h, q, kv: s / 30.0 + kv / 4 + q / 3 + (kv + q).float() / 41
    text = render_mods(trace_mods(mod, None), "cuda")
    # a score-dependent dividend: the reciprocal, folded into the softmax scale (fold.py)
    assert "(sm_scale * 0.03333333333333333)" in text and "(score / 30.0)" not in text
    # another float dividend: reciprocal product with one fma correction (exact quotients stay
    # exact, so floors and comparisons of them do not flip)
    assert "_div_const(" in text and "41.0, 0.024390243902439025)" in text
    assert "(kv_idx * 0.25)" in text                        # a power of two: exact
    assert "(q_idx / 3)" in text                            # an integer by 3: a division
    assert "(q_idx / 3)" in render_mods(trace_mods(mod, None), "interpret")


def test_index_differences_under_float_ops_convert_the_index_vectors():
    """ALiBi's slope * (kv_idx - q_idx): with float_index the difference is taken in float32
    from the converted q/kv vectors (no per-score int-to-float conversion); an integer use of
    the same difference (here % 3) still builds it as integers."""
    from cherenkov.attention.render import render_mods
    mod = lambda s, b, h, q, kv: s + 0.5 * (kv - q) + (kv - q) % 3
    fast = render_mods(trace_mods(mod, None), "cuda", float_index=True)
    assert "(kv_idx).to(tl.float32)" in fast and "(q_idx).to(tl.float32)" in fast
    # the decode, forward and gradient helpers and the Gluon loops' rest and its gradient
    # (tile_terms.py) build it for % 3 (the forward's 0.5 * (kv - q) is split at q0 instead:
    # row_terms.py; and out of the rest as a per-key vector)
    assert fast.count("(kv_idx - q_idx)") == 5
    plain = render_mods(trace_mods(lambda s, b, h, q, kv: s + 0.5 * (kv - q), None), "cuda")
    assert "(kv_idx).to(tl.float32)" not in plain and "(kv_idx - q_idx)" in plain


@pytest.mark.parametrize("limit", [1 << 22, 16])
def test_float_indices_only_below_the_exact_length(monkeypatch, limit):
    """Sequences at or past the limit get kernels that keep index arithmetic in integers; both
    match the reference (the limit is lowered to 16 here to take the other path)."""
    from cherenkov.attention import api, codegen
    seen = []
    real = codegen.compile_mods

    def spy(score_mod, mask_mod, interpret, float_index=False):
        seen.append(float_index)
        return real(score_mod, mask_mod, interpret, float_index)

    monkeypatch.setattr(api, "compile_mods", spy)
    monkeypatch.setattr(api, "FLOAT_INDEX_MAX_LEN", limit)
    q, k, v = qkv(requires_grad=True)
    mod = lambda s, b, h, q_, kv: s + 0.25 * (kv - q_ - 3)
    ours = attention(q, k, v, score_mod=mod)
    ref = attention_math(q.double(), k.double(), v.double(), mod, None)
    assert seen == [limit > 40] and close(ours, ref)
    ours.sum().backward()
    dq = q.grad.clone()
    q.grad = None
    ref_q = q.detach().double().requires_grad_()
    attention_math(ref_q, k.double(), v.double(), mod, None).sum().backward()
    assert close(dq, ref_q.grad)


def test_gradient_captures_follow_requires_grad_on_one_traced_object():
    """The backward remembers which captured tensors get gradients per traced mods, keyed by
    their requires_grad flags: a flag flipped on the same object is noticed."""
    table = torch.randn(40)
    traced = trace_mods(lambda s, b, h, q, kv: s + table[kv], None)
    assert traced.grad_indices() == [] and traced.score_grad_varies is False
    table.requires_grad_(True)
    assert traced.grad_indices() == [0]
    table.requires_grad_(False)
    assert traced.grad_indices() == []


def test_div_const_matches_division_in_float32():
    """The GPU kernels' `_div_const(x, c, r)` = fma(fma(-x*r, c, x), r, x*r), emulated with
    float64 (a product of two float32 is exact there): every exact quotient k*c / c is k, and
    random quotients equal float32 division bit for bit (the plain product x * r does not)."""
    import numpy as np
    f32 = np.float32

    def div_const(x, c):
        r = f32(1) / f32(c)
        y = (x * r).astype(f32)
        e = (x.astype(np.float64) - y.astype(np.float64) * np.float64(f32(c))).astype(f32)
        return (e.astype(np.float64) * np.float64(r) + y.astype(np.float64)).astype(f32)

    for c in (3, 7, 30, 41, 47, 61, 255):
        k = np.arange(1 << 14, dtype=np.int64)
        assert (div_const((k * c).astype(f32), c) == k.astype(f32)).all()
    x = (np.random.RandomState(0).randn(100_000) * 100).astype(f32)
    for c in (3.0, 7.0, 30.0, 41.0, 0.3):
        assert (div_const(x, c) == x / f32(c)).all()
        assert not (x * (f32(1) / f32(c)) == x / f32(c)).all()
