"""Grading tests for lesson 13 (l13_online_softmax): online_softmax, online_softmax_attention.

The answers are checked against slow oracles written here (one exponential and one dot product
at a time, the whole row at once, as lessons 2 and 3 define them). Sizes are all different
(B=2, H=3, T=5, S=11, K=4, Kv=6) and the block sizes 1, 3, 4, 11 and 64 cut S = 11 into full
blocks, a shorter last block (11 = 4 + 4 + 3) or a single block shorter than block_size, so
a dropped last block shows. Scores are large (q and k scaled up) and their row maxima grow from
block to block, so a running sum or output that is not rescaled shows too.

`blockwise` below is the same block recurrence with one rule broken at a time: it computes the
classic WRONG answers, only to name a mistake when an answer matches one of them.

Memory is measured by the grader from outside the process that runs the learner's code
(`lesson.measure`, see docs/adding_a_lesson.md), at T = 512 queries of width 4 and S = 8,192
and 32,768 keys: a (T, S) float64 matrix of scores is then 32 MiB and 128 MiB, a (64, S) block of
whole rows 4 MiB and 16 MiB, while q, k and v together are 0.5 MiB and 2 MiB. On a machine that
cannot measure soundly (no Landlock) `measure` raises RuntimeError, and the check ends as an
error of the grader: it never passes there.
"""

import math
import weakref

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
    Mistake,
    check_array,
    check_peak_below,
    exercise,
    hand_checked,
    remembered,
    rng,
    variation,
)

B, H, T, S, K, KV = 2, 3, 5, 11, 4, 6
BLOCKS = (1, 3, 4, 11, 64)  # 11 keys: 11 x 1, 3+3+3+2, 4+4+3, one full block, one short block
MIB = 1024**2


def listed(a):
    """a as nested lists, whole numbers without ".0" (for what= texts)."""
    if np.ndim(a) == 0:
        return f"{float(a):g}"
    return "[" + ", ".join(listed(row) for row in a) + "]"


# ---------------------------------------------------------------- oracles (slow and obvious)
@remembered
def softmax_loop(x):
    """Softmax along the last axis, one row at a time; an all -inf row gives zeros."""
    out = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape[:-1]):
        row = [float(value) for value in x[idx]]
        top = max(row, default=-math.inf)
        if top == -math.inf:
            continue
        e = [math.exp(value - top) for value in row]
        out[idx] = [value / sum(e) for value in e]
    return out


@remembered
def attention_loop(q, k, v, mask=None, scale=None):
    """Lesson 3's output, one query at a time over every key it may see; any leading axes, a
    mask broadcastable to (..., T, S). A query that may see no key gets zeros."""
    n_t, n_k = q.shape[-2:]
    n_s, n_v = k.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(n_k) if scale is None else scale
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        lead = np.broadcast_shapes(lead + (n_t, n_s), np.shape(mask))[:-2]
        mask = np.broadcast_to(mask, lead + (n_t, n_s))
    q, k, v = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))
    out = np.zeros(lead + (n_t, n_v))
    for idx in np.ndindex(*lead):
        for t in range(n_t):
            js = [j for j in range(n_s) if mask is None or mask[idx + (t, j)]]
            if not js:
                continue
            scores = [
                scale * sum(float(q[idx + (t, c)]) * float(k[idx + (j, c)]) for c in range(n_k)) for j in js
            ]
            top = max(scores)
            e = [math.exp(s - top) for s in scores]
            for j, weight in zip(js, e, strict=True):
                out[idx + (t,)] += weight / sum(e) * v[idx + (j,)].astype(np.float64)
    return out


# ---------------------------------------------------------------- named wrong answers
def blocks_of(n_s, block_size, drop_last=False):
    """(start, stop) of each block; drop_last keeps only the full blocks (S // block_size)."""
    stops = range(0, n_s - block_size + 1 if drop_last else n_s, block_size)
    return [(start, min(start + block_size, n_s)) for start in stops]


