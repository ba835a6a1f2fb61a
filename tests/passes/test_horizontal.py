"""Horizontal fusion into combo launches -- small single-input kernels (autocast's weight
casts), and updates written back into inputs (a compiled optimizer step): results equal
eager's in the Triton interpreter, the plan has one kernel step for them, updates stay in
place, and what must keep its own kernel does."""
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
    def fn(x, s, *ws):       # weights cast to bf16 as autocast does, and a sine
        return [w.to(torch.bfloat16) for w in ws] + [s.sin(), x.to(torch.bfloat16)]
    ws = _weights()
    x, s = torch.randn(5, 9), torch.randn(100)
    labels = _check(fn, x, s, *ws)
    assert labels == ["combo0"], labels
    plan = next(iter(COMPILED[-1][0].cache.values()))
    combo = next(s for s in plan.steps if s.label == "combo0")
    assert len(combo.kernel.parts) == 6 and len(combo.out_slots) == 6


def test_only_casts_the_schedule_runs_back_to_back_are_combined():
    """Casts interleaved with the matmuls reading them stay where the schedule put them."""
    def fn(x, *ws):
        return [x.to(torch.bfloat16) @ w.to(torch.bfloat16).t() for w in ws]
    labels = _check(fn, torch.randn(5, 9), *_weights())
    plan = next(iter(COMPILED[-1][0].cache.values()))
    kinds = [(s.kind, s.label) for s in plan.steps if s.kind != "view"]
    for i, (kind, label) in enumerate(kinds):
        if label.startswith("combo"):
            assert i == 0 or kinds[i - 1][0] != "kernel"
    assert len(labels) >= 2


def test_the_same_buffer_read_by_two_parts_is_passed_once():
    from cherenkov.codegen.combo import render_combo
    from cherenkov.codegen.triton_renderer import RenderedKernel

    def part(name, body, args, grid):
        src = (f"@triton.jit\ndef {name}(in_0, out_0, XBLOCK: tl.constexpr):\n"
               f"    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n    {body}\n")
        return RenderedKernel(name, src, args, grid, 4)
    combo = render_combo([(part("k0", "pass", ["a", "b"], 3), 128, 1),
                          (part("k1", "y = 1", ["a", "c"], 2), 256, 1)], "combo7")
    # inputs first, then outputs: the launcher takes the last arguments for the outputs
    assert combo.arg_names == ["a", "b", "c"] and combo.grid == 5 and combo.name == "combo7"
    combo = render_combo([(part("k0", "pass", ["a", "b"], 3), 128, 1),
                          (part("k1", "y = 1", ["d", "c"], 2), 256, 1)], "combo7")
    assert combo.arg_names == ["a", "d", "b", "c"]
    assert "def combo7(a_0, a_1, a_2, a_3):" in combo.source
    assert "(pid >= 3) & (pid < 5)" in combo.source and ", a_1, a_3, 256)" in combo.source
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


def test_combining_moves_no_cast_earlier_than_the_schedule_had_it():
    """Only runs of casts the schedule launches back to back are combined: a model whose
    casts the plan interleaves with its matmuls keeps its forward's peak memory."""
    from cherenkov.runtime.memory_plan import live_bytes
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    x = torch.randn(4, 64)
    peaks = []
    for combine in (False, True):
        start = len(COMPILED)
        compiled = cherenkov.compile(model, strict=True, cpu_backend="triton",
                                     combine_casts=combine)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            compiled(x).float().sum().backward()
        forward = next(g for g, info in COMPILED[start:] if info.name.startswith("forward"))
        # what the plan allocates (its inputs, the parameters, the caller holds anyway)
        peaks.append(max(live_bytes(next(iter(forward.cache.values())), inputs=False)))
        model.zero_grad()
    assert peaks[1] <= peaks[0], peaks


def _adamw_pair(shapes):
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(*s)) for s in shapes]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    return (ours, ref, torch.optim.AdamW(ours, lr=0.01, foreach=True),
            torch.optim.AdamW(ref, lr=0.01, foreach=True))


