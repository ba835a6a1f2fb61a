"""capture/flex_attention.py + attention/flex_op.py: torch's flex_attention and
cherenkov.attention inside compiled graphs run on Cherenkov's kernels (no graph break, no
eager graph), with values, lse and gradients (captured tensors' and lse's too) as eager's."""
import pytest
import torch
from torch.nn.attention.flex_attention import (BlockMask, _apply_kernel_options,
                                               create_block_mask, flex_attention)

import cherenkov
import cherenkov.attention as ca
from cherenkov.attention import flex_op

from torch._higher_order_ops.flex_attention import flex_attention as flex_hop  # noqa: E402


def _compiled(fn, **kw):
    torch._dynamo.reset()
    return cherenkov.compile(fn, strict=True, dynamic=False, **kw)


def causal(b, h, q, kv):
    return q >= kv


def _reference(q, k, v, score_mod, mask_mod, scale):
    """float64 attention with lse differentiable (d lse / d score = p); a query row with no
    key left gives output 0 and lse -inf, with no gradient through it."""
    q, k, v = q.double(), k.double(), v.double()
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    B, H, Q, _ = q.shape
    KV = k.shape[2]
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    qi, ki = torch.arange(Q).view(1, 1, Q, 1), torch.arange(KV).view(1, 1, 1, KV)
    s = q @ k.transpose(-1, -2) * scale
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki), float("-inf"))
    empty = torch.isinf(s).all(-1, keepdim=True) & (s.amax(-1, keepdim=True) < 0)
    s = s.masked_fill(empty, 0.0)
    out = (torch.softmax(s, -1) @ v).masked_fill(empty, 0.0)
    return out, torch.logsumexp(s, -1).masked_fill(empty[..., 0], float("-inf"))


def test_flex_attention_inference_runs_our_kernels(calls):
    torch.manual_seed(0)
    bias = torch.randn(4)
    softcap = lambda s, b, h, q, kv: 20 * torch.tanh(s / 20) + bias[h]  # noqa: E731
    bm = create_block_mask(causal, 1, 1, 96, 96, device="cpu", BLOCK_SIZE=(32, 32))
    fn = lambda q, k, v: flex_attention(q, k, v, score_mod=softcap, block_mask=bm).sin()  # noqa: E731
    q, k, v = (torch.randn(2, 4, 96, 16) for _ in range(3))
    got = _compiled(fn)(q, k, v)
    assert calls["forward"] == 1
    ref, _ = _reference(q, k, v, softcap, causal, 0.25)
    torch.testing.assert_close(got, ref.sin().float(), atol=2e-5, rtol=2e-5)


