"""Horizontal fusion of small single-input kernels (autocast's weight casts) into one combo
launch: results equal eager's in the Triton interpreter, the plan has one kernel step for
them, and what must keep its own kernel does."""
import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.passes import horizontal


def _kernel_steps(start):
    plan = next(iter(COMPILED[-1][0].cache.values()))
    assert len(COMPILED) > start
    return [s.label for s in plan.steps if s.kind == "kernel"]


def _check(fn, *args, **options):
    start = len(COMPILED)
    options.setdefault("combine_casts", True)
    compiled = cherenkov.compile(fn, strict=True, cpu_backend="triton", **options)
    for got, want in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(got, want)
    return _kernel_steps(start)


def _weights(n=4):
    torch.manual_seed(0)
    return [torch.randn(17 + i, 9) for i in range(n)]


def test_casts_of_inputs_share_one_launch_and_match_eager():
    def fn(x, s, *ws):       # a layer's weights cast for a bf16 matmul, as autocast does
        casts = [w.to(torch.bfloat16) for w in ws]
        return [x.to(torch.bfloat16) @ w.t() for w in casts] + [s.sin()]
    ws = _weights()
    x, s = torch.randn(5, 9), torch.randn(100)
    labels = _check(fn, x, s, *ws)
    combos = [label for label in labels if label.startswith("combo")]
    assert len(combos) == 1, labels
    plan = next(iter(COMPILED[-1][0].cache.values()))
    combo = next(s for s in plan.steps if s.label == combos[0])
    assert len(combo.kernel.parts) == 6            # 4 weight casts, x's cast, the sine
    assert len(combo.out_slots) == 6


def test_the_same_buffer_read_by_two_parts_is_passed_once():
    from cherenkov.codegen.combo import render_combo
    from cherenkov.codegen.triton_renderer import RenderedKernel

    def part(name, body, args, grid):
        src = (f"@triton.jit\ndef {name}(in_0, out_0, XBLOCK: tl.constexpr):\n"
               f"    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n    {body}\n")
        return RenderedKernel(name, src, args, grid, 4)
    combo = render_combo([(part("k0", "pass", ["a", "b"], 3), 128),
                          (part("k1", "y = 1", ["a", "c"], 2), 256)], "combo7")
    assert combo.arg_names == ["a", "b", "c"] and combo.grid == 5 and combo.name == "combo7"
    assert "def combo7(a_0, a_1, a_2):" in combo.source
    assert "(pid >= 3) & (pid < 5)" in combo.source and ", a_0, a_2, 256)" in combo.source
    assert "tl.program_id(0)" not in combo.source.split("def combo7")[0]


def test_identical_parts_are_defined_once_and_chunks_respect_max_parts(monkeypatch):
    monkeypatch.setattr(horizontal, "MAX_PARTS", 2)
    ws = [torch.randn(16, 8) for _ in range(5)]      # same shape: the same part text
    labels = _check(lambda *ws: [w.to(torch.bfloat16) for w in ws], *ws)
    assert sorted(label for label in labels if label.startswith("combo")) == ["combo0",
                                                                               "combo1"]
    assert len(labels) == 3                           # two combos of 2, one cast alone
    source = next(k[3] for k in COMPILED[-1][1].kernels if k[0] == "combo0")
    assert source.count("def p_") == 1 and source.count("    if ") == 2


def test_big_kernels_and_values_written_back_keep_their_own_launch(monkeypatch):
    monkeypatch.setattr(horizontal, "MAX_PART_ELEMENTS", 100)

    def fn(small1, small2, big, state):
        state.mul_(0.5)                            # an update written back into its input
        return small1.to(torch.bfloat16), small2.exp(), big.to(torch.bfloat16)
    args = [torch.randn(8, 8), torch.randn(5), torch.randn(30, 30), torch.randn(10)]
    ref_state = args[3].clone()
    labels = _check(fn, *args)
    torch.testing.assert_close(args[3], ref_state * 0.25)     # eager's call, then ours
    plan = next(iter(COMPILED[-1][0].cache.values()))
    combos = [s for s in plan.steps if s.label.startswith("combo")]
    assert len(combos) == 1 and len(combos[0].kernel.parts) == 2, labels
    assert len(labels) == 3                        # the combo, the big cast, the update


def test_combining_is_off_by_default():
    ws = _weights(3)
    start = len(COMPILED)
    compiled = cherenkov.compile(lambda *ws: [w.to(torch.bfloat16) for w in ws], strict=True,
                                 cpu_backend="triton")
    compiled(*ws)
    labels = _kernel_steps(start)
    assert len(labels) == 3 and not any(label.startswith("combo") for label in labels)


@pytest.mark.parametrize("n", [2, 7])
def test_a_backward_through_combined_casts_matches_eager(n):
    """Training: the forward's weight casts combined, gradients as eager's."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(n)])
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    compiled = cherenkov.compile(model, strict=True, cpu_backend="triton", combine_casts=True)
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(x)
    out.float().square().mean().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x
        for i in range(n):
            h = torch.nn.functional.linear(h, ref[2 * i], ref[2 * i + 1])
    h.float().square().mean().backward()
    for p, q in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-3)
    names = [info.name for _, info in COMPILED[-2:]]
    assert any(k[0].startswith("combo") for _, info in COMPILED[-2:]
               for k in info.kernels), names
