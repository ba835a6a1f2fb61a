"""NaN propagates through max, min and what is built on them (relu, clamp, amax, amin,
logsumexp, argmax/argmin, which point at the first NaN) as in eager, on both CPU backends and
in looped reductions. Triton's tl.maximum / tl.max drop a NaN by default: a NaN activation
came back a number through relu (found by a random search over small programs)."""
import pytest
import torch

import cherenkov
import cherenkov.compiler as compiler
from cherenkov.codegen.triton_renderer import BlockConfig

FNS = {
    "maximum": lambda a, b: torch.maximum(a, b),
    "minimum": lambda a, b: torch.minimum(a, b),
    "relu": lambda a, b: a.relu() + b,
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "amax_amin": lambda a, b: (a.amax(-1), a.amin(-1), a.amax(0)),
    "logsumexp": lambda a, b: a.logsumexp(-1),
    "argmax_argmin": lambda a, b: (a.argmax(-1), a.argmin(-1)),
}


def _inputs():
    torch.manual_seed(0)
    a, b = torch.randn(6, 40), torch.randn(6, 40)
    a[1, 7] = a[1, 30] = float("nan")        # two NaN in a row: the first one's index
    a[4, 39] = float("nan")                  # in the last (masked-tail) chunk of a loop
    b[2, 3] = float("nan")
    return a, b


def _check(fn, backend):
    a, b = _inputs()
    got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(a, b)
    want = fn(a, b)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("name", sorted(FNS))
def test_nan_propagates_as_in_eager(name, backend):
    _check(FNS[name], backend)


@pytest.mark.parametrize("name", ["amax_amin", "logsumexp", "argmax_argmin"])
def test_nan_propagates_through_looped_reductions(monkeypatch, name):
    original = compiler.choose_blocks

    def choose(kernel, interpret, device=None):
        if kernel.R > 1:
            return BlockConfig(XBLOCK=2, RBLOCK=16, persistent=False, num_warps=4, unroll=2)
        return original(kernel, interpret, device=device)
    monkeypatch.setattr(compiler, "choose_blocks", choose)
    _check(FNS[name], "triton")
