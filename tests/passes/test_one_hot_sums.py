"""passes/one_hot_sums.py: a sum over the last dim of a one-hot (nll_loss's gradient summed
by log_softmax's backward) computed per row -- the same numbers as the loop over columns."""
import pytest
import torch

import cherenkov
import cherenkov.compiler as compiler
from cherenkov.ir.ops import Op
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.one_hot_sums import sum_one_hots


def _grads(fn, x, *rest, **options):
    torch._dynamo.reset()
    x = x.detach().clone().requires_grad_()
    cherenkov.compile(fn, strict=True, dynamic=False, **options)(x, *rest).backward()
    return x.grad


def _cross_entropy(logits, t):
    return torch.nn.functional.cross_entropy(logits, t, ignore_index=3)


@pytest.mark.parametrize("cpu_backend", ["triton", "cpp"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cross_entropy_backward_unchanged_bit_for_bit(dtype, cpu_backend, monkeypatch):
    rewrote = []

    def counted(graph):
        out = sum_one_hots(graph)
        rewrote.append(out is not graph)
        return out
    monkeypatch.setattr(compiler, "sum_one_hots", counted)
    torch.manual_seed(0)
    x = torch.randn(37, 301, dtype=dtype)
    t = torch.randint(0, 301, (37,))
    t[2] = 3                                        # an ignored row
    with_pass = _grads(_cross_entropy, x, t, cpu_backend=cpu_backend)
    assert any(rewrote)                             # the backward's sum went
    monkeypatch.setattr(compiler, "sum_one_hots", lambda graph: graph)
    without = _grads(_cross_entropy, x, t, cpu_backend=cpu_backend)
    assert torch.equal(with_pass, without)
    ref = x.detach().clone().requires_grad_()
    _cross_entropy(ref, t).backward()
    # (the kernels' exp differs from eager's by an ulp of bf16 on a few tiny gradients, with
    # or without the pass, on both backends now that the interpreter's bf16 casts round)
    torch.testing.assert_close(with_pass, ref.grad, atol=4e-5, rtol=1.6e-2 if dtype ==
                               torch.bfloat16 else 1.3e-6)


def _vocab_sums(fn, *inputs) -> tuple[int, int]:
    """SUM nodes reducing a last dim of width 50 (the columns), before and after the pass."""
    from torch.fx.experimental.proxy_tensor import make_fx
    graph = eliminate_common_subexpressions(
        lower_fx(make_fx(fn)(*inputs), list(inputs), strict=True, name="g")[0])

    def count(g):
        return sum(1 for n in g.nodes() if n.op is Op.SUM and n.inputs[0].shape[-1] == 50)
    return count(graph), count(sum_one_hots(graph))


def one_hot_sum(a, k, r, other=0.0):
    hit = torch.arange(50) == k[:, None]
    return (torch.where(hit, a[:, None], other) * r[:, None]).sum(1)


def test_rewrites_only_true_one_hots():
    a, k, r = torch.randn(6), torch.tensor([0, 49, -1, 50, 7, 3]), torch.randn(6)
    assert _vocab_sums(lambda a, k, r: one_hot_sum(a, k, r), a, k, r) == (1, 0)
    # the other columns hold 1, not 0: their sum is not known
    assert _vocab_sums(lambda a, k, r: one_hot_sum(a, k, r, 1.0), a, k, r) == (1, 1)
    # the picked value varies along the columns
    assert _vocab_sums(lambda a, k, r: (torch.where(torch.arange(50) == k[:, None],
                                                    torch.arange(50.0), 0.0)
                                        * r[:, None]).sum(1), a, k, r) == (1, 1)


def test_targets_out_of_range_and_non_finite_rows_match_eager():
    """Columns outside [0, V) never match (the row sums to 0); a row scaled by inf or nan
    sums to nan, as the loop's 0 * inf does."""
    a = torch.randn(6)
    k = torch.tensor([0, 49, -1, 50, 7, 3])
    r = torch.tensor([1.5, -2.0, 3.0, 0.5, float("inf"), float("nan")])
    got = cherenkov.compile(one_hot_sum, strict=True, dynamic=False)(a, k, r)
    torch.testing.assert_close(got, one_hot_sum(a, k, r), equal_nan=True)
    assert got[2] == 0 and got[3] == 0 and got[4].isnan() and got[5].isnan()


@pytest.mark.parametrize("cpu_backend", ["triton", "cpp"])
def test_pointwise_kernel_over_long_rows_tiles_by_rows(cpu_backend, monkeypatch):
    """With the sum gone the cross-entropy gradient is one pointwise kernel reading per-row
    values (passes/fusion.py `_by_rows`): tiled by rows it computes the same bits."""
    from cherenkov.backend import COMPILED
    from cherenkov.passes import fusion
    torch.manual_seed(1)
    x = torch.randn(37, 301, dtype=torch.bfloat16)
    t = torch.randint(0, 301, (37,))
    grads, domains = [], []
    for row_min in (10 ** 9, 1):
        monkeypatch.setattr(fusion, "ROW_MIN", row_min)
        monkeypatch.setattr(fusion, "ROWS_MIN", 1)
        torch._dynamo.reset()
        start = len(COMPILED)
        x1 = x.detach().clone().requires_grad_()
        cherenkov.compile(_cross_entropy, strict=True, dynamic=False,
                          cpu_backend=cpu_backend)(x1, t).backward()
        grads.append(x1.grad)
        kernels = [k for _, info in COMPILED[start:] if info.name.startswith("backward")
                   for k in info.kernels]
        # a kernel over rows of 301 (Triton: an r index; C++: its header comment)
        domains.append(any("rbase" in src or "37 rows x 301" in src
                           for _, _, _, src in kernels))
    assert torch.equal(grads[0], grads[1])
    assert domains == [False, True]


def test_zero_broadcast_through_several_expands():
    """The other columns' 0 broadcast from a constant in more than one step."""
    def fn(a, k):
        zeros = torch.zeros(1, 3, 50).expand(2, 3, 50)
        return torch.where(torch.arange(50) == k.view(2, 3, 1), a.view(2, 3, 1), zeros).sum(-1)
    a, k = torch.randn(6), torch.tensor([0, 49, -1, 50, 7, 3])
    torch.testing.assert_close(cherenkov.compile(fn, strict=True, dynamic=False)(a, k),
                               fn(a, k))
