"""cherenkov/codegen/folding.py: comparisons the index ranges decide for every lane."""
from cherenkov.codegen.folding import comparison
from cherenkov.ir.ops import Op

RANGES = {"j": (0, 63)}             # an index value in [0, 63]
KNOWN = {"c0": 0, "c64": 64, "c10": 10, "cf": 1.5}


def test_decided_both_ways_and_either_side():
    assert comparison(Op.LT, "j", "c64", RANGES, KNOWN) is True
    assert comparison(Op.GE, "j", "c0", RANGES, KNOWN) is True
    assert comparison(Op.GE, "j", "c64", RANGES, KNOWN) is False
    assert comparison(Op.GT, "c64", "j", RANGES, KNOWN) is True      # 64 > j
    assert comparison(Op.LE, "c64", "j", RANGES, KNOWN) is False
    assert comparison(Op.NE, "j", "c64", RANGES, KNOWN) is True
    assert comparison(Op.EQ, "j", "c64", RANGES, KNOWN) is False


def test_undecided_when_lanes_differ_or_nothing_is_known():
    assert comparison(Op.LT, "j", "c10", RANGES, KNOWN) is None
    assert comparison(Op.EQ, "j", "c10", RANGES, KNOWN) is None
    assert comparison(Op.LT, "j", "cf", RANGES, KNOWN) is None        # not an integer constant
    assert comparison(Op.LT, "j", "other", RANGES, KNOWN) is None
    assert comparison(Op.EQ, "k", "c0", {"k": (0, 0)}, KNOWN) is True


def _c_eval(e, env) -> int:
    """An index expression as the kernel computes it: C's truncating // and %."""
    from cherenkov.codegen import indexing as ix
    total = e.const
    for a, c in e.terms:
        if isinstance(a, ix.Var):
            v = env[a.name]
        else:
            inner = _c_eval(a.expr, env)
            q = abs(inner) // a.divisor * (1 if inner >= 0 else -1)        # truncation
            v = q if isinstance(a, ix.Div) else inner - q * a.divisor
        total += c * v
    return total


def test_index_arithmetic_keeps_floor_semantics_where_operands_go_negative():
    """A pooling backward's window (h + 1 - r // 3) // 2 reaches -1 // 2: the folded
    expression, evaluated with C's truncating division, gives Python's floor for every lane."""
    from cherenkov.codegen import indexing as ix
    from cherenkov.codegen.folding import index_arithmetic
    h, r = ix.var("h", 112), ix.var("r", 9)
    num = index_arithmetic(Op.SUB, [index_arithmetic(Op.ADD, [h, 1]),
                                    index_arithmetic(Op.FLOORDIV, [r, 3])])
    o = index_arithmetic(Op.FLOORDIV, [num, 2])
    rem = index_arithmetic(Op.REMAINDER, [num, 2])
    neg = index_arithmetic(Op.MUL, [num, -3])
    for hv in range(112):
        for rv in range(9):
            env = {"h": hv, "r": rv}
            n = hv + 1 - rv // 3
            assert (_c_eval(o, env), _c_eval(rem, env)) == (n // 2, n % 2)
            assert _c_eval(neg, env) == -3 * n


def test_index_arithmetic_declines_what_is_not_an_index():
    from cherenkov.codegen import indexing as ix
    from cherenkov.codegen.folding import index_arithmetic
    h = ix.var("h", 112)
    assert index_arithmetic(Op.MUL, [h, h]) is None                  # not linear
    assert index_arithmetic(Op.FLOORDIV, [h, -2]) is None            # negative divisor
    assert index_arithmetic(Op.FLOORDIV, [h, h]) is None
    assert index_arithmetic(Op.FLOORDIV, [ix.dyn("v"), 2]) is None   # unbounded below
    assert index_arithmetic(Op.MUL, [h, 1 << 30]) is None            # leaves int32
    assert index_arithmetic(Op.MAXIMUM, [h, 3]) is None


def test_folded_index_arithmetic_matches_eager_in_both_cpu_backends():
    import pytest
    import torch

    from tests.lowering.compiled import compiled

    def fn(x):
        i = torch.arange(x.shape[0], device=x.device)
        j = torch.arange(x.shape[1], device=x.device)
        q = (i[:, None] * 3 - j[None, :] - 7) // 4           # negative for small i
        return x * q + (i[:, None] - 2 * j[None, :]) % 5

    x = torch.randn(9, 13)
    for backend in ("cpp", "triton"):
        out, externs, _ = compiled(fn, x, cpu_backend=backend)
        assert not externs
        torch.testing.assert_close(out, fn(x))
    with pytest.raises(AssertionError):       # the check can fail: truncation would differ
        torch.testing.assert_close(fn(x), x * torch.div(
            torch.arange(9)[:, None] * 3 - torch.arange(13)[None, :] - 7, 4,
            rounding_mode="trunc") + (torch.arange(9)[:, None] - 2 * torch.arange(13)) % 5)
