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
