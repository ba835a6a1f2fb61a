"""Tile candidates from the hardware model, the on-disk winner cache, and the tuning loop
(its timer replaced by fixed numbers: the CPU cannot time a GPU kernel)."""
import json

import pytest
import torch

from cherenkov import hw
from cherenkov.templates import MatmulSpec, TileConfig, candidates
from cherenkov.templates import autotune
from cherenkov.templates.tile_config import interpreter_config, stages_that_fit

H200 = hw.device("h200")


def test_candidates_fit_shared_memory_and_registers():
    found = candidates(H200, 1, 16384, 3072, 768, in_bytes=2)
    assert 2 <= len(found) <= 9
    assert any(c.persistent for c in found)
    for c in found:
        smem = c.num_stages * (c.block_m * c.block_k + c.block_k * c.block_n) * 2
        assert smem <= H200.sram_per_sm_bytes and c.num_stages >= 2
        assert c.block_m * c.block_n / (c.num_warps * 32) <= 128
        assert c.block_m in (64, 128, 256) and c.block_k in (32, 64)


def test_less_shared_memory_means_fewer_stages():
    small = H200.replace(sram_per_sm_bytes=100 * 1024)
    assert stages_that_fit(small, 128, 128, 64, 2) < stages_that_fit(H200, 128, 128, 64, 2)
    big = {(c.block_m, c.block_n, c.block_k): c.num_stages
           for c in candidates(H200, 1, 4096, 4096, 4096, 2, limit=50)}
    for c in candidates(small, 1, 4096, 4096, 4096, 2, limit=50):
        smem = c.num_stages * (c.block_m * c.block_k + c.block_k * c.block_n) * 2
        assert smem <= small.sram_per_sm_bytes
        assert c.num_stages <= big.get((c.block_m, c.block_n, c.block_k), 4)


def test_small_problems_get_no_huge_tiles():
    for c in candidates(H200, 1, 40, 4096, 4096, 2):
        assert c.block_m <= 128


def test_interpreter_config_is_small():
    c = interpreter_config(37, 53, 29)
    assert max(c.block_m, c.block_n, c.block_k) <= 32 and c.num_warps == 1


def test_cpu_never_tunes():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert autotune.tuned_config(MatmulSpec(), a, b, []) == interpreter_config(8, 8, 8)


def test_winner_cache_round_trips_through_disk():
    spec = MatmulSpec(("bias",))
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    key = autotune.problem_key(spec, a, b, torch.float32)
    assert autotune.cached(key) is None
    cfg = TileConfig(128, 64, 32, 8, 4, 3, persistent=True)
    autotune._store(key, cfg)
    autotune._MEMORY.clear()                       # a new process: only the file remains
    assert autotune.cached(key) == cfg
    table = json.loads(autotune._cache_path().read_text())
    assert table[key]["block_m"] == 128
    other = autotune.problem_key(spec, a, b.t().contiguous().t(), torch.float32)
    assert other != key                            # B's layout is part of the key
    autotune._store(other, autotune.CUBLAS)
    autotune._MEMORY.clear()
    assert autotune.cached(other) == "cublas"
    import triton
    assert torch.__version__ in key and triton.__version__ in key


def test_tune_picks_fastest_correct_config(monkeypatch):
    """The loop with a fake timer: faster-but-wrong configs are rejected, cuBLAS can win."""
    small = [TileConfig(16, 16, 16, 2, 1, 1), TileConfig(32, 32, 16, 2, 1, 1),
             TileConfig(32, 16, 16, 2, 1, 1)]
    monkeypatch.setattr(autotune, "candidates", lambda *a, **k: list(small))
    fake_ms = {str(small[0]): 3.0, str(small[1]): 1.0, str(small[2]): 2.0}
    current = {}

    def fake_launch(spec, cfg, a, b, out, *rest):
        current["cfg"] = cfg
        out.copy_(a @ b)
        if cfg == small[1]:
            out.add_(1.0)                          # the "fastest" one is wrong
        return out

    def fake_bench(fn, **kw):
        fn()
        return fake_ms[str(current["cfg"])] if "cfg" in current else 2.5

    import triton.testing
    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(autotune, "launch", fake_launch)
    a, b = torch.randn(20, 24), torch.randn(24, 12)
    result = autotune.tune(MatmulSpec(), a, b, [], progress=False)
    assert result.best == small[2]
    assert str(small[1]) in result.rejected and result.timings_ms["cublas"] == 2.5
    fake_ms[str(small[2])] = 9.0
    current.clear()
    assert autotune.tune(MatmulSpec(), a, b, [], progress=False).best == "cublas"
