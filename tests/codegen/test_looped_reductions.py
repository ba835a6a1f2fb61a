"""Looped reductions (rows longer than one tile): staged passes, online softmax, argmax,
and rows that are entirely -inf. Tiles are forced small so every row takes several loops."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
import cherenkov.compiler as compiler
from cherenkov.codegen.triton_renderer import BlockConfig


@pytest.fixture(params=[(False, False), (False, True), (True, True)],
                ids=["looped", "looped-transposed", "persistent-transposed"])
def small_tiles(monkeypatch, request):
    original = compiler.choose_blocks

    def choose(kernel, interpret, device=None):
        persistent, transposed = request.param
        if kernel.R > 1:
            return BlockConfig(XBLOCK=4, RBLOCK=512 if persistent else 16, persistent=persistent,
                               num_warps=4, transposed=transposed,
                               unroll=0 if persistent else 2)     # as the GPU's loops are
        return original(kernel, interpret, device=device)
    monkeypatch.setattr(compiler, "choose_blocks", choose)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cross_entropy", "layer_norm",
                                  "argmax", "var_mean", "row_broadcast",
                                  "column_sums"])
def test_looped_matches_eager(small_tiles, name):
    x = torch.randn(7, 301)
    x[0, :] = float("-inf")
    x[0, 3] = 1.0                      # a row that is -inf but for one entry
    t = torch.randint(0, 301, (7,))
    t[0] = 3
    fns = {
        "softmax": lambda x: torch.softmax(x, -1),
        "log_softmax": lambda x: torch.log_softmax(x, -1),
        "cross_entropy": lambda x: F.cross_entropy(x, t),
        "layer_norm": lambda x: F.layer_norm(x[1:], (301,)),
        "argmax": lambda x: x.argmax(-1),
        "var_mean": lambda x: torch.var_mean(x[1:], -1),
        "row_broadcast": lambda x: (x[1:].sum(-1, keepdim=True) + torch.zeros(6, 301),
                                    x[1:].softmax(-1)),
        "column_sums": lambda x: (x[1:].sum(0), x[1:].amax(0), x[1:].t().argmax(-1)),
    }
    fn = fns[name]
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(x), fn(x), rtol=1e-5,
                               atol=1e-5)


def test_online_softmax_rows_starting_with_minus_inf_blocks_and_all_minus_inf(small_tiles):
    """Running max per row, rescaled once per block: a row whose first blocks are all -inf
    must rescale by 0 (not by NaN), and an all -inf row gives eager's NaN."""
    x = torch.randn(5, 301)
    x[1, :40] = float("-inf")            # the first blocks (16 wide when looped) are all -inf
    x[2, :] = float("-inf")
    x[3, 250:] = 40.0                    # the max arrives late: earlier sums are rescaled
    fn = lambda x: (torch.log_softmax(x, -1), torch.logsumexp(x, -1))  # noqa: E731
    for got, want in zip(cherenkov.compile(fn, strict=True)(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_reductions_of_loads_read_lanes_the_load_filled(small_tiles):
    """A sum, max or min straight of a load (through float casts) reads masked-off lanes as
    the load filled them (other=identity) instead of selecting them: values as eager's on
    rows whose tail is masked, also when one load feeds reductions of different identities
    (the second keeps its select)."""
    x = (torch.randn(6, 301) * 3).bfloat16()
    x[2, :] = -1e4                                  # every lane negative: max must not see 0
    fns = [lambda x: (x.float().amax(-1), x.float().amin(-1), x.float().sum(-1)),
           lambda x: torch.logsumexp(x.float(), -1),
           lambda x: (x.amax(-1), (-x).float().amin(-1))]
    for fn in fns:
        for got, want in zip(cherenkov.compile(fn, strict=True)(x), fn(x)):
            torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-2)


def test_prefilled_load_renders_its_fill_and_no_select():
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov.codegen.triton_renderer import render_triton
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.fusion import fuse
    x = torch.randn(4, 300).bfloat16()
    gm = make_fx(lambda x: x.float().amax(-1))(x)
    graph, _ = lower_fx(gm, [x], strict=True, name="g")
    (group,) = fuse(graph).groups
    src = render_triton(group.kernel, BlockConfig(XBLOCK=1, RBLOCK=128, persistent=False)).source
    assert "other=float('-inf')" in src and "tl.where" not in src
    assert "tl.program_id(0).to(tl.int64)" in src        # looped rows index in 64 bits
