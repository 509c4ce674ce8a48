"""Grading tests for lesson 2 (l02_softmax): softmax, logsumexp.

Sizes are all different (B=2, H=4, T=3, S=5) so that a softmax over the wrong axis gives wrong
numbers and a logsumexp that reduces the wrong axis, or keeps it, gives a wrong shape. One test
uses a cube (4, 4, 4) on purpose: there a maximum taken without keepdims=True broadcasts silently
instead of raising, so its wrong numbers can be recognised and named.
"""

import math

import numpy as np
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    Mistake,
    check_array,
    check_not_modified,
    diagnose,
    exercise,
    failure,
    hand_checked,
    rng,
    variation,
)

B, H, T, S = 2, 4, 3, 5
INF = np.inf


# ---------------------------------------------------------------- oracles
def softmax_loop(x, axis=-1):
    """Oracle: one slice along `axis` at a time, one math.exp per number, in float64."""
    moved = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    out = np.zeros_like(moved)
    for index in np.ndindex(moved.shape[:-1]):
        row = [float(v) for v in moved[index]]
        m = max(row)
        if m == -math.inf:
            continue  # every key masked: the row stays all zeros
        exps = [math.exp(v - m) for v in row]
        total = sum(exps)
        out[index] = [e / total for e in exps]
    return np.moveaxis(out, -1, axis).astype(x.dtype)


def logsumexp_loop(x, axis=-1):
    """Oracle: m + log(sum(exp(v - m))) slice by slice, in float64; -inf for an all -inf slice."""
    moved = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    out = np.zeros(moved.shape[:-1])
    for index in np.ndindex(out.shape):
        row = [float(v) for v in moved[index]]
        m = max(row)
        out[index] = m if m == -math.inf else m + math.log(sum(math.exp(v - m) for v in row))
    return out.astype(x.dtype)


# ---------------------------------------------------------------- known mistakes
NO_MAX = Mistake(
    "no-max",
    "np.exp(x) was taken without subtracting the maximum first, so it overflowed to inf "
    "(float64 overflows above x = 709, float32 already above x = 88.7) and inf / inf = NaN",
    exercises=("softmax",),
)
NO_MAX_GUARDED = Mistake(
    "no-max-guarded",
    "np.exp(x) was taken without subtracting the maximum first, so it overflowed "
    "to inf or underflowed to 0 (float64: above x = 709.8 or below -745.1; float32: "
    "already above 88.7 or below -103.97)",
    exercises=("softmax",),
)
MEAN = Mistake(
    "mean",
    "the mean was subtracted instead of the maximum: x - mean can still be hundreds above 0, "
    "and exp overflowed",
    exercises=("softmax",),
)
LSE_NO_MAX = Mistake(
    "lse-no-max",
    "np.log(np.sum(np.exp(x))) was computed without taking the maximum out first, so "
    "exp overflowed to inf or underflowed to 0 (use m + log(sum(exp(x - m))))",
    exercises=("logsumexp",),
)
LSE_KEEPDIMS = Mistake(
    "lse-keepdims",
    "the axis was kept (keepdims=True): logsumexp reduces it away, as np.sum does; "
    "drop it at the end with np.squeeze(out, axis)",
    exercises=("logsumexp",),
)
LSE_LOST_AXIS = Mistake(
    "lse-lost-axis",
    "the maximum (kept with keepdims=True) was added to a sum that had already lost "
    "the axis, so the two broadcast into a table, e.g. (T,) + (T, 1) -> (T, T)",
    exercises=("logsumexp",),
)
MASKED_NAN = Mistake(
    "masked-nan",
    "a row of all -inf (every key masked) came out NaN; it must be all zeros: replace "
    "a -inf maximum by 0 before subtracting, and divide only where the sum is > 0",
    exercises=("softmax",),
)
LSE_MASKED_NAN = Mistake(
    "lse-masked-nan",
    "a row of all -inf came out NaN; its logsumexp is -inf: replace a -inf maximum "
    "by 0 before subtracting (log(0) = -inf then gives the right answer)",
    exercises=("logsumexp",),
)
IN_PLACE = Mistake(
    "in-place",
    "the input was modified in place (x -= m or np.exp(x, out=x))",
    exercises=("logsumexp", "softmax"),
)
FLOAT64 = Mistake(
    "float64",
    "the float32 input came back as float64: an astype, dtype=float or np.float64 somewhere promoted it",
    exercises=("logsumexp", "softmax"),
)
SOFTMAX_WRONG_AXIS = Mistake(
    "softmax-wrong-axis", "softmax normalised along the wrong axis ({which})", exercises=("softmax",)
)
LSE_WRONG_AXIS = Mistake(
    "logsumexp-wrong-axis", "logsumexp reduced the wrong axis ({which})", exercises=("logsumexp",)
)
BROADCAST = Mistake(
    "keepdims-missing", "{what}, so it broadcast against the wrong axis of x", exercises=("softmax",)
)
LOST_AXIS = Mistake(
    "lost-axis",
    "a maximum or a sum lost its axis (taken without keepdims=True, or put back in the "
    "wrong place with [..., None]), so it no longer lines up with x along that axis; "
    "keep the axis with keepdims=True while computing",
    exercises=("logsumexp", "softmax"),
)
# Read from the learner's code when a call raised: a maximum or sum taken without keepdims.
CODE_MISTAKES = {LOST_AXIS: r"\b(?:max|amax|sum)\((?!.*keepdims\s*=\s*True)"}


