"""capture/ce_forward_grad.py + templates/ce_forward_grad_op.py: a cross-entropy whose logits
need a gradient makes that gradient in the forward; loss and gradients as eager's."""
import logging

import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.templates.ce_forward_grad_op import cross_entropy_forward_grad

MOVED = "cross-entropy gradient made in the forward"


class Head(torch.nn.Module):
    """An LM head that returns its logits too (so the LM head fusion does not apply)."""

    def __init__(self, hidden=16, vocab=40, bias=False, upcast=False):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=bias)
        self.upcast = upcast

    def forward(self, x, targets, **ce):
        logits = self.lm_head(torch.tanh(self.proj(x)))
        flat = logits.view(-1, logits.size(-1))
        return logits, F.cross_entropy(flat.float() if self.upcast else flat, targets.view(-1),
                                       **ce)


def _run(model, mode, caplog, dtype=torch.float32, tol=1e-5, **ce):
    torch.manual_seed(0)
    model = model.to(dtype)
    x, t = torch.randn(2, 24, 16, dtype=dtype), torch.randint(0, 40, (2, 24))
    t[0, :5] = ce.get("ignore_index", -100)
    ref_logits, ref = model(x, t, **ce)
    want = torch.autograd.grad(ref, list(model.parameters()))
    torch._dynamo.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cherenkov"):
        logits, loss = cherenkov.compile(model, strict=True, ce_forward_grad=mode,
                                         dynamic=False)(x, t, **ce)
    got = torch.autograd.grad(loss, list(model.parameters()))
    assert loss.dtype == ref.dtype
    torch.testing.assert_close(logits, ref_logits, rtol=tol, atol=tol)
    torch.testing.assert_close(loss, ref, rtol=tol, atol=tol)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=tol * 10, atol=tol)
    return MOVED in caplog.text


@pytest.mark.parametrize("ce", [{}, {"reduction": "sum"}, {"ignore_index": 3}])
def test_gradient_in_the_forward_matches_eager(ce, caplog):
    assert _run(Head(), "on", caplog, **ce)


def test_bias_and_half_precision_with_an_upcast(caplog):
    # bf16 logits upcast for the loss: the op reads the bf16 logits (fp32 math) and gives a
    # bf16 gradient, as eager's cast back does
    assert _run(Head(bias=True, upcast=True), "on", caplog, dtype=torch.bfloat16, tol=2e-2)


def test_not_matched_when_off_or_unsupported(caplog):
    assert not _run(Head(), "off", caplog)
    assert not _run(Head(), "on", caplog, label_smoothing=0.1)
    # "auto" moves it on CUDA only (on the CPU the kernel would run interpreted)
    assert not _run(Head(), "auto", caplog)


def test_not_matched_without_a_gradient(caplog):
    model, x, t = Head(), torch.randn(2, 24, 16), torch.randint(0, 40, (2, 24))
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="cherenkov"):
        _, loss = cherenkov.compile(model, strict=True, ce_forward_grad="on",
                                    dynamic=False)(x, t)
    torch.testing.assert_close(loss, model(x, t)[1])
    assert MOVED not in caplog.text


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_op_against_eager_with_every_target_ignored(reduction):
    logits = torch.randn(5, 9, requires_grad=True)
    for t in (torch.tensor([1, -100, 8, 0, -100]), torch.full((5,), -100)):
        ref = F.cross_entropy(logits, t, reduction=reduction)
        (want,) = torch.autograd.grad(ref, logits)
        got = cross_entropy_forward_grad(logits, t, reduction=reduction)
        (grad,) = torch.autograd.grad(got, logits)
        torch.testing.assert_close(got, ref, equal_nan=True)      # mean of none: NaN, as eager
        torch.testing.assert_close(grad, want)                    # its gradient: 0, as eager


def test_the_op_rejects_what_it_does_not_compute():
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy_forward_grad(torch.randn(3, 4), torch.zeros(3, dtype=torch.long),
                                   reduction="none")
    with pytest.raises(ValueError, match=r"\(N, V\)"):
        cross_entropy_forward_grad(torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("launch", [{}, {"block_v": 64}, {"block_v": 128, "num_warps": 2},
                                    {"block_v": 32, "reverse": False}])
def test_the_rows_kernel_under_each_launch_choice(launch):
    from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows
    torch.manual_seed(0)
    x, t = torch.randn(7, 101) * 3, torch.tensor([1, 5, -100, 100, 0, 7, 50])
    want_loss = F.cross_entropy(x, t, reduction="none")
    want = (torch.softmax(x, -1) - F.one_hot(t.clamp(min=0), 101)) * (t != -100)[:, None]
    loss, grad = torch.empty(7), torch.empty_like(x)
    cross_entropy_rows(x, t, loss, -100, True, grad=grad, **launch)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want, rtol=1e-5, atol=1e-6)
    inplace = x.clone()                    # the LM head fusion's form: over the logits
    cross_entropy_rows(inplace, t, loss, -100, True, **launch)
    torch.testing.assert_close(inplace, want, rtol=1e-5, atol=1e-6)


