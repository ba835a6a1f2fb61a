"""Inputs in every layout a caller may pass -- transposed, an offset view, broadcast by
expand (stride 0), the same tensor twice, empty, 0-d, channels_last -- give eager's values
and eager's output layout on both CPU backends (kernels address each input through its own
strides and storage offset, and store an output laid out as eager lays it out)."""
import pytest
import torch

import cherenkov

torch.manual_seed(0)
_X = torch.randn(6, 8)
CASES = {
    "transposed": (lambda x: x * 2 + 1, (_X.t(),)),
    "offset view": (lambda x: x.exp(), (_X[2:, 3:],)),
    "expanded": (lambda x, y: (x + y, (x * 2).sum(1)), (torch.randn(3, 1).expand(3, 4),
                                                        torch.randn(4).expand(3, 4))),
    "same tensor twice": (lambda a, b: a * b + a, (_X, _X)),
    "empty": (lambda x: (x.exp() + 1, x.sum(0)), (torch.randn(0, 5),)),
    "0-d": (lambda x: x * 3, (torch.tensor(2.0),)),
    "channels_last": (lambda x: (x.relu() * 2, x.sum(1)),
                      (torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(CASES))
def test_input_layouts_match_eager(name, backend):
    fn, args = CASES[name]
    got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(*args)
    want = fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride() or g.numel() <= 1