def naive_softmax(x, axis=-1, guarded=False):
    """exp(x) / sum(exp(x)) with no maximum subtracted (guarded: 0 where the sum is 0)."""
    with np.errstate(all="ignore"):
        e = np.exp(x)
        s = np.sum(e, axis=axis, keepdims=True)
        if guarded:
            return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
        return e / s


def mean_shifted_softmax(x, axis=-1):
    with np.errstate(all="ignore"):
        m = np.mean(x, axis=axis, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(m), m, 0))
        s = np.sum(e, axis=axis, keepdims=True)
        return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def overflow_mistakes(x, axis=-1):
    return {
        NO_MAX: lambda: naive_softmax(x, axis),
        NO_MAX_GUARDED: lambda: naive_softmax(x, axis, guarded=True),
        MEAN: lambda: mean_shifted_softmax(x, axis),
    }


def _axis(x, axis):
    return axis % x.ndim


def wrong_axis_mistakes(x, axis=-1):
    """softmax along every other axis of x, named as the wrong axis."""
    mistakes = {}
    for other in range(x.ndim):
        if other != _axis(x, axis):
            ignored = " (is the axis argument ignored?)" if other == x.ndim - 1 else ""
            which = f"axis {other} instead of axis {axis}"
            mistakes[SOFTMAX_WRONG_AXIS.format(which=which).plus(ignored)] = lambda other=other: softmax_loop(
                x, other
            )
    return mistakes


def _reduce(function, a, axis, mode):
    if mode == "keep":
        return function(a, axis=axis, keepdims=True)
    reduced = function(a, axis=axis)
    return reduced if mode == "drop" else reduced[..., None]


def broadcast_variant(x, axis, max_mode, sum_mode):
    """softmax with the maximum and/or the sum reduced without keepdims ('drop') or with the
    axis put back as the last one ('end'); raises where numpy cannot broadcast."""
    with np.errstate(all="ignore"):
        m = _reduce(np.max, x, axis, max_mode)
        e = np.exp(x - np.where(np.isfinite(m), m, 0))
        return e / _reduce(np.sum, e, axis, sum_mode)


def keepdims_mistakes(x, axis):
    how = {
        "drop": "without keepdims=True",
        "end": "without keepdims=True and put back as the last axis ([..., None])",
    }
    mistakes = {}
    # The maximum alone first, then the sum alone, then both: the first match gets named.
    combos = [(m, "keep") for m in ("drop", "end")] + [("keep", m) for m in ("drop", "end")]
    combos += [(a, b) for a in ("drop", "end") for b in ("drop", "end")]
    for max_mode, sum_mode in combos:
        parts = []
        if max_mode != "keep":
            parts.append(f"the maximum was taken {how[max_mode]}")
        if sum_mode != "keep":
            parts.append(f"the sum was taken {how[sum_mode]}")
        mistakes[BROADCAST.format(what=" and ".join(parts))] = lambda a=max_mode, b=sum_mode: (
            broadcast_variant(x, axis, a, b)
        )
    return mistakes


def softmax_mistakes(x, axis=-1):
    """Every named way a softmax along `axis` goes wrong on this x."""
    return {**wrong_axis_mistakes(x, axis), **keepdims_mistakes(x, axis), **overflow_mistakes(x, axis)}


def naive_logsumexp(x, axis=-1):
    with np.errstate(all="ignore"):
        return np.log(np.sum(np.exp(x), axis=axis))


