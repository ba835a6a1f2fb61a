"""In-place updates of a plan's inputs (runtime/compiled_graph.apply_mutations): a value the
plan wrote into the input itself is not copied again -- a CUDA graph replay hands back an
alias of the input, not the input object."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from cherenkov.compiler import compile_fx
from cherenkov.config import Config


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _plan():
    def step(p, m, g):
        m.mul_(0.9).add_(g)
        p.add_(m, alpha=-0.1)
    p, m, g = torch.randn(16), torch.randn(16), torch.randn(16)
    gm = make_fx(torch.func.functionalize(step, remove="mutations_and_views"))(p, m, g)
    compiled, _ = compile_fx(gm, [p, m, g], Config(strict=True))
    return compiled


def test_aliases_of_the_updated_inputs_are_not_copied_onto_themselves():
    compiled = _plan()
    p, m = torch.randn(16), torch.randn(16)
    outs = [None] * len(compiled.graph.outputs)
    targets = []
    for index, position in compiled.graph.mutations:
        dst = (p, m)[index]
        targets.append(dst)
        outs[position] = dst.detach()          # as a replay returns it
    before = [t._version for t in targets]
    with _Ops() as ops:
        compiled.apply_mutations(targets, outs)
    assert not {"copy_", "clone"} & set(ops.names), ops.names
    assert [t._version for t in targets] > before       # still marked as written


def test_values_elsewhere_are_copied_in():
    """New memory, and other elements of the input's own storage, are copied in."""
    compiled = _plan()
    storage = torch.arange(64.0)
    p, m = storage[:16], storage[16:32]
    fresh = torch.randn(16)
    outs = [None] * len(compiled.graph.outputs)
    targets, expected = [], []
    for index, position in compiled.graph.mutations:
        targets.append((p, m)[index])
        outs[position] = fresh if index == 0 else storage[32:48]   # m's value: p's storage
        expected.append(outs[position].clone())
    compiled.apply_mutations(targets, outs)
    for t, e in zip(targets, expected):
        assert torch.equal(t, e)
