"""GPU tests: run on the GPU machine (`pytest tests/gpu`), skipped where there is no CUDA.

They check what the CPU suite cannot: compiled Triton kernels on the device (not the
interpreter), bf16 autocast numerics, CUDA-graph replay and the direct launch path.
"""
import copy
import dataclasses

import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.models import GPT, Llama, preset

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def rel(a, b):
    return ((a.float() - b.float()).norm() / (b.float().norm() + 1e-12)).item()


@pytest.mark.parametrize("arch", ["tiny", "tiny-llama"])
def test_blocks_under_bf16_autocast_match_eager_against_fp64(arch):
    cfg = dataclasses.replace(preset(arch), hidden=80, heads=4, seq=37, vocab=1001, layers=2,
                              **({"kv_heads": 2, "ffn": 96} if arch == "tiny-llama" else {}))
    cls = GPT if cfg.arch == "gpt" else Llama
    torch.manual_seed(0)
    eager, ours, ref = cls(cfg).cuda(), cls(cfg).cuda(), cls(cfg).cuda().double()
    ours.load_state_dict(eager.state_dict())
    ref.load_state_dict(eager.state_dict())
    idx = torch.randint(0, cfg.vocab, (3, cfg.seq), device="cuda")
    compiled = cherenkov.compile(ours, strict=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss_e = eager(idx, idx)[1]
        loss_c = compiled(idx, idx)[1]
    loss_r = ref(idx, idx)[1]
    for loss in (loss_e, loss_c, loss_r):
        loss.backward()
    err_e = max(rel(p.grad, q.grad) for p, q in zip(eager.parameters(), ref.parameters()))
    err_c = max(rel(p.grad, q.grad) for p, q in zip(ours.parameters(), ref.parameters()))
    assert err_c <= max(2 * err_e, 2e-2)
    assert abs(loss_c.item() - loss_r.item()) <= max(3 * abs(loss_e.item() - loss_r.item()), 1e-2)


def test_cuda_graph_replay_matches_eager_on_fresh_inputs():
    fn = lambda x, w: torch.nn.functional.layer_norm(x @ w, (64,)).relu()  # noqa: E731
    w = torch.randn(64, 64, device="cuda")
    compiled = cherenkov.compile(fn, strict=True, cuda_graphs=True)
    for _ in range(5):
        x = torch.randn(32, 64, device="cuda")
        torch.testing.assert_close(compiled(x, w), fn(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_cuda_graph_applies_in_place_updates_once_per_call(mode):
    """A plan that updates an input in place (running statistics, an optimizer step) is
    graphed (auto: it is launch-bound) and updates it once per call, the capturing call
    included; a moving input that is a view at an offset is copied into the same layout."""
    def fn(x, stat):
        stat.mul_(0.9).add_(x.sum(0))
        return x * 2 + stat
    stat, ref = torch.zeros(8, device="cuda"), torch.zeros(8, device="cuda")
    compiled = cherenkov.compile(fn, strict=True, cuda_graphs=mode)
    for _ in range(6):
        base = torch.randn(5, 8, device="cuda")
        x = base[1:]                      # storage offset 8, a new address every call
        out = compiled(x, stat)
        torch.testing.assert_close(out, fn(x, ref))
        torch.testing.assert_close(stat, ref)
    _, info = COMPILED[-1]
    assert info.cuda_graphs.use, info.cuda_graphs
    graph = COMPILED[-1][0]
    plan = next(iter(graph.cache.values()))
    assert plan._call.graph is not None and not plan._call.disabled


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_cuda_graph_replays_draw_fresh_random_numbers(mode):
    """Dropout and rand_like in a graphed plan: every call, replays included, draws new
    numbers (torch's generator moves its offset on each replay), with dropout's statistics."""
    def fn(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)
    compiled = cherenkov.compile(fn, strict=True, cuda_graphs=mode)
    x = torch.ones(4096, device="cuda")
    outs = [compiled(x).clone() for _ in range(8)]
    plan = next(iter(COMPILED[-1][0].cache.values()))
    assert plan._call.graph is not None and not plan._call.disabled
    for a, b in zip(outs, outs[1:]):
        assert not torch.equal(a, b)
    every = torch.stack(outs)
    kept = every >= 2                     # kept: 2 + U[0, 1); dropped: U[0, 1)
    assert 0.45 < kept.float().mean().item() < 0.55
    assert ((every >= 0) & (every < 3) & ((every < 1) | kept)).all()


def test_direct_launch_is_checked_then_used():
    fn = lambda x: torch.softmax(x * 2, -1)  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True)
    for _ in range(4):
        x = torch.randn(128, 300, device="cuda")
        torch.testing.assert_close(compiled(x), fn(x))
    graph = COMPILED[-1][0]
    plan = next(iter(graph.cache.values()))
    launchers = [s.launcher for s in plan.steps if s.kind == "kernel"]
    assert launchers
    # after two calls every launcher has decided, and calls since then were still correct
    assert all(launcher.direct in (True, False) for launcher in launchers)


def test_cuda_graph_outputs_held_across_calls_are_never_overwritten():
    fn = lambda x: (x * 3).sin() + 1  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True, cuda_graphs=True)
    xs = [torch.randn(256, device="cuda") for _ in range(6)]
    outs = [compiled(x) for x in xs]          # every output kept alive
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, fn(x))


