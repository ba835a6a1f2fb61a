"""Max pooling decomposed into int8 argmax offsets + indices arithmetic
(capture/max_pool_offsets.py): the op matches eager's, the indices rebuilt from the offsets are
eager's, and compiled training saves the int8 offsets for the backward, whose gradients match
eager's (the stem's shape of pool, padding, ceil mode, channels-last, ties and -inf)."""
import math

import pytest
import torch

import cherenkov
from cherenkov.capture.max_pool_offsets import (max_pool_decompositions, max_pool_offsets,
                                                offsets_to_indices)
from cherenkov.passes import partition

CASES = [  # shape, kernel, stride, padding, ceil_mode, channels_last
    ((2, 3, 9, 11), [3, 3], [2, 2], [1, 1], False, False),
    ((2, 3, 9, 11), [3, 3], [2, 2], [1, 1], True, True),
    ((1, 2, 8, 7), [2, 3], [1, 2], [1, 0], True, False),
    ((1, 2, 6, 7, 5), [2, 3, 2], [2, 1, 2], [1, 1, 0], False, False),
]


def _eager(x, k, s, p, ceil):
    op = torch.ops.aten.max_pool2d_with_indices if len(k) == 2 else \
        torch.ops.aten.max_pool3d_with_indices
    return op(x, k, s, p, [1] * len(k), ceil)


def _input(shape, cl, special=False):
    x = torch.randn(shape)
    if special:              # ties, and -inf everywhere in the first rows (windows of -inf)
        x = x.round()
        x[..., :2, :] = -math.inf
    if cl:
        x = x.to(memory_format=torch.channels_last)
    return x


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_offsets_rebuild_eagers_indices(case, special):
    shape, k, s, p, ceil, cl = case
    x = _input(shape, cl, special)
    values, indices = _eager(x, k, s, p, ceil)
    ours, offsets = max_pool_offsets(x, k, s, p, [1] * len(k), ceil)
    assert offsets.dtype == torch.int8 and offsets.stride() == indices.stride()
    assert torch.equal(ours, values)
    assert 0 <= int(offsets.min()) and int(offsets.max()) < math.prod(k)
    rebuilt = offsets_to_indices(offsets, k, list(x.shape[-len(k):]), s, p, [1] * len(k))
    assert torch.equal(rebuilt, indices)


def test_dilated_and_large_windows_keep_eagers_op():
    two = max_pool_decompositions()[torch.ops.aten.max_pool2d_with_indices.default]
    x = torch.randn(1, 1, 20, 20)
    assert two(x, [3, 3], [1, 1], [1, 1], [2, 2], False) is NotImplemented
    assert two(x, [12, 12], [1, 1], [0, 0], [1, 1], False) is NotImplemented
    values, indices = two(x, [3, 3], [2, 2], [1, 1], [1, 1], False)
    assert torch.equal(indices, _eager(x, [3, 3], [2, 2], [1, 1], False)[1])


def _model(k, s, p, ceil):
    def f(x):
        y = torch.relu(x * 2.0 + 1.0)
        pool = torch.nn.functional.max_pool2d if len(k) == 2 else torch.nn.functional.max_pool3d
        return pool(y, k, s, p, ceil_mode=ceil).sum(dim=(-2, -1))
    return f


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("case", CASES[:3])
def test_compiled_training_saves_int8_offsets(case, special):
    shape, k, s, p, ceil, cl = case
    x = _input(shape, cl, special).requires_grad_()
    f = _model(k, s, p, ceil)
    torch._dynamo.reset()
    out = cherenkov.compile(f, partitioner="cherenkov")(x)
    out.sum().backward()
    ours = x.grad.clone()
    x.grad = None
    ref = f(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(ours, x.grad)
    pooled = _eager(x.detach(), k, s, p, ceil)[0].numel()
    saved = {d.nbytes for d in partition.LAST_REPORT.saved}
    assert pooled in saved and 8 * pooled not in saved    # int8 offsets, no int64 indices
