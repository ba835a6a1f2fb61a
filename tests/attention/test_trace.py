"""Tracing mods into graphs, their printed form, and symbolic derivatives vs torch autograd."""
import pytest
import torch

from cherenkov.attention import mods
from cherenkov.attention.trace import (TraceError, depends_on, evaluate, partials,
                                       topo_order, trace_mods)


def test_printed_graphs():
    t = trace_mods(mods.tanh_softcap(30.0), mods.sliding_window(8))
    assert str(t.score) == "mul(30.0, tanh(div(score, 30.0)))"
    assert str(t.mask) == "and(lt(sub(q_idx, kv_idx), 8), ge(q_idx, kv_idx))"
    assert t.captured == []


def test_captured_tensors_become_loads_with_runtime_strides():
    table = torch.randn(4, 9)
    t = trace_mods(mods.relative_bias(table), None)
    assert t.captured[0] is table
    i = "add(sub(q_idx, kv_idx), 4)"
    wrapped = f"where(lt({i}, 0), add({i}, size(0, 1)), {i})"   # negative counts from the end
    inside = f"where(lt(h, size(0, 0)), and(ge({wrapped}, 0), lt({wrapped}, size(0, 1))), False)"
    assert str(t.score) == (f"add(score, load[0](add(mul(h, stride(0, 0)), "
                            f"mul({wrapped}, stride(0, 1))), {inside}))")
    assert depends_on(t.score) == {"score", "h", "q_idx", "kv_idx"}


def test_same_tensor_captured_once_across_mods():
    ids = torch.tensor([0, 0, 1, 1])
    t = trace_mods(lambda s, b, h, q, kv: s + ids[q], mods.document(ids))
    assert len(t.captured) == 1


def _leaves(shape=(2, 3, 5, 7)):
    B, H, Q, KV = shape
    return {"score": torch.randn(shape, dtype=torch.float64, requires_grad=True),
            "b": torch.arange(B).view(B, 1, 1, 1), "h": torch.arange(H).view(1, H, 1, 1),
            "q_idx": torch.arange(Q).view(1, 1, Q, 1), "kv_idx": torch.arange(KV).view(1, 1, 1, KV)}


@pytest.mark.parametrize("score_mod", [
    mods.tanh_softcap(1.5),
    lambda s, b, h, q, kv: torch.where(q >= kv, s * s, torch.exp(s) / 3.0),
    lambda s, b, h, q, kv: torch.sigmoid(s) - torch.sqrt(torch.abs(s) + 1.0) + s ** 3,
    lambda s, b, h, q, kv: torch.maximum(s, -s * 0.5) + torch.log(1.0 + s * s),
])
def test_symbolic_derivative_matches_autograd(score_mod):
    leaves = _leaves()
    t = trace_mods(score_mod, None)
    score_leaf = next(n for n in topo_order([t.score]) if n.op == "score")
    (d,) = partials(t.score, [score_leaf])
    expected = torch.autograd.grad(score_mod(leaves["score"], *list(leaves.values())[1:]).sum(),
                                   leaves["score"])[0]
    value = evaluate(t.score, leaves, t.captured)
    assert torch.allclose(value, score_mod(*leaves.values()))
    assert torch.allclose(torch.broadcast_to(evaluate(d, leaves, t.captured), expected.shape),
                          expected)


def test_derivative_wrt_captured_load():
    slopes = torch.randn(3, dtype=torch.float64, requires_grad=True)
    t = trace_mods(mods.alibi(slopes), None)
    (load,) = t.grad_loads()
    (d,) = partials(t.score, [load])
    leaves = _leaves()
    assert torch.equal(torch.broadcast_to(evaluate(d, leaves, t.captured), (2, 3, 5, 7)).double(),
                       torch.broadcast_to(leaves["kv_idx"] - leaves["q_idx"], (2, 3, 5, 7)).double())


def test_untraceable_mods_raise():
    with pytest.raises(TraceError, match="Python bool"):
        trace_mods(None, lambda b, h, q, kv: q >= kv if q > 3 else q == kv)
    with pytest.raises(TraceError, match="index every dimension"):
        table = torch.randn(3, 4)
        trace_mods(lambda s, b, h, q, kv: s + table[h], None)
    with pytest.raises(TraceError, match="not supported"):
        trace_mods(lambda s, b, h, q, kv: torch.erf(s), None)