@pytest.mark.parametrize("max_parts", [32, 2])
def test_a_compiled_adamw_step_is_multi_tensor_and_updates_in_place(monkeypatch, max_parts):
    """The per-parameter updates (each reading p, g, m, v and writing p, m, v) share combo
    launches, chunked by MAX_UPDATE_PARTS; the step count's increment, which they read, keeps
    its own launch before them; every update is still written into its input in place."""
    from tests.optim_steps import plans_since, step_alongside
    monkeypatch.setattr(horizontal, "MAX_UPDATE_PARTS", max_parts)
    shapes = [(64, 33), (7,), (3, 5, 2), (16,), (16,)]
    ours, ref, opt, opt_ref = _adamw_pair(shapes)
    start = len(COMPILED)
    step_alongside(cherenkov.compile(opt.step, strict=True, cpu_backend="triton"), opt_ref,
                   ours, ref, atol=1e-5)
    plan, = plans_since(start)
    kernels = [s for s in plan.steps if s.kind == "kernel"]
    combos = [s for s in kernels if s.label.startswith("combo")]
    # 32: one combo of all 5; 2: two combos of 2, the fifth update alone
    assert [len(s.kernel.parts) for s in combos] == ([5] if max_parts == 32 else [2, 2])
    assert len(kernels) == 1 + len(combos) + (0 if max_parts == 32 else 1)
    assert not kernels[0].label.startswith("combo")          # the step count first
    assert plan.in_place == set(range(len(plan.graph.mutations)))


def test_combine_updates_can_be_turned_off():
    from tests.optim_steps import plans_since, step_alongside
    ours, ref, opt, opt_ref = _adamw_pair([(8, 3), (5,)])
    start = len(COMPILED)
    step_alongside(cherenkov.compile(opt.step, strict=True, cpu_backend="triton",
                                     combine_updates=False), opt_ref, ours, ref, atol=1e-5)
    plan, = plans_since(start)
    assert not any(s.label.startswith("combo") for s in plan.steps)


def test_an_input_another_part_reads_is_not_overwritten_in_place():
    """Two updates in one combo, one reading the input the other writes back: one launch has
    no order between its parts, so that write goes to a buffer of its own (copied back after
    the launch) and the reader sees the old value."""
    def fn(a, b):
        b.add_(a[:30] * 2)              # reads a before a's update (eager's order)
        a.mul_(3)
        return ()
    a, b = torch.randn(40), torch.randn(30)
    a_ref, b_ref = a.clone(), b.clone()
    start = len(COMPILED)
    cherenkov.compile(fn, strict=True, cpu_backend="triton")(a, b)
    fn(a_ref, b_ref)
    torch.testing.assert_close(a, a_ref)
    torch.testing.assert_close(b, b_ref)
    plan = next(iter(COMPILED[start][0].cache.values()))
    combo, = [s for s in plan.steps if s.label.startswith("combo")]
    assert len(combo.kernel.parts) == 2
    written = [plan.graph.inputs[plan.graph.mutations[k][0]].shape for k in plan.in_place]
    assert written == [(30,)]                  # b in place, a not


def test_a_part_reading_a_getitem_scheduled_between_parts_starts_a_new_combo():
    """A getitem (or view) between two parts runs after the combo, which sits at its first
    part's place: a later part reading it cannot join that combo (found in review)."""
    def fn(x, a, b):
        v, i = torch.sort(x)
        a.add_(v)                     # reads getitem 0
        b.add_(i.float())             # reads getitem 1, scheduled after a's update
        return ()
    args = [torch.randn(8), torch.randn(8), torch.randn(8)]
    ref = [t.clone() for t in args]
    cherenkov.compile(fn, strict=True, cpu_backend="triton")(*args)
    fn(*ref)
    for got, want in zip(args, ref):
        torch.testing.assert_close(got, want)


def test_no_input_is_written_in_place_by_a_step_reading_an_alias_of_it():
    """A part (or a single kernel) reading the input through a library view of it
    (diagonal) would read elements other programs already overwrote: the update gets a
    buffer of its own (found in review; the single-kernel case predates combos)."""
    def combo(a, b):
        b.add_(a.diagonal().flip(0))
        a.mul_(3)
        return ()

    def single(a, b):
        b.add_(1)
        a.add_(a.diagonal().flip(0))
        return ()
    for fn, n in ((combo, 64), (single, 512)):
        args = [torch.randn(n, n), torch.randn(n if fn is combo else 8)]
        ref = [t.clone() for t in args]
        start = len(COMPILED)
        cherenkov.compile(fn, strict=True, cpu_backend="triton")(*args)
        fn(*ref)
        for got, want in zip(args, ref):
            torch.testing.assert_close(got, want)
        plan = next(iter(COMPILED[start][0].cache.values()))
        families = plan._aliases()
        for step in plan.steps:
            for out, slot in getattr(step, "into", {}).items():
                assert not (families.get(slot, {slot}) - {slot}) & set(step.reads), step.label
