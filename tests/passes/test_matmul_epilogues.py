"""passes/matmul_epilogues.py + templates/fused_epilogue.py: a matmul and the elementwise work
reading its result as one template kernel (Triton's interpreter on CPU, with
matmul_templates="on"; on CUDA the tuning cache decides, tests/gpu)."""
import dataclasses
import os

import pytest
import torch

import cherenkov
from torch.fx.experimental.proxy_tensor import make_fx

from cherenkov.capture.decompositions import decomposition_table
from cherenkov.config import Config
from cherenkov.ir.ops import Op
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.matmul_epilogues import build, fuse_matmul_epilogues
from cherenkov.templates import epilogue_tuning
from cherenkov.templates.fused_epilogue import FusedMatmul

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="Triton kernels on CPU need TRITON_INTERPRET=1")
ON = Config(matmul_templates="on")
CPU = torch.device("cpu")


def _lowered(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*inputs)
    graph, _ = lower_fx(gm, list(inputs), strict=True, name="g")
    return eliminate_common_subexpressions(graph)


def _fused(graph):
    return [n for n in graph.nodes() if n.op is Op.MATMUL and isinstance(n.args[0], FusedMatmul)]


def _epilogue(graph):
    order, users = graph.nodes(), graph.users()
    outputs = {o for o in graph.outputs if o is not None}
    (mm,) = [n for n in order if n.op is Op.MATMUL]
    return build(mm, order, users, outputs)


def test_elementwise_readers_join_the_matmul_and_only_what_leaves_is_stored():
    x, w, r = torch.randn(40, 24), torch.randn(24, 48), torch.randn(40, 48)

    def f(x, w, r):
        return torch.relu(x @ w) * 2.0 + r

    graph = _lowered(f, x, w, r)
    ep = _epilogue(graph)
    # relu, mul, add: one value stored (the sum), the product never written
    assert not ep.store_mm and [n.op for n in ep.stored] == [Op.ADD]
    assert [n.op for n in ep.leaves] == [Op.INPUT]
    fused = fuse_matmul_epilogues(graph, CPU, ON, None)
    (node,) = _fused(fused)
    assert node.meta[0].shape == (40, 48)
    got = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w, r)
    torch.testing.assert_close(got, f(x, w, r), rtol=1e-5, atol=1e-5)


def test_matmul_read_elsewhere_is_stored_too_and_a_reduction_ends_the_region():
    x, w = torch.randn(33, 20), torch.randn(20, 36)

    def f(x, w):
        y = x @ w
        g = torch.sigmoid(y)
        return y, g, g * g.sum(-1, keepdim=True)   # the product reads a reduction of g

    graph = _lowered(f, x, w)
    ep = _epilogue(graph)
    assert ep.store_mm and [n.op for n in ep.stored] == [Op.MATMUL, Op.SIGMOID]
    assert Op.MUL not in {n.op for n in ep.members}
    got = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w)
    for a, b in zip(got, f(x, w)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_value_only_kernels_read_stays_with_them():
    """sigmoid(x @ w) read only by a reduction and a product: without the template it is never
    stored (those kernels compute it from the matmul's output); the template would write it."""
    x, w = torch.randn(33, 20), torch.randn(20, 36)

    def f(x, w):
        g = torch.sigmoid(x @ w)
        return g * g.sum(-1, keepdim=True)

    assert _epilogue(_lowered(f, x, w)) is None


def test_addmm_bias_and_inlined_inputs_of_other_shapes():
    x, w, b = torch.randn(48, 32), torch.randn(64, 32), torch.randn(64)
    s = torch.randn(48, 1)

    def f(x, w, b, s):           # the bias through addmm, a per-row scale through an expand
        return torch.tanh(torch.addmm(b, x, w.t())) * torch.exp(s)

    graph = _lowered(f, x, w, b, s)
    ep = _epilogue(graph)
    assert ep.bias is not None and ep.bias.strides == (0, 1)
    assert ep.b.strides == (1, 32)                         # the transposed weight, no copy
    got = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w, b, s)
    torch.testing.assert_close(got, f(x, w, b, s), rtol=1e-5, atol=1e-5)


