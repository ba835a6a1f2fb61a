"""Multi-tensor (`_foreach_*`) optimizer steps and gradient clipping compile into per-tensor
generated kernels (no foreach library call left) and match eager step for step."""
from __future__ import annotations

import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.capture.foreach import foreach_decompositions
from tests.optim_steps import plans_since, step_alongside

aten = torch.ops.aten


def _params(seed=0):
    torch.manual_seed(seed)
    ours = [torch.nn.Parameter(torch.randn(6, 5)), torch.nn.Parameter(torch.randn(7)),
            torch.nn.Parameter(torch.randn(2, 3, 4))]
    return ours, [torch.nn.Parameter(p.detach().clone()) for p in ours]


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
], ids=["adamw", "sgd-nesterov"])
def test_foreach_optimizer_step_is_generated_per_tensor_and_matches_eager(make):
    ours, ref = _params()
    opt, opt_ref = make(ours), make(ref)
    start = len(COMPILED)
    step_alongside(cherenkov.compile(opt.step, strict=True), opt_ref, ours, ref)
    plans = plans_since(start)
    assert plans
    for cg in plans:
        assert not any(s.kind == "library" for s in cg.steps), "a foreach op was left whole"
        # one kernel per tensor, or one part per tensor of a combo launch (combine_updates)
        parts = sum(len(getattr(s.kernel, "parts", None) or [s.kernel])
                    for s in cg.steps if s.kind == "kernel")
        assert parts >= len(ours)


def test_foreach_gradient_clipping_matches_eager():
    ours, ref = _params(1)
    for a, b in zip(ours, ref):
        g = torch.randn_like(a) * 3
        a.grad, b.grad = g.clone(), g.clone()

    def clip(ps):
        return torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
    got = cherenkov.compile(clip, strict=True)(ours)
    want = clip(ref)
    torch.testing.assert_close(got, want)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad)


def test_table_covers_the_optimizer_ops_and_leaves_reductions_whole():
    table = foreach_decompositions()
    for op in (aten._foreach_add.Scalar, aten._foreach_add.List, aten._foreach_lerp.Scalar,
               aten._foreach_mul.Tensor, aten._foreach_addcdiv.Scalar, aten._foreach_sqrt.default,
               aten._foreach_pow.ScalarAndTensor, aten._foreach_norm.Scalar):
        assert op in table, op
    assert aten._foreach_max.default not in table
    assert aten._foreach_addcmul.Tensor not in table
    # one call of the base op per tensor, lists indexed and scalars passed on
    xs, ys = [torch.randn(3), torch.randn(2, 2)], [torch.randn(3), torch.randn(2, 2)]
    got = table[aten._foreach_add.List](xs, ys, alpha=2.0)
    for g, x, y in zip(got, xs, ys):
        torch.testing.assert_close(g, x + 2.0 * y)
    got = table[aten._foreach_addcmul.Scalar](xs, ys, ys, 0.5)
    for g, x, y in zip(got, xs, ys):
        torch.testing.assert_close(g, x + 0.5 * y * y)
    got = table[aten._foreach_pow.ScalarAndTensor](0.9, xs)
    for g, x in zip(got, xs):
        torch.testing.assert_close(g, torch.pow(0.9, x))


def test_step_counters_run_as_one_kernel():
    """A capturable AdamW keeps one step counter per parameter: their increments share no
    data, so fusion never pairs them for bytes saved, but they run as one scalar kernel
    rather than one launch each; every counter and parameter still matches eager."""
    ours, ref = _params(2)
    # eager checks capturable's devices (CPU is not one); compiled, the counters are tensor
    # math either way -- the reference is the same update, not capturable
    opt = torch.optim.AdamW(ours, lr=0.05, foreach=True, capturable=True)
    opt_ref = torch.optim.AdamW(ref, lr=0.05, foreach=True)
    start = len(COMPILED)
    step_alongside(cherenkov.compile(opt.step, strict=True), opt_ref, ours, ref, steps=2)
    for a, b in zip(ours, ref):
        assert float(opt.state[a]["step"]) == float(opt_ref.state[b]["step"]) == 2.0
    for cg in plans_since(start):
        kernels = [s.kernel for s in cg.steps if s.kind == "kernel"]
        assert sum(k.X == 1 and k.R == 1 for k in kernels) <= 1
        assert len(kernels) <= len(ours) + 1


def test_dependent_scalars_are_not_batched_out_of_order():
    """Scalar results that feed each other through a reduction keep their order."""
    def f(x, y):
        a = x.sum() * 2.0               # scalar from a reduction
        b = (y * a).sum() + 1.0         # a reduction reading a, then a scalar
        return a + 1.0, b * 3.0, (a * b).exp()
    x, y = torch.randn(33), torch.randn(17)
    got = cherenkov.compile(f, strict=True)(x, y)
    for g, w in zip(got, f(x, y)):
        torch.testing.assert_close(g, w)
