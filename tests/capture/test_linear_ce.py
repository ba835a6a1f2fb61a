"""capture/linear_ce.py: cross_entropy(linear(...)) in a compiled graph becomes the fused LM
head + cross-entropy when the logits are read by nothing else; loss and gradients as eager's."""
import importlib

import pytest
import torch
import torch.nn.functional as F

import cherenkov

# the module (cherenkov.templates re-exports a function of the same name)
lce = importlib.import_module("cherenkov.templates.linear_cross_entropy")


class Head(torch.nn.Module):
    def __init__(self, hidden=16, vocab=40, bias=True, return_logits=False, upcast=False):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=bias)
        self.return_logits, self.upcast = return_logits, upcast

    def forward(self, x, targets, **ce):
        logits = self.lm_head(torch.tanh(self.proj(x)))
        flat = logits.view(-1, logits.size(-1))
        loss = F.cross_entropy(flat.float() if self.upcast else flat, targets.view(-1), **ce)
        return (logits, loss) if self.return_logits else loss


def _run(model, mode, **ce):
    torch.manual_seed(0)
    x, t = torch.randn(2, 24, 16), torch.randint(0, 40, (2, 24))
    t[0, :5] = ce.get("ignore_index", -100)
    ref = model(x, t, **ce)
    ref_loss = ref[1] if isinstance(ref, tuple) else ref
    want = torch.autograd.grad(ref_loss, list(model.parameters()))
    torch._dynamo.reset()
    lce.LAST_GRAD_WEIGHT_PATH.clear()
    out = cherenkov.compile(model, strict=True, linear_ce=mode, dynamic=False)(x, t, **ce)
    loss = out[1] if isinstance(out, tuple) else out
    got = torch.autograd.grad(loss, list(model.parameters()))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    return bool(lce.LAST_GRAD_WEIGHT_PATH)             # the fused op ran


@pytest.mark.parametrize("ce", [{}, {"reduction": "sum"}, {"ignore_index": 3}])
def test_fused_when_on(ce):
    assert _run(Head(), "on", **ce)


def test_without_bias_and_with_float_upcast():
    assert _run(Head(bias=False, upcast=True), "on")


def test_logits_also_returned_stay_unfused():
    assert not _run(Head(return_logits=True), "on")


def test_label_smoothing_is_not_matched():
    assert not _run(Head(), "on", label_smoothing=0.1)


def test_auto_leaves_tiny_heads_alone_and_off_is_off():
    assert not _run(Head(), "auto")
    assert not _run(Head(), "off")


def test_auto_follows_the_cost_model(monkeypatch):
    """'auto' (on CUDA graphs; the backend skips it elsewhere) asks should_fuse_linear_ce
    with the graph's (tokens, vocab, hidden) and the linear's dtype: the pass on Dynamo's
    graph, run here directly."""
    from cherenkov import hw
    from cherenkov.capture.linear_ce import fuse_linear_cross_entropy
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    x, t = torch.randn(2, 24, 16), torch.randint(0, 40, (2, 24))
    torch.compile(Head(), backend=keep, dynamic=False)(x, t)
    seen, answer = [], [False]

    def decide(tokens, vocab, hidden, dtype, spec):
        seen.append((tokens, vocab, hidden, dtype))
        return answer[0]
    monkeypatch.setattr(lce, "should_fuse_linear_ce", decide)
    spec = hw.device("h200")
    assert fuse_linear_cross_entropy(graphs[0], "auto", spec) == 0
    answer[0] = True
    assert fuse_linear_cross_entropy(graphs[0], "auto", spec) == 1
    assert seen == [(48, 40, 16, torch.float32)] * 2
    assert "fused_linear_cross_entropy" in graphs[0].code


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="linear_ce"):
        cherenkov.compile(Head(), linear_ce="always")


def test_under_bf16_autocast_the_head_runs_in_bf16():
    """The replaced linear ran in autocast's dtype; so do the fused op's matmuls (its
    gradient-weight accumulation stays fp32), and the loss is close to eager autocast's."""
    model = Head()
    torch.manual_seed(0)
    x, t = torch.randn(2, 24, 16), torch.randint(0, 40, (2, 24))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = model(x, t)
    want = torch.autograd.grad(ref, list(model.parameters()))
    torch._dynamo.reset()
    lce.LAST_GRAD_WEIGHT_PATH.clear()
    compiled = cherenkov.compile(model, strict=True, linear_ce="on", dynamic=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(x, t)
    got = torch.autograd.grad(loss, list(model.parameters()))
    assert lce.LAST_GRAD_WEIGHT_PATH == ["mm+add"]       # bf16 logits: a bf16 matmul, added
    assert loss.dtype == ref.dtype
    torch.testing.assert_close(loss.float(), ref.float(), rtol=2e-2, atol=2e-2)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), rtol=5e-2, atol=2e-2)


@pytest.mark.parametrize("arch", ["tiny", "tiny-llama"])
def test_a_model_returning_only_its_loss_gets_the_fused_head(arch):
    """GPT / Llama with return_logits=False (the train suite's gpt2-loss-only case): the LM
    head and its cross-entropy run fused; loss and every gradient as eager's."""
    from cherenkov.models import GPT, Llama, preset
    cfg = preset(arch).replace(return_logits=False, layers=1, seq=16)
    cls = GPT if cfg.arch == "gpt" else Llama
    torch.manual_seed(0)
    eager, ours = cls(cfg), cls(cfg)
    ours.load_state_dict(eager.state_dict())
    idx, tgt = torch.randint(0, cfg.vocab, (2, 16)), torch.randint(0, cfg.vocab, (2, 16))
    logits, want = eager(idx, tgt)
    assert logits is None
    want_grads = torch.autograd.grad(want, list(eager.parameters()))
    torch._dynamo.reset()
    lce.LAST_GRAD_WEIGHT_PATH.clear()
    _, loss = cherenkov.compile(ours, strict=True, linear_ce="on", dynamic=False)(idx, tgt)
    grads = torch.autograd.grad(loss, list(ours.parameters()))
    assert lce.LAST_GRAD_WEIGHT_PATH                      # the fused op ran
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_the_train_suite_runs_its_loss_only_case_when_named_in_full(tmp_path):
    from types import SimpleNamespace

    from cherenkov.bench.suites.train import extra_cases, run
    assert not extra_cases("smoke")[0].model.return_logits

    def listed(patterns, capsys=None):
        import contextlib
        import io
        out = io.StringIO()
        args = SimpleNamespace(smoke=True, cpu=True, dtype=None, cases=patterns, list=True)
        with contextlib.redirect_stdout(out):
            assert run(args) == 0
        return [line.split()[0] for line in out.getvalue().splitlines() if line.strip()]
    assert listed(["gpt2"]) == ["gpt2-style"]
    assert listed(["gpt2-loss-only"]) == ["gpt2-loss-only"]
    assert listed(None) == ["gpt2-style", "llama-style"]