def test_cuda_graph_training_steps_match_and_backward_reads_saved_activations_in_place():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.LayerNorm(128), torch.nn.Linear(128, 8)).cuda()
    ref = copy.deepcopy(model)
    start = len(COMPILED)
    graphed = cherenkov.compile(model, strict=True, cuda_graphs=True)
    for step in range(5):
        x = torch.randn(32, 64, device="cuda")
        graphed(x).square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    plans = {info.name: next(iter(g.cache.values()))._call for g, info in COMPILED[start:]}
    forward = next(p for name, p in plans.items() if name.startswith("forward"))
    backward = next(p for name, p in plans.items() if name.startswith("backward"))
    assert forward.graph is not None and backward.graph is not None
    # both replayed on the steps after their captures (an output viewing a forward input,
    # such as a saved x.t(), is no holder)
    assert forward.replays == 3 and backward.replays == 1, (forward.replays, backward.replays)
    # activations the forward graph computed are read in place (only the batch, a saved
    # forward input, and the incoming gradient are copied in)
    made_by_forward = {o.untyped_storage().data_ptr() for o in forward.owned}
    read_in_place = [keep for keep, s in zip(backward.static_slots, backward.input_storages)
                     if s in made_by_forward]
    assert read_in_place and all(read_in_place)
    assert forward.group is not None and forward.group is backward.group   # one pool


@pytest.mark.parametrize("mode,hold,pooled", [("on", False, False), ("on", True, False),
                                              ("auto", False, False), ("on", False, True),
                                              ("on", True, True)])
