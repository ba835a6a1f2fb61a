"""The forward's TMA-descriptor forms (launch.TMA "2d" / "4d") in Triton's interpreter: the
same outputs and LSE as pointer loads, and the choice of form (launch.tma_mode)."""
import pytest
import torch

from cherenkov.attention import attention, block_mask, causal, tanh_softcap
from cherenkov.attention import launch
from cherenkov.attention.tuning import _INTERPRETER


def _run(mode, q, k, v, monkeypatch, **kw):
    """attention() under launch.TMA = mode, and the descriptor forms its forward launched."""
    made = []
    real = launch._descriptors

    def spy(form, *args):
        made.append(form)
        return real(form, *args)
    with monkeypatch.context() as m:
        m.setattr(launch, "TMA", mode)
        m.setattr(launch, "_descriptors", spy)
        out, lse = attention(q, k, v, return_lse=True, **kw)
    return out, lse, made


def _layout(mode, q, k, v):
    o = torch.empty_like(q)
    return launch.tma_mode(q, k, v, o, _INTERPRETER.block_m, _INTERPRETER.block_n, True, mode)


@pytest.mark.parametrize("mode, B, H, HK, Q, KV, transposed, expect", [
    ("2d", 1, 2, 2, 64, 64, False, 2),      # contiguous, tile-multiple lengths
    ("4d", 1, 2, 1, 37, 45, False, 4),      # GQA, ragged lengths: zero-filled reads
    ("4d", 2, 2, 2, 40, 40, True, 4),       # (B, S, H, D) storage seen as (B, H, S, D)
    ("2d", 1, 2, 2, 37, 45, False, 0),      # 2-D refuses ragged lengths: pointers
])
def test_descriptor_forward_matches_pointer_loads(mode, B, H, HK, Q, KV, transposed, expect,
                                                  monkeypatch):
    def make(heads, length):
        if transposed:
            return torch.randn(B, length, heads, 16, dtype=torch.float16).transpose(1, 2)
        return torch.randn(B, heads, length, 16, dtype=torch.float16)
    q, k, v = make(H, Q), make(HK, KV), make(HK, KV)
    assert _layout(mode, q, k, v) == expect
    kw = dict(score_mod=tanh_softcap(5.0), enable_gqa=H != HK,
              block_mask=block_mask(causal, B, H, Q, KV, block=(32, 32)))
    out, lse, made = _run(mode, q, k, v, monkeypatch, **kw)
    ref, ref_lse, pointers = _run("off", q, k, v, monkeypatch, **kw)
    assert made == [expect] and pointers == [0]
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)


def test_descriptors_need_aligned_unpadded_layouts():
    q = torch.randn(1, 2, 32, 16, dtype=torch.float16)
    assert _layout("2d", q, q, q) == 2
    assert _layout("auto", q, q, q) == 0      # the interpreter takes descriptors only if asked
    assert _layout("off", q, q, q) == 0
    odd = torch.randn(1, 2, 32, 24, dtype=torch.float16)             # D padded to 32
    assert _layout("4d", odd, odd, odd) == 0
    narrow = torch.randn(1, 2, 32, 17, dtype=torch.float16)[..., :4]  # rows of 34 bytes
    assert _layout("4d", narrow, narrow, narrow) == 0
    assert launch.tma_mode(q, q, q, q, 32, 32, False, "auto") == 0   # CPU, not the interpreter
