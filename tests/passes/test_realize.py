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


def _broadcast_test(chain_op, links: int) -> bool:
    """A (1000,) bool from `links` ops on an input, tested against both bounds (two paths to
    the chain) and broadcast over 200000 rows: realized or not by realize_broadcast_work on the
    H200 preset."""
    from cherenkov import hw
    from cherenkov.passes.realize import realize_broadcast_work
    cpu = torch.device("cpu")
    m = lambda shape, dtype: TensorMeta(shape, dtype, cpu)              # noqa: E731
    x = Node(Op.INPUT, (), (0,), m((1000,), torch.float32))
    big = Node(Op.INPUT, (), (1,), m((200000, 1000), torch.float32))
    one = Node(Op.CONST, (), (1.0, torch.float32), m((), torch.float32))
    chain, nodes = x, [x, big, one]
    for _ in range(links):
        chain = Node(chain_op, (chain, one) if chain_op == Op.ADD else (chain,), (),
                     m((1000,), torch.float32))
        nodes.append(chain)
    lo = Node(Op.GE, (chain, one), (), m((1000,), torch.bool))
    hi = Node(Op.LT, (chain, x), (), m((1000,), torch.bool))
    valid = Node(Op.AND, (lo, hi), (), m((1000,), torch.bool))
    wide = Node(Op.EXPAND, (valid,), ((200000, 1000),), m((200000, 1000), torch.bool))
    out = Node(Op.WHERE, (wide, big, one), (), m((200000, 1000), torch.float32))
    nodes += [lo, hi, valid, wide, out]
    realized = {out}
    realize_broadcast_work(nodes, _users(nodes), realized, {wide}, hw.device("h200"))
    return valid in realized


def test_a_broadcast_value_costs_each_shared_subexpression_once():
    """A value whose inputs share one long subexpression (a pooling window's index, read by
    the tests of its lower and upper bound) inlines it once: 40 adds are cheap to recompute
    per element (a sum over paths counted them twice, past the realization threshold and a
    kernel of its own), transcendental functions are not."""
    assert not _broadcast_test(Op.ADD, 40)
    assert _broadcast_test(Op.EXP, 2)
