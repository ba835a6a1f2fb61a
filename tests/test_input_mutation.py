"""In-place updates of a compiled function's inputs reach the caller's tensors (a compiled
optimizer step, a running statistic), or the graph runs in eager with the reason: never a
silently dropped update."""
import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from tests.optim_steps import plans_since


def test_inplace_update_of_an_input_is_applied():
    def f(x, y):
        x.add_(y)
        return (x * 2).sum()
    x, y = torch.randn(8), torch.randn(8)
    x_ref = x.clone()
    got = cherenkov.compile(f, strict=True)(x, y)
    want = f(x_ref, y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, x_ref)


def test_every_call_updates_again_and_reads_see_the_old_value():
    def f(x, buf):
        out = buf * 3 + x               # reads buf before the update
        buf.mul_(0.5).add_(x)
        return out
    x, buf = torch.randn(4, 5), torch.randn(4, 5)
    buf_ref = buf.clone()
    compiled = cherenkov.compile(f, strict=True)
    for _ in range(3):
        torch.testing.assert_close(compiled(x, buf), f(x, buf_ref))
        torch.testing.assert_close(buf, buf_ref)


def test_update_of_a_view_of_an_input_is_correct():
    def f(x):
        x[1:3].mul_(2)
        return x.sum()
    x = torch.randn(5, 3)
    x_ref = x.clone()
    got = cherenkov.compile(f, strict=False)(x)
    torch.testing.assert_close(got, f(x_ref))
    torch.testing.assert_close(x, x_ref)


def test_compiled_optimizer_step_matches_eager():
    torch.manual_seed(0)
    params = [torch.randn(6, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    ref = [p.detach().clone().requires_grad_() for p in params]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref, lr=0.1, momentum=0.9)
    step = cherenkov.compile(lambda: opt.step(), strict=False)
    for _ in range(3):
        for ps in (params, ref):
            for p in ps:
                p.grad = torch.ones_like(p) * p.detach().sum()
        step()
        opt_ref.step()
        for p, q in zip(params, ref):
            torch.testing.assert_close(p, q)


def test_adamw_step_compiles_without_externs_and_matches_eager():
    """Adam's decomposition leaves prims.fma (a * b + c rounded once): it is generated code,
    rounded exactly once on both CPU backends."""
    torch.manual_seed(0)
    params = [torch.randn(5, 3, requires_grad=True), torch.randn(3, requires_grad=True)]
    ref = [p.detach().clone().requires_grad_() for p in params]
    opt = torch.optim.AdamW(params, lr=0.1)
    opt_ref = torch.optim.AdamW(ref, lr=0.1)
    start = len(COMPILED)
    step = cherenkov.compile(lambda: opt.step(), strict=True)
    for _ in range(3):
        for ps in (params, ref):
            for p in ps:
                p.grad = torch.cos(p.detach())
        step()
        opt_ref.step()
        for p, q in zip(params, ref):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)   # op order differs
    infos = [info for _, info in COMPILED[start:]]
    assert infos and all(not info.externs for info in infos)


def test_fma_rounds_once_on_both_cpu_backends():
    torch.manual_seed(0)
    a, b, c = torch.randn(300), torch.randn(300), torch.randn(300)
    exact = (a.double() * b.double() + c.double()).float()
    fn = lambda a, b, c: torch.ops.prims.fma.default(a, b, c)  # noqa: E731
    for backend in ("cpp", "triton"):
        got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(a, b, c)
        assert torch.equal(got, exact), backend


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_compiled_adamw_step_writes_parameters_in_place(backend):
    """AdamW's parameter, moment and step-counter updates are written by the kernels straight
    into the optimizer's tensors (no copy back), bump their versions as copy_ would, and match
    eager AdamW step for step."""  # noqa: D401
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = torch.optim.AdamW(ours, lr=0.1, foreach=False)
    opt_ref = torch.optim.AdamW(ref, lr=0.1, foreach=False)
    start = len(COMPILED)
    step = cherenkov.compile(opt.step, strict=True, cpu_backend=backend)
    for _ in range(3):
        for a, b in zip(ours, ref):
            g = torch.randn_like(a)
            a.grad, b.grad = g.clone(), g.clone()
        before = ours[0]._version
        step()
        opt_ref.step()
        assert ours[0]._version > before
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    plans = [cg for cg in plans_since(start) if cg.graph.mutations]
    assert plans and all(len(cg.in_place) == len(cg.graph.mutations) for cg in plans)
    if backend == "cpp":     # the per-parameter C++ kernels run as one call into their library
        assert all(any(s.kind == "kernel_batch" for s in cg.fast_steps) for cg in plans)


