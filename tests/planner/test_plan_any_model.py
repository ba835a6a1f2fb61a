"""`cherenkov.plan(model, ...)` on models that are not built in: captured on fake/meta tensors,
planned end to end. Built-in models captured plan exactly as from their configs; a user's
GPT-J-style model plans, its memory and time grow with its layers; a 1.05-trillion-parameter
model built on the meta device plans without allocating; no repeated blocks, no plan."""
import json
import resource

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cherenkov
from cherenkov import Shard, shard
from cherenkov.cli import main
from cherenkov.hw import cluster
from cherenkov.models import ModelConfig, preset
from cherenkov.models.counting import build_model
from cherenkov.parallel.capture_model import NoRepeatedBlocks, capture_model
from cherenkov.planner.program import stage_memory
from cherenkov.planner.result import plan_training
from cherenkov.planner.search import Request

SMALL_LLAMA = ModelConfig("llama", layers=4, hidden=1024, heads=16, kv_heads=4, ffn=2816,
                          vocab=32000, seq=2048, name="small-llama")


class ParallelBlock(nn.Module):
    """GPT-J / PaLM style: attention and a squared-ReLU MLP side by side on one LayerNorm."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)        # (B, H, T, D)
        mlp = self.down(F.relu(self.up(h)).square())
        return x + self.out(a.transpose(1, 2).reshape(B, T, C)) + mlp


class ParallelLM(nn.Module):
    def __init__(self, vocab, d, heads, layers, ffn):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[ParallelBlock(d, heads, ffn) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        return self.unembed(self.norm(self.blocks(self.embed(idx))))


def small_parallel_lm(layers=4):
    with torch.device("meta"):
        return ParallelLM(32000, 2048, 16, layers, 8192)


@pytest.mark.parametrize("cfg, gb, seq, fixed", [
    (preset("gpt2"), 512, 1024, {}),
    (SMALL_LLAMA, 64, 2048, {"tp": 2}),
], ids=["gpt2", "llama-gqa-tp2"])
def test_captured_builtin_plans_like_its_config(cfg, gb, seq, fixed):
    from_config = plan_training(Request(cfg, cluster("8xH100"), gb, seq, dict(fixed)))
    captured = capture_model(build_model(cfg, "meta"), seq)
    from_capture = plan_training(Request(captured, cluster("8xH100"), gb, seq, dict(fixed)))
    assert from_capture.plan.choice == from_config.plan.choice
    assert from_capture.model_flops_per_step == pytest.approx(from_config.model_flops_per_step)
    assert from_capture.peak_memory_bytes_per_device == \
        pytest.approx(from_config.peak_memory_bytes_per_device, rel=0.01)
    assert from_capture.step_time_s == pytest.approx(from_config.step_time_s, rel=0.01)


def test_user_model_plans_and_grows_with_its_layers():
    free = cherenkov.plan(small_parallel_lm(), "8xH100", 64, 2048)
    assert 0 < free.mfu < 1 and free.plan.model.name == "ParallelLM"
    assert free.peak_memory_bytes_per_device < 0.9 * cluster("8xH100").device.memory_bytes
    fixed = dict(dp=8, tp=1, pp=1, zero=0, microbatch=2, recompute="none")
    four = cherenkov.plan(small_parallel_lm(4), "8xH100", 64, 2048, **fixed)
    eight = cherenkov.plan(small_parallel_lm(8), "8xH100", 64, 2048, **fixed)
    layer_params = sum(p.numel() for p in small_parallel_lm(1).blocks[0].parameters())
    m4, m8 = stage_memory(four.plan, 0), stage_memory(eight.plan, 0)
    assert m8.weights - m4.weights == pytest.approx(4 * layer_params * 2)     # bf16, no ZeRO
    assert m8.optimizer - m4.optimizer == pytest.approx(4 * layer_params * 12)
    per_layer = four.plan.layer.saved_bytes["none"]
    assert m8.activations - m4.activations == pytest.approx(4 * per_layer)  # 1 microbatch live
    assert eight.peak_memory_bytes_per_device > four.peak_memory_bytes_per_device
    assert 1.3 < eight.step_time_s / four.step_time_s < 2.0     # layers dominate, head does not


def test_trillion_parameter_model_plans_on_meta_without_allocating():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with torch.device("meta"):
        model = ParallelLM(256000, 32768, 256, 80, 4 * 32768)
    params = sum(p.numel() for p in model.parameters())
    assert 1.0e12 < params < 1.1e12
    pred = cherenkov.plan(model, "128x8xH100", 1024, 4096, tp=8, recompute="full")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < 2**30 and all(p.is_meta for p in model.parameters())   # 2 TB in bf16
    assert pred.plan.choice.tp == 8 and pred.plan.model.param_count == params
    assert pred.peak_memory_bytes_per_device < 0.9 * cluster("128x8xH100").device.memory_bytes
    # PaLM FLOPs: 6 per matmul weight (all but the embedding table and the norms) per token,
    # plus 12 * layers * hidden * seq for attention
    matmul = params - 256000 * 32768 - 2 * 32768 * 81
    tokens = 1024 * 4096
    assert pred.model_flops_per_step == pytest.approx((6 * matmul + 12 * 80 * 32768 * 4096) * tokens)


def test_model_without_repeated_blocks_gets_no_plan():
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 256), nn.GELU(),
                          nn.Linear(256, 1000))
    with pytest.raises(NoRepeatedBlocks, match="no repeated blocks"):
        cherenkov.plan(model, "8xH100", 64, 512)


def test_annotations_of_a_captured_model_are_honoured():
    """Megatron's split asked for on the MLP: its up projection is column-parallel (merged with
    qkv, both read the LayerNorm), its down projection row-parallel."""
    model = small_parallel_lm()
    for block in model.blocks:
        shard(block.up.weight, [Shard(0)])
        shard(block.down.weight, [Shard(1)])
    pred = cherenkov.plan(model, "8xH100", 64, 2048, tp=2)
    chosen = pred.plan.layer.chosen
    assert (chosen["qkv+up"].name, chosen["down"].name) == ("column", "row")


def test_cli_plans_a_module_factory(capsys):
    code = main(["plan", "--module", f"{__name__}:small_parallel_lm", "--seq", "1024",
                 "--cluster", "8xH100", "--global-batch", "32", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["model"] == "ParallelLM" and out["seq"] == 1024
    assert out["plan"]["dp"] * out["plan"]["tp"] * out["plan"]["pp"] * out["plan"]["cp"] == 8