def test_cuda_graphs_sharing_a_pool_keep_accumulated_gradients_and_held_outputs(mode, hold,
                                                                                pooled):
    """Forward and backward share one pool, so a forward replay may write where the backward
    put its gradients: with gradients accumulated over micro-steps (held between them) and,
    with `hold`, every step's first output kept, every gradient and output still matches
    eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)).cuda()
    ref = copy.deepcopy(model)
    graphed = cherenkov.compile(model, strict=True, cuda_graphs=mode, cuda_graphs_pooled=pooled)
    kept, kept_ref = [], []
    for step in range(6):
        for micro in range(1 + step % 3):              # 1, 2 or 3 micro-steps
            x = torch.randn(32, 64, device="cuda")
            out, out_ref = graphed(x), ref(x)
            out.square().mean().backward()
            out_ref.square().mean().backward()
            if micro == 0 and hold:
                kept.append(out)
                kept_ref.append(out_ref)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    for out, out_ref in zip(kept, kept_ref):
        torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_row_loop_norm_backward_matches_eager_against_fp64(norm):
    """Row-loop kernels on the device: a bf16 norm's gradients, dx and the weight
    gradients the row loop's column partials make, as close to fp64 as eager's."""
    import torch.nn.functional as F

    def fn(x, r, w, b):
        h = x + r
        if norm == "rms":
            return (h.float() * torch.rsqrt(h.float().square().mean(-1, keepdim=True) + 1e-5)
                    ).to(x.dtype) * w
        return F.layer_norm(h, (h.shape[-1],), w, b)
    torch.manual_seed(0)
    args = [torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16),
            torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16),
            torch.randn(1024, device="cuda", dtype=torch.bfloat16),
            torch.randn(1024, device="cuda", dtype=torch.bfloat16)]
    dy = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    start = len(COMPILED)
    leaves = [a.clone().requires_grad_(True) for a in args]
    out = cherenkov.compile(fn, strict=True, row_loops=True)(*leaves)
    got = torch.autograd.grad(out, leaves[:3], dy)
    ref_in = [a.double().requires_grad_(True) for a in args]
    ref = torch.autograd.grad(fn(*ref_in), ref_in[:3], dy.double())
    eager_in = [a.clone().requires_grad_(True) for a in args]
    eager = torch.autograd.grad(fn(*eager_in), eager_in[:3], dy)
    for g, e, r in zip(got, eager, ref):
        assert rel(g, r) <= 2 * rel(e, r) + 1e-3
    assert any("for xi in " in k[3] for _, info in COMPILED[start:] for k in info.kernels)


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masked_sdpa_runs_our_kernels_on_the_device(kind):
    """SDPA with a mask on CUDA (the memory-efficient op) routed to our kernels: bf16 output
    and gradients as close to fp64 as eager's, and the graphs hold no extern."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    B, H, Q, KV, D = 2, 4, 300, 333, 64
    keep = torch.rand(Q, KV, device="cuda") > 0.4
    keep[:, 0] = True
    mask = keep if kind == "bool" else torch.where(keep, torch.randn(Q, KV, device="cuda"),
                                                   float("-inf")).to(torch.bfloat16)

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    args = [torch.randn(B, H, Q, D, device="cuda", dtype=torch.bfloat16),
            torch.randn(B, H, KV, D, device="cuda", dtype=torch.bfloat16),
            torch.randn(B, H, KV, D, device="cuda", dtype=torch.bfloat16)]
    dy = torch.randn(B, H, Q, D, device="cuda", dtype=torch.bfloat16)
    start = len(COMPILED)
    leaves = [a.clone().requires_grad_(True) for a in args]
    out = cherenkov.compile(fn, strict=True)(*leaves, mask)
    got = torch.autograd.grad(out, leaves, dy)
    ref_in = [a.double().requires_grad_(True) for a in args]
    ref = fn(*ref_in, mask if kind == "bool" else mask.double())
    want = torch.autograd.grad(ref, ref_in, dy.double())
    eager_in = [a.clone().requires_grad_(True) for a in args]
    eager_out = fn(*eager_in, mask)
    eager = torch.autograd.grad(eager_out, eager_in, dy)
    assert rel(out, ref) <= 2 * rel(eager_out, ref) + 1e-3
    for g, e, r in zip(got, eager, want):
        assert rel(g, r) <= 2 * rel(e, r) + 1e-3
    infos = [info for _, info in COMPILED[start:]]
    assert infos and all(i.library_calls.get("attention") == 1 and not i.externs for i in infos)


