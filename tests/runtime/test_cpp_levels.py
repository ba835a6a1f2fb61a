"""C++ kernel batches by levels: independent serial kernels of one batch (an optimizer step's
per-parameter updates) run side by side on the threads; conflicting kernels stay in order."""
from types import SimpleNamespace

import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.runtime import compiled_graph
from cherenkov.runtime.compiled_graph import _levels


def _kernel(reads, outs, into=None, parallel=False):
    return SimpleNamespace(reads=list(reads) + list(outs), out_slots=list(outs),
                           into=dict(into or {}),
                           launcher=SimpleNamespace(parallel_inside=parallel))


def test_levels_order_conflicts_and_run_independent_kernels_together():
    members = [
        _kernel([0], [10]),              # a: reads input 0
        _kernel([1], [11]),              # b: independent of a
        _kernel([10], [12]),             # c: reads a's output -> after a
        _kernel([2], [13], {13: 3}),     # d: writes input 3 in place
        _kernel([4], [14]),              # e: reads 4, a view of input 3 -> ordered with d
    ]
    roots = {3: 3, 4: 3}
    assert _levels(members, roots) == [[0, 1, 3], [2, 4]]
    # no shared storage: e is independent of d
    assert _levels(members, {}) == [[0, 1, 3, 4], [2]]
    # f reads d's output, which d wrote into input 3: f comes after d (an optimizer's step
    # counter, updated in place by one kernel and read by the parameter's update)
    counter = [_kernel([9], [30], {30: 9}), _kernel([0, 30], [31]), _kernel([1], [32])]
    assert _levels(counter, {}) == [[0, 2], [1]]


def test_a_kernel_parallel_inside_runs_alone_after_everything_before_it():
    members = [_kernel([0], [10]), _kernel([1], [11]), _kernel([2], [12], parallel=True),
               _kernel([3], [13]), _kernel([4], [14])]
    assert _levels(members, {}) == [[0, 1], [2], [3, 4]]
    assert _levels([_kernel([0], [10]), _kernel([10], [11])], {}) is None   # a chain


def _adamw_step(params, levels: bool, monkeypatch):
    if not levels:
        monkeypatch.setattr(compiled_graph, "_levels", lambda members, roots: None)
    opt = torch.optim.AdamW(params, lr=0.05, foreach=False)
    start = len(COMPILED)
    step = cherenkov.compile(opt.step, strict=True, cpu_backend="cpp")
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        step()
    plans = [cg for sp, _ in COMPILED[start:] if sp is not None for cg in sp.cache.values()]
    monkeypatch.undo()
    return plans


def test_optimizer_batch_by_levels_is_bitwise_the_sequential_batch(monkeypatch):
    shapes = [(64, 33), (7,), (130, 20), (5, 5, 5), (300,), (17, 3)]
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in a]
    plans = _adamw_step(a, True, monkeypatch)
    _adamw_step(b, False, monkeypatch)
    opt = torch.optim.AdamW(ref, lr=0.05, foreach=False)
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        for p in ref:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    for x, y, r in zip(a, b, ref):
        assert torch.equal(x, y)
        torch.testing.assert_close(x, r, rtol=1e-5, atol=1e-6)
    batches = [st for cg in plans for st in cg.fast_steps if st.kind == "kernel_batch"]
    levels = [_levels(st.members, plans[0]._storage_roots(plans[0]._aliases())) for st in batches]
    assert any(lv is not None and max(len(g) for g in lv) >= len(shapes) for lv in levels), (
        levels, [cg.graph.name for cg in plans])