def test_left_alone_off_or_on_a_cpu_without_asking():
    x, w = torch.randn(32, 16), torch.randn(16, 32)

    def f(x, w):
        return torch.relu(x @ w)

    graph = _lowered(f, x, w)
    assert fuse_matmul_epilogues(graph, CPU, Config(matmul_templates="off"), None) is graph
    assert fuse_matmul_epilogues(graph, CPU, Config(), None) is graph     # "auto": CUDA only
    from cherenkov.passes.matmul_epilogues import applies
    assert not applies(Config(), torch.device("cuda"))        # ... and autotuning only
    assert applies(Config(autotune=True), torch.device("cuda")) and applies(ON, CPU)
    tiny = _lowered(f, torch.randn(8, 16), torch.randn(16, 32))
    assert not _fused(fuse_matmul_epilogues(tiny, CPU, ON, None))       # below tl.dot's 16 rows
    with pytest.raises(ValueError, match="matmul_templates"):
        Config(matmul_templates="always")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 64)
        self.proj = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(x), approximate="tanh"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mlp_training_step_matches_eager(tmp_path, dtype):
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(2, 24, 32, requires_grad=True)
    compiled = cherenkov.compile(model, matmul_templates="on", strict=True,
                                 dump_dir=str(tmp_path))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
        y, ref = compiled(x), model(x)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *model.parameters()], g)
    refs = torch.autograd.grad(ref, [x, *model.parameters()], g)
    # bf16: another summation order inside the matmul can move a rounded output by an ulp,
    # which later products carry: a few bf16 ulps of each tensor's largest value
    tol = 1e-4 if dtype is torch.float32 else 2e-2
    for got, want in zip((y, *grads), (ref, *refs)):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())
    # the forward's GELU and residual, the backward's GELU gradient ran in templates
    for stage in ("forward", "backward"):
        (ir,) = [p for p in tmp_path.glob(f"{stage}*/2_ir_after_cse.txt")]
        assert "fused_mm[" in ir.read_text()


def test_tuning_key_names_the_epilogue_and_the_cache_decides(monkeypatch):
    x, w, r = torch.randn(32, 16), torch.randn(16, 32), torch.randn(32, 32)
    relu = _epilogue(_lowered(lambda x, w: torch.relu(x @ w), x, w))
    plus = _epilogue(_lowered(lambda x, w, r: x @ w + r, x, w, r))
    assert relu.signature != plus.signature
    assert epilogue_tuning.problem_key(relu, CPU) != epilogue_tuning.problem_key(plus, CPU)
    # on CUDA, "auto" takes cuBLAS unless autotune is on, whatever the cache holds; with it,
    # the cached verdict (tuning only what is not cached)
    cuda = torch.device("cuda")
    from cherenkov.templates.tile_config import TileConfig
    cfg = TileConfig(64, 64, 32)
    monkeypatch.setattr(epilogue_tuning, "problem_key", lambda ep, device: "k")
    monkeypatch.setattr(epilogue_tuning, "tune", lambda *a: pytest.fail("tuned"))
    monkeypatch.setattr(epilogue_tuning, "cached", lambda key: cfg)
    assert epilogue_tuning.choose(relu, Config(), None, cuda) is None
    tuned = Config(autotune=True)
    assert epilogue_tuning.choose(relu, tuned, None, cuda) == cfg
    monkeypatch.setattr(epilogue_tuning, "cached", lambda key: "cublas")
    assert epilogue_tuning.choose(relu, tuned, None, cuda) is None
    stored = {}
    monkeypatch.setattr(epilogue_tuning, "cached", lambda key: None)
    monkeypatch.setattr(epilogue_tuning, "tune", lambda ep, spec, device, workers: (cfg, {}))
    monkeypatch.setattr(epilogue_tuning, "_store", lambda key, best: stored.update({key: best}))
    assert epilogue_tuning.choose(relu, tuned, None, cuda) == cfg and stored == {"k": cfg}