def lse_lost_axis(x, axis=-1):
    """m (kept) + log(sum) (reduced): broadcasts into the wrong shape."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        return np.log(np.sum(np.exp(x - m), axis=axis)) + m


def logsumexp_mistakes(x, axis=-1):
    mistakes = {
        LSE_KEEPDIMS: lambda: np.expand_dims(logsumexp_loop(x, axis), axis),
        LSE_LOST_AXIS: lambda: lse_lost_axis(x, axis),
    }
    for other in range(x.ndim):
        if other != _axis(x, axis):
            ignored = " (is the axis argument ignored?)" if other == x.ndim - 1 else ""
            which = f"axis {other} instead of axis {axis}"
            mistakes[LSE_WRONG_AXIS.format(which=which).plus(ignored)] = lambda other=other: logsumexp_loop(
                x, other
            )
    return mistakes


def lse_mistakes(x, axis=-1):
    """Every named way a logsumexp along `axis` goes wrong on this x."""
    return {LSE_NO_MAX: lambda: naive_logsumexp(x, axis), **logsumexp_mistakes(x, axis)}


# ---------------------------------------------------------------- checking
def check(actual, expected, *, what, dims, mistakes=None, **tolerance):
    """check_array, plus the float64 mistake for float32 answers."""
    __tracebackhide__ = True  # pytest formats fewer frames: failing checks report faster
    expected = np.asarray(expected)
    named = dict(mistakes or {})
    if expected.dtype == np.float32:
        named.setdefault(FLOAT64, expected.astype(np.float64))
    check_array(actual, expected, what=what, dims=dims, mistakes=named, **tolerance)


def check_untouched(lesson, what):
    """check_not_modified, reported as the named mistake it is."""
    __tracebackhide__ = True
    try:
        check_not_modified(lesson, what)
    except AssertionError as exc:
        raise KnownMistake(str(exc), IN_PLACE) from None


# ---------------------------------------------------------------- calling the learner
def call(function, x, **kwargs):
    """function(x, **kwargs) in the learner's worker, a numpy scalar read as a 0-d array."""
    __tracebackhide__ = True
    out = function(x, **kwargs)
    if isinstance(out, (np.generic, float)) and not isinstance(out, bool):
        out = np.asarray(out)  # a numpy scalar (np.sum of a 1-D array) counts as a 0-d array
    return out


def array_of_shape(out, shape, what, mistakes=None):
    """For property tests: fail clearly unless `out` is an array of the expected shape."""
    __tracebackhide__ = True
    if isinstance(out, np.ndarray) and out.shape == shape:
        return out
    if isinstance(out, np.ndarray):
        got = f"an array of shape {out.shape}"
    else:
        got = f"a {type(out).__name__}" if out is not None else "None (is a `return` missing?)"
    message = f"{what} returned {got}; expected a numpy array of shape {shape}."
    raise failure(message, diagnose(out, mistakes, np.full(shape, np.nan)))


def plus(c):
    """The text " + c" of a shift c ("" for none)."""
    return "" if c == 0 else f" {'+' if c > 0 else '-'} {abs(c):g}"


def with_axis(name, kwargs):
    return f"{name}(x{''.join(f', axis={a}' for a in kwargs.values())})"


def letters(ndim):
    return " ".join(f"N{i}" for i in range(ndim))


def reduced_letters(ndim, axis):
    names = [f"N{i}" for i in range(ndim)]
    del names[axis % ndim]
    return " ".join(names)


# Logits far from 0, with the same layout in every dtype: a row near +1000 (exp overflows),
# a row near -1000 (exp underflows to 0), and a row that mixes both (its mean is near 0).
HUGE = np.array(
    [
        [1000.0, 1001.5, 999.2, 1000.7, 998.4],
        [-1000.0, -1001.5, -999.2, -1000.7, -998.4],
        [1000.0, -1000.0, 0.0, 999.0, -999.0],
    ]
)  # (T, S)


def huge(name):
    """HUGE, as the case `name` sees it."""
    # Under an instructor's secret: the rows and the columns reordered, every logit shifted by c.
    v = variation(name)
    return HUGE[v.permutation(T)][:, v.permutation(S)] + v.shift()


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3)
seeds = st.integers(0, 2**32 - 1)
scales = st.sampled_from([0.1, 1.0, 10.0, 100.0])
dtypes = st.sampled_from(["float64", "float32"])


# A failing property reports the first failing example it finds, without shrinking it: every
# shrinking step is a round trip to the learner's worker, and shrinking cost seconds per failing
# property (up to 10 s for one classic mistake here), while the messages already name shapes and
# mistakes. Stopgap until the engine's "grading" profile leaves out Phase.shrink for all lessons.
no_shrinking = settings(phases=(Phase.explicit, Phase.reuse, Phase.generate))


def pick_axis(ndim, pick):
    return pick % (2 * ndim) - ndim  # any of -ndim .. ndim - 1


