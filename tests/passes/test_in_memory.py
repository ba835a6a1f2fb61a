"""Tests for cherenkov/passes/in_memory.py: which forward values are in memory whatever the
partitioner decides, and which readers compute a value in their own kernel."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cherenkov.passes import in_memory


def test_values_in_memory_anyway():
    def f(x, w):
        a = x * 2.0              # read again after the matmul its tanh feeds
        m = torch.tanh(a) @ w    # tanh(a): a library op's input; m: its result
        b = a + m                # read only by pointwise work and a reduction
        t = torch.sin(b)
        return torch.cos(t) + t.sum(), torch.exp(b)
    gm = make_fx(f)(torch.randn(4, 4), torch.randn(4, 4))
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    outputs = set(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    written = {n.name for n in in_memory.written_anyway(nodes, set(nodes), outputs)}
    assert written == {"x_1", "w_1", "mul", "tanh", "mm", "add_1", "exp"}
    # past the bitsets' size limit the rule about reading again is left out (x * 2 then
    # prices as computed in registers); the others hold
    in_memory.BITSET_NODES, saved = 0, in_memory.BITSET_NODES
    try:
        assert {n.name for n in in_memory.written_anyway(nodes, set(nodes), outputs)} == \
            written - {"mul"}
    finally:
        in_memory.BITSET_NODES = saved


def test_readers_that_compute_their_input_in_their_own_kernel():
    def f(x, w, i):
        y = torch.exp(x)
        return y.sum(1), y.to(torch.float64), torch.zeros_like(y), y @ w, y.gather(1, i)
    gm = make_fx(f)(torch.randn(4, 4), torch.randn(4, 4), torch.zeros(4, 1, dtype=torch.long))
    readers = {n.target: in_memory.fusible_reader(n) for n in gm.graph.nodes
               if n.op == "call_function"}
    aten = torch.ops.aten
    assert readers[aten.sum.dim_IntList] and readers[aten._to_copy.default]
    assert readers[aten.zeros_like.default]          # reads only the shape
    assert not readers[aten.mm.default] and not readers[aten.gather.default]
