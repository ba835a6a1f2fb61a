"""Golden text for the IR printer and checks of the verifier."""
import pytest
import torch

from cherenkov.ir.graph import Graph, Node, TensorMeta
from cherenkov.ir.ops import Op
from cherenkov.ir.placement import Mesh, Partial, Replicate, Shard, format_placements
from cherenkov.ir.printer import format_graph
from cherenkov.ir.verifier import VerificationError, verify

CPU = torch.device("cpu")


def meta(*shape, dtype=torch.float32):
    return TensorMeta(shape, dtype, CPU)


def test_graph_prints_like_a_jaxpr():
    a = Node(Op.INPUT, (), (0,), meta(8, 16))
    b = Node(Op.INPUT, (), (1,), meta(16))
    c = Node(Op.EXPAND, (Node(Op.RESHAPE, (b,), ((1, 16),), meta(1, 16)),), ((8, 16),), meta(8, 16))
    d = Node(Op.ADD, (a, c), (), meta(8, 16))
    e = Node(Op.EXP, (d,), (), meta(8, 16))
    f = Node(Op.SUM, (Node(Op.MUL, (e, Node(Op.CONST, (), (2.0,), meta())), (), meta(8, 16)),),
             (1,), meta(8))
    text = format_graph(Graph([a, b], [f, e]))
    assert text == (
        "{ lambda ; a:f32[8,16] b:f32[16]. let\n"
        "    c:f32[1,16] = reshape[shape=(1, 16)] b\n"
        "    d:f32[8,16] = expand[shape=(8, 16)] c\n"
        "    e:f32[8,16] = add a d\n"
        "    f:f32[8,16] = exp e\n"
        "    g:f32[8,16] = mul f 2.0\n"
        "    h:f32[8] = sum[trailing=1] g\n"
        "  in (h, f) }")


def test_placements_print_short_and_exact():
    mesh = Mesh((("dp", 8), ("tp", 4)))
    assert format_placements(mesh, (Shard(0), Replicate())) == "dp:S(0) tp:R"
    assert str(Partial()) == "P" and repr(Shard(1)) == "Shard(dim=1)"
    with pytest.raises(ValueError, match="unique"):
        Mesh((("dp", 2), ("dp", 2)))


def test_verifier_rejects_mismatched_elementwise_shapes():
    a = Node(Op.INPUT, (), (0,), meta(4, 4))
    b = Node(Op.INPUT, (), (1,), meta(4))
    bad = Node(Op.ADD, (a, b), (), meta(4, 4))
    with pytest.raises(VerificationError, match="operand shape"):
        verify(Graph([a, b], [bad]))
    verify(Graph([a], [Node(Op.NEG, (a,), (), meta(4, 4))]))