def test_an_input_read_after_its_update_is_computed_is_not_overwritten_early():
    """y = x + 1 must be computed before the matmul that feeds x * (y @ w), which reads the
    old x: writing y into x in place would feed that product the new values, so the update
    is copied after the run instead."""
    def f(x, w):
        y = x + 1
        out = x * (y @ w)
        x.copy_(y)
        return out
    start = len(COMPILED)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    x_ref = x.clone()
    got = cherenkov.compile(f, strict=True)(x, w)
    torch.testing.assert_close(got, f(x_ref, w))
    torch.testing.assert_close(x, x_ref)
    plans = [cg for cg in plans_since(start) if cg.graph.mutations]
    assert plans and not any(cg.in_place for cg in plans)


def test_a_clone_of_an_input_comes_back_as_a_new_tensor():
    """clone/contiguous of an input lower to nothing (kernels read through them), but the
    output must not be the input itself: writing into one would change the other, and an
    in-place update of the input (SGD's momentum buffer starts as a clone of the gradient
    that the same step then updates) would change the returned value."""
    x = torch.randn(4, 3)
    a, b, v = cherenkov.compile(lambda x: (x.clone(), x.detach().clone().view(12), x.view(12)),
                                strict=True)(x)
    assert a.data_ptr() != x.data_ptr() and b.data_ptr() != x.data_ptr()
    assert torch.equal(a, x) and torch.equal(b, x.view(12))
    assert v.data_ptr() == x.data_ptr()              # a view stays a view, as in eager

    def f(g):
        buf = g.clone()
        g.add_(buf, alpha=0.5)
        return buf
    g, g_ref = torch.randn(5), None
    g_ref = g.clone()
    got = cherenkov.compile(f, strict=True)(g)
    want = f(g_ref)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g, g_ref)


def test_outputs_that_are_copies_never_share_memory():
    """y and y.clone() are two tensors in eager; so are two clones of y; a view of y stays a
    view of the first. A value written into an input in place and also returned (as a clone,
    or as the value copied into the input) is not the input itself."""
    x = torch.randn(4)

    def f(x):
        y = x * 2
        return y, y.clone(), y.view(2, 2), y.clone()
    a, b, c, d = cherenkov.compile(f, strict=True)(x)
    assert len({a.data_ptr(), b.data_ptr(), d.data_ptr()}) == 3
    assert c.data_ptr() == a.data_ptr()
    for got, want in zip((a, b, c, d), f(x)):
        torch.testing.assert_close(got, want)

    def g(x):
        x.add_(1)
        return x.clone()

    def h(x):
        y = x * 2
        x.copy_(y)
        return y
    for fn in (g, h):
        ours, ref = torch.randn(5), None
        ref = ours.clone()
        got, want = cherenkov.compile(fn, strict=True)(ours), fn(ref)
        assert got.data_ptr() != ours.data_ptr()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(ours, ref)
        got.zero_()                                   # the caller's copy is its own
        torch.testing.assert_close(ours, ref)


def test_training_graph_outputs_that_are_copies_never_share_memory():
    """The same in a forward graph with a backward: its user outputs are told apart from the
    activations it saves (which may share), and gradients flow through both copies."""
    x = torch.randn(6, requires_grad=True)

    def f(x):
        y = torch.sin(x)
        return y, y.clone()
    a, b = cherenkov.compile(f, strict=True)(x)
    assert a.data_ptr() != b.data_ptr()
    (a * 2 + b).sum().backward()
    torch.testing.assert_close(x.grad, 3 * torch.cos(x.detach()))