def test_rope_halves_kernels_on_the_device():
    """Rotate-half RoPE (halves kernels: each lane computes elements j and j + D/2 of a row)
    compiled for the device, bf16 forward and backward as close to fp64 as eager's."""
    def rope(x, cos, sin):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    torch.manual_seed(0)
    B, T, H, D = 2, 300, 4, 128
    angle = torch.arange(T, device="cuda")[:, None] * torch.rand(D // 2, device="cuda")
    angle = torch.cat((angle, angle), -1)[:, None, :]
    cos, sin = angle.cos(), angle.sin()
    x = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    start = len(COMPILED)
    leaf = x.clone().requires_grad_(True)
    out = cherenkov.compile(rope, strict=True)(leaf, cos, sin)
    (got,) = torch.autograd.grad(out, [leaf], dy)
    ref_in = x.double().requires_grad_(True)
    ref = rope(ref_in, cos.double(), sin.double())
    (want,) = torch.autograd.grad(ref, [ref_in], dy.double())
    eager_in = x.clone().requires_grad_(True)
    eager_out = rope(eager_in, cos, sin)
    (eager,) = torch.autograd.grad(eager_out, [eager_in], dy)
    assert rel(out, ref) <= 2 * rel(eager_out, ref) + 1e-3
    assert rel(got, want) <= 2 * rel(eager, want) + 1e-3
    sources = [k[3] for _, info in COMPILED[start:] for k in info.kernels]
    assert any(f"xindex < {B * T * H * D // 2}" in s for s in sources)     # halves lanes


def test_outputs_keep_eager_layout_and_never_alias_on_the_device():
    x = torch.randn(2, 3, 8, 8, device="cuda").to(memory_format=torch.channels_last)

    def f(x):
        y = x.relu() * 2
        return y, y.clone()
    a, b = cherenkov.compile(f, strict=True)(x)
    want_a, want_b = f(x)
    torch.testing.assert_close(a, want_a)
    assert a.stride() == want_a.stride() and a.data_ptr() != b.data_ptr()


@pytest.mark.parametrize("cuda_graphs", ["auto", "on"])
def test_unused_logits_gradient_is_compiled_as_zeros(cuda_graphs):
    """nanoGPT's (logits, loss) with the logits dropped: the backward is handed None for their
    gradient (no zero fill) and runs its zeroed variant; gradients as with autograd's zeros.
    (Static shapes: GPT.forward compiled earlier in this process with other shapes would make
    Dynamo's automatic dynamic shapes trace this one symbolically, and that is not watched.)"""
    torch._dynamo.reset()
    cfg = dataclasses.replace(preset("tiny"), hidden=64, heads=4, seq=32, vocab=4096, layers=2)
    torch.manual_seed(0)
    ours, ref = GPT(cfg).cuda(), GPT(cfg).cuda()
    ref.load_state_dict(ours.state_dict())
    start = len(COMPILED)
    fast = cherenkov.compile(ours, strict=True, dynamic=False, cuda_graphs=cuda_graphs)
    filled = cherenkov.compile(ref, strict=True, dynamic=False, cuda_graphs=cuda_graphs,
                               unused_grads=False)
    for step in range(4):
        idx = torch.randint(0, cfg.vocab, (4, cfg.seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss_a = fast(idx, idx)[1]
            loss_b = filled(idx, idx)[1]
        loss_a.backward()
        loss_b.backward()
        torch.testing.assert_close(loss_a, loss_b)
        for p, q in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
            p.grad = q.grad = None
    names = [info.name for _, info in COMPILED[start:]]
    assert sum("_zero" in n for n in names) == 1, names


def test_weight_gradients_come_out_of_cublas_in_fp32():
    """Under bf16 autocast a weight gradient is one mm.dtype call writing fp32, no cast kernel
    (passes/widen_matmul.py); it is no further from the fp64 gradient than eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 128)).cuda()
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    start = len(COMPILED)
    compiled = cherenkov.compile(model, strict=True, dynamic=False)
    x = torch.randn(384, 256, device="cuda")
    for m, inp in ((compiled, x), (eager, x)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(inp).float().square().mean().backward()
    ref(x.double()).square().mean().backward()
    for p, e, r in zip(model.parameters(), eager.parameters(), ref.parameters()):
        assert p.grad.dtype == torch.float32
        assert rel(p.grad, r.grad) <= max(1.5 * rel(e.grad, r.grad), 1e-3)
    backward = next(g for g, info in COMPILED[start:] if info.name.startswith("backward"))
    plan = next(iter(backward.cache.values()))
    targets = [n.args[0] for n in plan.graph.nodes() if n.op.name == "MATMUL"]
    # the two weight gradients (and the second layer's input gradient, which the GELU
    # backward reads in fp32)
    assert targets.count(torch.ops.aten.mm.dtype) >= 2, targets


class _Block(torch.nn.Module):
    def __init__(self, d=256, f=512):
        super().__init__()
        self.fc, self.proj = torch.nn.Linear(d, f), torch.nn.Linear(f, d)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(x), approximate="tanh"))


def _fused_calls(start):
    from cherenkov.templates.fused_epilogue import FusedMatmul
    found = {}
    for g, info in COMPILED[start:]:
        for plan in g.cache.values():
            found[info.name] = sum(isinstance(n.args[0], FusedMatmul)
                                   for n in plan.graph.nodes() if n.op.name == "MATMUL")
    return found


def test_matmul_epilogue_templates_on_the_device():
    """matmul_templates="on": the GELU, the residual and the GELU gradient run inside matmul
    template kernels; gradients as close to fp64 as eager's under bf16 autocast."""
    torch.manual_seed(0)
    model = _Block().cuda()
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    start = len(COMPILED)
    compiled = cherenkov.compile(model, strict=True, dynamic=False, matmul_templates="on")
    x = torch.randn(4, 96, 256, device="cuda")
    for m in (compiled, eager):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(x).float().square().mean().backward()
    ref(x.double()).square().mean().backward()
    for p, e, r in zip(model.parameters(), eager.parameters(), ref.parameters()):
        assert rel(p.grad, r.grad) <= max(1.5 * rel(e.grad, r.grad), 2e-3)
    counts = _fused_calls(start)
    assert any(k.startswith("forward") and v for k, v in counts.items()), counts
    assert any(k.startswith("backward") and v for k, v in counts.items()), counts


def test_matmul_epilogue_autotune_caches_a_checked_winner(tmp_path, monkeypatch):
    """autotune=True times cuBLAS + the epilogue kernel against the template's candidates,
    stores the verdict on disk, and the compiled step computes what eager does."""
    import json
    monkeypatch.setenv("CHERENKOV_CACHE_DIR", str(tmp_path))
    from cherenkov.templates import autotune
    monkeypatch.setattr(autotune, "_MEMORY", {})
    torch.manual_seed(0)
    model = _Block(128, 384).cuda()
    eager = copy.deepcopy(model)
    start = len(COMPILED)
    compiled = cherenkov.compile(model, strict=True, dynamic=False, autotune=True)
    x = torch.randn(2, 256, 128, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, want = compiled(x), eager(x)
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    table = json.loads((tmp_path / "templates" / "autotune.json").read_text())
    verdicts = [v for k, v in table.items() if json.loads(k)[0] == "epilogue"]
    assert verdicts and all(v.get("cublas") or v.get("block_m") for v in verdicts), table
    # a graph given templates was also planned without them and both plans timed
    if any(v.get("block_m") for v in verdicts):
        timed = [info.plans_timed for _, info in COMPILED[start:] if info.plans_timed]
        assert timed and all(set(t) == {"templates", "cuBLAS"} for t in timed), timed


def test_combined_weight_casts_run_on_the_device():
    """Autocast's weight and bias casts share launches on the device (how many combos form
    depends on how the schedule orders the casts among the matmuls: one, of 22 parts, on the
    H200 at 243d1cf), compiled by the workers and launched directly, with eager's results,
    forward and backward."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(96 + i, 97 + i) for i in range(20)]).cuda()
    ref = copy.deepcopy(model)
    start = len(COMPILED)
    compiled = cherenkov.compile(model, strict=True, combine_casts=True)
    for _ in range(3):
        x = torch.randn(16, 96, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out, want = compiled(x), ref(x)
        torch.testing.assert_close(out, want)
        out.float().square().mean().backward()
        want.float().square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=1e-3)
            p.grad = q.grad = None
    combos = [k for _, info in COMPILED[start:] for k in info.kernels
              if k[0].startswith("combo")]
    assert combos and sum(k[1] for k in combos) >= 20, \
        [info.name for _, info in COMPILED[start:]]
    plan = next(iter(COMPILED[start][0].cache.values()))
    steps = [s for s in plan.steps if s.label.startswith("combo")]
    assert steps and all(s.launcher.direct is not False for s in steps)
