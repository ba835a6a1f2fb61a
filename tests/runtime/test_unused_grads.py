"""Gradients of unused outputs (runtime/unused_grads.py): the backward is handed None, not
filled zeros, and runs a variant compiled with zeros in their place -- the same gradients as
eager whichever outputs the loss uses."""
import pytest
import torch

import cherenkov
import cherenkov.backend as backend
from cherenkov.runtime import unused_grads


class LogitsAndLoss(torch.nn.Module):
    """nanoGPT's shape of forward: (logits, loss)."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 40)

    def forward(self, x, t):
        logits = self.l2(torch.relu(self.l1(x)))
        return logits, torch.nn.functional.cross_entropy(logits, t)


def _pair(seed=0):
    torch.manual_seed(seed)
    m = LogitsAndLoss()
    ref = LogitsAndLoss()
    ref.load_state_dict(m.state_dict())
    return m, ref


def _names_since(start: int) -> list[str]:
    return [info.name for _, info in backend.COMPILED[start:]]


def _check_grads(m, ref):
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def _step(fn, model, x, t, use_logits: bool):
    logits, loss = fn(x, t)
    (loss + logits.square().mean() if use_logits else loss).backward()
    return loss


@pytest.fixture
def data():
    torch.manual_seed(1)
    return torch.randn(24, 16), torch.randint(0, 40, (24,))


def test_unused_output_gradient_compiles_as_zeros(data):
    """The loss alone: the backward variant without the logits' tangent; the loss alone and
    then both outputs on the same compiled model give eager's gradients each time."""
    torch._dynamo.reset()
    x, t = data
    m, ref = _pair()
    start = len(backend.COMPILED)
    fn = cherenkov.compile(m, strict=True)
    for use_logits in (False, False, True, False):
        loss = _step(fn, m, x, t, use_logits)
        ref_loss = _step(ref, ref, x, t, use_logits)
        torch.testing.assert_close(loss, ref_loss)
        _check_grads(m, ref)
        m.zero_grad()
        ref.zero_grad()
    names = _names_since(start)
    zero = [n for n in names if "_zero" in n]
    assert len(zero) == 1 and zero[0].startswith("backward"), names
    assert any(n.startswith("backward") and "_zero" not in n for n in names), names


def test_off_keeps_autograd_zeros(data):
    torch._dynamo.reset()
    x, t = data
    m, ref = _pair()
    start = len(backend.COMPILED)
    fn = cherenkov.compile(m, strict=True, unused_grads=False)
    _step(fn, m, x, t, False)
    _step(ref, ref, x, t, False)
    _check_grads(m, ref)
    assert not [n for n in _names_since(start) if "_zero" in n]


def test_dynamic_shapes_are_not_watched(data):
    """A graph traced with symbolic shapes keeps autograd's zeros (a zeroed variant would need
    its zeros' shape)."""
    torch._dynamo.reset()
    x, t = data
    m, ref = _pair()
    start = len(backend.COMPILED)
    fn = torch.compile(m, backend="cherenkov", dynamic=True, options={"strict": True})
    for n in (24, 11):
        _step(fn, m, x[:n], t[:n], False)
        _step(ref, ref, x[:n], t[:n], False)
        _check_grads(m, ref)
        m.zero_grad()
        ref.zero_grad()
    assert not [n for n in _names_since(start) if "_zero" in n]


def test_zeroed_variant_that_fails_to_compile_runs_in_eager(data, monkeypatch):
    torch._dynamo.reset()
    x, t = data
    m, ref = _pair()
    real = backend.compile_fx

    def no_zero(gm, inputs, config, name):
        if "_zero" in name:
            raise RuntimeError("planted failure")
        return real(gm, inputs, config, name)
    monkeypatch.setattr(backend, "compile_fx", no_zero)
    fn = cherenkov.compile(m)
    with pytest.warns(UserWarning, match="planted failure"):
        _step(fn, m, x, t, False)
    _step(ref, ref, x, t, False)
    _check_grads(m, ref)


def test_zeroed_graph_drops_the_input_and_reads_zeros():
    def f(a, tangents_1, tangents_2):
        return a * tangents_1 + tangents_2
    gm = torch.fx.symbolic_trace(f)
    vals = [torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)]
    for node, v in zip(gm.graph.nodes, vals):
        node.meta["val"] = v
    assert unused_grads.tangent_positions(gm) == (1, 2)
    z = unused_grads.zeroed(gm, (1,))
    assert [n.name for n in z.graph.nodes if n.op == "placeholder"] == ["a", "tangents_2"]
    torch.testing.assert_close(z(vals[0], vals[2]), vals[2].expand(3, 4))
    filled = unused_grads.filled(gm, [vals[0], None, vals[2]], (1,))
    assert torch.equal(filled[1], torch.zeros(3, 4))
    torch.testing.assert_close(gm(*filled), z(vals[0], vals[2]))