def blockwise(
    scores,
    v=None,
    block_size=4,
    rescale_sum=True,
    rescale_out=True,
    drop_last=False,
    nan_rows=False,
    nan_kept=True,
    block_max=False,
):
    """The block recurrence in float64, with one rule broken at a time, ONLY to name mistakes.
    scores (..., T, S) with -inf where masked; with v the attention output, else the softmax.
    nan_rows: -inf - (-inf) is left NaN; nan_kept: the final division keeps those NaN (else the
    rows come out 0, as np.divide(..., where=denom > 0) gives them); block_max: the running
    maximum is replaced by each block's own maximum."""
    scores = np.asarray(scores, dtype=np.float64)
    m = np.full(scores.shape[:-1] + (1,), -np.inf)
    m_safe, denom = np.zeros_like(m), np.zeros_like(m)
    o = None if v is None else np.zeros(scores.shape[:-1] + (v.shape[-1],))
    with np.errstate(all="ignore"):
        for start, stop in blocks_of(scores.shape[-1], block_size, drop_last):
            block = scores[..., start:stop]
            m_new = (
                block.max(axis=-1, keepdims=True)
                if block_max
                else np.maximum(m, block.max(axis=-1, keepdims=True))
            )
            m_safe = m_new if nan_rows else np.where(np.isfinite(m_new), m_new, 0)
            p = np.exp(block - m_safe)
            alpha = np.exp(m - m_safe)
            denom = (denom * alpha if rescale_sum else denom) + p.sum(axis=-1, keepdims=True)
            if o is not None:
                o = (o * alpha if rescale_out else o) + p @ np.asarray(v, np.float64)[..., start:stop, :]
            m = m_new
        top = np.exp(scores - m_safe) if o is None else o
        divide = (denom > 0) | (np.isnan(denom) & nan_kept)
        return np.divide(top, denom, out=np.zeros_like(top), where=divide)


def masked_scores(q, k, mask=None, scale=None):
    """Lesson 3's scores (..., T, S) in float64, -inf where the mask is False (vectorised: used
    only to compute named wrong answers)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2)) * scale
    return scores if mask is None else np.where(mask, scores, -np.inf)


NO_RESCALE_SUM = Mistake(
    "sum-not-rescaled",
    "the running sum was not rescaled when the maximum grew: denom must become "
    "denom * exp(m_old - m_new) + the new block's sum, or it adds terms measured against "
    "different maxima",
    misconception="stale-running-max",
    exercises=("online_softmax", "online_softmax_attention"),
)
NO_RESCALE_OUT = Mistake(
    "output-not-rescaled",
    "the accumulated output was not rescaled when the maximum grew: o must become "
    "o * exp(m_old - m_new) + p @ v_block, like the running sum",
    misconception="stale-running-max",
    exercises=("online_softmax_attention",),
)
DROPS_LAST = Mistake(
    "last-block-dropped",
    "the last, shorter block of keys was dropped (range(0, S - block_size + 1, block_size), or "
    "S // block_size blocks): when block_size does not divide S, a last block holds the "
    "S % block_size keys left",
    exercises=("online_softmax", "online_softmax_attention"),
)
NAN_ROWS = Mistake(
    "nan-masked-rows",
    "NaN where every key of a row is masked (so far): the running maximum is -inf there and "
    "-inf - (-inf) is NaN; subtract 0 where the maximum is not finite, as lesson 2 does",
    exercises=("online_softmax", "online_softmax_attention"),
)
NAN_ZEROED = NAN_ROWS.plus(
    " (here the NaN then zeroed every row it reached: a row whose first blocks are masked lost "
    "its later keys too)"
)
PROMOTED = Mistake(
    "promoted",
    "float32 came back as float64: an array made without dtype (np.full, np.zeros) or a numpy "
    "float64 number promoted the result; make m, l and o in the inputs' dtype",
    exercises=("online_softmax", "online_softmax_attention"),
)
NOT_REFUSED = Mistake(
    "block-size-not-refused",
    "block_size={value!r} was not refused: raise ValueError unless block_size is a positive int "
    "(check_block_size(block_size) does it)",
    exercises=("online_softmax", "online_softmax_attention"),
)
FULL_SCORES = Mistake(
    "full-score-matrix",
    "the full (T, S) matrix of scores is built (lesson 3's way): visit the keys in blocks and "
    "keep only a (T, block_size) piece of scores at a time",
    exercises=("online_softmax_attention",),
)
BLOCK_MAX = Mistake(
    "running-max-reset",
    "the running maximum was replaced by each block's own maximum instead of max(m, the block's "
    "maximum): once an earlier block held the row's maximum, the later terms and the rescaling "
    "factor exp(m - m_new) grow without bound (exp(1000) is inf)",
    exercises=("online_softmax", "online_softmax_attention"),
)
WHOLE_ROWS = Mistake(
    "whole-rows-of-scores",
    "whole rows of scores are kept: a (t, S) array, a block of queries against EVERY key, "
    "still grows with S; visit the keys in blocks too, with a running maximum, sum and output",
    exercises=("online_softmax_attention",),
)


def softmax_mistakes(x, block_size):
    scores = np.asarray(x, np.float64)
    return {
        NO_RESCALE_SUM: lambda: blockwise(scores, None, block_size, rescale_sum=False),
        DROPS_LAST: lambda: blockwise(scores, None, block_size, drop_last=True),
        NAN_ROWS: lambda: blockwise(scores, None, block_size, nan_rows=True),
        NAN_ZEROED: lambda: blockwise(scores, None, block_size, nan_rows=True, nan_kept=False),
        BLOCK_MAX: lambda: blockwise(scores, None, block_size, block_max=True),
    }


def attention_mistakes(q, k, v, mask=None, scale=None, block_size=64):
    scores = masked_scores(q, k, mask, scale)

    def wrong(**how):
        return lambda: blockwise(scores, v, block_size, **how)

    return {
        Mistake.any_of(NO_RESCALE_SUM, NO_RESCALE_OUT): wrong(rescale_sum=False, rescale_out=False),
        NO_RESCALE_SUM: wrong(rescale_sum=False),
        NO_RESCALE_OUT: wrong(rescale_out=False),
        DROPS_LAST: wrong(drop_last=True),
        NAN_ROWS: wrong(nan_rows=True),
        NAN_ZEROED: wrong(nan_rows=True, nan_kept=False),
        BLOCK_MAX: wrong(block_max=True),
    }


def check_softmax(actual, x, block_size, *, what):
    expected = softmax_loop(x)
    promoted = {PROMOTED: expected} if x.dtype == np.float32 else {}
    check_array(
        actual,
        expected.astype(x.dtype),
        what=what,
        dims=" ".join("BTS"[-x.ndim :]),
        rtol=1e-9 if x.dtype == np.float64 else None,
        atol=1e-12 if x.dtype == np.float64 else None,
        mistakes={**promoted, **softmax_mistakes(x, block_size)},
    )


def check_attention(actual, q, k, v, mask=None, scale=None, block_size=64, *, what, expected=None, dims=None):
    expected = attention_loop(q, k, v, mask, scale) if expected is None else expected
    dtype = np.result_type(q, k, v)
    promoted = {PROMOTED: expected} if dtype == np.float32 else {}
    check_array(
        actual,
        expected.astype(dtype),
        what=what,
        dims=dims or " ".join(("B", "H", "T", "Kv")[-expected.ndim :]),
        rtol=1e-9 if dtype == np.float64 else None,
        atol=1e-12 if dtype == np.float64 else None,
        mistakes={**promoted, **attention_mistakes(q, k, v, mask, scale, block_size)},
    )


def check_refuses(call, value, what):
    """The learner's code must raise ValueError for this block_size."""
    try:
        call()
    except ValueError:  # raised in this process: only in a debug run (`course check --debug`)
        return
    except LearnerError as error:
        text = str(error)
        if not any(line.startswith("ValueError") for line in text.splitlines()):
            raise KnownMistake(
                f"{what} must raise ValueError, but it raised:\n{text}", NOT_REFUSED.format(value=value)
            ) from None
        return
    mistake = NOT_REFUSED.format(value=value)
    raise KnownMistake(f"{what} returned a result, but it must raise ValueError.", mistake)


