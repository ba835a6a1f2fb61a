"""GPU: generated kernels launched with programmatic dependent launch (config pdl) give the
same bits as without it -- a chain of small dependent kernels, forward and backward, run many
times on fresh inputs (a kernel that read or wrote before the previous one finished would
show as a difference), graphed by CUDA graphs too."""
import pytest
import torch

import cherenkov
from cherenkov import backend
from cherenkov.codegen.dependent_launch import supported

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not supported(torch.device("cuda")),
    reason="needs a CUDA device of compute capability 9.0+")


class _Chain(torch.nn.Module):
    def __init__(self, width: int = 1536, depth: int = 8):
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(depth))

    def forward(self, x):
        for norm in self.norms:          # each layer: a row reduction, then pointwise work
            x = x + torch.nn.functional.gelu(norm(x)) * 0.5
        return x.sum(dim=0)


@pytest.mark.parametrize("cuda_graphs", ["off", "on"])
def test_dependent_launches_match_ordinary_ones_bit_for_bit(cuda_graphs):
    torch.manual_seed(0)
    model = _Chain().cuda()
    start = len(backend.COMPILED)
    plain = cherenkov.compile(model, strict=True, dynamic=False, cuda_graphs=cuda_graphs,
                              pdl=False)
    pdl = cherenkov.compile(model, strict=True, dynamic=False, cuda_graphs=cuda_graphs,
                            pdl=True)
    for i in range(12):
        x = torch.randn(4096, 1536, device="cuda", requires_grad=True)
        outs = []
        for f in (plain, pdl):
            x.grad = None
            model.zero_grad(set_to_none=True)
            y = f(x)
            y.backward(torch.ones_like(y))
            outs.append((y.detach().clone(), x.grad.clone(),
                         [p.grad.clone() for p in model.parameters()]))
        (y0, g0, p0), (y1, g1, p1) = outs
        assert torch.equal(y0, y1) and torch.equal(g0, g1), i
        assert all(torch.equal(a, b) for a, b in zip(p0, p1)), i
    sources = [k[3] for _, info in backend.COMPILED[start:] for k in info.kernels]
    assert any("gdc_wait()" in s for s in sources)
    assert any("gdc_wait()" not in s for s in sources)