# ---------------------------------------------------------------- softmax
@exercise("softmax")
class TestSoftmax:
    def test_softmax_keeps_the_shape_b_t_s(self, lesson):
        """softmax(x) of (B, T, S) scores keeps the shape (B, T, S)"""
        x = rng(1).standard_normal((B, T, S))
        check(
            call(lesson.softmax, x),
            softmax_loop(x),
            what="softmax(x)",
            dims="B T S",
            mistakes=softmax_mistakes(x),
        )

    @hand_checked
    def test_softmax_small_case_by_hand(self, lesson):
        """softmax(log([[1, 3], [2, 2]])) by hand is [[0.25, 0.75], [0.5, 0.5]]"""
        # Under an instructor's secret: the rows and the columns swapped, every score shifted by c.
        v = variation("softmax by hand")
        c, rows, cols = v.shift(), v.permutation(2), v.permutation(2)
        table = np.array([[1.0, 3.0], [2.0, 2.0]])[rows][:, cols]
        x = np.log(table) + c
        # exp(x) = [[1, 3], [2, 2]]: each row divided by its sum, 4 and 4.
        expected = np.array([[0.25, 0.75], [0.5, 0.5]])[rows][:, cols]
        # Over the columns instead (sums 3 and 5): [[1/3, 3/5], [2/3, 2/5]].
        by_column = np.array([[1 / 3, 3 / 5], [2 / 3, 2 / 5]])[rows][:, cols]
        check(
            call(lesson.softmax, x),
            expected,
            what=f"softmax(log({table.astype(int).tolist()}){plus(c)})",
            dims="T S",
            mistakes={
                SOFTMAX_WRONG_AXIS.format(
                    which="the columns, axis 0, instead of the rows, axis -1"
                ): by_column,
                **softmax_mistakes(x),
            },
        )

    def test_softmax_of_equal_scores_is_uniform(self, lesson):
        """equal scores get equal weights 1/S"""
        # Under an instructor's secret: the score 7.0 scaled by s and shifted by c.
        v = variation("softmax of equal scores")
        score = 7.0 * v.scale() + v.shift()
        x = np.full((T, S), score)  # every score equal: every weight 1/S = 0.2
        # Over the columns instead: every weight 1/T = 1/3.
        check(
            call(lesson.softmax, x),
            np.full((T, S), 0.2),
            what=f"softmax(all {score})",
            dims="T S",
            mistakes={
                SOFTMAX_WRONG_AXIS.format(which="axis 0 instead of axis -1"): np.full((T, S), 1 / T),
                **softmax_mistakes(x),
            },
        )

    def test_softmax_is_taken_over_the_last_axis_by_default(self, lesson):
        """without an axis, softmax is taken over the last axis (S)"""
        x = rng(2).standard_normal((T, S)) * 2
        check(
            call(lesson.softmax, x),
            softmax_loop(x, -1),
            what="softmax(x) of a (T, S) x",
            dims="T S",
            mistakes=softmax_mistakes(x, -1),
        )

    def test_softmax_along_axis_0_and_axis_1_of_a_t_by_s_input(self, lesson):
        """softmax along axis 0, 1 and -2 of a (T, S) input"""
        x = rng(3).standard_normal((T, S)) * 2
        for axis in (0, 1, -2):
            check(
                call(lesson.softmax, x, axis=axis),
                softmax_loop(x, axis),
                what=f"softmax(x, axis={axis}) of a (T, S) x",
                dims="T S",
                mistakes=softmax_mistakes(x, axis),
            )

    def test_softmax_along_every_axis_of_a_b_t_s_input(self, lesson):
        """softmax along every axis, -3 to 2, of a (B, T, S) input"""
        x = rng(4).standard_normal((B, T, S)) * 2
        for axis in (0, 1, 2, -1, -2, -3):
            check(
                call(lesson.softmax, x, axis=axis),
                softmax_loop(x, axis),
                what=f"softmax(x, axis={axis}) of a (B, T, S) x",
                dims="B T S",
                mistakes=softmax_mistakes(x, axis),
            )

    def test_softmax_keeps_the_axis_of_the_maximum_for_broadcasting(self, lesson):
        """the maximum keeps its axis (keepdims=True), on a (4, 4, 4) cube"""
        # A cube on purpose: a maximum without keepdims=True broadcasts here without an error.
        x = rng(5).standard_normal((4, 4, 4)) * 3
        for axis in (None, 0, 1):
            kwargs = {} if axis is None else {"axis": axis}
            axis = -1 if axis is None else axis
            check(
                call(lesson.softmax, x, **kwargs),
                softmax_loop(x, axis),
                what=f"softmax(x, axis={axis}) of a (4, 4, 4) x",
                dims="B T S",
                mistakes=softmax_mistakes(x, axis),
            )

    def test_softmax_of_logits_around_plus_minus_1000_in_float64(self, lesson):
        """logits near +1000, near -1000 and mixed, in float64"""
        x = huge("softmax float64 logits near +-1000")
        check(
            call(lesson.softmax, x),
            softmax_loop(x),
            what="softmax(x) of logits near +1000, near -1000, and mixed",
            dims="T S",
            mistakes=softmax_mistakes(x),
        )
        check(
            call(lesson.softmax, x.T.copy(), axis=0),
            softmax_loop(x.T, 0),
            what="softmax(x, axis=0) of logits near +-1000",
            dims="S T",
            mistakes=softmax_mistakes(x.T, 0),
        )

    def test_softmax_of_logits_around_plus_minus_1000_in_float32(self, lesson):
        """logits near +1000, near -1000 and mixed, in float32"""
        x = huge("softmax float32 logits near +-1000").astype(np.float32)
        check(
            call(lesson.softmax, x),
            softmax_loop(x),
            what="softmax(x) in float32 of logits near +1000, near -1000, and mixed",
            dims="T S",
            mistakes=softmax_mistakes(x),
        )

    def test_softmax_in_float32_survives_logits_of_100(self, lesson):
        """float32 logits near +-100 do not overflow (exp overflows above 88.7)"""
        # float64 would survive exp(100) without the maximum; float32 overflows above 88.7.
        x = (huge("softmax float32 logits near +-100") / 10).astype(np.float32)
        check(
            call(lesson.softmax, x),
            softmax_loop(x),
            what="softmax(x) in float32 of logits near +100, near -100, and mixed",
            dims="T S",
            mistakes=softmax_mistakes(x),
        )

    def test_softmax_of_an_all_minus_inf_row_is_all_zeros(self, lesson):
        """a row of all -inf gives all zeros, not NaN"""
        # Under an instructor's secret: other rows and columns masked.
        v = variation("softmax all -inf row")
        rows, cols = v.permutation(T), v.permutation(S)
        full, part, masked = rows[1], rows[2], cols[[0, 2, 4]]
        x = rng(6).standard_normal((T, S))
        x[full] = -INF  # every key masked
        x[part, masked] = -INF  # some keys masked: the others share the weight
        expected = softmax_loop(x)
        assert not expected[full].any() and expected[part, masked].sum() == 0
        with_nan = expected.copy()
        with_nan[full] = np.nan
        check(
            call(lesson.softmax, x),
            expected,
            what=f"softmax(x) with row {full} all -inf and row {part} partly -inf",
            dims="T S",
            mistakes={MASKED_NAN: with_nan, **softmax_mistakes(x)},
        )

    def test_softmax_of_an_all_minus_inf_slice_along_axis_0_in_float32(self, lesson):
        """an all -inf slice along axis 0 in float32 gives zeros, not NaN"""
        # Under an instructor's secret: other slices masked, and an all -inf x of another shape.
        v = variation("softmax all -inf slice along axis 0")
        rows, cols = v.permutation(T), v.permutation(S)
        t, s = rows[1], cols[3]
        x = rng(7).standard_normal((B, T, S)).astype(np.float32)
        x[:, t, s] = -INF  # the slice along axis 0 at (t=1, s=3)
        x[0, rows[2], cols[0]] = -INF
        expected = softmax_loop(x, 0)
        with_nan = expected.astype(np.float64)
        with_nan[:, t, s] = np.nan
        check(
            call(lesson.softmax, x, axis=0),
            expected,
            what=f"softmax(x, axis=0) in float32 with x[:, {t}, {s}] all -inf",
            dims="B T S",
            mistakes={MASKED_NAN: with_nan, **softmax_mistakes(x, 0)},
        )
        shape, dims = v.pick((((T, S), "T S"), ((S, T), "S T"), ((B, T, S), "B T S"), ((H, S), "H S")))
        whole = np.full(shape, -INF)
        check(
            call(lesson.softmax, whole),
            np.zeros(shape),
            what="softmax(all -inf)",
            dims=dims,
            mistakes={MASKED_NAN: np.full(shape, np.nan)},
        )

    def test_softmax_keeps_float32_and_float64(self, lesson):
        """float32 stays float32 and float64 stays float64"""
        x64 = rng(8).standard_normal((B, T, S))
        for x in (x64.astype(np.float32), x64):
            check(
                call(lesson.softmax, x),
                softmax_loop(x),
                what=f"softmax(x) in {x.dtype}",
                dims="B T S",
                mistakes=softmax_mistakes(x),
            )

    def test_softmax_leaves_its_input_unchanged(self, lesson):
        """softmax leaves its input x unchanged, for any axis"""
        x = rng(9).standard_normal((B, T, S)) * 2
        x[0, 1] = -INF
        for kwargs in ({}, {"axis": 0}, {"axis": 1}):
            call(lesson.softmax, x, **kwargs)
            check_untouched(lesson, with_axis("softmax", kwargs))
        call(lesson.softmax, x.astype(np.float32))
        check_untouched(lesson, "softmax(x) in float32")

    def test_softmax_matches_the_loop_on_1d_3d_and_4d_scores(self, lesson):
        """softmax matches the loop on (S,), (B, T, S) and (B, H, T, S) scores"""
        r = rng(10)
        for x, dims in (
            (r.standard_normal(S) * 5, "S"),
            (r.standard_normal((B, T, S)) * 5, "B T S"),
            (r.standard_normal((B, H, T, S)) * 5, "B H T S"),
        ):
            check(
                call(lesson.softmax, x),
                softmax_loop(x),
                what=f"softmax(x) with x {x.shape}, scores of spread 5",
                dims=dims,
                mistakes=softmax_mistakes(x),
            )

    @no_shrinking
    @given(shape=shapes, pick=st.integers(0, 5), scale=scales, dtype=dtypes, seed=seeds)
    def test_softmax_rows_sum_to_one(self, lesson, shape, pick, scale, dtype, seed):
        """weights along the axis sum to one and are never negative"""
        x = (rng(seed).standard_normal(shape) * scale).astype(dtype)
        axis = pick_axis(x.ndim, pick)
        what = f"softmax(x, axis={axis}) with x {x.shape} {dtype}"
        out = array_of_shape(call(lesson.softmax, x, axis=axis), x.shape, what, softmax_mistakes(x, axis))
        sums = np.asarray(out.astype(np.float64).sum(axis=axis))
        mistakes = {
            name: (lambda v=v: np.asarray(v()).astype(np.float64).sum(axis=axis))
            for name, v in {**wrong_axis_mistakes(x, axis), **overflow_mistakes(x, axis)}.items()
        }
        check(
            sums,
            np.ones(sums.shape),
            what=f"{what}.sum(axis={axis})",
            dims=reduced_letters(x.ndim, axis),
            rtol=1e-5,
            atol=1e-5,
            mistakes=mistakes,
        )
        assert (out >= 0).all(), f"{what} has negative weights; exp never gives one."

    @no_shrinking
    @given(shape=shapes, pick=st.integers(0, 5), seed=seeds)
    def test_softmax_is_unchanged_by_adding_a_constant_to_each_row(self, lesson, shape, pick, seed):
        """adding a constant (up to +-1000) to each row leaves softmax unchanged"""
        r = rng(seed)
        x = r.standard_normal(shape) * 3
        axis = pick_axis(x.ndim, pick)
        c = r.uniform(-1000, 1000, np.max(x, axis=axis, keepdims=True).shape)  # one per row
        plain = array_of_shape(
            call(lesson.softmax, x, axis=axis), x.shape, f"softmax(x, axis={axis})", softmax_mistakes(x, axis)
        )
        check(
            call(lesson.softmax, x + c, axis=axis),
            plain,
            what=f"softmax(x + c, axis={axis}) (c one constant per row, up to +-1000)",
            dims=letters(x.ndim),
            mistakes=softmax_mistakes(x + c, axis),
        )

    @no_shrinking
    @given(shape=shapes, pick=st.integers(0, 5), scale=scales, seed=seeds)
    def test_softmax_preserves_the_order_within_a_row(self, lesson, shape, pick, scale, seed):
        """a larger score gets a larger weight, equal scores equal weights"""
        x = np.round(rng(seed).standard_normal(shape) * scale, 1)  # rounding makes some ties
        # Under an instructor's secret: every score shifted by c, off the 0.1 grid of a public grade.
        c = variation("softmax order within a row").shift(values=(-0.75, -0.25, 0.25, 0.75))
        x = x + c if c else x  # (adding 0.0 would turn a -0.0 into 0.0)
        axis = pick_axis(x.ndim, pick)
        what = f"softmax(x, axis={axis}) with x {x.shape}"
        out = array_of_shape(call(lesson.softmax, x, axis=axis), x.shape, what, softmax_mistakes(x, axis))
        assert not np.isnan(out).any(), f"{what} contains NaN for finite scores."
        xs, ps = np.moveaxis(x, axis, -1), np.moveaxis(out, axis, -1)
        lower = xs[..., :, None] < xs[..., None, :]
        swapped = lower & (ps[..., :, None] > ps[..., None, :])
        tied = (xs[..., :, None] == xs[..., None, :]) & (ps[..., :, None] != ps[..., None, :])
        assert not swapped.any(), (
            f"{what} changed the order within a row: a smaller score got a larger weight "
            f"(first at slice index {[int(i) for i in np.argwhere(swapped)[0]]}). softmax is "
            "increasing: is it taken along the wrong axis?"
        )
        assert not tied.any(), f"{what} gave equal scores in one row different weights."


