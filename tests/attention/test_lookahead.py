"""The forward's lookahead loop (launch.FWD_LOOKAHEAD, kernels_src._fwd_tiles: the next key
tile's scores issued before this tile's softmax) in the interpreter: the same tiles in the
same order, so the same bits as the plain loop, and right against the fp64 reference --
partial and full tile lists, key tiles finer than the mask's (R > 1), rows with no tile."""
import pytest
import torch

from cherenkov.attention import (alibi, alibi_slopes, attention, block_mask, causal, document,
                                 prefix_lm, sliding_window, tanh_softcap)
from cherenkov.attention import launch
from tests.attention.test_api import DOC_IDS, check, make_qkv

MASKS = {"causal": causal, "sliding_window": sliding_window(12), "prefix_lm": prefix_lm(20),
         "rows without keys": lambda b, h, q, kv: (q >= 10) & (kv <= q)}


@pytest.mark.parametrize("block", [(16, 16), (32, 64)])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_lookahead_forward_matches_the_plain_loop_and_the_reference(monkeypatch, name, block):
    q, k, v = make_qkv(1, 2, 2, 37, 101, 16)
    bm = block_mask(MASKS[name], 1, 2, 37, 101, block=block)       # check()'s tiles
    plain = attention(q, k, v, mask_mod=MASKS[name], block_mask=bm).detach()
    monkeypatch.setattr(launch, "FWD_LOOKAHEAD", True)
    ahead = check(q, k, v, mask_mod=MASKS[name], block=block)
    assert torch.equal(ahead.detach(), plain)


def test_lookahead_with_a_score_mod_and_documents(monkeypatch):
    monkeypatch.setattr(launch, "FWD_LOOKAHEAD", True)
    slopes = alibi_slopes(4)
    check(*make_qkv(1, 4, 1, 33, 47, 32), lambda: alibi(slopes), causal, block=(32, 64))
    check(*make_qkv(1, 2, 2, 37, 37, 16), mask_mod=document(DOC_IDS[:37].clone(), causal=True))


def _gradients_unchanged(monkeypatch, flag: str, name: str, block) -> None:
    """With launch.<flag> on, the gradients are bit-identical to the plain loop's on the same
    tiles and match the reference."""
    q, k, v = make_qkv(1, 2, 2, 37, 101, 16)
    bm = block_mask(MASKS[name], 1, 2, 37, 101, block=block)
    go = torch.randn(1, 2, 37, 16)
    plain = torch.autograd.grad(attention(q, k, v, block_mask=bm), (q, k, v), go)
    monkeypatch.setattr(launch, flag, True)
    ahead = torch.autograd.grad(attention(q, k, v, block_mask=bm), (q, k, v), go)
    assert all(torch.equal(a, b) for a, b in zip(ahead, plain))
    check(q, k, v, mask_mod=MASKS[name], block=block)


@pytest.mark.parametrize("block", [(16, 16), (32, 64)])
@pytest.mark.parametrize("name", ["causal", "prefix_lm", "rows without keys"])
def test_lookahead_dq_matches_the_plain_loop_and_the_reference(monkeypatch, name, block):
    """launch.DQ_LOOKAHEAD (kernels_bwd_src._dq_tiles)."""
    _gradients_unchanged(monkeypatch, "DQ_LOOKAHEAD", name, block)
    monkeypatch.setattr(launch, "FWD_LOOKAHEAD", True)
    # both, with a score mod whose captured slopes get gradients (the dQ kernel computes
    # those; score mods without them take the stored-dS backward)
    slopes = alibi_slopes(4).requires_grad_()
    check(*make_qkv(1, 4, 4, 37, 101, 16), alibi, causal, captured=(slopes,), block=block)


@pytest.mark.parametrize("block", [(16, 16), (32, 64), (64, 32)])
@pytest.mark.parametrize("name", ["causal", "sliding_window", "rows without keys"])
def test_lookahead_dkdv_matches_the_plain_loop_and_the_reference(monkeypatch, name, block):
    """launch.DKDV_LOOKAHEAD (kernels_bwd_src._dkdv_tiles), also with a score mod on the
    stored-dS backward (ALiBi) and with softcap (DP_FIRST)."""
    _gradients_unchanged(monkeypatch, "DKDV_LOOKAHEAD", name, block)
    slopes = alibi_slopes(4)
    check(*make_qkv(1, 4, 1, 33, 47, 32), lambda: alibi(slopes), causal, block=block)
    check(*make_qkv(1, 2, 2, 37, 101, 16), lambda: tanh_softcap(1.5), block=block)