def test_rows_in_torch_where_the_interpreter_cannot_loop(monkeypatch):
    """Triton 3.6's interpreter with numpy 2.4 cannot run the kernel's loop
    (runtime/loader.interpreter_fault): CPU tensors then take the same rows in torch ops --
    eager's losses and gradients, NaN rows for out-of-range targets, as the kernel gives."""
    from cherenkov.runtime import loader
    from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows
    torch.manual_seed(0)
    x = (torch.randn(6, 37) * 3).to(torch.bfloat16)
    t = torch.tensor([1, 36, -100, 200, 0, -5])
    runs = {}
    for fault in ([None] if loader.interpreter_fault() is None else []) + ["cannot loop"]:
        monkeypatch.setattr(loader, "interpreter_fault", lambda fault=fault: fault)
        loss, grad, inplace = torch.empty(6), torch.empty_like(x), x.clone()
        cross_entropy_rows(x, t, loss, -100, True, grad=grad)
        cross_entropy_rows(inplace, t, torch.empty(6), -100, True)
        runs[fault] = (loss, grad, inplace)
    loss, grad, inplace = runs["cannot loop"]
    ok = torch.tensor([0, 1, 2, 4])                       # rows with a valid or ignored target
    xf, tk = x.float()[ok], t[ok]
    want_loss = F.cross_entropy(xf, tk, reduction="none")
    want = (torch.softmax(xf, -1) - F.one_hot(tk.clamp(min=0), 37)) * (tk != -100)[:, None]
    torch.testing.assert_close(loss[ok], want_loss)
    torch.testing.assert_close(grad[ok].float(), want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(inplace, grad, equal_nan=True)
    assert loss[[3, 5]].isnan().all() and grad[[3, 5]].isnan().all()
    if None in runs:                                       # the kernel, where it runs
        for kernel, torch_rows in zip(runs[None], runs["cannot loop"]):
            torch.testing.assert_close(torch_rows.float(), kernel.float(), rtol=1e-2,
                                       atol=1e-2, equal_nan=True)


def test_strided_targets_and_slices_of_minus_infinity():
    torch.manual_seed(0)
    logits = torch.randn(6, 100, requires_grad=True)
    t2 = torch.randint(40, 100, (6, 2))
    masked = logits.masked_fill(torch.arange(100) < 40, float("-inf"))   # whole first slices
    for x, t in ((logits, t2[:, 1]), (masked, t2[:, 0])):
        ref = F.cross_entropy(x, t)
        (want,) = torch.autograd.grad(ref, logits, retain_graph=True)
        got = cross_entropy_forward_grad(x, t)
        (grad,) = torch.autograd.grad(got, logits, retain_graph=True)
        torch.testing.assert_close(got, ref)
        torch.testing.assert_close(grad, want)


def test_a_single_class_column_view():
    x = torch.randn(1, 5).t().requires_grad_()           # (5, 1), strides (1, 5)
    t = torch.zeros(5, dtype=torch.long)
    got = cross_entropy_forward_grad(x, t)
    (grad,) = torch.autograd.grad(got, x)
    torch.testing.assert_close(got, F.cross_entropy(x, t))
    torch.testing.assert_close(grad, torch.zeros(5, 1))


def test_fp64_logits_stay_eager(caplog):
    # the kernel's math is fp32: fp64 keeps eager's cross-entropy (and its precision)
    assert not _run(Head(), "on", caplog, dtype=torch.float64, tol=1e-12)


def test_fused_lm_head_without_input_gradient_or_bias():
    # the fused op's unneeded gradients are distinct empty tensors (custom op outputs must
    # not alias each other)
    torch.manual_seed(0)
    w, x, t = torch.randn(40, 16, requires_grad=True), torch.randn(48, 16), torch.randint(0, 40, (48,))
    fn = lambda w, x, t: F.cross_entropy(F.linear(x, w), t)          # noqa: E731
    torch._dynamo.reset()
    got = cherenkov.compile(fn, strict=True, linear_ce="on", dynamic=False)(w, x, t)
    ref = fn(w, x, t)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(torch.autograd.grad(got, w)[0], torch.autograd.grad(ref, w)[0])