@pytest.mark.filterwarnings("ignore:return_lse is deprecated")
def test_flex_attention_without_block_mask_gqa_odd_lengths_lse(calls):
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 37, 16), torch.randn(1, 2, 101, 16), torch.randn(1, 2, 101, 16)

    def fn(q, k, v):
        return flex_attention(q, k, v, enable_gqa=True, return_lse=True, scale=0.3)
    out, lse = _compiled(fn)(q, k, v)
    assert calls["forward"] == 1
    ref, ref_lse = _reference(q, k, v, None, None, 0.3)
    torch.testing.assert_close(out, ref.float(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, ref_lse.float(), atol=2e-5, rtol=2e-5)


def test_flex_hop_gradients_include_captured_tensors_and_lse(calls):
    """The HOP called as flex_attention does (its CPU wrapper refuses gradients, the op does
    not): dq, dk, dv, the captured bias's gradient and lse's gradient."""
    torch.manual_seed(2)
    bias = torch.randn(4, requires_grad=True)
    mod = lambda s, b, h, q, kv: s + bias[h] * (kv - q) + torch.tanh(s / 30)  # noqa: E731
    bm = create_block_mask(causal, 1, 1, 64, 96, device="cpu", BLOCK_SIZE=(32, 32))

    def fn(q, k, v):
        out, lse, *_ = flex_hop(q, k, v, mod, bm.as_tuple(), 0.25,
                                _apply_kernel_options(q, k, v, True, None))
        return out, lse

    q = torch.randn(1, 4, 64, 16, requires_grad=True)
    k, v = (torch.randn(1, 4, 96, 16, requires_grad=True) for _ in range(2))
    out, lse = _compiled(fn)(q, k, v)
    (out.square().sum() + 0.1 * lse.sum()).backward()
    got = [t.grad for t in (q, k, v, bias)]
    assert calls == {"forward": 1, "backward": 1}
    for t in (q, k, v, bias):
        t.grad = None
    ref, ref_lse = _reference(q, k, v, mod, causal, 0.25)
    (ref.square().sum() + 0.1 * (ref_lse / flex_op.LN2).sum()).backward()
    torch.testing.assert_close(out, ref.float(), atol=2e-5, rtol=2e-5)
    for g, t in zip(got, (q, k, v, bias)):
        torch.testing.assert_close(g, t.grad, atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("with_block_mask", [False, True])
def test_cherenkov_attention_is_captured_in_graph(calls, with_block_mask):
    """No graph break (fullgraph=True): the call is recorded as the HOP and runs our op,
    forward and backward, the ALiBi slopes' gradient included."""
    torch.manual_seed(3)
    slopes = torch.randn(4, requires_grad=True)
    bm = ca.block_mask(ca.causal, 1, 1, 100, 100, block=(32, 32)) if with_block_mask else None

    def fn(q, k, v):
        return ca.attention(q, k, v, score_mod=ca.alibi(slopes), mask_mod=ca.causal,
                            block_mask=bm).sin()
    q, k, v = (torch.randn(1, 4, 100, 16, requires_grad=True) for _ in range(3))
    got = _compiled(fn, fullgraph=True)(q, k, v)
    got.sum().backward()
    grads = [t.grad for t in (q, k, v, slopes)]
    assert calls == {"forward": 1, "backward": 1}
    for t in (q, k, v, slopes):
        t.grad = None
    ref = fn(q, k, v)            # eager: cherenkov.attention itself
    ref.sum().backward()
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=2e-5)
    for g, t in zip(grads, (q, k, v, slopes)):
        torch.testing.assert_close(g, t.grad, atol=5e-5, rtol=5e-5)


def test_untraceable_mod_runs_the_math_implementation(calls):
    """A mod our tracer cannot render (erf) still runs in the graph: the op takes the math
    implementation, forward and backward."""
    torch.manual_seed(4)
    mod = lambda s, b, h, q, kv: s + torch.erf(s)  # noqa: E731

    def fn(q, k, v):
        out, _, *_ = flex_hop(q, k, v, mod, create_block_mask(
            causal, 1, 1, 32, 32, device="cpu", BLOCK_SIZE=(32, 32)).as_tuple(), 0.25,
            _apply_kernel_options(q, k, v, False, None))
        return out
    q, k, v = (torch.randn(1, 2, 32, 16, requires_grad=True) for _ in range(3))
    got = _compiled(fn)(q, k, v)
    got.sum().backward()
    grads = [t.grad for t in (q, k, v)]
    assert calls == {"forward": 1, "backward": 1}
    for t in (q, k, v):
        t.grad = None
    ref, _ = _reference(q, k, v, mod, causal, 0.25)
    ref.sum().backward()
    torch.testing.assert_close(got, ref.float(), atol=2e-5, rtol=2e-5)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad.float(), atol=5e-5, rtol=5e-5)


def test_other_backends_run_the_recorded_flex_call():
    """Compiled by another backend, cherenkov.attention's graph form is plain flex_attention."""
    torch.manual_seed(5)
    q, k, v = (torch.randn(1, 2, 48, 16) for _ in range(3))
    fn = lambda q, k, v: ca.attention(q, k, v, mask_mod=ca.sliding_window(8))  # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="eager", fullgraph=True)(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v), atol=2e-5, rtol=2e-5)


