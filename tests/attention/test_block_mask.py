"""Block masks: tile states and index lists agree with the dense mask; the printed picture."""
import importlib
import math

import pytest
import torch

from cherenkov.attention import block_mask, mods
from cherenkov.attention.block_mask import EMPTY, FULL, PARTIAL
from cherenkov.attention.reference import index_grids


def dense_states(mask_mod, B, H, Q, KV, block):
    """Tile states from the dense (B, H, Q, KV) mask, one tile at a time (the slow way)."""
    m = torch.broadcast_to(torch.as_tensor(mask_mod(*index_grids(B, H, Q, KV, "cpu"))),
                           (B, H, Q, KV))
    bq, bk = block
    nq, nk = math.ceil(Q / bq), math.ceil(KV / bk)
    out = torch.empty(B, H, nq, nk, dtype=torch.int8)
    for i in range(nq):
        for j in range(nk):
            tile = m[:, :, i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
            out[:, :, i, j] = torch.where(tile.flatten(2).all(-1), FULL,
                                          torch.where(tile.flatten(2).any(-1), PARTIAL, EMPTY))
    return out


DOC_IDS = torch.tensor([0] * 30 + [1] * 45 + [2] * 26)
MASKS = {
    "causal": mods.causal,
    "window": mods.sliding_window(20),
    "prefix": mods.prefix_lm(33),
    "document": mods.document(DOC_IDS, causal=True),
    "per_head": lambda b, h, q, kv: kv <= q + 16 * h,
    "and_or": mods.or_masks(mods.and_masks(mods.causal, mods.sliding_window(8)),
                            mods.prefix_lm(5)),
}


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize("use_kernel", [False, True])
def test_states_and_lists_match_dense_mask(name, use_kernel):
    B, H, Q, KV, block = 2, 3, 101, 101, (16, 32)
    mm = MASKS[name]
    bm = block_mask(mm, B, H, Q, KV, block=block, use_kernel=use_kernel)
    expected = dense_states(mm, B, H, Q, KV, block)
    assert torch.equal(bm.to_dense(), expected)
    assert bm.state.shape[1] == (H if name == "per_head" else 1)
    dense = bm.to_dense()
    for b in range(B):
        for h in range(H):
            for i in range(dense.shape[2]):
                partial = torch.nonzero(dense[b, h, i] == PARTIAL).flatten().tolist()
                full = torch.nonzero(dense[b, h, i] == FULL).flatten().tolist()
                bb, hh = min(b, bm.state.shape[0] - 1), min(h, bm.state.shape[1] - 1)
                n = bm.kv_num_blocks[bb, hh, i].item()
                nf = bm.full_kv_num_blocks[bb, hh, i].item()
                assert bm.kv_indices[bb, hh, i, :n].tolist() == partial
                assert bm.full_kv_indices[bb, hh, i, :nf].tolist() == full
            for j in range(dense.shape[3]):
                n = bm.q_num_blocks[bb, hh, j].item()
                assert bm.q_indices[bb, hh, j, :n].tolist() == \
                    torch.nonzero(dense[b, h, :, j] == PARTIAL).flatten().tolist()


def test_chunked_build_equals_one_shot(monkeypatch):
    bmod = importlib.import_module("cherenkov.attention.block_mask")   # the module, not the function
    one = block_mask(mods.document(DOC_IDS), 1, 1, 101, 101, block=(16, 16))
    monkeypatch.setattr(bmod, "_CHUNK_ELEMENTS", 16 * 112)   # one row-block per chunk
    chunked = block_mask(mods.document(DOC_IDS), 1, 1, 101, 101, block=(16, 16))
    assert torch.equal(one.state, chunked.state)


def test_picture_of_causal_mask():
    bm = block_mask(mods.causal, 1, 1, 64, 64, block=(16, 16))
    assert str(bm) == ("BlockMask(B=1, H=1, Q=64, KV=64, block=(16, 16), sparsity 37.5%)\n"
                       "+...\n"
                       "#+..\n"
                       "##+.\n"
                       "###+")


def test_picture_groups_large_grids():
    bm = block_mask(mods.sliding_window(256), 1, 1, 2048, 2048, block=(16, 16))
    lines = str(bm).splitlines()[1:]
    assert len(lines) == 32 and all(len(line) == 32 for line in lines)
    assert lines[0][0] == "+" and lines[-1][0] == "." and lines[-1][-1] == "+"


def test_no_mask_is_all_full_and_bad_blocks_rejected():
    bm = block_mask(None, 2, 2, 40, 70, block=(16, 32))
    assert bm.state.shape == (1, 1, 3, 3) and bool((bm.state == FULL).all())
    with pytest.raises(ValueError):
        block_mask(mods.causal, 1, 1, 64, 64, block=(24, 16))


def test_compaction_is_the_stable_sort_on_not_hit():
    """Index lists come from one prefix sum and a scatter; they equal a stable sort of each
    row on "not hit" (hit blocks first, each group in increasing order)."""
    from cherenkov.attention.block_mask import _compact
    g = torch.Generator().manual_seed(0)
    for shape in [(1, 1, 7, 13), (2, 3, 5, 64), (1, 1, 1, 1), (1, 2, 4, 0)]:
        hit = torch.rand(shape, generator=g) < 0.4
        num, idx = _compact(hit)
        want = torch.sort((~hit).to(torch.int8), dim=-1, stable=True).indices
        assert idx.dtype == torch.int32 and num.dtype == torch.int32
        assert torch.equal(idx.long(), want) and torch.equal(num, hit.sum(-1).int())
