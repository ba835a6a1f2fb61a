"""Index arithmetic: simplification is exact (checked numerically) and folds views away."""
import itertools
import random

from cherenkov.codegen import indexing as ix


def evaluate(e, env):
    e = ix.as_lin(e)
    total = e.const
    for a, c in e.terms:
        if isinstance(a, ix.Var):
            v = env[a.name]
        elif isinstance(a, ix.Within):
            v = evaluate(a.expr, env)
        elif isinstance(a, ix.Div):
            v = evaluate(a.expr, env) // a.divisor
        else:
            v = evaluate(a.expr, env) % a.divisor
        total += c * v
    return total


def test_unravel_of_ravel_gives_back_the_indices():
    x, r = ix.var("x", 8), ix.var("r", 16)
    assert ix.unravel(ix.add(ix.mul(x, 16), r), (8, 16)) == (x, r)
    assert str(ix.ravel(ix.unravel(ix.var("x", 96), (2, 3, 4, 4)), (2, 3, 4, 4))) == "x"


def test_random_views_are_exact():
    rng = random.Random(0)
    for _ in range(30):
        shape_a = tuple(rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4)))
        n = 1
        for s in shape_a:
            n *= s
        # a different factorisation of the same size
        shape_b, rest = [], n
        while rest > 1:
            f = rng.choice([d for d in range(1, rest + 1) if rest % d == 0])
            shape_b.append(f)
            rest //= f
        shape_b = tuple(shape_b or [1])
        lin = ix.var("x", n)
        idx_b = ix.unravel(lin, shape_b)
        back = ix.unravel(ix.ravel(idx_b, shape_b), shape_a)
        for value in range(n):
            got = tuple(evaluate(e, {"x": value}) for e in back)
            want, v = [], value
            for s in reversed(shape_a):
                want.append(v % s)
                v //= s
            assert got == tuple(reversed(want)), (shape_a, shape_b, value)


def test_floordiv_and_mod_simplify_with_ranges():
    x, r = ix.var("x", 8), ix.var("r", 16)
    e = ix.add(ix.mul(x, 16), r)
    assert str(ix.floordiv(e, 64)) == "((x) // 4)"
    assert ix.mod(e, 16) == r
    for xv, rv in itertools.product(range(8), range(16)):
        env = {"x": xv, "r": rv}
        assert evaluate(ix.mod(e, 64), env) == (16 * xv + rv) % 64


def test_a_cat_piece_index_folds_views_as_if_the_piece_were_whole():
    """Piece 1 of a cat of three (rows, 768) pieces, each a transposed (16, 12, 1024, 64)
    tensor: with the promise that the column lies in the piece, the address folds to
    row/head/position/lane terms (no division of the whole flat index), and it is exact
    wherever the promise holds."""
    x = ix.var("x", 16384 * 2304)
    row, col = ix.floordiv(x, 2304), ix.mod(x, 2304)
    local = ix.within(ix.add(col, -768), 0, 767)
    b, t, h, d = ix.unravel(ix.ravel((row, local), (16384, 768)), (16, 1024, 12, 64))
    address = ix.dot((b, h, t, d), (786432, 65536, 64, 1))
    text = str(address)
    assert "786432)" not in text and "((x) % 64)" in text, text
    rng = random.Random(0)
    for value in [rng.randrange(16384 * 2304) for _ in range(2000)]:
        rv, cv = divmod(value, 2304)
        if not 768 <= cv < 1536:
            continue
        bv, tv = divmod(rv, 1024)
        hv, dv = divmod(cv - 768, 64)
        assert evaluate(address, {"x": value}) == bv * 786432 + hv * 65536 + tv * 64 + dv
    assert ix.within(col, 0, 2303) == col          # a promise already kept adds nothing


def test_a_cat_piece_of_contiguous_rows_indexes_its_rows_directly():
    """Piece 1 of a cat of (rows, 768) pieces that are (16, 1024, 12, 64) tensors viewed
    through a transpose and back (cuDNN's dq layout): once the promise is released the address
    merges back to row * 768 + column -- no digit-by-digit form Triton cannot vectorize."""
    x = ix.var("x", 16384 * 2304)
    row, col = ix.floordiv(x, 2304), ix.mod(x, 2304)
    local = ix.within(ix.add(col, -768), 0, 767)
    b, t, h, d = ix.unravel(ix.ravel((row, local), (16384, 768)), (16, 1024, 12, 64))
    address = ix.release(ix.dot((b, h, t, d), (786432, 64, 768, 1)))
    assert address == ix.add(ix.mul(row, 768), col, -768), str(address)
    assert ix.floordiv(ix.mod(x, 2304), 64) == ix.mod(ix.floordiv(x, 64), 36)