def test_block_mask_without_q_lists_serves_the_forward(calls):
    torch.manual_seed(6)
    full = create_block_mask(causal, 1, 1, 64, 64, device="cpu", BLOCK_SIZE=(32, 32))
    bm = BlockMask.from_kv_blocks(full.kv_num_blocks, full.kv_indices, full.full_kv_num_blocks,
                                  full.full_kv_indices, BLOCK_SIZE=(32, 32), mask_mod=causal,
                                  seq_lengths=(64, 64), compute_q_blocks=False)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    got = _compiled(lambda q, k, v: flex_attention(q, k, v, block_mask=bm))(q, k, v)
    assert calls["forward"] == 1
    torch.testing.assert_close(got, _reference(q, k, v, None, causal, 0.25)[0].float(),
                               atol=2e-5, rtol=2e-5)


def test_few_query_rows_take_the_decode_kernel(calls, monkeypatch):
    """In-graph decode (4 query rows over 256 keys, GQA): the split-KV kernel."""
    from cherenkov.attention import launch_decode
    used = []
    real = launch_decode.decode
    monkeypatch.setattr(launch_decode, "decode", lambda *a, **kw: used.append(1) or real(*a, **kw))
    torch.manual_seed(7)
    q, k, v = torch.randn(1, 4, 4, 16), torch.randn(1, 2, 256, 16), torch.randn(1, 2, 256, 16)
    fn = lambda q, k, v: ca.attention(q, k, v, enable_gqa=True, scale=0.3)  # noqa: E731
    got = _compiled(fn, fullgraph=True)(q, k, v)
    assert calls["forward"] == 1 and used
    torch.testing.assert_close(got, _reference(q, k, v, None, None, 0.3)[0].float(),
                               atol=2e-5, rtol=2e-5)


def test_dynamic_shapes_stay_on_our_kernels(calls):
    """dynamic=True: symbolic lengths (and the symbolic size Dynamo hands the mask graph as a
    buffer) reach the op as run-time values; every length runs our op, gradients included."""
    torch.manual_seed(8)
    slopes = torch.randn(4, requires_grad=True)

    def fn(q, k, v, ids):
        docs = ca.document(ids=ids, causal=True)
        return ca.attention(q, k, v, score_mod=ca.alibi(slopes), mask_mod=docs)
    torch._dynamo.reset()
    compiled = cherenkov.compile(fn, strict=True, dynamic=True)
    for n, S in enumerate((48, 80, 96), 1):
        q, k, v = (torch.randn(1, 4, S, 16, requires_grad=True) for _ in range(3))
        ids = torch.arange(S) // 30
        got = compiled(q, k, v, ids)
        got.sum().backward()
        grads = [t.grad for t in (q, k, v, slopes)]
        assert calls["forward"] == n and calls["backward"] == n
        for t in (q, k, v, slopes):
            t.grad = None
        ref = fn(q, k, v, ids)
        ref.sum().backward()
        torch.testing.assert_close(got, ref, atol=2e-5, rtol=2e-5)
        for g, t in zip(grads, (q, k, v, slopes)):
            torch.testing.assert_close(g, t.grad, atol=5e-5, rtol=5e-5)
        slopes.grad = None


def test_lse_gradient_eager_matches_compiled_and_float64():
    """cherenkov.attention's lse carries its gradient, outside a graph and inside one."""
    torch.manual_seed(9)
    slopes = torch.randn(2, requires_grad=True)

    def fn(q, k, v):
        out, lse = ca.attention(q, k, v, score_mod=ca.alibi(slopes), mask_mod=ca.causal,
                                return_lse=True)
        return out.square().sum() + 0.3 * torch.where(torch.isfinite(lse), lse, 0).sum()
    q, k, v = (torch.randn(1, 2, 40, 16, requires_grad=True) for _ in range(3))
    ref_mod = lambda s, b, h, qi, kv: s + slopes[h] * (kv - qi)  # noqa: E731
    ref, ref_lse = _reference(q, k, v, ref_mod, causal, 0.25)
    (ref.square().sum() + 0.3 * ref_lse.sum()).backward()
    want = [t.grad.clone() for t in (q, k, v, slopes)]
    for run in (fn, _compiled(fn, fullgraph=True)):
        for t in (q, k, v, slopes):
            t.grad = None
        run(q, k, v).backward()
        for g, t in zip(want, (q, k, v, slopes)):
            torch.testing.assert_close(t.grad, g.float(), atol=1e-4, rtol=1e-4)