def growing_rows(r, shape, spread=6.0):
    """Random scores whose running maximum grows from one block to the next along the last
    axis (a rising trend plus noise), so every block rescales what came before."""
    trend = np.linspace(0.0, spread, shape[-1])
    return r.standard_normal(shape) * 2.0 + trend


def qkv(r, lead=(B, H), t=T, s=S, k=K, kv=KV, dtype=np.float64):
    """q, k, v with large scores (q and k scaled up) whose row maxima grow along the keys."""
    q = r.standard_normal(lead + (t, k)) * 2.0
    keys = r.standard_normal(lead + (s, k)) * 2.0
    keys[..., :, 0] += np.linspace(0.0, 4.0, s)  # later keys score higher for q[..., 0] > 0
    q[..., :, 0] = np.abs(q[..., :, 0]) + 1.0
    v = r.standard_normal(lead + (s, kv))
    return q.astype(dtype), keys.astype(dtype), v.astype(dtype)


# ---------------------------------------------------------------- online_softmax
@exercise("online_softmax")
class TestOnlineSoftmax:
    def test_online_softmax_keeps_the_shape_b_t_s_and_the_dtype(self, lesson):
        """online_softmax keeps the shape (B, T, S) and the dtype"""
        x = growing_rows(rng(1), (B, T, S))
        check_softmax(lesson.online_softmax(x, 4), x, 4, what="online_softmax(x (B, T, S) = (2, 5, 11), 4)")

    @hand_checked
    def test_small_case_by_hand_in_blocks_of_two(self, lesson):
        """small case by hand: [0, 1, 2, 3, 4, 5] in blocks of two"""
        # x = [0, 1, 2, 3, 4, 5] in blocks [0, 1], [2, 3], [4, 5]: the maximum grows in every block.
        # softmax = exp(x - 5) / sum_j exp(x_j - 5) = [0.0043, 0.0116, 0.0315, 0.0858, 0.2331, 0.6337]
        # Under an instructor's secret: x scaled by s and shifted by c (the shift changes no weight).
        v = variation("online_softmax by hand")
        s, c = v.scale(), v.shift()
        x = np.arange(6.0).reshape(1, 6) * s + c
        e = [math.exp(s * (i - 5)) for i in range(6)]
        expected = np.array([[value / sum(e) for value in e]])
        # without the rescaling, l = e^-1 + e^0 (against max 1), then + e^-1 + e^0 against max 3,
        # then + e^-1 + e^0 against max 5: a sum of 3 (e^-1 + 1) = 4.1036 instead of 1.5781
        check_array(
            lesson.online_softmax(x, 2),
            expected,
            what=f"online_softmax({listed(x)}, block_size=2)",
            dims="T S",
            rtol=1e-9,
            atol=1e-12,
            mistakes=softmax_mistakes(x, 2),
        )

    def test_every_block_size_gives_lesson_2s_softmax(self, lesson):
        """every block size (1, 3, 4, 11, 64) gives lesson 2's softmax"""
        x = growing_rows(rng(2), (B, T, S))
        for block_size in BLOCKS:
            check_softmax(
                lesson.online_softmax(x, block_size),
                x,
                block_size,
                what=f"online_softmax(x (2, 5, 11), block_size={block_size})",
            )

    def test_the_default_block_size_is_64_and_the_last_short_block_counts(self, lesson):
        """the default block_size is 64, and the last short block counts"""
        x = growing_rows(rng(3), (3, 150), spread=10.0)  # 150 = 64 + 64 + 22
        check_softmax(
            lesson.online_softmax(x), x, 64, what="online_softmax(x (3, 150)) with the default block_size"
        )

    def test_large_scores_do_not_overflow(self, lesson):
        """large scores (near +-1000) do not overflow"""
        # Under an instructor's secret: x shifted by c, its columns reordered.
        v = variation("scores near 1000")
        c, order = v.shift(), v.permutation(5)
        x = np.array([[1000.0, 1001.0, 999.0, 1002.0, 998.0], [-1000.0, -1001.0, -999.0, -1002.0, -998.0]])
        x = x[:, order] + c
        check_softmax(lesson.online_softmax(x, 2), x, 2, what="online_softmax(x with values near +-1000, 2)")

    @hand_checked
    def test_a_maximum_in_an_earlier_block_keeps_every_later_term_in_range(self, lesson):
        """a maximum in an earlier block keeps every later term in range"""
        # Row 0's maximum, 1000, is in the first block of two: every later term is measured
        # against it, exp(0 - 1000) = 0, so the weights are [1, 0, 0, 0]. A running maximum
        # replaced by each block's own (0 in the second block) rescales the sum by exp(1000):
        # inf, and NaN after it. Row 1 grows only at its end, where either way is right.
        # Under an instructor's secret: x shifted by c, its two rows swapped.
        v = variation("maximum in an earlier block")
        c, order = v.shift(), v.permutation(2)
        x = np.array([[1000.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1000.0]])[order] + c
        check_softmax(lesson.online_softmax(x, 2), x, 2, what=f"online_softmax({listed(x)}, 2)")

    def test_a_row_of_all_minus_inf_gives_zeros_and_no_nan(self, lesson):
        """a row of all -inf gives zeros, and no NaN"""
        x = growing_rows(rng(4), (4, S))
        x[1] = -np.inf  # every key masked
        x[2, :5] = -np.inf  # the first blocks masked, later keys not
        check_softmax(lesson.online_softmax(x, 3), x, 3, what="online_softmax(x (4, 11) with masked rows, 3)")

    def test_online_softmax_keeps_float32(self, lesson):
        """online_softmax keeps float32"""
        x = growing_rows(rng(5), (T, S)).astype(np.float32)
        check_softmax(lesson.online_softmax(x, 4), x, 4, what="online_softmax(x float32 (5, 11), 4)")

    def test_the_input_is_left_unchanged(self, lesson):
        """the input x is left unchanged"""
        x = growing_rows(rng(6), (T, S))
        lesson.online_softmax(x, 4)
        if lesson.mutated:
            raise AssertionError(
                "online_softmax(x, 4) changed x in place: write x - m, never x -= m, and leave "
                "the caller's array untouched."
            )

    def test_a_block_size_that_is_not_a_positive_int_raises_value_error(self, lesson):
        """a block_size not a positive int (0, -4, 2.5) raises ValueError"""
        x = growing_rows(rng(7), (T, S))
        for value in (0, -4, 2.5):
            check_refuses(
                lambda value=value: lesson.online_softmax(x, value),
                value,
                f"online_softmax(x, block_size={value!r})",
            )

    @given(
        shape=st.sampled_from([(1,), (7,), (3, 9), (2, 3, 16), (2, 1, 5)]),
        block_size=st.integers(1, 10),
        spread=st.floats(-20.0, 20.0),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_online_softmax_equals_softmax_for_any_blocks(self, lesson, shape, block_size, spread, seed):
        """online_softmax equals softmax for any shape and block_size"""
        x = growing_rows(rng(seed), shape, spread)
        check_softmax(
            lesson.online_softmax(x, block_size),
            x,
            block_size,
            what=f"online_softmax(x {shape}, block_size={block_size})",
        )


# ---------------------------------------------------------------- online_softmax_attention
@exercise("online_softmax_attention")
class TestOnlineSoftmaxAttention:
    def test_out_has_shape_b_h_t_kv(self, lesson):
        """out has shape (B, H, T, Kv)"""
        q, k, v = qkv(rng(10))
        check_attention(
            lesson.online_softmax_attention(q, k, v, block_size=4),
            q,
            k,
            v,
            block_size=4,
            what="online_softmax_attention(q (B, H, T, K) = (2, 3, 5, 4), k (B, H, S, K) = (2, 3, 11, 4), "
            "v (B, H, S, Kv) = (2, 3, 11, 6), block_size=4)",
        )

    @hand_checked
    def test_small_case_by_hand_one_query_three_blocks(self, lesson):
        """small case by hand: one query, three blocks of two keys"""
        # K = 1, q = [[1]], keys 0..5 and scale 1: the scores are 0..5, visited in blocks of 2,
        # the maximum growing in every block. The values are 10 * position, so the output is
        # 10 * sum_j j softmax_j = 10 * 4.4329 = 44.329 (lesson 3's answer). Forgetting to
        # rescale the output gives 71.02, forgetting the sum 17.05, forgetting both 27.31.
        # Under an instructor's secret: the keys shifted by c (so every score is: no weight changes),
        # the values scaled by s and shifted by c_v (so the output is too: the weights sum to 1).
        other = variation("attention by hand")
        c, s, c_v = other.shift(), other.scale(), other.shift()
        q = np.array([[1.0]])
        k = np.arange(6.0).reshape(6, 1) + c
        v = 10.0 * np.arange(6.0).reshape(6, 1) * s + c_v
        e = [math.exp(j - 5) for j in range(6)]
        expected = np.array([[sum(10.0 * j * e[j] for j in range(6)) / sum(e)]]) * s + c_v
        check_attention(
            lesson.online_softmax_attention(q, k, v, None, 1.0, 2),
            q,
            k,
            v,
            None,
            1.0,
            2,
            what=f"online_softmax_attention(q [[1]], k [[{k[0, 0]:g}], ..., [{k[-1, 0]:g}]], "
            f"v [[{v[0, 0]:g}], ..., [{v[-1, 0]:g}]], scale=1.0, block_size=2)",
            expected=expected,
            dims="T Kv",
        )

    @hand_checked
    def test_a_maximum_in_an_earlier_block_keeps_every_later_term_in_range(self, lesson):
        """a maximum in an earlier block keeps every later term in range"""
        # One query, K = 1, scale 1: the scores are [1000, 0, 0, 0, 1], visited in blocks of 2.
        # The first key takes all the weight, so the output is its value, 7. Measured against
        # each block's own maximum instead, the later blocks rescale by exp(1000): NaN.
        # Under an instructor's secret: the keys shifted by c (so every score is: no weight changes),
        # the values scaled by s and shifted by c_v (so the output is too: the weights sum to 1).
        other = variation("attention maximum in an earlier block")
        c, s, c_v = other.shift(), other.scale(), other.shift()
        q = np.array([[1.0]])
        k = np.array([[1000.0], [0.0], [0.0], [0.0], [1.0]]) + c
        v = np.array([[7.0], [1.0], [2.0], [3.0], [4.0]]) * s + c_v
        check_attention(
            lesson.online_softmax_attention(q, k, v, None, 1.0, 2),
            q,
            k,
            v,
            None,
            1.0,
            2,
            what=f"online_softmax_attention(q [[1]], k {listed(k)}, v {listed(v)}, scale=1.0, block_size=2)",
            expected=np.array([[7.0]]) * s + c_v,
            dims="T Kv",
        )

    def test_every_block_size_gives_lesson_3s_output(self, lesson):
        """every block size (1, 3, 4, 11, 64) gives lesson 3's output"""
        q, k, v = qkv(rng(11))
        expected = attention_loop(q, k, v)
        for block_size in BLOCKS:
            check_attention(
                lesson.online_softmax_attention(q, k, v, block_size=block_size),
                q,
                k,
                v,
                block_size=block_size,
                what="online_softmax_attention(q (2, 3, 5, 4), k (2, 3, 11, 4), v (2, 3, 11, 6), "
                f"block_size={block_size})",
                expected=expected,
            )

    def test_the_default_block_size_is_64_and_the_last_short_block_counts(self, lesson):
        """the default block_size is 64, and the last short block counts"""
        q, k, v = qkv(rng(12), lead=(), t=3, s=150)  # 150 keys = 64 + 64 + 22
        check_attention(
            lesson.online_softmax_attention(q, k, v),
            q,
            k,
            v,
            what="online_softmax_attention(q (T, K) = (3, 4), k (S, K) = (150, 4), v (150, 6)) "
            "with the default block_size",
        )

    def test_an_explicit_scale_is_used_as_given(self, lesson):
        """an explicit scale (0.7, 0.0) is used as given"""
        q, k, v = qkv(rng(13))
        for scale in (0.7, 0.0):
            check_attention(
                lesson.online_softmax_attention(q, k, v, None, scale, 3),
                q,
                k,
                v,
                None,
                scale,
                3,
                what=f"online_softmax_attention(q, k, v, scale={scale}, block_size=3)",
            )

    def test_masks_broadcast_as_in_lesson_3(self, lesson):
        """masks (T, S), (B, 1, 1, S), (B, 1, T, S), (S,) broadcast as in lesson 3"""
        r = rng(14)
        q, k, v = qkv(r)
        masks = {
            "(T, S)": r.random((T, S)) < 0.6,
            "(B, 1, 1, S) padding": np.arange(S) < np.array([7, 10]).reshape(B, 1, 1, 1),
            "(B, 1, T, S)": r.random((B, 1, T, S)) < 0.6,
            "(S,)": np.arange(S) % 3 != 1,
        }
        for name, mask in masks.items():
            check_attention(
                lesson.online_softmax_attention(q, k, v, mask, None, 4),
                q,
                k,
                v,
                mask,
                None,
                4,
                what=f"online_softmax_attention(q (2, 3, 5, 4), k, v, mask {name}, block_size=4)",
            )

    def test_a_fully_masked_row_gives_zeros_and_a_late_first_key_gives_no_nan(self, lesson):
        """a fully masked row gives zeros, and a late first key gives no NaN"""
        r = rng(15)
        q, k, v = qkv(r, lead=(B,))
        mask = r.random((B, T, S)) < 0.7
        mask[0, 1] = False  # query 1 of sequence 0 may see no key: zeros, as in lesson 3
        mask[1, 2, :6] = False  # query 2 of sequence 1: its first blocks are fully masked
        mask[1, 2, 9] = True
        check_attention(
            lesson.online_softmax_attention(q, k, v, mask, None, 3),
            q,
            k,
            v,
            mask,
            None,
            3,
            what="online_softmax_attention(q (B, T, K) = (2, 5, 4), k, v, mask (B, T, S) with a fully "
            "masked row and a row whose first 6 keys are masked, block_size=3)",
            dims="B T Kv",
        )

    def test_a_causal_mask_whose_first_blocks_are_empty_for_early_queries(self, lesson):
        """query i sees keys i..S-1: the first blocks of later queries are empty"""
        q, k, v = qkv(rng(16), lead=(), t=S, s=S)
        mask = np.arange(S)[None, :] >= np.arange(S)[:, None]  # query i sees keys i .. S-1 only,
        # so the first blocks of the later queries are fully masked
        check_attention(
            lesson.online_softmax_attention(q, k, v, mask, None, 4),
            q,
            k,
            v,
            mask,
            None,
            4,
            what="online_softmax_attention(q (11, 4), k (11, 4), v (11, 6), mask: query i sees "
            "keys i..10, block_size=4)",
            dims="T Kv",
        )

    def test_leading_axes_broadcast_as_in_lesson_3(self, lesson):
        """leading axes broadcast as in lesson 3: k (1, H, S, K), v (S, Kv)"""
        r = rng(17)
        q = r.standard_normal((B, H, T, K)) * 2
        k = r.standard_normal((1, H, S, K)) * 2  # shared over the batch
        v = r.standard_normal((S, KV))  # shared over batch and heads
        check_attention(
            lesson.online_softmax_attention(q, k, v, None, None, 4),
            q,
            k,
            v,
            block_size=4,
            what="online_softmax_attention(q (2, 3, 5, 4), k (1, 3, 11, 4), v (11, 6), block_size=4)",
        )

    def test_online_softmax_attention_keeps_float32(self, lesson):
        """online_softmax_attention keeps float32"""
        q, k, v = qkv(rng(18), dtype=np.float32)
        mask = np.arange(S) < 8
        check_attention(
            lesson.online_softmax_attention(q, k, v, mask, None, 4),
            q,
            k,
            v,
            mask,
            None,
            4,
            what="online_softmax_attention(q, k, v float32 (2, 3, ...), mask (S,), block_size=4)",
        )

    def test_the_inputs_are_left_unchanged(self, lesson):
        """q, k, v and the mask are left unchanged"""
        q, k, v = qkv(rng(19))
        lesson.online_softmax_attention(q, k, v, np.ones((T, S), dtype=bool), 0.5, 4)
        if lesson.mutated:
            raise AssertionError(
                f"online_softmax_attention(q, k, v, mask, 0.5, 4) changed its input in place "
                f"({', '.join(lesson.mutated)}): build new arrays, never write into the caller's."
            )

    def test_a_block_size_that_is_not_a_positive_int_raises_value_error(self, lesson):
        """a block_size not a positive int (0, -4, 2.5, 4.0) raises ValueError"""
        q, k, v = qkv(rng(20))
        for value in (0, -4, 2.5, 4.0):
            check_refuses(
                lambda value=value: lesson.online_softmax_attention(q, k, v, block_size=value),
                value,
                f"online_softmax_attention(q, k, v, block_size={value!r})",
            )

    @given(
        lead=st.sampled_from([(), (2,), (2, 3), (1, 2)]),
        t=st.integers(1, 4),
        s=st.integers(1, 12),
        block_size=st.integers(1, 13),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_online_attention_equals_lesson_3_for_any_blocks(
        self, lesson, lead, t, s, block_size, masked, seed
    ):
        """equals lesson 3's attention for any shapes, masks and block sizes"""
        r = rng(seed)
        q, k, v = qkv(r, lead=lead, t=t, s=s, k=3, kv=2)
        mask = r.random((t, s)) < 0.6 if masked else None
        check_attention(
            lesson.online_softmax_attention(q, k, v, mask, None, block_size),
            q,
            k,
            v,
            mask,
            None,
            block_size,
            what=f"online_softmax_attention(q {q.shape}, k {k.shape}, v {v.shape}, "
            f"mask {None if mask is None else mask.shape}, block_size={block_size})",
        )


# ---------------------------------------------------------------- memory, measured from outside
MEM_T, MEM_D = 512, 4  # queries and head width of the measured calls
MEM_SMALL, MEM_LARGE = 8_192, 32_768  # keys: (T, S) scores are 32 MiB, then 128 MiB


def measured_inputs(n_s, seed, n_t=MEM_T):
    """q, k, v of a measured call (not remembered by seed: under a secret rng(seed) differs)."""
    r = rng(seed)
    return (
        r.standard_normal((n_t, MEM_D)),
        r.standard_normal((n_s, MEM_D)),
        r.standard_normal((n_s, MEM_D)),
    )


@remembered
def reference_attention(q, k, v):
    """Lesson 3's output, vectorised in float64 (the measured sizes are too large for a loop)."""
    scores = (q @ k.T) / math.sqrt(q.shape[-1])
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def allowed_bytes(q, k, v):
    """What a blockwise implementation may hold: its inputs a few times over (received and
    copied), its (T, block_size) pieces and a fixed margin; no array that grows like T * S."""
    return 4 * (q.nbytes + k.nbytes + v.nbytes) + 6 * MIB


_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # lesson -> {(S, seed): ...}


def measure(lesson, n_s, seed, n_t=MEM_T):
    """The peak memory of one measured call (and its inputs); both memory checks of a grade
    share the call at S = MEM_LARGE, which is measured once."""
    done = _MEASURED.setdefault(lesson, {})
    if (n_s, seed, n_t) not in done:
        done[(n_s, seed, n_t)] = _measure(lesson, n_s, seed, n_t)
    return done[(n_s, seed, n_t)]


def _measure(lesson, n_s, seed, n_t):
    q, k, v = measured_inputs(n_s, seed, n_t)
    measured = lesson.measure("online_softmax_attention", q, k, v)  # RuntimeError: cannot measure here
    check_array(
        measured.result,
        reference_attention(q, k, v),
        what=f"online_softmax_attention(q (T, K) = ({n_t}, {MEM_D}), k and v (S, K) = ({n_s}, {MEM_D}))",
        dims="T Kv",
    )
    return measured.peak_bytes, (q, k, v), measured.import_bytes


def extra_bytes(lesson, n_t):
    """What the call at S = MEM_LARGE held beyond its inputs, with ``n_t`` queries."""
    peak, inputs, _ = measure(lesson, MEM_LARGE, 30, n_t)
    return peak - sum(a.nbytes for a in inputs)


def fail_on_memory(message, lesson):
    """Raise the failure, naming a mistake only where the memory singles it out. A figure in
    bytes cannot tell a (T, S) array of float64 scores from one of booleans eight times as
    long, so a second call with half the queries says how the extra memory grows with T:
    not at all (a block of queries against every key: whole rows), or like T with 8 bytes or
    more per (query, key) pair (the full matrix of scores, or some other (T, S) float array)."""
    _, inputs, imported = measure(lesson, MEM_LARGE, 30)
    if imported >= allowed_bytes(*inputs):  # the import's own peak: nothing about the call
        raise AssertionError(message)
    extra, half = extra_bytes(lesson, MEM_T), extra_bytes(lesson, MEM_T // 2)
    per_pair = extra / (MEM_T * MEM_LARGE)
    message += (
        f"\nWith T = {MEM_T // 2} queries instead of {MEM_T} the call held {half / MIB:.1f} MiB "
        f"beyond its inputs instead of {extra / MIB:.1f} MiB: about {per_pair:.2g} bytes per "
        f"(query, key) pair at T = {MEM_T}. What takes that much: a (T, S) array of float64 "
        "scores or weights (8 bytes a pair, shrinking with T), a (T, S) boolean mask made in full "
        "(np.ones((T, S)) or a broadcast written out: 1 byte a pair), or whole rows of S scores for "
        "a block of queries (as much whatever T is)."
    )
    if half > 0.8 * extra:  # not shrinking with T: a fixed block of queries, every key
        raise KnownMistake(message, WHOLE_ROWS)
    if per_pair >= 7 and half < 0.6 * extra:  # like T: a (T, S) array of float64
        raise KnownMistake(message, FULL_SCORES)
    raise AssertionError(message)


@exercise("online_softmax_attention")
class TestMemory:
    def test_never_a_t_by_s_array_of_scores(self, lesson):
        """never a (T, S) array of scores: peak memory at T = 512, S = 32,768"""
        peak, inputs, imported = measure(lesson, MEM_LARGE, 30)
        try:
            check_peak_below(
                peak,
                allowed_bytes(*inputs),
                what=f"online_softmax_attention at T = {MEM_T}, S = {MEM_LARGE}",
                import_bytes=imported,
            )
        except AssertionError as failure:
            fail_on_memory(
                f"{failure} A (T, S) array of float64 scores takes "
                f"{MEM_T * MEM_LARGE * 8 / MIB:.0f} MiB at T = {MEM_T}, S = {MEM_LARGE}.",
                lesson,
            )

    def test_at_fixed_t_the_memory_does_not_grow_with_s(self, lesson):
        """at fixed T the memory does not grow with S (8,192 vs 32,768 keys)"""
        small, small_inputs, _ = measure(lesson, MEM_SMALL, 31)
        large, large_inputs, _ = measure(lesson, MEM_LARGE, 30)
        growth = large - small
        inputs_growth = sum(a.nbytes for a in large_inputs) - sum(a.nbytes for a in small_inputs)
        limit = 4 * inputs_growth + 4 * MIB
        if growth >= limit:
            fail_on_memory(
                f"online_softmax_attention at T = {MEM_T} used {large / MIB:.1f} MiB at its peak with "
                f"S = {MEM_LARGE} keys and {small / MIB:.1f} MiB with S = {MEM_SMALL}: "
                f"{growth / MIB:.1f} MiB more, where its inputs grew by {inputs_growth / MIB:.1f} MiB "
                f"(the limit is {limit / MIB:.1f} MiB): the extra memory grows with S.",
                lesson,
            )
