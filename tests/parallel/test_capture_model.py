"""Capturing models into the planner's graphs (parallel/capture_model.py, parallel/from_graph.py):
the built-in GPT-2 and Llama blocks captured on the meta device match their config-derived
graphs; a user-written block gives hand-counted FLOPs, parameters and saved bytes; models
without repeated blocks and unsupported ops fail with messages naming the problem."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from cherenkov.models import ModelConfig, preset
from cherenkov.models.counting import build_model, param_count, training_flops_per_token
from cherenkov.parallel.capture_model import NoRepeatedBlocks, capture_model, find_blocks
from cherenkov.parallel.from_graph import UnsupportedOp
from cherenkov.parallel.layer_graph import (causal_tile_overhead, embedding_graph, head_graph,
                                            layer_graph)

SMALL_LLAMA = ModelConfig("llama", layers=4, hidden=1024, heads=16, kv_heads=4, ffn=2816,
                          vocab=32000, seq=2048, name="small-llama")


def saved_bytes(graph) -> int:
    return sum(graph.values[v].nbytes for op in graph.ops for v in op.saved)


@pytest.mark.parametrize("cfg", [preset("gpt2"), SMALL_LLAMA], ids=["gpt2", "llama-gqa"])
def test_captured_builtin_matches_config_graphs(cfg):
    captured = capture_model(build_model(cfg, "meta"), seq=1024)
    assert (captured.layers, captured.heads, captured.kv_heads, captured.head_dim) == \
        (cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim)
    assert captured.param_count == param_count(cfg)
    # captured at (2, 1024), planned at another microbatch and (context-parallel) length
    for batch, seq in ((2, 1024), (4, 512)):
        got = captured.graphs(batch, seq)
        want = (embedding_graph(cfg, batch, seq), layer_graph(cfg, batch, seq),
                head_graph(cfg, batch, seq))
        for g, w in zip(got, want):
            assert g.param_count == w.param_count, g.name
            assert saved_bytes(g) == pytest.approx(saved_bytes(w), rel=0.02), g.name
        for g, w in zip(got[1:], want[1:]):   # the config's embedding counts no FLOPs at all
            assert g.flops == pytest.approx(w.flops, rel=0.02), g.name
        total = sum(g.flops for g in got) / sum(w.flops for w in want)
        assert total == pytest.approx(1.0, rel=0.02)
    assert captured.flops_per_token(1024) == pytest.approx(training_flops_per_token(cfg, 1024))


def test_llama_layer_reads_like_the_model():
    """Names come from the module; wq/wk/wv and w1/w3 become one matmul with free slices."""
    layer = capture_model(build_model(SMALL_LLAMA, "meta"), seq=256).layer
    assert [(op.name, op.kind) for op in layer.ops] == [
        ("attention_norm", "norm"), ("attention.wq+wk+wv", "matmul"),
        ("attention.wq", "elementwise"), ("attention.wk", "elementwise"),
        ("attention.wv", "elementwise"), ("attention.mul", "elementwise"),        # RoPE on q
        ("attention.mul_1", "elementwise"), ("attention.sdpa", "attention"),      # RoPE on k
        ("attention.wo", "matmul"), ("add", "elementwise"), ("ffn_norm", "norm"),
        ("feed_forward.w1+w3", "matmul"), ("feed_forward.w1", "elementwise"),
        ("feed_forward.w3", "elementwise"), ("feed_forward.silu", "elementwise"),
        ("feed_forward.w2", "matmul"), ("add_1", "elementwise")]
    qkv = layer.values["attention.wq+wk+wv.weight"]
    assert qkv.shape == (1024, 1024 + 2 * 256) and qkv.weight
    attn = next(op for op in layer.ops if op.kind == "attention")
    assert attn.inputs == ("attention.mul", "attention.mul_1", "attention.wv")
    assert layer.values["attention.mul_1"].shape == (2, 256, 256)   # K before the GQA repeat


class MQABlock(nn.Module):
    """Not a built-in: F.rms_norm, one K/V head (enable_gqa), GeGLU MLP, a learned layer scale."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.norm1, self.norm2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.wi = nn.Linear(d, 2 * ffn, bias=False)
        self.wo = nn.Linear(ffn, d, bias=False)
        self.gamma = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, x):
        B, T, C = x.shape
        h = F.rms_norm(x, (C,), self.norm1)
        q = self.q(h).view(B, T, self.heads, self.hd).transpose(1, 2)      # (B, H, T, D)
        k, v = (t.transpose(1, 2) for t in self.kv(h).view(B, T, 2, 1, self.hd).unbind(2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        g, u = self.wi(F.rms_norm(x, (C,), self.norm2)).chunk(2, dim=-1)
        return x + self.gamma * self.wo(F.gelu(g, approximate="tanh") * u)


class MQALM(nn.Module):
    def __init__(self, vocab=1000, d=256, heads=8, ffn=512, layers=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(MQABlock(d, heads, ffn) for _ in range(layers))
        self.out = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return self.out(F.rms_norm(x, (x.shape[-1],)))


def test_user_block_hand_counts():
    d, heads, f, b, s = 256, 8, 512, 2, 128
    hd = d // heads
    model = MQALM(d=d, heads=heads, ffn=f)
    captured = capture_model(model, seq=s)
    layer = captured.layer
    assert (captured.layers, captured.heads, captured.kv_heads, captured.head_dim) == (3, 8, 1, 32)
    assert captured.param_count == sum(p.numel() for p in model.parameters())
    assert layer.param_count == sum(p.numel() for p in model.blocks[0].parameters())
    matmuls = 2 * b * s * (d * d + d * 2 * hd + d * d + d * 2 * f + f * d)
    attention = 2 * b * s * s * d * causal_tile_overhead(s)
    pointwise = b * s * (2 * 8 * d + 9 * f + 3 * d)   # 2 norms, GeGLU, 2 adds + the scale
    assert layer.flops == pytest.approx(matmuls + attention + pointwise)
    # x, h, q, k|v, attention out, x1, norm2 out, wi out (GeGLU), GeGLU out, wo out (scale)
    assert saved_bytes(layer) == 2 * b * s * (7 * d + 2 * hd + 3 * f)
    scaled = next(op for op in layer.ops if "gamma" in op.weights)
    assert scaled.saved == ("wo",)     # x1 + gamma * wo keeps wo for gamma's gradient, not x1
    # the planner's matmul layout: nn.Linear [out, in] transposed to [in, out]
    assert layer.values["o.weight"].shape == (d, d)
    assert captured.block_layout["kv.weight"] == ("q+kv.weight", True)


def test_capture_allocates_nothing_and_keeps_the_model():
    with torch.device("meta"):
        model = MQALM(vocab=50000, d=8192, heads=64, ffn=16384, layers=6)
    captured = capture_model(model, seq=4096)
    assert captured.layers == 6 and len(model.blocks) == 6 and model.training
    assert all(p.is_meta for p in model.parameters())


def test_repeated_blocks_are_the_biggest_run():
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8),
                          nn.LayerNorm(8), nn.Linear(8, 10))
    run = find_blocks(model)
    assert (run.path, run.start, run.count) == ("", 1, 3)
    assert run.paths == ("1", "2", "3")


def test_model_without_repeated_blocks_is_refused():
    model = nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 100))
    with pytest.raises(NoRepeatedBlocks, match="Sequential has no repeated blocks"):
        capture_model(model, seq=8)


class ConvBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.conv = nn.Conv1d(d, d, 3, padding=1)

    def forward(self, x):
        return x + self.conv(x.transpose(1, 2)).transpose(1, 2)


class ManualAttentionBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return x + torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


@pytest.mark.parametrize("block, message", [
    (ConvBlock, r"aten\.conv(1d|olution) in module 'conv' has no planner rule"),
    (ManualAttentionBlock, "multiplies two activations"),
])
def test_unsupported_ops_are_named(block, message):
    model = nn.Sequential(nn.Embedding(100, 16), block(16), block(16), nn.Linear(16, 100))
    with pytest.raises(UnsupportedOp, match=message):
        capture_model(model, seq=8)
