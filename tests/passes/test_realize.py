"""passes/realize.py: which values fusion stores, and in which width -- a value read only
through a narrowing cast is stored narrow, a widening cast is stored as the value it widens."""
import torch

from cherenkov.ir.graph import Node, TensorMeta
from cherenkov.ir.ops import Op
from cherenkov.passes.realize import realize_narrowed, realize_shared


def _users(nodes):
    users = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n)
    return users


def test_a_reduction_read_only_through_a_narrowing_cast_is_stored_narrow():
    cpu = torch.device("cpu")
    x = Node(Op.INPUT, (), (0,), TensorMeta((64, 300), torch.bfloat16, cpu))
    wide = Node(Op.CAST, (x,), (torch.float32,), TensorMeta((64, 300), torch.float32, cpu))
    total = Node(Op.SUM, (wide,), (1,), TensorMeta((64,), torch.float32, cpu))
    narrow = Node(Op.CAST, (total,), (torch.bfloat16,), TensorMeta((64,), torch.bfloat16, cpu))
    twice = Node(Op.ADD, (narrow, narrow), (), TensorMeta((64,), torch.bfloat16, cpu))
    nodes = [x, wide, total, narrow, twice]
    realized = {total}
    realize_narrowed(nodes, _users(nodes), realized, set())
    assert narrow in realized                      # the cast becomes the stored value
    realized = {total}
    realize_narrowed(nodes, _users(nodes), realized, {total})      # returned: stays wide
    assert realized == {total}
    also = Node(Op.NEG, (total,), (), TensorMeta((64,), torch.float32, cpu))
    nodes.append(also)                             # a reader of the float32 value itself
    realized = {total}
    realize_narrowed(nodes, _users(nodes), realized, set())
    assert realized == {total}


def test_a_widened_value_read_thrice_is_stored_at_its_own_width():
    """A bfloat16 value widened to float32 for three readers (a ReLU gradient a norm's
    backward upcasts): the value is stored, each reader widens it as it loads."""
    cpu = torch.device("cpu")
    meta = TensorMeta((256, 96), torch.bfloat16, cpu)
    a, b, c, d = (Node(Op.INPUT, (), (i,), meta) for i in range(4))
    gt = Node(Op.GT, (a, b), (), TensorMeta((256, 96), torch.bool, cpu))
    value = Node(Op.WHERE, (gt, c, d), (), meta)
    wide = Node(Op.CAST, (value,), (torch.float32,), TensorMeta((256, 96), torch.float32, cpu))
    readers = [Node(op, (wide,), (), TensorMeta((256, 96), torch.float32, cpu))
               for op in (Op.NEG, Op.EXP, Op.ABS)]
    nodes = [a, b, c, d, gt, value, wide, *readers]
    realized = set()
    realize_shared(nodes, _users(nodes), realized, {})
    assert value in realized and wide not in realized
