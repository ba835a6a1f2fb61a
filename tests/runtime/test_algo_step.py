"""runtime/algo_step.py on the CPU: a compiled model's mm / addmm / linear steps hand the
cuBLASLt call the right addresses in the right order -- a stand-in for the library reads the
operands' memory the way cuBLAS would (through the layouts the problem records) and computes
with torch -- and the results, forward and backward, match the plain plan's."""
import pytest
import torch

import cherenkov
from cherenkov.runtime import compiled_graph
from cherenkov.templates import cublaslt, matmul_algos


class _StandIn:
    """What LtMatmul does with its arguments, computed by torch: only the addresses of a, b,
    out and bias are used; the layouts are the problem's."""
    calls = 0

    def __init__(self, problem):
        self.p = problem

    def __call__(self, a, b, out, bias=None, aux=None, stream=None):
        p = self.p
        a_ = torch.as_strided(a, (p.m, p.k), p.a_strides, a.storage_offset())
        b_ = torch.as_strided(b, (p.k, p.n), p.b_strides, b.storage_offset())
        r = a_.float() @ b_.float()
        if bias is not None:
            r = r + bias.float()
        out.copy_(r.to(out.dtype))
        _StandIn.calls += 1

    def run(self, a, b, bias, torch_call, alloc, stream=None):     # AlgoMatmul's interface
        result = alloc()
        self(a, b, result, bias=bias, stream=stream)
        return result


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(cublaslt, "library", lambda: object())
    real_problem = matmul_algos.problem_of_node
    monkeypatch.setattr(matmul_algos, "problem_of_node", lambda target, metas, out, device:
                        real_problem(target, metas, out, torch.device("cuda", 0)))

    def for_operands(a, b, planned):
        p = cublaslt.Problem(planned.m, planned.n, planned.k, tuple(a.stride()),
                             tuple(b.stride()), planned.dtype, planned.epilogue)
        return _StandIn(p)
    monkeypatch.setattr(matmul_algos, "for_operands", for_operands)
    real_init = compiled_graph.CompiledGraph.__init__

    def init(self, *args, **kwargs):
        kwargs["tune_matmuls"] = _StandIn.min_flop
        real_init(self, *args, **kwargs)
    monkeypatch.setattr(compiled_graph.CompiledGraph, "__init__", init)
    _StandIn.calls = 0
    _StandIn.min_flop = 0.0


class _Block(torch.nn.Module):
    def __init__(self, d=48):
        super().__init__()
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d, bias=False)
        self.head = torch.nn.Parameter(torch.randn(40, d) / d ** 0.5)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(x))) + x
        return h @ self.head.t()                      # an mm of a transposed parameter


def test_matmul_steps_pass_the_library_the_right_operands(stand_in):
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(2, 16, 48, requires_grad=True)

    def step(fn):
        x.grad = None
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(x)
        y.float().square().mean().backward()
        return [y.detach().float(), x.grad.clone()] + [p.grad.clone() for p in model.parameters()]

    got = step(cherenkov.compile(model, matmul_algos=True))
    assert _StandIn.calls >= 6               # forward and backward matmuls went through it
    expected = step(model)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=3e-2, rtol=3e-2)


def test_only_matmuls_of_the_minimum_flops_are_tuned(stand_in):
    # the block's matmuls: 2*32*48*192 FLOPs each way for up/down, 2*32*48*40 for the head
    # (and their backward products of the same counts): only those at or above the minimum
    # go through the library; the result is the same either way
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(2, 16, 48)
    _StandIn.min_flop = 2 * 32 * 48 * 100
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = cherenkov.compile(model, matmul_algos=True)(x)
    tuned = _StandIn.calls
    assert 0 < tuned
    _StandIn.calls, _StandIn.min_flop = 0, 2 * 32 * 48 * 192 + 1
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cherenkov.compile(model, matmul_algos=True)(x)
    assert _StandIn.calls == 0               # none is that large
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=3e-2)


def test_tuned_matmul_flops_follow_the_device_rate():
    from cherenkov.compiler import _tuned_matmul_flop
    from cherenkov.config import Config
    from cherenkov.hw import catalog
    h200 = catalog.device("h200")
    cuda = torch.device("cuda", 0)
    assert _tuned_matmul_flop(Config(), h200, cuda) is None            # matmul_algos off
    assert _tuned_matmul_flop(Config(matmul_algos=True), h200, torch.device("cpu")) is None
    assert _tuned_matmul_flop(Config(matmul_algos=True), h200, cuda) == 0.0
    flop = _tuned_matmul_flop(Config(matmul_algos=True, matmul_algos_min_ms=0.5), h200, cuda)
    assert flop == pytest.approx(0.5e-3 * h200.achievable_flops(torch.bfloat16))
    slower = h200.replace(peak_flops={k: v / 2 for k, v in h200.peak_flops.items()},
                          measured_flops={k: v / 2 for k, v in h200.measured_flops.items()})
    assert _tuned_matmul_flop(Config(matmul_algos=True, matmul_algos_min_ms=0.5), slower,
                              cuda) == pytest.approx(flop / 2)


def test_widened_weight_gradients_go_through_the_library_in_fp32(stand_in, monkeypatch):
    # on CUDA a weight gradient cast to fp32 becomes mm.dtype(a, b, float32) (passes/
    # widen_matmul.py); its step hands cuBLASLt an fp32 result (D in fp32, A and B bf16)
    from cherenkov.passes import widen_matmul
    monkeypatch.setattr(widen_matmul, "available", lambda device: True)
    seen = []
    real_call = _StandIn.__call__

    def call(self, a, b, out, **kwargs):
        seen.append((a.dtype, out.dtype))
        return real_call(self, a, b, out, **kwargs)
    monkeypatch.setattr(_StandIn, "__call__", call)
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(2, 16, 48)

    def grads(fn):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(x)
        y.float().square().mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    got = grads(cherenkov.compile(model, matmul_algos=True))
    assert (torch.bfloat16, torch.float32) in seen         # a widened product, fp32 out
    for g, e in zip(got, grads(model)):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, e, atol=3e-2, rtol=3e-2)