# ---------------------------------------------------------------- logsumexp
@exercise("logsumexp")
class TestLogsumexp:
    def test_logsumexp_reduces_the_last_axis_away(self, lesson):
        """logsumexp(x) of (B, T, S) scores reduces the last axis away: (B, T)"""
        x = rng(20).standard_normal((B, T, S))
        check(
            call(lesson.logsumexp, x),
            logsumexp_loop(x),
            what="logsumexp(x)",
            dims="B T",
            mistakes=lse_mistakes(x),
        )

    @hand_checked
    def test_logsumexp_small_case_by_hand(self, lesson):
        """logsumexp(log([[1, 3], [2, 6]])) by hand is [log 4, log 8]"""
        # Under an instructor's secret: the rows and the columns swapped, every score shifted by c.
        v = variation("logsumexp by hand")
        c, rows, cols = v.shift(), v.permutation(2), v.permutation(2)
        table = np.array([[1.0, 3.0], [2.0, 6.0]])[rows][:, cols]
        x = np.log(table) + c
        # exp(x) = [[1, 3], [2, 6]]: row sums 4 and 8, so [log 4, log 8].
        # Column sums instead: 3 and 9, so [log 3, log 9].
        by_row, by_column = np.log([4.0, 8.0])[rows] + c, np.log([3.0, 9.0])[cols] + c
        check(
            call(lesson.logsumexp, x),
            by_row,
            what=f"logsumexp(log({table.astype(int).tolist()}){plus(c)})",
            dims="T",
            mistakes={
                LSE_KEEPDIMS: by_row[:, None],
                LSE_WRONG_AXIS.format(which="the columns, axis 0, instead of the rows, axis -1"): by_column,
                **lse_mistakes(x),
            },
        )

    def test_logsumexp_of_a_1d_array_is_a_scalar(self, lesson):
        """logsumexp of a 1-D array is a scalar: log 4 for np.zeros(4)"""
        # Under an instructor's secret: another length n, every entry c instead of 0.
        v = variation("logsumexp of a 1-D array")
        n, c = v.integers(2, 9, 4), v.shift()
        x = np.zeros(n) + c  # log(1 + 1 + 1 + 1) = log 4 (plus c)
        check(
            call(lesson.logsumexp, x),
            np.array(math.log(n) + c),
            what=f"logsumexp(np.zeros({n}))" if c == 0 else f"logsumexp(np.full({n}, {c:g}))",
            dims="",
            mistakes={LSE_KEEPDIMS: np.array([math.log(n) + c])},
        )

    def test_logsumexp_along_axis_0_and_axis_1_of_a_t_by_s_input(self, lesson):
        """logsumexp along axis 0, 1, -2 and -1 of a (T, S) input"""
        x = rng(21).standard_normal((T, S)) * 2
        for axis, dims in ((0, "S"), (1, "T"), (-2, "S"), (-1, "T")):
            check(
                call(lesson.logsumexp, x, axis=axis),
                logsumexp_loop(x, axis),
                what=f"logsumexp(x, axis={axis}) of a (T, S) x",
                dims=dims,
                mistakes=lse_mistakes(x, axis),
            )

    def test_logsumexp_along_every_axis_of_a_b_t_s_input(self, lesson):
        """logsumexp along every axis of a (B, T, S) input"""
        x = rng(22).standard_normal((B, T, S)) * 2
        for axis, dims in ((0, "T S"), (1, "B S"), (2, "B T"), (-2, "B S"), (-3, "T S")):
            check(
                call(lesson.logsumexp, x, axis=axis),
                logsumexp_loop(x, axis),
                what=f"logsumexp(x, axis={axis}) of a (B, T, S) x",
                dims=dims,
                mistakes=lse_mistakes(x, axis),
            )

    def test_logsumexp_of_logits_around_plus_minus_1000_in_float64(self, lesson):
        """logits near +1000, near -1000 and mixed, in float64"""
        x = huge("logsumexp float64 logits near +-1000")
        check(
            call(lesson.logsumexp, x),
            logsumexp_loop(x),
            what="logsumexp(x) of logits near +1000, near -1000, and mixed",
            dims="T",
            mistakes=lse_mistakes(x),
        )
        check(
            call(lesson.logsumexp, x.T.copy(), axis=0),
            logsumexp_loop(x.T, 0),
            what="logsumexp(x, axis=0) of logits near +-1000",
            dims="T",
            mistakes=lse_mistakes(x.T, 0),
        )

    def test_logsumexp_of_logits_around_plus_minus_1000_and_100_in_float32(self, lesson):
        """logits near +-1000 and near +-100, in float32"""
        logits = huge("logsumexp float32 logits near +-1000 and +-100")
        for x, near in ((logits.astype(np.float32), 1000), ((logits / 10).astype(np.float32), 100)):
            check(
                call(lesson.logsumexp, x),
                logsumexp_loop(x),
                what=f"logsumexp(x) in float32 of logits near +-{near}",
                dims="T",
                mistakes=lse_mistakes(x),
            )

    def test_logsumexp_of_an_all_minus_inf_row_is_minus_inf(self, lesson):
        """a row of all -inf gives -inf, not NaN, in float64 and float32"""
        # Under an instructor's secret: other rows and columns masked.
        v = variation("logsumexp all -inf row")
        rows, cols = v.permutation(T), v.permutation(S)
        full, part = rows[1], rows[2]
        x = rng(23).standard_normal((T, S))
        x[full] = -INF
        x[part, cols[[1, 3]]] = -INF
        expected = logsumexp_loop(x)
        assert expected[full] == -INF
        with_nan = expected.copy()
        with_nan[full] = np.nan
        check(
            call(lesson.logsumexp, x),
            expected,
            what=f"logsumexp(x) with row {full} all -inf and row {part} partly -inf",
            dims="T",
            mistakes={LSE_MASKED_NAN: with_nan, **lse_mistakes(x)},
        )
        x32 = x.T.astype(np.float32)  # (S, T): the all -inf slice is now column 1
        check(
            call(lesson.logsumexp, x32, axis=0),
            expected.astype(np.float32),
            what=f"logsumexp(x, axis=0) in float32 with column {full} all -inf",
            dims="T",
            mistakes={LSE_MASKED_NAN: with_nan, **lse_mistakes(x32, 0)},
        )

    def test_logsumexp_keeps_float32_and_float64(self, lesson):
        """float32 stays float32 and float64 stays float64"""
        x64 = rng(24).standard_normal((B, T, S))
        for x in (x64.astype(np.float32), x64):
            check(
                call(lesson.logsumexp, x),
                logsumexp_loop(x),
                what=f"logsumexp(x) in {x.dtype}",
                dims="B T",
                mistakes=lse_mistakes(x),
            )

    def test_logsumexp_leaves_its_input_unchanged(self, lesson):
        """logsumexp leaves its input x unchanged, for any axis"""
        x = rng(25).standard_normal((B, T, S)) * 2
        x[1, 2] = -INF
        for kwargs in ({}, {"axis": 0}, {"axis": 1}):
            call(lesson.logsumexp, x, **kwargs)
            check_untouched(lesson, with_axis("logsumexp", kwargs))

    def test_logsumexp_matches_the_loop_on_3d_and_4d_scores(self, lesson):
        """logsumexp matches the loop on (B, T, S) and (B, H, T, S) scores"""
        r = rng(26)
        for x, dims in (
            (r.standard_normal((B, T, S)) * 5, "B T"),
            (r.standard_normal((B, H, T, S)) * 5, "B H T"),
        ):
            check(
                call(lesson.logsumexp, x),
                logsumexp_loop(x),
                what=f"logsumexp(x) with x {x.shape}, scores of spread 5",
                dims=dims,
                mistakes=lse_mistakes(x),
            )

    @no_shrinking
    @given(shape=shapes, pick=st.integers(0, 5), seed=seeds)
    def test_logsumexp_shifts_with_a_constant_added_to_each_row(self, lesson, shape, pick, seed):
        """adding a constant c to each row adds c to logsumexp"""
        r = rng(seed)
        x = r.standard_normal(shape) * 3
        axis = pick_axis(x.ndim, pick)
        c = r.uniform(-1000, 1000, np.max(x, axis=axis, keepdims=True).shape)  # one per row
        reduced, top, n = np.max(x, axis=axis).shape, np.max(x, axis=axis), x.shape[axis]
        what = f"logsumexp(x, axis={axis}) with x {x.shape}"
        plain = array_of_shape(call(lesson.logsumexp, x, axis=axis), reduced, what, lse_mistakes(x, axis))
        # The sum of n exponentials lies between exp(max) and n * exp(max).
        assert (plain >= top - 1e-9).all() and (plain <= top + math.log(n) + 1e-9).all(), (
            f"{what} is not between max(x) and max(x) + log(n) along the axis (n = {n})."
        )
        check(
            call(lesson.logsumexp, x + c, axis=axis),
            plain + c.reshape(reduced),
            what=f"logsumexp(x + c, axis={axis}) (c one constant per row, up to +-1000)",
            dims=reduced_letters(x.ndim, axis),
            mistakes=lse_mistakes(x + c, axis),
        )

    @no_shrinking
    @given(shape=shapes, pick=st.integers(0, 5), scale=scales, seed=seeds)
    def test_exp_of_x_minus_logsumexp_is_the_softmax(self, lesson, shape, pick, scale, seed):
        """exp(x - logsumexp(x)) is softmax(x), along any axis"""
        x = rng(seed).standard_normal(shape) * scale
        axis = pick_axis(x.ndim, pick)
        what = f"logsumexp(x, axis={axis}) with x {x.shape}"
        lse = call(lesson.logsumexp, x, axis=axis)
        check(
            lse,
            logsumexp_loop(x, axis),
            what=what,
            dims=reduced_letters(x.ndim, axis),
            mistakes=lse_mistakes(x, axis),
        )
        with np.errstate(all="ignore"):
            weights = np.exp(x - np.expand_dims(lse, axis))
        check(weights, softmax_loop(x, axis), what=f"exp(x - {what})", dims=letters(x.ndim))