def test_flex_inside_activation_checkpointing_runs_our_op(calls):
    torch.manual_seed(10)
    bm = create_block_mask(causal, 1, 1, 64, 64, device="cpu", BLOCK_SIZE=(32, 32))

    def attend(q, k, v):
        out, *_ = flex_hop(q, k, v, lambda s, b, h, qi, kv: s, bm.as_tuple(), 0.25,
                           _apply_kernel_options(q, k, v, False, None))
        return out.sin()

    def fn(q, k, v):
        return torch.utils.checkpoint.checkpoint(attend, q, k, v, use_reentrant=False)
    q, k, v = (torch.randn(1, 2, 64, 16, requires_grad=True) for _ in range(3))
    got = _compiled(fn)(q, k, v)
    got.sum().backward()
    grads = [t.grad for t in (q, k, v)]
    assert calls["forward"] >= 1 and calls["backward"] == 1
    for t in (q, k, v):
        t.grad = None
    ref, _ = _reference(q, k, v, None, causal, 0.25)
    ref.sin().sum().backward()
    torch.testing.assert_close(got, ref.sin().float(), atol=2e-5, rtol=2e-5)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad.float(), atol=5e-5, rtol=5e-5)


def test_sdpa_config_still_runs_cherenkov_attention_in_graph(calls):
    """attention="sdpa" is about SDPA calls; cherenkov.attention's recorded op still runs."""
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    fn = lambda q, k, v: ca.attention(q, k, v, mask_mod=ca.causal)  # noqa: E731
    got = _compiled(fn, attention="sdpa")(q, k, v)
    assert calls["forward"] == 1
    torch.testing.assert_close(got, fn(q, k, v), atol=2e-5, rtol=2e-5)


def test_mod_creating_a_tensor_runs_the_math_implementation(calls):
    """A tensor made inside the mod would be baked in with a stand-in's values: the op runs
    the math implementation instead."""
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    fn = lambda q, k, v: flex_attention(  # noqa: E731
        q, k, v, score_mod=lambda s, b, h, qi, kv: s + torch.tensor(0.5) * (qi > kv))
    got = _compiled(fn)(q, k, v)
    assert calls["forward"] == 1
    ref, _ = _reference(q, k, v, lambda s, b, h, qi, kv: s + 0.5 * (qi > kv), None, 0.25)
    torch.testing.assert_close(got, ref.float(), atol=2e-5, rtol=2e-5)


def test_calls_our_kernels_cannot_take_stay_pytorchs(calls):
    """Odd tiles of hand-made lists, k/v batch broadcast: left to PyTorch (values as eager's)."""
    torch.manual_seed(11)
    full = create_block_mask(causal, 1, 1, 96, 96, device="cpu", BLOCK_SIZE=(48, 48))
    q, k, v = (torch.randn(2, 2, 96, 16) for _ in range(3))
    fn = lambda q, k, v: flex_attention(q, k, v, block_mask=full)  # noqa: E731
    torch._dynamo.reset()
    torch.testing.assert_close(cherenkov.compile(fn, dynamic=False)(q, k, v), fn(q, k, v),
                               atol=2e-5, rtol=2e-5)
    with pytest.raises(Exception, match="subgraph of a higher-order op"):
        _compiled(fn)(q, k, v)             # strict: the reason, not an eager graph
    k1, v1 = k[:1], v[:1]
    bm2 = create_block_mask(causal, 2, 1, 96, 96, device="cpu", BLOCK_SIZE=(32, 32))
    fn2 = lambda q, k, v: flex_attention(q, k, v, block_mask=bm2)  # noqa: E731
    torch.testing.assert_close(cherenkov.compile(fn2, dynamic=False)(q, k1, v1), fn2(q, k1, v1),
                               atol=2e-5, rtol=2e-5)
    assert calls["forward"] == 0


