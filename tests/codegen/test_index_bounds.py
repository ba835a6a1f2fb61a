"""Run-time indices out of range (gather, advanced indexing, scatter-add): PyTorch raises; a
kernel cannot, so it reads and writes nothing there and a floating result is NaN -- never a
number read from elsewhere, never a write past the buffer. Both CPU backends."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov


@pytest.fixture(params=["cpp", "triton"])
def backend(request):
    torch._dynamo.reset()
    return request.param


def _compile(fn, backend):
    return cherenkov.compile(fn, cpu_backend=backend, dynamic=False)


def test_cross_entropy_with_a_target_past_the_vocabulary_is_nan(backend):
    x = torch.randn(8, 50, requires_grad=True)
    t = torch.randint(0, 50, (8,))
    with pytest.raises(IndexError):
        F.cross_entropy(x, t.clone().index_fill_(0, torch.tensor([2]), 57))
    good = _compile(lambda x, t: F.cross_entropy(x, t), backend)(x, t)
    torch.testing.assert_close(good, F.cross_entropy(x, t))
    t[2] = 57
    assert torch.isnan(_compile(lambda x, t: F.cross_entropy(x, t), backend)(x, t))


def test_gather_and_indexing_out_of_range_give_nan_rows(backend):
    w = torch.randn(10, 4)
    ids = torch.tensor([1, 12, -3, -11])           # 12 and -11 are out of range
    out = _compile(lambda w, i: w[i] * 2, backend)(w, ids)
    torch.testing.assert_close(out[[0, 2]], w[[1, -3]] * 2)
    assert torch.isnan(out[[1, 3]]).all()
    g = _compile(lambda w, i: torch.gather(w, 1, i) + 1, backend)(
        w, torch.tensor([[0], [4], [3], [9], [0], [1], [2], [3], [0], [-1]]))
    assert torch.isnan(g[[1, 3]]).all() and torch.isfinite(g[[0, 2, 4, 9]]).all()


def test_embedding_backward_with_an_id_out_of_range_writes_nothing_past_the_table(backend):
    """The scatter-add of the embedding backward skips the bad id (the forward gave NaN)."""
    w = torch.randn(10, 4, requires_grad=True)
    ids = torch.tensor([1, 3, 40, 3])
    out = _compile(lambda w, i: F.embedding(i, w) * 3, backend)(w, ids)
    assert torch.isnan(out[2]).all() and torch.isfinite(out[[0, 1, 3]]).all()
    (gw,) = torch.autograd.grad(out, [w], torch.ones_like(out))
    want = torch.zeros(10, 4)
    want[1] += 3
    want[3] += 6
    torch.testing.assert_close(gw, want)
