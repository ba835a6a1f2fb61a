"""The warp-specialized Gluon forward (and dQ kernel) without a GPU: they compile for sm_90
(every built-in mod's rendering; the forward bf16 and fp16, dQ at D=128 and 64), masks
coarsen to its 128 x 128 tiles in both directions exactly, and which masks and inputs it
takes (launch_gluon)."""
import os
from types import SimpleNamespace

import pytest
import torch

from cherenkov.attention import launch_gluon, launch_gluon_bwd
from cherenkov.attention.launch import Plan
from cherenkov.attention.block_mask import EMPTY, PARTIAL, block_mask
from cherenkov.attention.mods import causal, document, prefix_lm, sliding_window
from cherenkov.attention.trace import trace_mods
from tests.sm90_compiling import run_script

HERE = os.path.dirname(os.path.abspath(__file__))


def test_gluon_forward_compiles_for_sm90():
    run = run_script(os.path.join(HERE, "sm90_gluon_compile.py"), timeout=600)
    lines = [line for line in run.stdout.splitlines() if "shared memory" in line]
    assert len(lines) == 46, run.stdout      # 25 forwards, 21 dQ kernels


@pytest.mark.parametrize("name, mask_mod", [
    ("causal", causal), ("window", sliding_window(40)), ("prefix", prefix_lm(50))])
def test_masks_coarsen_both_ways_to_the_mask_built_with_bigger_tiles(name, mask_mod):
    fine = block_mask(mask_mod, 2, 1, 256, 384, block=(32, 32))
    big = fine.coarsened(4, 4)
    direct = block_mask(mask_mod, 2, 1, 256, 384, block=(128, 128))
    assert big.block == (128, 128) and big.exact and fine.coarsened(4, 4) is big
    for field in ("state", "kv_num_blocks", "full_kv_num_blocks", "q_num_blocks",
                  "full_q_num_blocks"):
        assert torch.equal(getattr(big, field), getattr(direct, field)), field
    n = big.kv_num_blocks.max().item()
    assert torch.equal(big.kv_indices[..., :n], direct.kv_indices[..., :n])


def test_columns_past_the_keys_make_a_tile_partial():
    """Keys 320..383 do not exist: the last 128-wide tile is at most partial, never full."""
    fine = block_mask(lambda b, h, q, kv: q >= 0, 1, 1, 128, 320, block=(64, 64))
    big = fine.coarsened(2, 2)
    assert big.state.shape[-1] == 3
    assert big.state[0, 0, 0, 2].item() == PARTIAL and (big.state != EMPTY).all()


def _plan(mask, mask_mod, coarsen=True):
    return Plan(None, trace_mods(None, mask_mod), mask, 1.0, False, coarsen=coarsen)


def test_which_masks_get_128_tiles():
    fine = block_mask(causal, 1, 1, 256, 256, block=(64, 64))
    assert launch_gluon.tile_mask(_plan(fine, causal, coarsen=False)) is None
    big = launch_gluon.tile_mask(_plan(fine, causal))
    assert big.block == (128, 128) and launch_gluon.tile_mask(_plan(fine, causal)) is big
    ids = torch.arange(256) // 100
    docs = block_mask(document(ids), 1, 1, 256, 256, block=(64, 64))
    assert launch_gluon.tile_mask(_plan(docs, document(ids))) is None   # reads ids
    given = block_mask(document(ids), 1, 1, 256, 256, block=(128, 128))
    assert launch_gluon.tile_mask(_plan(given, document(ids))) is given
    odd = block_mask(causal, 1, 1, 256, 256, block=(64, 256))
    assert launch_gluon.tile_mask(_plan(odd, causal)) is None       # 256 > 128


@pytest.mark.parametrize("usable", [launch_gluon.usable, launch_gluon_bwd.usable],
                         ids=["forward", "dq"])
def test_cpu_tensors_and_interpreted_plans_take_the_triton_kernels(usable):
    q = torch.randn(1, 2, 128, 128, dtype=torch.bfloat16)
    plan = SimpleNamespace(interpret=False, traced=trace_mods(None, causal),
                           kernels=SimpleNamespace(_attn_fwd_ws=None, _attn_bwd_dq_ws=None))
    assert not usable(plan, q, q, q)                                       # on the CPU
    plan.interpret = True
    assert not usable(plan, q, q, q)


def test_score_mods_reading_tensors_take_the_triton_forward():
    from cherenkov.attention.mods import alibi, tanh_softcap
    assert trace_mods(alibi(torch.ones(2)), causal).score_reads_tensors()
    assert not trace_mods(tanh_softcap(20.0), causal).score_reads_tensors()
    assert not trace_mods(None, causal).score_reads_tensors()


@pytest.mark.parametrize("module, switch, kernel, guarded", [
    (launch_gluon, "GLUON_FWD", "forward", "guarded_forward"),
    (launch_gluon_bwd, "DQ", "dq", "guarded_dq")], ids=["forward", "dq"])
def test_a_failing_gluon_kernel_switches_itself_off(module, switch, kernel, guarded,
                                                    monkeypatch, caplog):
    def broken(*args):
        raise RuntimeError("no such Gluon op")
    monkeypatch.setattr(module, kernel, broken)
    monkeypatch.setattr(module, switch, "auto")
    with caplog.at_level("WARNING", logger="cherenkov"):
        assert getattr(module, guarded)(1, 2) is None
    assert getattr(module, switch) == "off" and "no such Gluon op" in caplog.text


def test_the_launches_pass_each_gluon_kernel_its_constexprs():
    """launch_gluon.constexprs / launch_gluon_bwd.constexprs (decided once per call
    signature) name exactly the kernels' constexpr parameters."""
    from cherenkov.attention.codegen import gluon_hopper, load_kernels
    from cherenkov.attention.mods import alibi
    if not gluon_hopper():
        pytest.skip("this Triton has no Gluon Hopper language")
    traced = trace_mods(alibi(torch.ones(2)), causal)
    kernels = load_kernels(traced, interpret=False, float_index=True)
    plan = Plan(kernels, traced, block_mask(causal, 1, 2, 256, 256), 0.125, False)

    def params(fn):
        return {p.name for p in fn.params if p.is_constexpr}
    assert set(launch_gluon.constexprs(plan, 128)) == params(kernels._attn_fwd_ws)
    for fused in (True, False):
        cx = launch_gluon_bwd.constexprs(plan, 128, fused)
        assert set(cx) == params(kernels._attn_bwd_dq_ws) and cx["FUSED_DELTA"] == fused