@pytest.mark.parametrize("given_lists", [True, False])
def test_compile_jobs_equal_the_run_launches(monkeypatch, given_lists):
    """What the lowering hands the compile workers (flex_op.compile_jobs on meta tensors)
    is exactly what the op launches: flex's lists as given, or the block mask it builds."""
    from cherenkov.attention.launch import Recorder
    from cherenkov.runtime.parallel_compile import tensor_arg
    torch.manual_seed(12)
    bias = torch.randn(4)
    if given_lists:
        bm = create_block_mask(causal, 1, 1, 96, 96, device="cpu", BLOCK_SIZE=(32, 32))
        blocks = (bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
                  bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices)
        tiles = (32, 32)
    else:
        blocks = (torch.ones(1, 1, 1, dtype=torch.int32),
                  torch.zeros(1, 1, 1, 1, dtype=torch.int32)) + (None,) * 6
        tiles = (flex_op.HUGE_BLOCK, flex_op.HUGE_BLOCK)
    spec = flex_op.FlexSpec(lambda s, b, h, qi, kv, t: s + t[h],
                            lambda b, h, qi, kv: qi >= kv,
                            (((4,), torch.float32, False),), (), tiles)
    key = flex_op.register(spec)
    q, k, v, dout = (torch.randn(2, 4, 96, 16) for _ in range(4))

    def meta(t):
        return None if t is None else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                                          device="meta")
    out_m = torch.empty_like(meta(q))
    fwd, bwd = flex_op.compile_jobs(key, meta(q), meta(k), meta(v), [meta(b) for b in blocks],
                                    [meta(bias)], [], 0.25, q.device,
                                    (out_m, torch.empty(2, 4, 96, device="meta"), meta(dout),
                                     None))
    rec = Recorder()
    monkeypatch.setattr(spec, "kernels", lambda interpret, float_index: rec)
    out, lse = flex_op.forward(q, k, v, blocks, [bias], [], 0.25, key)
    flex_op.backward(q, k, v, out, lse, dout, None, blocks, [bias], [], 0.25, key)
    ran = [(name, tuple(tensor_arg(a.dtype) if isinstance(a, torch.Tensor) else a
                        for a in args), tuple(kwargs.items())) for name, args, kwargs in rec.calls]
    assert [(j.fn, j.args, j.kwargs) for j in fwd + bwd] == ran
    # dQ from the dS tiles the dK/dV kernel stores (launch_bwd.DS_BUDGET): delta by its own kernel
    assert [j.fn for j in fwd + bwd] == ["_attn_fwd", "_attn_bwd_delta", "_attn_bwd_dkdv",
                                         "_attn_bwd_dq_ds"]


from hypothesis import example, given, settings, strategies as st  # noqa: E402

_SCORE = {"none": None,
          "softcap": lambda s, b, h, qi, kv: 20 * torch.tanh(s / 20),
          "bias": "bias"}
_MASK = {"none": None, "causal": causal,
         "window": lambda b, h, qi, kv: (qi - kv).abs() < 20}


@settings(max_examples=8, deadline=None)
@given(B=st.integers(1, 2), HK=st.sampled_from([1, 2]), G=st.sampled_from([1, 2]),
       Q=st.integers(1, 70), KV=st.integers(1, 70), D=st.sampled_from([16, 24]),
       score=st.sampled_from(sorted(_SCORE)), mask=st.sampled_from(sorted(_MASK)),
       lists=st.booleans())
