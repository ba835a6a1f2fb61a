"""Graphs compiled when AOTAutograd hands them over (config `compile_ahead`, backend.py): a
training graph's forward and backward before the forward's first call, each compiled once."""
import pytest
import torch

import cherenkov
import cherenkov.backend as backend
from cherenkov.config import Config


class Head(torch.nn.Module):
    """Returns (logits, loss), as nanoGPT's model does: the loop drops the logits."""

    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(16, 32), torch.nn.Linear(32, 5)

    def forward(self, x, t):
        y = self.out(torch.nn.functional.gelu(self.fc(x)))
        return y, torch.nn.functional.cross_entropy(y, t)


def _names(start: int) -> list[str]:
    return [entry.info.name for entry in backend.COMPILED[start:]]


def _train(model, compiled, steps: int = 2):
    x, t = torch.randn(8, 16), torch.randint(0, 5, (8,))
    _, want = model(x, t)
    want.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    start = len(backend.COMPILED)
    seen = []
    for step in range(steps):
        for p in model.parameters():
            p.grad = None
        _, loss = compiled(x, t)
        seen.append(_names(start))
        loss.backward()
        torch.testing.assert_close(loss, want)
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad, g)
    seen.append(_names(start))
    return seen


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backward_compiles_before_the_forward_first_runs_and_only_once():
    torch.manual_seed(0)
    model = Head()
    seen = _train(model, cherenkov.compile(model, strict=True))
    # after the first forward call both graphs are compiled: the backward as the variant
    # without the dropped logits' gradient (a constant zero), which the backward then runs
    assert len(seen[0]) == 2 and seen[0][0].startswith("forward") and "_zero" in seen[0][1]
    assert seen[-1] == seen[0]                     # nothing compiled at the backward calls
    infos = [entry.info for entry in backend.COMPILED[-2:]]
    assert all("first run" in info.seconds for info in infos)   # each ran, timed as a first


def test_with_compile_ahead_off_the_backward_compiles_at_its_first_call():
    torch.manual_seed(0)
    model = Head()
    seen = _train(model, cherenkov.compile(model, strict=True, compile_ahead=False))
    assert len(seen[0]) == 1 and seen[0][0].startswith("forward")
    assert len(seen[-1]) == 2 and "_zero" in seen[-1][1]


def test_a_used_second_output_takes_the_full_backward_compiled_at_its_call():
    """The guess (the logits' gradient unused) is wrong here: the backward with the logits'
    gradient compiles at its first call, and the gradients stay right."""
    torch.manual_seed(0)
    model = Head()
    compiled = cherenkov.compile(model, strict=True)
    x, t = torch.randn(8, 16), torch.randint(0, 5, (8,))
    y, loss = model(x, t)
    (loss + y.square().mean()).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    start = len(backend.COMPILED)
    y, loss = compiled(x, t)
    (loss + y.square().mean()).backward()
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    names = _names(start)
    assert any(n.startswith("backward") and "_zero" not in n for n in names)


def test_only_static_inputs_and_real_value_free_plans_compile_ahead():
    on, off = Config(), Config(compile_ahead=False)
    x = torch.randn(3, 4)
    assert backend.ahead_of_time([x, 2], on)
    assert not backend.ahead_of_time([x], off)
    assert not backend.ahead_of_time([], on)
    assert not backend.ahead_of_time([x, "text"], on)


def test_a_graph_that_cannot_compile_ahead_compiles_at_its_call(monkeypatch):
    calls = []
    real = backend.compile_fx

    def once_failing(gm, inputs, config, name):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("planted ahead-of-time failure")
        return real(gm, inputs, config, name)
    monkeypatch.setattr(backend, "compile_fx", once_failing)
    fn = lambda x: torch.tanh(x) * 2  # noqa: E731
    x = torch.randn(6)
    torch.testing.assert_close(cherenkov.compile(fn)(x), fn(x))
    assert len(calls) == 2                 # ahead (failed quietly), then at the first call


def test_saved_views_are_reported_so_the_backward_compiled_ahead_is_the_one_run():
    """Llama's grouped-query attention saves K and V expanded over the query heads: the
    compiled forward returns them as views (stride 0), not in the traced layout. Reported to
    AOTAutograd, the backward's example inputs carry those strides: it compiles once."""
    from cherenkov.bench.suites.train import cases
    from cherenkov.models import build_model
    case = cases("smoke")[1]
    torch.manual_seed(0)
    model = build_model(case.model)
    tokens = torch.randint(0, case.model.vocab, (case.batch, case.seq))
    targets = torch.randint(0, case.model.vocab, (case.batch, case.seq))
    _, want = model(tokens, targets)
    want.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    start = len(backend.COMPILED)
    _, loss = cherenkov.compile(model, dynamic=False)(tokens, targets)
    ahead = _names(start)
    loss.backward()
    assert len(ahead) == 2 and _names(start) == ahead
    from cherenkov.runtime.output_strides import output_strides
    forward = backend.COMPILED[start][0]
    saved = [s for s in output_strides(forward.cache[next(iter(forward.cache))])
             if s is not None and 0 in s]
    assert saved                                   # there were stride-0 views to report
    torch.testing.assert_close(loss, want)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


def test_graphs_compile_ahead_outside_aotautograds_fake_mode(monkeypatch):
    """AOTAutograd calls its compilers under its fake mode; the passes' meta-tensor work ran
    3-5x slower under it, so a graph compiled ahead is compiled outside it, as at a call."""
    active = []
    real = backend.compile_fx

    def spy(gm, inputs, config, name):
        active.append(torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
                      is not None)
        return real(gm, inputs, config, name)
    monkeypatch.setattr(backend, "compile_fx", spy)
    torch.manual_seed(0)
    model = Head()
    _train(model, cherenkov.compile(model, strict=True), steps=1)
    assert active == [False, False]          # forward and backward, each once
