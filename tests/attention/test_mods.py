"""Built-in mods evaluated on torch index grids agree with hand-written definitions."""
import torch

from cherenkov.attention import mods
from cherenkov.attention.reference import index_grids


def grids(Q=9, KV=11, B=2, H=3):
    return index_grids(B, H, Q, KV, "cpu")


def dense(mask_mod, B=2, H=3, Q=9, KV=11):
    return torch.broadcast_to(torch.as_tensor(mask_mod(*grids(Q, KV, B, H))), (B, H, Q, KV))


def test_causal_and_window_and_prefix():
    q = torch.arange(9).view(9, 1)
    kv = torch.arange(11).view(1, 11)
    assert torch.equal(dense(mods.causal)[0, 0], q >= kv)
    assert torch.equal(dense(mods.sliding_window(3))[1, 2], (q >= kv) & (q - kv < 3))
    assert torch.equal(dense(mods.sliding_window(3, causal=False))[0, 1], (q - kv).abs() < 3)
    assert torch.equal(dense(mods.prefix_lm(4))[0, 0], (kv < 4) | (q >= kv))


def test_document_from_ids_and_offsets_agree():
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2])
    offsets = torch.tensor([0, 3, 5, 11])
    assert torch.equal(mods.document_ids_from_offsets(offsets), ids.to(torch.int32))
    by_ids = dense(mods.document(ids=ids, causal=True), Q=11)
    by_offsets = dense(mods.document(offsets=offsets, causal=True), Q=11)
    assert torch.equal(by_ids, by_offsets)
    q, kv = torch.arange(11).view(11, 1), torch.arange(11).view(1, 11)
    assert torch.equal(by_ids[1, 2], (ids[q] == ids[kv]) & (q >= kv))


def test_batched_document_ids():
    ids = torch.tensor([[0] * 5 + [1] * 6, [0] * 2 + [1] * 9])
    m = dense(mods.document(ids), Q=11)
    assert m[0, 0, 4, 5].item() is False and m[1, 0, 4, 5].item() is True


def test_and_or_masks():
    both = dense(mods.and_masks(mods.causal, mods.sliding_window(4, causal=False)))
    either = dense(mods.or_masks(mods.causal, mods.prefix_lm(3)))
    assert torch.equal(both, dense(mods.causal) & dense(mods.sliding_window(4, causal=False)))
    assert torch.equal(either, dense(mods.prefix_lm(3)))   # prefix-LM already contains causal


def test_score_mods():
    b, h, q, kv = grids()
    score = torch.randn(2, 3, 9, 11, dtype=torch.float64)
    slopes = mods.alibi_slopes(3, dtype=torch.float64)
    assert torch.allclose(mods.alibi(slopes)(score, b, h, q, kv),
                          score + slopes.view(1, 3, 1, 1) * (kv - q))
    assert torch.allclose(mods.tanh_softcap(2.0)(score, b, h, q, kv), 2.0 * torch.tanh(score / 2))
    table = torch.randn(3, 2 * 11 - 1, dtype=torch.float64)
    expected = score + table[h, q - kv + 10]
    assert torch.allclose(mods.relative_bias(table)(score, b, h, q, kv), expected)


def test_alibi_slopes_match_the_paper_for_8_heads():
    assert torch.allclose(mods.alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
