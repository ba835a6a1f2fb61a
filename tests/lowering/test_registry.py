"""The lowering registry's declines: zero-element outputs, unless a lowering takes them."""
import pytest
import torch

from cherenkov.lowering.registry import Unsupported, _declining


class Ctx:
    def __init__(self, out):
        self.out = out


def test_an_empty_auxiliary_output_declines_unless_the_lowering_takes_it():
    """Flash attention's forward returns an empty debug mask beside its output: a lowering
    registered with empty_outputs=True sees the call (and handles the placeholder); any
    other declines, so the op runs as extern."""
    outs = (torch.empty(2, 3), torch.empty(0))
    seen = []

    def fn(ctx, x):
        seen.append(x)
        return "lowered"
    with pytest.raises(Unsupported, match="zero-element output"):
        _declining(fn, empty_inputs=False)(Ctx(outs), 1)
    assert _declining(fn, empty_inputs=False, empty_outputs=True)(Ctx(outs), 1) == "lowered"
    assert seen == [1]


def test_the_cuda_flash_forward_lowering_takes_its_empty_debug_mask():
    from cherenkov.lowering.registry import LOWERINGS
    lower = LOWERINGS[torch.ops.aten._scaled_dot_product_flash_attention.default]
    # past the empty-output check, it reaches the routing decision (off in this context)
    with pytest.raises(Unsupported, match="routing off"):
        lower(type("C", (), {"out": (torch.empty(1, 1, 4, 8), torch.empty(0)),
                             "route_attention": False})(), None, None, None)
