"""Index arithmetic (compiler/arith.py): affine forms, coefficients and slopes, value ranges, simplification; and
a property test that every interval contains every value of random expressions over their variables' ranges."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as hs

from compiler import loopir as L
from compiler.arith import affine_form, coefficient, form_expr, interval, simplify, slope, variables
from loop_eval import _ev
from relayish import te

v, w = te.Var("v"), te.Var("w")


# ---------------------------------------------------------------------------------------------- affine forms

def test_affine_form_of_sums_products_and_constants():
    assert affine_form(v * 3 + w - 2) == {v: 3, w: 1, 1: -2}
    assert affine_form((v + 1) * 4) == {v: 4, 1: 4}
    assert affine_form(2 * (v - w)) == {v: 2, w: -2}
    assert affine_form(te.IntImm(7)) == {1: 7}
    assert affine_form(te.IntImm(0)) == {}
    assert affine_form(v + w - v) == {w: 1}  # cancelled terms disappear


def test_affine_form_keeps_opaque_terms_and_merges_equal_ones():
    assert affine_form(v // 4) == {v // 4: 1}
    assert affine_form(v * w) == {v * w: 1}  # not affine: one opaque term
    assert affine_form((v // 4) * 2 + v // 4 + v % 4) == {v // 4: 3, v % 4: 1}


def test_form_expr_puts_the_constant_first():
    assert str(form_expr(affine_form(v + 1 + v))) == "(1 + (v * 2))"
    assert str(form_expr({})) == "0"


def test_coefficient():
    a = L.Buffer("A", (8,))
    assert coefficient(w * 16 + v, v) == 1
    assert coefficient((v + w) * 3 - v, v) == 2
    assert coefficient(w * 7 + 1, v) == 0
    assert coefficient(te.min_(w, 3), v) == 0  # opaque, but independent of v
    assert coefficient(v * w, v) is None  # coefficient not a constant
    assert coefficient(v // 4, v) is None
    assert coefficient(L.Load(a, v), v) is None  # an index loaded from memory
    assert coefficient(L.Load(a, w), v) == 0
    t = te.Var("t")
    assert coefficient(t * 2, v, {t: 3}) == 6
    assert coefficient(t + v, v, {t: None}) is None


def test_slope_estimates_strides_of_non_affine_terms():
    assert slope(w * 16 + v * 2, v) == 2.0
    assert slope(v // 4, v) == 0.25
    assert slope((v % 4) * 8, v) == 8.0
    assert slope(te.max_(0, te.min_(v - 1, 6)), v) == 1.0  # a clamp moves like its operand
    assert slope(L.Load(L.Buffer("A", (8,)), v), v) == 1.0  # a gather: some movement
    assert slope(w * 5, v) == 0.0


def test_variables_include_load_indices():
    a = L.Buffer("A", (8,))
    assert variables(L.Load(a, v) + w * 2) == {v, w}


# ---------------------------------------------------------------------------------------------- intervals

def test_interval_of_affine_expressions_is_exact():
    ranges = {v: 4, w: 3}
    assert interval(v * 3 - w + 1, ranges) == (-1, 10)
    assert interval(v - v, ranges) == (0, 0)
    assert interval(te.IntImm(5), {}) == (5, 5)


def test_interval_of_floordiv_mod_min_max():
    ranges = {v: 10}
    assert interval(v // 4, ranges) == (0, 2)
    assert interval((v - 3) // 4, ranges) == (-1, 1)  # floor division
    assert interval(v % 16, ranges) == (0, 9)  # provably below the modulus: v itself
    assert interval(v % 4, ranges) == (0, 3)
    assert interval((w * 7) % 4, {}) == (0, 3)  # floor modulo by 4 even when its operand is unknown
    assert interval(te.min_(v, 6), ranges) == (0, 6)
    assert interval(te.max_(0, te.min_(v - 2, 5)), ranges) == (0, 5)


def test_interval_of_select_cast_and_products():
    ranges = {v: 5, w: 3}
    assert interval(te.select(v < 2, v + 10, w), ranges) == (0, 14)
    assert interval(te.Cast("int64", v * 2), ranges) == (0, 8)
    assert interval(v * w, ranges) == (0, 8)
    assert interval((v - 2) * w, ranges) == (-4, 4)


def test_interval_is_unknown_for_free_vars_and_loads():
    assert interval(v + w, {v: 4}) is None
    assert interval(L.Load(L.Buffer("A", (8,), "int32"), v), {v: 8}) is None
    assert interval(v // w, {v: 4, w: 2}) is None  # a division by a variable


# ---------------------------------------------------------------------------------------------- simplification

def test_simplify_undoes_splits():
    o, i = te.Var("o"), te.Var("i")
    ranges = {o: 8, i: 4}
    assert simplify((o * 4 + i) // 4, ranges) is o
    assert simplify((o * 4 + i) % 4, ranges) is i
    assert str(simplify((o * 4 + i + 8) // 4, ranges)) == "(2 + o)"


def test_simplify_divides_by_a_common_factor_of_the_divisor():
    # the group of a grouped convolution's output block j // 16, after the schedule splits j = 2*o + i: both
    # halves of the tile read one input block
    o, i = te.Var("o"), te.Var("i")
    ranges = {o: 16, i: 2}
    assert str(simplify((o * 2 + i) // 16, ranges)) == "(o // 8)"
    assert str(simplify((o * 2 + i) % 16, ranges)) == "(((o % 8) * 2) + i)"
    # the largest factor wins: 4*o + 2*i + 1 = 4*o + (2*i + 1) with 2*i + 1 in [1, 3]
    assert str(simplify((o * 4 + i * 2 + 1) // 8, ranges)) == "(o // 2)"
    # not provable: i + 1 reaches 2
    assert str(simplify((o * 2 + i + 1) // 16, ranges)) == "(((1 + (o * 2)) + i) // 16)"
    for a, b in itertools.product(range(16), range(2)):
        env = {o: a, i: b}
        for e in ((o * 2 + i) // 16, (o * 2 + i) % 16, (o * 4 + i * 2 + 1) // 8, (o * 4 + i * 2 + 1) % 8):
            assert _ev(simplify(e, ranges), env, {}) == _ev(e, env, {})


def test_simplify_keeps_what_it_cannot_prove():
    o, i = te.Var("o"), te.Var("i")
    wide = {o: 8, i: 8}  # i may reach past the divisor
    assert str(simplify((o * 4 + i) // 4, wide)) == "(((o * 4) + i) // 4)"
    assert str(simplify((o * 4 + i) // 2, {o: 8, i: 4})) == "(((o * 4) + i) // 2)"
    # the remainder -i may be negative: only the operand is canonicalized
    assert str(simplify((o * 4 - i) % 4, {o: 8, i: 4})) == "(((o * 4) + (i * -1)) % 4)"
    f = te.Var("f", "float32")
    assert simplify(f + f, {}) == f + f  # only int32 is rewritten


def test_simplify_collects_affine_terms():
    assert str(simplify(v + 3 + v * 2 - 1, {v: 4})) == "(2 + (v * 3))"


# ---------------------------------------------------------------------------------------------- properties

VARS = [te.Var("x"), te.Var("y"), te.Var("z")]


def _exprs():
    leaves = hs.one_of(hs.sampled_from(VARS), hs.integers(-3, 7).map(te.IntImm))
    divisor = hs.sampled_from([-3, -2, 1, 2, 3, 4, 5]).map(te.IntImm)

    def extend(sub):
        binary = hs.tuples(hs.sampled_from(["+", "-", "*", "min", "max"]), sub, sub)
        division = hs.tuples(hs.sampled_from(["//", "%"]), sub, divisor)
        select = hs.tuples(sub, sub, sub, sub).map(lambda t: te.select(t[0] < t[1], t[2], t[3]))
        cast = sub.map(lambda e: te.Cast("int64", e))
        return hs.one_of(hs.one_of(binary, division).map(lambda t: te.binop(*t)), select, cast)
    return hs.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_exprs(), hs.lists(hs.integers(1, 5), min_size=3, max_size=3))
def test_interval_contains_every_value_and_simplify_keeps_them(e, extents):
    ranges = dict(zip(VARS, extents))
    rng = interval(e, ranges)
    simple = simplify(e, ranges)
    for point in itertools.product(*(range(n) for n in extents)):
        env = dict(zip(VARS, point))
        value = _ev(e, env, {})
        if rng is not None:
            assert rng[0] <= value <= rng[1], (str(e), rng, env, value)
        assert _ev(simple, env, {}) == value, (str(e), str(simple), env)