# always tried: query rows with no key left (a window of 5 keys for 70 queries), with flex's
# lists and with the op's own block mask
@example(B=1, HK=1, G=2, Q=70, KV=5, D=24, score="bias", mask="window", lists=True)
@example(B=2, HK=2, G=1, Q=70, KV=5, D=16, score="softcap", mask="window", lists=False)
def test_random_flex_calls_match_float64(B, HK, G, Q, KV, D, score, mask, lists):
    """Random shapes (odd lengths, GQA, head dim 24), mods and block masks through the HOP as
    flex_attention records it: output, lse and q/k/v gradients vs float64."""
    torch.manual_seed(Q * 131 + KV)
    H = HK * G
    bias = torch.randn(H)
    score_mod = _SCORE[score]
    if score_mod == "bias":
        score_mod = lambda s, b, h, qi, kv: s + bias[h] * (kv - qi) / 16  # noqa: E731
    mask_mod = _MASK[mask]
    if lists and mask_mod is not None:
        bm = create_block_mask(mask_mod, 1, 1, Q, KV, device="cpu", BLOCK_SIZE=(32, 32))
    else:
        bm = create_block_mask(mask_mod or (lambda b, h, qi, kv: qi >= 0), 1, 1, Q, KV,
                               device="cpu", BLOCK_SIZE=(32, 32)) if lists else None

    def fn(q, k, v):
        block = bm.as_tuple() if bm is not None else BlockMask.from_kv_blocks(
            torch.ones(1, 1, 1, dtype=torch.int32), torch.zeros(1, 1, 1, 1, dtype=torch.int32),
            BLOCK_SIZE=flex_op.HUGE_BLOCK, mask_mod=mask_mod or (lambda b, h, qi, kv: qi >= 0),
            seq_lengths=(Q, KV)).as_tuple()
        out, lse, *_ = flex_hop(q, k, v, score_mod or (lambda s, b, h, qi, kv: s), block, 0.3,
                                _apply_kernel_options(q, k, v, True, None))
        return out, lse
    q = torch.randn(B, H, Q, D, requires_grad=True)
    k, v = (torch.randn(B, HK, KV, D, requires_grad=True) for _ in range(2))
    torch._dynamo.reset()
    out, lse = cherenkov.compile(fn, strict=True, dynamic=False)(q, k, v)
    out.square().sum().backward()
    got = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref, ref_lse = _reference(q, k, v, score_mod, mask_mod, 0.3)
    empty = torch.isinf(ref_lse)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref.float(), atol=3e-5, rtol=3e-5)
    torch.testing.assert_close(lse, torch.where(empty, float("-inf"), ref_lse / flex_op.LN2)
                               .float(), atol=3e-5, rtol=3e-5)
    for g, t in zip(got, (q, k, v)):
        torch.testing.assert_close(g, t.grad.float(), atol=1e-4, rtol=1e-4)


def test_specs_live_while_their_compiled_function_does(calls):
    """The op's spec registry holds specs weakly: the compiled function (and the graphs and
    plans it holds) keep a spec through garbage collection, training included; once the
    function is gone and Dynamo's cache reset, the spec goes too (no leak per compile)."""
    import gc
    torch.manual_seed(0)
    before = set(flex_op._SPECS.keys())
    scale = torch.randn(4, requires_grad=True)
    mod = lambda s, b, h, q, kv: s * scale[h]  # noqa: E731
    bm = create_block_mask(causal, 1, 1, 64, 64, device="cpu", BLOCK_SIZE=(32, 32))

    def step(q, k, v):       # the HOP as flex_attention calls it (its CPU wrapper refuses grads)
        out, *_ = flex_hop(q, k, v, mod, bm.as_tuple(), 0.25,
                           _apply_kernel_options(q, k, v, True, None))
        return out.sum()
    fn = _compiled(step)
    q, k, v = (torch.randn(1, 4, 64, 16, requires_grad=True) for _ in range(3))
    fn(q, k, v)
    new = set(flex_op._SPECS.keys()) - before
    assert len(new) == 1
    gc.collect()
    loss = fn(q, k, v)             # the spec survived collection; forward and backward run
    loss.backward()
    assert calls["forward"] >= 1 and calls["backward"] >= 1 and scale.grad is not None
    del fn, loss
    torch._dynamo.reset()
    gc.collect()
    assert not new & set(flex_op._SPECS.keys())
    with pytest.raises(RuntimeError, match="is gone"):
        flex_op.spec_of(next(iter(new)))
