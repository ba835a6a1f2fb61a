"""GPU: cuBLASLt calls (templates/cublaslt.py) compute what torch's matmuls do, for every
operand layout the library steps pass and for the candidates the choice times; compiled
models whose matmuls take cuBLASLt's fastest algorithm (templates/matmul_algos.py) match the
same model with torch's calls, CUDA-graphed too."""
import pytest
import torch

import cherenkov
from cherenkov.templates import autotune, cublaslt, matmul_algos

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or cublaslt.library() is None,
                                reason="needs CUDA and cuBLASLt")


@pytest.fixture(autouse=True)
def fresh_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("CHERENKOV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_MEMORY", {})
    matmul_algos.AlgoMatmul.tuned.clear()
    matmul_algos._algo.cache_clear()           # the problems' verdicts, kept per process


def _operands(layout: str, m: int, k: int, n: int, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=g) / k ** 0.5
    if layout == "x @ w.t()":
        return x, w.t()
    if layout == "x @ w":
        return x, w.t().contiguous()
    return x.t().contiguous().t(), w.t()              # a column-major A


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["x @ w.t()", "x @ w", "col-major x"])
@pytest.mark.parametrize("bias", [False, True])
def test_candidates_match_torch(dtype, layout, bias):
    m, k, n = 192, 136, 264
    a, b = _operands(layout, m, k, n, dtype)
    bias_t = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    expected = torch.addmm(bias_t, a, b) if bias else a @ b
    found = cublaslt.candidates(cublaslt.problem_of(a, b, "bias" if bias else "none"), 4) + \
        cublaslt.candidates(cublaslt.problem_of(a, b, "bias" if bias else "none"), 2, 0)
    assert found, "the heuristic offered no algorithm"
    for lt in found:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        lt(a, b, out, bias=bias_t)
        torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("layout", ["x @ w.t()", "col-major x"])
def test_fp32_result_candidates_match_mm_dtype(layout):
    # a weight gradient's product (passes/widen_matmul.py): bf16 operands, fp32 written out
    m, k, n = 192, 520, 264
    a, b = _operands(layout, m, k, n, torch.bfloat16)
    expected = torch.ops.aten.mm.dtype(a, b, torch.float32)
    problem = cublaslt.problem_of(a, b, "none", torch.float32)
    found = cublaslt.candidates(problem, 4) + cublaslt.candidates(problem, 2, 0)
    assert found, "the heuristic offered no algorithm"
    for lt in found:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        lt(a, b, out)
        torch.testing.assert_close(out, expected, atol=1e-3, rtol=1e-3)


class _MLP(torch.nn.Module):
    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x), approximate="tanh")) + x


@pytest.mark.parametrize("cuda_graphs", ["off", "on"])
def test_compiled_mlp_matches_torch_matmuls(cuda_graphs):
    torch.manual_seed(0)
    model = _MLP().cuda()
    x = torch.randn(4, 512, 256, device="cuda", requires_grad=True)

    def step(fn):
        x.grad = None
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = fn(x)
        y.float().square().mean().backward()
        return [y.detach().float(), x.grad.clone()] + [p.grad.clone() for p in model.parameters()]

    ref = step(cherenkov.compile(model, matmul_algos=False, cuda_graphs=cuda_graphs))
    algos = cherenkov.compile(model, matmul_algos=True, cuda_graphs=cuda_graphs)
    # the first run times alone, the next ones try the shortlist in the step, then the
    # verdict runs; every run computes the same results (a capture tries nothing)
    for _ in range((matmul_algos.SHORTLIST + 1) * matmul_algos.SAMPLES + 2):
        got = step(algos)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, atol=3e-2, rtol=3e-2)
    if cuda_graphs == "on":
        return
    # forward and backward matmuls were decided (each distinct problem once)
    assert len(matmul_algos.AlgoMatmul.tuned) >= 4
    # the weight gradients' fp32 products too
    assert any(p.out_dtype == torch.float32 for p, _, _ in matmul_algos.AlgoMatmul.tuned)
    for problem, verdict, timings in matmul_algos.AlgoMatmul.tuned:
        assert verdict == matmul_algos.TORCH or isinstance(timings[verdict], float)
