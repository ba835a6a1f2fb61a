"""hoist.py: which captured-tensor loads leave the loops (one element per (b, h), the same in
every helper), the `_h` helpers reading the hoisted value, and gradients through the dK/dV
kernel that uses them (Triton's interpreter) matching the math."""
import pytest
import torch

from cherenkov.attention import alibi, alibi_slopes, attention, causal, launch_bwd
from cherenkov.attention.codegen import kernel_source
from cherenkov.attention.hoist import hoist_statement, hoistable, score_loads_hoisted
from cherenkov.attention.reference import attention_math
from cherenkov.attention.render import capture_params
from cherenkov.attention.trace import trace_mods

BIAS = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.0, -0.5]])      # (B, H)
WINDOW = torch.tensor([5, 9, 100])                               # per head
DOC = torch.tensor([0] * 20 + [1] * 44)


def _per_head_window(b, h, q, kv):
    return (kv <= q) & (q - kv < WINDOW[h])


def _scored_window(s, b, h, q, kv):
    return s + (WINDOW[h] * 0.01) * (kv - q)


def _doc_mask(b, h, q, kv):
    return DOC[q] == DOC[kv]


def _bias_and_doc(s, b, h, q, kv):
    return s + DOC[kv] * 0.5


@pytest.mark.parametrize("score,mask,expect", [
    (alibi(alibi_slopes(4)), causal, {0}),                     # slopes[h]
    (lambda s, b, h, q, kv: s + BIAS[b, h], None, {0}),          # bias[b, h]
    (_scored_window, _per_head_window, {0}),                     # window[h] in both mods
    (None, _doc_mask, set()),                                    # doc[q]: varies per row
    (_bias_and_doc, _doc_mask, set()),                           # doc[kv] too
    (lambda s, b, h, q, kv: s + WINDOW[h] * 0.1 + WINDOW[(h + 1) % 3], None, set()),
])
def test_hoistable_loads(score, mask, expect):
    traced = trace_mods(score, mask)
    assert set(hoistable(traced)) == expect
    src = kernel_source(traced, "cuda", gluon=True)
    hoist = hoist_statement(traced, capture_params(traced))
    if expect:
        assert hoist == f"C0 = _hoist_C0(b, h, {capture_params(traced)})"
        # the loop functions' helpers read C0's value (no load of C0 left in them)
        for name in ("_score_mod_q0_h", "_score_mod_grad_h", "_mask_mod_h", "_row_shift_h"):
            body = src.split(f"def {name}(")[1].split("\n\n")[0]
            assert "tl.load(C0" not in body
        assert src.count(hoist) == 3        # dK/dV's loop function, both Gluon consumers
        assert "_score_mod_grad_h(" in src and "__H" not in src and "__HOIST__" not in src
    else:
        assert hoist == "" and "def _score_mod_grad_h(" not in src and "_hoist_C" not in src
        assert "__H" not in src and "__HOIST__" not in src


@pytest.mark.parametrize("store_ds", ["on", "off"])
def test_gradients_with_hoisted_loads(store_ds, monkeypatch):
    """window[h] read by both mods, through the dK/dV kernel's `_h` helpers (with and without
    stored dS), against the math in float64."""
    monkeypatch.setattr(launch_bwd, "DS_STORE", store_ds)
    B, H, S, D = 1, 3, 48, 16
    q, k, v = (torch.randn(B, H, S, D, requires_grad=True) for _ in range(3))
    out = attention(q, k, v, score_mod=_scored_window, mask_mod=_per_head_window)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_out = attention_math(q64, k64, v64, _scored_window, _per_head_window)
    ref = torch.autograd.grad(ref_out, (q64, k64, v64), do.double())
    torch.testing.assert_close(out.double(), ref_out, atol=2e-5, rtol=2e-5)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.double(), r, atol=1e-4, rtol=1e-4)


def test_score_loads_hoisted():
    """The Gluon kernels take score mods reading tensors only through hoisted loads."""
    assert score_loads_hoisted(trace_mods(alibi(alibi_slopes(4)), causal))
    assert not score_loads_hoisted(trace_mods(_bias_and_doc, None))       # doc[kv]
    assert not score_loads_hoisted(trace_mods(None, _doc_mask))           # no score mod
    # the score's load hoisted, the mask's (doc[q]) not: the score's loads are what count
    assert score_loads_hoisted(trace_mods(_scored_window, _doc_mask))
