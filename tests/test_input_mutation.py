"""In-place updates of a compiled function's inputs reach the caller's tensors (a compiled
optimizer step, a running statistic), or the graph runs in eager with the reason: never a
silently dropped update."""
import torch

import cherenkov


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
    from cherenkov.backend import COMPILED
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