def test_reference_pair_computes_what_the_template_does():
    x, w, r = torch.randn(40, 24), torch.randn(24, 48), torch.randn(40, 48)
    ep = _epilogue(_lowered(lambda x, w, r: torch.sigmoid(x @ w) + r, x, w, r))
    roots = epilogue_tuning.random_roots(ep, CPU)
    expected = ep.reference(roots, interpret=True)()
    cfg = epilogue_tuning.choose(ep, ON, None, CPU)
    got = FusedMatmul(ep, cfg, True)(*roots)
    assert all(map(epilogue_tuning.close, got, expected))
    # as a compile-worker job: one tensor argument per root and per stored value, the
    # launch's options
    job = FusedMatmul(ep, cfg, True).job()
    assert job.fn.startswith("mm_epilogue_") and job.path.endswith(".py")
    assert job.args == ("*float32",) * (len(ep.roots) + len(ep.stored))
    assert dict(job.kwargs) == {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    # the epilogue run per column half of the tile: the same values
    halves = FusedMatmul(ep, dataclasses.replace(cfg, epilogue_split=2), True)
    assert "tl.split(" in halves.source
    assert all(torch.equal(a, b) for a, b in zip(halves(*roots), got))
    assert not epilogue_tuning.close(got[0] + 1.0, expected[0])


def test_broadcast_operands_and_a_one_element_bias():
    """Stride-0 operands (an expanded row, an expanded column, a bias of one element) keep
    both terms of their tile offsets (the tile's shape), and compute what eager does."""
    w, x = torch.randn(32, 48), torch.randn(40, 32)
    cases = [(lambda r, w: torch.relu(r.expand(40, 32) @ w), (torch.randn(1, 32), w)),
             (lambda x, c: torch.relu(x @ c.expand(32, 48)), (x, torch.randn(32, 1))),
             (lambda b, x, w: torch.relu(torch.addmm(b, x, w)), (torch.randn(1), x, w))]
    for f, args in cases:
        got = cherenkov.compile(f, matmul_templates="on", strict=True)(*args)
        torch.testing.assert_close(got, f(*args), rtol=1e-5, atol=1e-5)


def test_a_value_the_next_matmul_reads_is_not_recomputed_inside_its_epilogue():
    """h = relu(x @ w1) feeds both the next matmul and that matmul's epilogue: it is read
    as the first template's stored output, not inlined (which kept a second x @ w1)."""
    x, w1, w2 = torch.randn(40, 32), torch.randn(32, 48), torch.randn(48, 48)

    def f(x, w1, w2):
        h = torch.relu(x @ w1)
        return torch.sigmoid(h @ w2) + h

    graph = fuse_matmul_epilogues(_lowered(f, x, w1, w2), CPU, ON, None)
    assert sum(n.op is Op.MATMUL for n in graph.nodes()) == 2
    got = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w1, w2)
    torch.testing.assert_close(got, f(x, w1, w2), rtol=1e-5, atol=1e-5)


def test_bf16_results_are_rounded_to_nearest_in_the_interpreter():
    """Triton's interpreter truncates fp32 -> bf16; the template rounds to nearest even."""
    x, w = torch.randn(48, 64, dtype=torch.bfloat16), torch.randn(64, 48, dtype=torch.bfloat16)

    def f(x, w):
        y = x @ w
        return y, y * 2

    y, _ = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w)
    exact = (x.float() @ w.float()).bfloat16()
    # another summation order may move a value that lies near a rounding boundary
    assert (y != exact).float().mean() < 0.02


def test_no_template_on_cpu_where_the_interpreter_cannot_loop(monkeypatch):
    """Triton 3.6 + numpy 2.4 (runtime/loader.interpreter_fault): 'on' leaves CPU matmuls to
    the library call (the template's K loop would fail at run time)."""
    from cherenkov.runtime import loader
    monkeypatch.setattr(loader, "interpreter_fault", lambda: "interpreter cannot loop here")
    x, w, r = torch.randn(40, 24), torch.randn(24, 48), torch.randn(40, 48)

    def f(x, w, r):
        return torch.relu(x @ w) * 2.0 + r
    assert not _fused(fuse_matmul_epilogues(_lowered(f, x, w, r), CPU, ON, None))
    got = cherenkov.compile(f, matmul_templates="on", strict=True)(x, w, r)
    torch.testing.assert_close(got, f(x, w, r), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["x @ w", "x @ w.t()", "x.t() @ w"])
def test_tma_descriptor_loads_compute_what_pointer_loads_do(layout):
    """A and B read through TMA descriptors (TileConfig.tma; a column-major operand described
    transposed), ragged edges included: the same values as the pointer loads."""
    x, w, r = torch.randn(40, 24), torch.randn(24, 56), torch.randn(40, 56)
    fns = {"x @ w": lambda x, w, r: torch.sigmoid(x @ w) + r,
           "x @ w.t()": lambda x, w, r: torch.sigmoid(x @ w.t().contiguous().t()) + r,
           "x.t() @ w": lambda x, w, r: torch.sigmoid(x.t().contiguous().t() @ w) + r}
    ep = _epilogue(_lowered(fns[layout], x, w, r))
    from cherenkov.templates.fused_epilogue import tma_ready
    assert tma_ready(ep)
    roots = epilogue_tuning.random_roots(ep, CPU)
    cfg = dataclasses.replace(epilogue_tuning.choose(ep, ON, None, CPU), block_k=16)
    pointers = FusedMatmul(ep, cfg, True)
    tma = FusedMatmul(ep, dataclasses.replace(cfg, tma=True), True)
    assert "make_tensor_descriptor" in tma.source and "make_tensor_descriptor" not in \
        pointers.source
    for a, b in zip(tma(*roots), pointers(*roots)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
