"""output_strides: the strides a compiled plan's outputs have as it returns them."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cherenkov.compiler import compile_fx
from cherenkov.config import Config
from cherenkov.runtime.output_strides import output_strides


def test_view_outputs_report_the_strides_the_plan_returns():
    def fn(x):
        y = torch.tanh(x)
        return y.t(), y[:, None, :].expand(4, 3, 5), y * 2
    x = torch.randn(4, 5)
    gm = make_fx(fn)(x)
    compiled, _ = compile_fx(gm, [x], Config())
    outs = compiled([x.clone()])
    assert output_strides(compiled) == [tuple(o.stride()) for o in outs]
    assert 0 in output_strides(compiled)[1]        # the expand's broadcast dimension