def test_symbolic_tangent_cannot_be_zeroed():
    def f(a, tangents_1):
        return a + tangents_1
    gm = torch.fx.symbolic_trace(f)
    for node in gm.graph.nodes:
        node.meta["val"] = None
    with pytest.raises(RuntimeError, match="no static shape"):
        unused_grads.zeroed(gm, (1,))


def test_static_checks_example_inputs():
    assert unused_grads.static([torch.randn(2, 3), 4])
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fake = mode.from_tensor(torch.randn(5, 3), symbolic_context=None)
    s = mode.shape_env.create_unbacked_symint()
    assert not unused_grads.static([fake, s])


def test_view_outputs_and_a_second_backward_through_the_same_graph():
    """Outputs that view an intermediate (AOTAutograd returns their base as an extra output)
    and a graph backpropagated twice (retain_graph), each time through different outputs."""
    torch._dynamo.reset()

    def f(x, w):
        h = x @ w
        return h.view(-1), h.t(), (h.relu() ** 2).sum()
    torch.manual_seed(2)
    x, w = torch.randn(12, 16), torch.randn(16, 20, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    start = len(backend.COMPILED)
    fn = cherenkov.compile(f, strict=True, dynamic=False)
    outs, refs = fn(x, w), f(x, w_ref)
    for pick in ((2,), (0, 2), (1,)):
        sum(outs[i].sum() * (i + 1) for i in pick).backward(retain_graph=True)
        sum(refs[i].sum() * (i + 1) for i in pick).backward(retain_graph=True)
        torch.testing.assert_close(w.grad, w_ref.grad)
        w.grad = w_ref.grad = None
    # the two views share one tangent (their base's): the sum alone leaves it None, the
    # transpose alone the sum's; both used, none is
    assert sum("_zero" in n for n in _names_since(start)) == 2


def test_input_updated_in_place_with_an_unused_output(data):
    """A graph that also updates a buffer in place (batch-norm running stats): the mutated
    input's gradient slot and the unused output's both handled."""
    torch._dynamo.reset()
    torch.manual_seed(3)

    class WithStats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 40)
            self.bn = torch.nn.BatchNorm1d(40)

        def forward(self, x, t):
            logits = self.bn(self.lin(x))
            return logits, torch.nn.functional.cross_entropy(logits, t)
    m, ref = WithStats(), WithStats()
    ref.load_state_dict(m.state_dict())
    x, t = data
    start = len(backend.COMPILED)
    fn = cherenkov.compile(m, strict=True, dynamic=False)
    for _ in range(2):
        fn(x, t)[1].backward()
        ref(x, t)[1].backward()
        _check_grads(m, ref)
        torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
        m.zero_grad()
        ref.zero_grad()
    assert any("_zero" in n for n in _names_since(start))


def test_a_view_of_another_compilers_output_keeps_its_zeros():
    """An output that views an input carries, one step up, the node of whatever made the
    input -- here torch's own compiled graph, whose backward expects tensors: left alone."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(8, 8)
    theirs = torch.compile(lambda x: (lin(x), lin(x).relu()), backend="aot_eager")
    ours = cherenkov.compile(lambda a, b: (a.view(-1), b * 2, (b * 3).sum()), strict=True,
                             dynamic=False)
    x = torch.randn(4, 8)
    a, b = theirs(x)
    out = ours(a, b)
    assert not unused_grads._ours(out[0].grad_fn.next_functions[0][0])
    out[2].backward()           # neither `a` (theirs, through the view) nor out[1] is used
    ref = torch.nn.Linear(8, 8)
    ref.load_state_dict(lin.state_dict())
    (ref(x).relu() * 3).sum().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad)


def test_a_dynamic_graphs_node_is_never_switched():
    """A static graph viewing the output of a graph traced with symbolic shapes: that graph's
    backward cannot compile zeros in, and its node keeps autograd's zeros."""
    torch._dynamo.reset()
    torch.manual_seed(4)
    w = torch.randn(16, 20, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    dyn = torch.compile(lambda x, w: (x @ w, (x @ w).relu()), backend="cherenkov",
                        dynamic=True, options={"strict": True})
    static = cherenkov.compile(lambda h: (h.view(-1), (h * 2).sum()), strict=True,
                               dynamic=False)
    static(torch.randn(12, 20, requires_grad=True) * 1)     # compiled static first
    x = torch.randn(12, 16)
    h, _ = dyn(x, w)
    static(h)[1].backward()
    ((x @ w_ref) * 2).sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_compiled_autograd_on_at_forward_time_keeps_autograd_zeros():
    """Compiled autograd traces AOTAutograd's backward graph itself (a None tangent would
    fail there): outputs made while it is on are not watched."""
    torch._dynamo.reset()
    torch.manual_seed(5)
    lin = torch.nn.Linear(16, 12)
    ref = torch.nn.Linear(16, 12)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(8, 16)
    fn = cherenkov.compile(lambda x: (lin(x), lin(x).relu().sum()), dynamic=False)
    from torch._dynamo import compiled_autograd
    with compiled_autograd._enable(torch.compile(backend="aot_eager")):
        out = fn(x)
        out[1].backward()
    ref(x).relu().sum().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad)
