"""Grading tests for lesson 3 (l03_attention): attention_scores, scaled_dot_product_attention.

Sizes are all different (B=2, H=3, T=4, S=5, K=6, Kv=7) so that a swapped axis, a wrong scale
(1/K, 1/sqrt(S), 1/sqrt(H*K), ...) or a softmax over the wrong axis shows as a wrong shape or
wrong numbers instead of passing by coincidence. The expected answers come from slow loops below
(one dot product, one exponential at a time); the vectorised `variant` function computes the
classic WRONG answers, only to name a mistake when an answer matches one of them.
"""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    Mistake,
    check_array,
    check_not_modified,
    check_tuple,
    exercise,
    hand_checked,
    remembered,
    rng,
    variation,
)

B, H, T, S, K, KV = 2, 3, 4, 5, 6, 7


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    "attention_scores": {"q": "T K", "k": "S K"},
    "scaled_dot_product_attention": {"q": "T K", "k": "S K", "v": "S Kv", "mask": "T S"},
}


# ---------------------------------------------------------------- oracles (slow and obvious)
def scores_loop(q, k, scale=None):
    """Oracle: one dot product per score, any leading axes (shared by q and k)."""
    n_k = q.shape[-1]
    scale = 1.0 / math.sqrt(n_k) if scale is None else scale
    lead, n_t, n_s = q.shape[:-2], q.shape[-2], k.shape[-2]
    out = np.zeros((*lead, n_t, n_s))
    for idx in np.ndindex(*lead):
        for t in range(n_t):
            for s in range(n_s):
                dot = sum(float(q[idx + (t, i)]) * float(k[idx + (s, i)]) for i in range(n_k))
                out[idx + (t, s)] = dot * scale
    return out


@remembered
def attention_loop(q, k, v, mask=None, scale=None):
    """Oracle: for each query, a softmax over the keys it may attend, then a weighted sum of v."""
    scores = scores_loop(q, k, scale)
    lead, n_t, n_s = scores.shape[:-2], scores.shape[-2], scores.shape[-1]
    allowed = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    weights = np.zeros(scores.shape)
    out = np.zeros((*lead, n_t, v.shape[-1]))
    for idx in np.ndindex(*lead):
        for t in range(n_t):
            keys = [s for s in range(n_s) if allowed[idx + (t, s)]]
            if not keys:  # every key blocked: zero weights, zero output
                continue
            top = max(scores[idx + (t, s)] for s in keys)
            e = {s: math.exp(scores[idx + (t, s)] - top) for s in keys}
            total = sum(e.values())
            for s in keys:
                weights[idx + (t, s)] = e[s] / total
                out[idx + (t,)] += weights[idx + (t, s)] * v[idx + (s,)].astype(np.float64)
    return out, weights


def fully_masked(mask, shape):
    """(..., T) booleans: True where the query row may attend no key at all."""
    return ~np.broadcast_to(mask, shape).any(axis=-1)


# ---------------------------------------------------------------- classic mistakes, by name
MISSING_SCALE = Mistake(
    "missing-scale",
    "the scores are not scaled: the 1/sqrt(K) factor is missing",
    misconception="missing-scale",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_ONE_OVER_K = Mistake(
    "scale-one-over-k",
    "the scores are scaled by 1/K instead of 1/sqrt(K)",
    misconception="scale-one-over-k",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_SQRT_D = Mistake(
    "scale-sqrt-d",
    "the scores are scaled by 1/sqrt(D), D = H*K the model width, instead of "
    "1/sqrt(K) with K = q.shape[-1] the head width",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_SQRT_S = Mistake(
    "scale-sqrt-s",
    "the scores are scaled by 1/sqrt(S), S the number of keys, instead of 1/sqrt(K) with K = q.shape[-1]",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_SQRT_T = Mistake(
    "scale-sqrt-t",
    "the scores are scaled by 1/sqrt(T), T the number of queries, instead of 1/sqrt(K) with K = q.shape[-1]",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_SQRT_H = Mistake(
    "scale-sqrt-h",
    "the scores are scaled by 1/sqrt(H), H the number of heads, instead of 1/sqrt(K) with K = q.shape[-1]",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
SCALE_IGNORED = Mistake(
    "scale-ignored",
    "the scale argument was ignored: the default 1/sqrt(K) was used instead of the scale passed in",
    exercises=("attention_scores",),
)
SCALE_NOT_PASSED = Mistake(
    "scale-not-passed",
    "the scale argument was ignored or not passed on to attention_scores: the "
    "default 1/sqrt(K) was used instead of the scale passed in",
    exercises=("scaled_dot_product_attention",),
)
SCALE_ZERO = Mistake(
    "scale-zero",
    "scale=0.0 was treated as if no scale was given (`scale or ...` or `if not scale`): "
    "test `scale is None` instead",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
NO_TRANSPOSE = Mistake(
    "no-transpose",
    "k was not transposed: q @ k instead of q @ k^T (swap k's last two axes with np.swapaxes(k, -1, -2))",
    exercises=("attention_scores",),
)
K_DOT_T = Mistake(
    "k-dot-t",
    "`.T` was used on a batched k: it reverses EVERY axis, (B, S, K) -> (K, S, B), so q @ k.T "
    "cannot line up (it only works on 2-D arrays); swap the last two axes: np.swapaxes(k, -1, -2)",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code on a line
# the error went through (the grading plugin applies these to every check; testing.named_by_code).
CODE_MISTAKES = {K_DOT_T: r"\.T\b"}
PROMOTED = Mistake(
    "promoted",
    "float32 came back as float64: in numpy 2 multiplying by a numpy float64 such as "
    "1 / np.sqrt(K) promotes float32 arrays; use math.sqrt (a Python float) or cast back "
    "with .astype(q.dtype)",
    exercises=("attention_scores", "scaled_dot_product_attention"),
)
MASK_FLIPPED = Mistake(
    "mask-flipped",
    "mask polarity flipped: True was treated as blocked, but True means may attend "
    "(put -inf where the mask is False)",
    misconception="mask-polarity",
    exercises=("scaled_dot_product_attention",),
)
MASK_AFTER = Mistake(
    "mask-after-softmax",
    "the mask was applied after the softmax (weights zeroed instead of scores set to "
    "-inf), so the rows no longer sum to 1",
    misconception="mask-after-softmax",
    exercises=("scaled_dot_product_attention",),
)
MASK_MULTIPLIED = Mistake(
    "mask-multiplied",
    "masked scores were set to 0 (scores * mask) instead of -inf, so blocked keys still get weight",
    exercises=("scaled_dot_product_attention",),
)
MASK_IGNORED = Mistake(
    "mask-ignored",
    "the mask was ignored",
    exercises=("scaled_dot_product_attention",),
)
MASK_1E9 = Mistake(
    "mask-minus-1e9",
    "the masked scores were set to a large negative number like -1e9 instead of -inf: a "
    "fully masked row then gets uniform weights 1/S instead of all zeros",
    misconception="minus-1e9",
    exercises=("scaled_dot_product_attention",),
)
FULLY_MASKED_SUM_TO_ONE = Mistake(
    "fully-masked-sum-to-one",
    "fully masked rows got weights that sum to 1 instead of all zeros: the "
    "masked scores were set to a large negative number like -1e9 (or to 0) "
    "instead of -inf, or the mask was ignored or flipped",
    misconception="minus-1e9",
    exercises=("scaled_dot_product_attention",),
)
FULLY_MASKED_UNIFORM = Mistake(
    "fully-masked-uniform",
    "a fully masked row got uniform weights 1/S instead of all zeros: the masked "
    "scores were set to a large negative number like -1e9 (or to 0) instead of "
    "-inf, or the mask was ignored or flipped",
    misconception="minus-1e9",
    exercises=("scaled_dot_product_attention",),
)
NAN_ROW = Mistake(
    "nan-row",
    "a fully masked query row came out as NaN instead of all zeros (-inf - max = NaN when "
    "the max is -inf too; lesson 2's softmax returns zeros for an all -inf row)",
    exercises=("scaled_dot_product_attention",),
)
WRONG_AXIS = Mistake(
    "softmax-wrong-axis",
    "the softmax was taken over the wrong axis: over axis {axis} ({letter}) instead of "
    "the last axis (S, the keys)",
    misconception="softmax-wrong-axis",
    exercises=("scaled_dot_product_attention",),
)
WEIGHTS_ARE_SCORES = Mistake(
    "weights-are-scores",
    "the second result holds the scores (before the softmax) instead of the weights",
    exercises=("scaled_dot_product_attention",),
)
WEIGHTS_UNNORMALISED = Mistake(
    "weights-unnormalised",
    "the weights are not normalised: exp(scores) was returned without dividing by the row sum",
    exercises=("scaled_dot_product_attention",),
)
OUT_UNMASKED = Mistake(
    "out-unmasked",
    "out was computed from the unmasked weights: the mask must shape out as well as "
    "the weights (out = masked weights @ v)",
    exercises=("scaled_dot_product_attention",),
)
SWAPPED_RESULTS = Mistake(
    "swapped-results",
    "out and weights are returned in the wrong order: return out, weights",
    exercises=("scaled_dot_product_attention",),
)


def _softmax(x, axis=-1):
    """A safe softmax (an all -inf slice gives zeros), for the wrong variants only."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def variant(
    q,
    k,
    v,
    mask=None,
    scale=None,
    *,
    scale_as=None,
    transpose_k=True,
    masking="-inf",
    axis=-1,
    returned="weights",
    out_from="masked",
):
    """(out, weights) of attention done wrong in one named way (vectorised, float64)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if scale_as is not None:
        scale = scale_as
    elif scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    plain = (q @ (np.swapaxes(k, -1, -2) if transpose_k else k)) * scale
    scores = plain
    blocked = None if mask is None else ~np.broadcast_to(mask, plain.shape)
    with np.errstate(all="ignore"):
        if blocked is not None and masking in ("-inf", "-1e9", "flip", "multiply", "nan"):
            if masking == "flip":
                blocked = ~blocked
            fill = {"-1e9": -1e9, "multiply": 0.0}.get(masking, -np.inf)
            scores = np.where(blocked, fill, plain)
        weights = _softmax(scores, axis=axis)
        if blocked is not None and masking == "after":
            weights = _softmax(plain, axis=axis) * ~blocked
        if blocked is not None and masking == "nan":
            weights = np.where(fully_masked(~blocked, plain.shape)[..., None], np.nan, weights)
        out = (_softmax(plain) if out_from == "unmasked" else weights) @ v
        if returned == "scores":
            weights = scores
        elif returned == "exp":
            weights = np.exp(scores)
        elif returned == "exp-max":
            weights = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return out, weights


def scale_mistakes(q, k, v=None, mask=None, part=1):
    """Named wrong scales: part=1 for the weights (or the scores when v is None), 0 for out."""
    n_k, n_t, n_s = q.shape[-1], q.shape[-2], k.shape[-2]
    scales = {
        MISSING_SCALE: 1.0,
        SCALE_ONE_OVER_K: 1.0 / n_k,
        SCALE_SQRT_S: 1.0 / math.sqrt(n_s),
        SCALE_SQRT_T: 1.0 / math.sqrt(n_t),
    }
    if q.ndim == 4:
        scales[SCALE_SQRT_D] = 1.0 / math.sqrt(q.shape[1] * n_k)
        scales[SCALE_SQRT_H] = 1.0 / math.sqrt(q.shape[1])
    if v is None:
        return {name: (lambda c=c: scores_loop(q, k, c)) for name, c in scales.items()}
    return {name: (lambda c=c: variant(q, k, v, mask, scale_as=c)[part]) for name, c in scales.items()}


def attention_mistakes(q, k, v, mask=None, scale=None, part=1, dims="B T S"):
    """Every named wrong answer for (out, weights)[part]."""
    args = (q, k, v, mask, scale)

    def named(**how):
        return lambda: variant(*args, **how)[part]

    mistakes = {}
    if mask is not None and part == 0:  # checked after the weights: those are right by now
        mistakes[OUT_UNMASKED] = named(out_from="unmasked")
    if scale is None:
        mistakes.update(scale_mistakes(q, k, v, mask, part))
    else:
        name = SCALE_ZERO if scale == 0 else SCALE_NOT_PASSED
        mistakes[name] = named(scale_as=1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        mistakes.update(
            {
                MASK_FLIPPED: named(masking="flip"),
                MASK_AFTER: named(masking="after"),
                MASK_MULTIPLIED: named(masking="multiply"),
                MASK_IGNORED: named(masking="none"),
                MASK_1E9: named(masking="-1e9"),
                NAN_ROW: named(masking="nan"),
            }
        )
    letters = dims.split()
    for ax in range(q.ndim - 1):
        mistakes[WRONG_AXIS.format(axis=ax - q.ndim, letter=letters[ax])] = named(axis=ax - q.ndim)
    if part == 1:
        mistakes[WEIGHTS_ARE_SCORES] = named(returned="scores")
        mistakes[WEIGHTS_UNNORMALISED] = named(returned="exp")
        mistakes[WEIGHTS_UNNORMALISED.plus(" (after subtracting the row maximum)")] = named(
            returned="exp-max"
        )
        mistakes[SWAPPED_RESULTS] = lambda: variant(*args)[0]
    else:
        mistakes[SWAPPED_RESULTS] = lambda: variant(*args)[1]
    return mistakes


# ---------------------------------------------------------------- helpers for the checks
def pair(result, what):
    """The learner's (out, weights), or a failure that says what came back instead."""
    return check_tuple(result, what, ("out", "weights"))


def check_attention(result, q, k, v, mask=None, scale=None, *, what, lead="B", dtype=None):
    """Compare (out, weights) with the loop oracle; weights first, as out is built from them."""
    out, weights = pair(result, what)
    expected_out, expected_weights = attention_loop(q, k, v, mask, scale)
    dtype = dtype or q.dtype
    dims = f"{lead} T S".strip()
    promoted = dtype == np.float32  # a float64 answer with the right values was promoted
    check_array(
        weights,
        expected_weights.astype(dtype),
        what=f"the weights of {what}",
        dims=dims,
        mistakes={
            **({PROMOTED: expected_weights} if promoted else {}),
            **attention_mistakes(q, k, v, mask, scale, 1, dims),
        },
    )
    check_array(
        out,
        expected_out.astype(dtype),
        what=f"the out of {what}",
        dims=f"{lead} T Kv".strip(),
        mistakes={
            **({PROMOTED: expected_out} if promoted else {}),
            **attention_mistakes(q, k, v, mask, scale, 0, dims),
        },
    )
    return out, weights


def qkv(r, lead=(B,), t=T, s=S, k=K, kv=KV, dtype=np.float64, spread=1.5):
    """Random queries, keys and values; `spread` > 1 keeps the softmax far from uniform."""
    q = (r.standard_normal((*lead, t, k)) * spread).astype(dtype)
    keys = (r.standard_normal((*lead, s, k)) * spread).astype(dtype)
    v = r.standard_normal((*lead, s, kv)).astype(dtype)
    return q, keys, v


def batch_masks(r, shape, fully_masked_rows=True):
    """Random boolean masks, a different one per batch element, with some fully masked rows."""
    mask = r.random(shape) < 0.6
    mask[..., 0, 0] = True  # never an empty mask
    if fully_masked_rows and shape[-2] > 1:
        mask[..., -1, :] = False  # the last query of each mask sees nothing (like a padded query)
    return mask


# ---------------------------------------------------------------- attention_scores
@exercise("attention_scores")
class TestAttentionScores:
    def test_scores_map_b_t_k_and_b_s_k_to_b_t_s(self, lesson):
        """q (B, T, K) and k (B, S, K) give scores (B, T, S)"""
        q, k, _ = qkv(rng(1))
        check_array(
            lesson.attention_scores(q, k),
            scores_loop(q, k),
            what="attention_scores(q, k)",
            dims="B T S",
            mistakes=scale_mistakes(q, k),
        )

    @hand_checked
    def test_scores_small_case_by_hand(self, lesson):
        """a (2, 4) q and a (3, 4) k by hand: q @ k^T / sqrt(4)"""
        # Under an instructor's secret: q scaled by a and k by b, the queries, the keys and the
        # features (of q and k together) reordered.
        var = variation("attention_scores by hand")
        a, b = var.scale(), var.scale()
        queries, keys, features = var.permutation(2), var.permutation(3), var.permutation(4)
        q = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 2.0]])  # (T=2, K=4): sqrt(K) = 2
        k = np.array([[1.0, 0.0, 1.0, 0.0], [2.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0]])  # (S=3, K=4)
        q, k = q[queries][:, features] * a, k[keys][:, features] * b
        # q @ k^T = [[1, 4, 0], [2, 0, 8]]; divided by sqrt(4) = 2: [[0.5, 2, 0], [1, 0, 4]]
        expected = np.array([[0.5, 2.0, 0.0], [1.0, 0.0, 4.0]])[queries][:, keys] * (a * b)
        check_array(
            lesson.attention_scores(q, k),
            expected,
            what="attention_scores(q, k) on the hand-checked (2, 4) q and (3, 4) k",
            dims="T S",
            mistakes={MISSING_SCALE: expected * 2, SCALE_ONE_OVER_K: expected / 2},
        )

    def test_scores_are_scaled_by_one_over_sqrt_of_the_head_width(self, lesson):
        """scores are scaled by 1/sqrt(K), K the head width, with heads (B, H)"""
        q, k, _ = qkv(rng(2), lead=(B, H))  # (B, H, T, K): the model width is D = H*K = 18
        check_array(
            lesson.attention_scores(q, k),
            scores_loop(q, k),
            what="attention_scores(q, k) with q (B, H, T, K) = (2, 3, 4, 6) and k (2, 3, 5, 6)",
            dims="B H T S",
            mistakes=scale_mistakes(q, k),
        )

    def test_scores_compare_every_query_with_every_key(self, lesson):
        """every query meets every key: q @ k^T, even when S = K"""
        q, k, _ = qkv(rng(3), s=K)  # S = K = 6: q @ k (no transpose) has the right shape
        check_array(
            lesson.attention_scores(q, k),
            scores_loop(q, k),
            what="attention_scores(q, k) with q (2, 4, 6), k (2, 6, 6)",
            dims="B T S",
            mistakes={NO_TRANSPOSE: lambda: (q @ k) / math.sqrt(K), **scale_mistakes(q, k)},
        )

    def test_an_explicit_scale_is_used_as_given(self, lesson):
        """an explicit scale (0.37, 1.0) is used as given"""
        q, k, _ = qkv(rng(4))
        for scale in (0.37, 1.0):
            check_array(
                lesson.attention_scores(q, k, scale=scale),
                scores_loop(q, k, scale),
                what=f"attention_scores(q, k, scale={scale})",
                dims="B T S",
                mistakes={
                    SCALE_IGNORED: lambda: scores_loop(q, k),
                    MISSING_SCALE: lambda: scores_loop(q, k, 1.0),
                },
            )

    def test_scale_zero_is_a_scale_not_a_missing_value(self, lesson):
        """scale=0.0 is a scale, not a missing value: every score is 0"""
        q, k, _ = qkv(rng(5))
        check_array(
            lesson.attention_scores(q, k, scale=0.0),
            np.zeros((B, T, S)),
            what="attention_scores(q, k, scale=0.0)",
            dims="B T S",
            mistakes={SCALE_ZERO: lambda: scores_loop(q, k)},
        )

    def test_scores_of_single_vectors_without_a_batch(self, lesson):
        """q (T, K) and k (S, K) without a batch axis give (T, S)"""
        q, k, _ = qkv(rng(6), lead=())
        check_array(
            lesson.attention_scores(q, k),
            scores_loop(q, k),
            what="attention_scores(q, k) with q (T, K) = (4, 6), k (S, K) = (5, 6)",
            dims="T S",
            mistakes=scale_mistakes(q, k),
        )

    def test_scores_keep_float32(self, lesson):
        """float32 q and k give float32 scores, with and without a scale"""
        q, k, _ = qkv(rng(7), lead=(B, H), dtype=np.float32)
        expected = scores_loop(q, k)
        check_array(
            lesson.attention_scores(q, k),
            expected.astype(np.float32),
            what="attention_scores(q, k) in float32",
            dims="B H T S",
            mistakes={PROMOTED: expected, **scale_mistakes(q, k)},
        )
        check_array(
            lesson.attention_scores(q, k, scale=0.25),
            scores_loop(q, k, 0.25).astype(np.float32),
            what="attention_scores(q, k, scale=0.25) in float32",
            dims="B H T S",
            mistakes={PROMOTED: scores_loop(q, k, 0.25), SCALE_IGNORED: expected},
        )

    def test_scores_leave_their_inputs_unchanged(self, lesson):
        """attention_scores leaves q and k unchanged"""
        q, k, _ = qkv(rng(8))
        lesson.attention_scores(q, k)
        check_not_modified(lesson, "attention_scores(q, k)")
        lesson.attention_scores(q, k, scale=0.5)
        check_not_modified(lesson, "attention_scores(q, k, scale=0.5)")

    @given(
        lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
        t=st.integers(1, 4),
        s=st.integers(1, 4),
        k=st.integers(1, 5),
        explicit=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_scores_match_the_loop_for_any_sizes(self, lesson, lead, t, s, k, explicit, seed):
        """scores match the loop for any sizes, with or without a scale"""
        r = rng(seed)
        q, keys, _ = qkv(r, lead=tuple(lead), t=t, s=s, k=k, kv=1)
        scale = float(r.uniform(0.1, 2.0)) if explicit else None
        dims = " ".join([f"N{i}" for i in range(len(lead))] + ["T", "S"])
        check_array(
            lesson.attention_scores(q, keys, scale=scale),
            scores_loop(q, keys, scale),
            what=f"attention_scores(q {q.shape}, k {keys.shape}, scale={scale})",
            dims=dims,
        )


# ---------------------------------------------------------------- scaled_dot_product_attention
@exercise("scaled_dot_product_attention")
class TestScaledDotProductAttention:
    def test_attention_returns_out_b_t_kv_and_weights_b_t_s(self, lesson):
        """returns out (B, T, Kv) and weights (B, T, S)"""
        q, k, v = qkv(rng(20))
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v),
            q,
            k,
            v,
            what="scaled_dot_product_attention(q, k, v) with q (2, 4, 6), k (2, 5, 6), v (2, 5, 7)",
        )

    @hand_checked
    def test_attention_small_case_by_hand(self, lesson):
        """a small masked case by hand, one query row fully masked"""
        # Under an instructor's secret: v scaled by c and shifted by d; the queries, the keys
        # (with their values and mask columns), the features of q and k, and v's columns reordered.
        var = variation("scaled_dot_product_attention by hand")
        c, d = var.scale(), var.shift()
        queries, keys, features, columns = (var.permutation(n) for n in (3, 2, 4, 3))
        q = np.array(
            [[2.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]]
        )  # (T=3, K=4): sqrt(K) = 2
        k = np.array([[math.log(3.0), 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # (S=2, K=4)
        v = np.array([[4.0, 0.0, 1.0], [0.0, 8.0, 1.0]])  # (S=2, Kv=3)
        mask = np.array([[True, True], [False, True], [False, False]])
        q, k = q[queries][:, features], k[keys][:, features]
        v, mask = v[keys][:, columns] * c + d, mask[queries][:, keys]
        # row 0: scores [2 ln3 / 2, 0] = [ln 3, 0] -> weights [3/4, 1/4] -> out [3, 2, 1]
        # row 1: key 0 blocked -> weights [0, 1] -> out = v[1] = [0, 8, 1]
        # row 2: every key blocked -> weights [0, 0] and out [0, 0, 0]
        expected_weights = np.array([[0.75, 0.25], [0.0, 1.0], [0.0, 0.0]])[queries][:, keys]
        expected_out = np.array([[3.0, 2.0, 1.0], [0.0, 8.0, 1.0], [0.0, 0.0, 0.0]])[:, columns] * c
        expected_out[:2] += d  # a fully masked row stays 0
        expected_out = expected_out[queries]
        what = "scaled_dot_product_attention on the hand-checked q (3, 4), k (2, 4), v (2, 3), mask"
        out, weights = pair(lesson.scaled_dot_product_attention(q, k, v, mask=mask), what)
        check_array(
            weights,
            expected_weights,
            what=f"the weights of {what}",
            dims="T S",
            mistakes=attention_mistakes(q, k, v, mask, part=1, dims="T S"),
        )
        check_array(
            out,
            expected_out,
            what=f"the out of {what}",
            dims="T Kv",
            mistakes=attention_mistakes(q, k, v, mask, part=0, dims="T S"),
        )

    def test_attention_on_heads_matches_the_loop(self, lesson):
        """attention on heads, q (B, H, T, K), matches the loop"""
        q, k, v = qkv(rng(21), lead=(B, H))
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v),
            q,
            k,
            v,
            lead="B H",
            what="scaled_dot_product_attention(q, k, v) with q (B, H, T, K) = "
            "(2, 3, 4, 6), k (2, 3, 5, 6), v (2, 3, 5, 7)",
        )

    def test_attention_passes_the_scale_on(self, lesson):
        """the scale (0.37, and 0.0) is passed on to the scores"""
        q, k, v = qkv(rng(22), lead=(B, H))
        for scale in (0.37, 0.0):
            check_attention(
                lesson.scaled_dot_product_attention(q, k, v, scale=scale),
                q,
                k,
                v,
                scale=scale,
                lead="B H",
                what=f"scaled_dot_product_attention(q, k, v, scale={scale})",
            )

    def test_a_t_by_s_mask_applies_to_every_batch_element_and_head(self, lesson):
        """a (T, S) mask applies to every batch element and head"""
        q, k, v = qkv(rng(23), lead=(B, H))
        mask = np.tril(np.ones((T, S), bool), k=S - T)  # causal, aligned bottom-right
        # Under an instructor's secret: another query attends nothing.
        mask[variation("a (T, S) mask").integers(0, T, 0)] = False  # query 0 may attend nothing
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask),
            q,
            k,
            v,
            mask,
            lead="B H",
            what="scaled_dot_product_attention(q, k, v, mask) with q (2, 3, 4, 6) and a (T, S) = (4, 5) mask",
        )

    def test_a_padding_mask_b_1_s_hides_different_keys_per_batch_element(self, lesson):
        """a (B, 1, S) padding mask hides different keys per batch element"""
        q, k, v = qkv(rng(24))
        # Under an instructor's secret: the short element has another length and comes first.
        var = variation("a (B, 1, S) padding mask")
        lengths = np.array([S, var.integers(1, S, 2)])[var.permutation(B)]  # batch element 1 has 2 real keys
        mask = (np.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S)
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask),
            q,
            k,
            v,
            mask,
            what="scaled_dot_product_attention(q, k, v, mask) with a (B, 1, S) = "
            f"(2, 1, 5) padding mask of lengths {lengths.tolist()}",
        )

    def test_a_b_t_s_mask_gives_each_batch_element_its_own_mask(self, lesson):
        """a (B, T, S) mask gives each batch element its own mask"""
        r = rng(25)
        q, k, v = qkv(r)
        mask = batch_masks(r, (B, T, S))
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask),
            q,
            k,
            v,
            mask,
            what="scaled_dot_product_attention(q, k, v, mask) with a (B, T, S) = (2, 4, 5) mask",
        )

    def test_a_b_1_t_s_mask_broadcasts_over_heads(self, lesson):
        """a (B, 1, T, S) mask broadcasts over the heads"""
        r = rng(26)
        q, k, v = qkv(r, lead=(B, H))
        mask = batch_masks(r, (B, 1, T, S))
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.8),
            q,
            k,
            v,
            mask,
            0.8,
            lead="B H",
            what="scaled_dot_product_attention(q, k, v, mask, scale=0.8) with q "
            "(2, 3, 4, 6) and a (B, 1, T, S) = (2, 1, 4, 5) mask",
        )

    def test_a_fully_masked_query_row_gets_zero_weights_and_zero_output(self, lesson):
        """a fully masked query row gets zero weights and zero output, not NaN"""
        r = rng(27)
        q, k, v = qkv(r)
        mask = batch_masks(r, (B, T, S))
        mask[1, 1] = False  # batch element 1: queries 1 and 3 see nothing
        what = "scaled_dot_product_attention(q, k, v, mask) where some query rows are fully masked"
        out, weights = pair(lesson.scaled_dot_product_attention(q, k, v, mask=mask), what)
        empty = fully_masked(mask, (B, T, S))
        for name, array in (("weights", weights), ("out", out)):
            usable = isinstance(array, np.ndarray) and array.dtype.kind == "f"
            if usable and array.shape[:2] == (B, T):
                bad = np.argwhere(np.isnan(array[empty]).any(axis=-1))
                if len(bad):  # NaN exactly where a row is fully masked: seen, not guessed
                    raise KnownMistake(
                        f"{what} returned NaN in the {name} of a fully masked query row (batch "
                        f"{int(np.argwhere(empty)[bad[0, 0]][0])}, query "
                        f"{int(np.argwhere(empty)[bad[0, 0]][1])}). A query with every key masked "
                        "must get all-zero weights and an all-zero output.",
                        NAN_ROW,
                    )
        check_attention((out, weights), q, k, v, mask, what=what)

    def test_rows_of_weights_sum_to_one_because_the_mask_comes_before_the_softmax(self, lesson):
        """rows of weights sum to 1 (0 if fully masked): mask before the softmax"""
        r = rng(28)
        q, k, v = qkv(r, lead=(B, H))
        mask = batch_masks(r, (B, 1, T, S))  # the last query of each mask sees nothing
        mask[:, :, 1] = True  # query 1 sees every key: a flipped mask would hide them all
        what = "scaled_dot_product_attention(q, k, v, mask)"
        _, weights = pair(lesson.scaled_dot_product_attention(q, k, v, mask=mask), what)
        expected = (~fully_masked(mask, (B, H, T, S))).astype(np.float64)

        def sums(**how):
            return lambda: variant(q, k, v, mask, **how)[1].sum(axis=-1)

        assert isinstance(weights, np.ndarray) and weights.shape == (B, H, T, S), (
            f"the weights of {what} should have shape (B, H, T, S) = {(B, H, T, S)}; got "
            f"{getattr(weights, 'shape', type(weights).__name__)}."
        )
        check_array(
            weights.sum(axis=-1),
            expected,
            what=f"the row sums weights.sum(axis=-1) of {what} (1 for a query that may "
            "attend some key, 0 for a fully masked one)",
            dims="B H T",
            mistakes={
                MASK_FLIPPED: sums(masking="flip"),
                MASK_AFTER: sums(masking="after"),
                FULLY_MASKED_SUM_TO_ONE: sums(masking="-1e9"),
                NAN_ROW: sums(masking="nan"),
                WRONG_AXIS.format(axis=-2, letter="T"): sums(axis=-2),
                WEIGHTS_UNNORMALISED: sums(returned="exp"),
            },
        )

    def test_out_is_built_from_the_masked_weights(self, lesson):
        """out is built from the masked weights: out = weights @ v"""
        r = rng(29)
        q, k, v = qkv(r)
        mask = batch_masks(r, (B, T, S), fully_masked_rows=False)
        # check_attention checks the weights first: once they are right, a wrong out that
        # equals softmax(unmasked scores) @ v can only come from the unmasked weights.
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask),
            q,
            k,
            v,
            mask,
            what="scaled_dot_product_attention(q, k, v, mask)",
        )

    def test_attention_keeps_float32(self, lesson):
        """float32 q, k and v give float32 out and weights"""
        r = rng(30)
        q, k, v = qkv(r, lead=(B, H), dtype=np.float32)
        mask = batch_masks(r, (B, 1, T, S))
        check_attention(
            lesson.scaled_dot_product_attention(q, k, v, mask=mask),
            q,
            k,
            v,
            mask,
            lead="B H",
            what="scaled_dot_product_attention(q, k, v, mask) in float32",
        )

    def test_attention_leaves_its_inputs_unchanged(self, lesson):
        """attention leaves q, k, v and the mask unchanged"""
        r = rng(31)
        q, k, v = qkv(r)
        mask = batch_masks(r, (B, T, S))
        lesson.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.5)
        check_not_modified(lesson, "scaled_dot_product_attention(q, k, v, mask, scale=0.5)")
        lesson.scaled_dot_product_attention(q, k, v)
        check_not_modified(lesson, "scaled_dot_product_attention(q, k, v)")

    # ------------------------------------------------------------ properties
    @given(
        lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
        t=st.integers(1, 4),
        s=st.integers(1, 5),
        k=st.integers(1, 4),
        kv=st.integers(1, 4),
        mask_kind=st.sampled_from(["none", "T S", "lead 1 S", "lead T S"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_attention_matches_the_loop_for_any_sizes_and_masks(
        self, lesson, lead, t, s, k, kv, mask_kind, seed
    ):
        """attention matches the loop for any sizes and mask shapes"""
        r = rng(seed)
        lead = tuple(lead)
        q, keys, v = qkv(r, lead=lead, t=t, s=s, k=k, kv=kv)
        shape = {"none": None, "T S": (t, s), "lead 1 S": (*lead, 1, s), "lead T S": (*lead, t, s)}
        mask = None if mask_kind == "none" else r.random(shape[mask_kind]) < 0.6
        what = (
            f"scaled_dot_product_attention(q {q.shape}, k {keys.shape}, v {v.shape}, mask "
            f"{None if mask is None else mask.shape})"
        )
        expected_out, expected_weights = attention_loop(q, keys, v, mask)
        out, weights = pair(lesson.scaled_dot_product_attention(q, keys, v, mask=mask), what)
        letters = " ".join(f"N{i}" for i in range(len(lead)))
        check_array(weights, expected_weights, what=f"the weights of {what}", dims=f"{letters} T S".strip())
        check_array(out, expected_out, what=f"the out of {what}", dims=f"{letters} T Kv".strip())

    @given(b=st.integers(1, 3), t=st.integers(1, 4), s=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
    def test_weights_rows_sum_to_one_or_to_zero_when_fully_masked(self, lesson, b, t, s, seed):
        """rows of weights sum to 1, or to 0 when fully masked"""
        r = rng(seed)
        k = int(r.integers(1, 5))  # widths do not matter here: drawn from the seed
        q, keys, v = qkv(r, lead=(b,), t=t, s=s, k=k, kv=2, spread=3.0)
        mask = r.random((b, t, s)) < 0.5
        what = f"scaled_dot_product_attention(q {q.shape}, k {keys.shape}, v {v.shape}, mask)"
        _, weights = pair(lesson.scaled_dot_product_attention(q, keys, v, mask=mask), what)
        expected = (~fully_masked(mask, (b, t, s))).astype(np.float64)

        def sums(**how):
            return lambda: variant(q, keys, v, mask, **how)[1].sum(axis=-1)

        assert isinstance(weights, np.ndarray) and weights.shape == (b, t, s), (
            f"the weights of {what} should have shape (B, T, S) = {(b, t, s)}; got "
            f"{getattr(weights, 'shape', type(weights).__name__)}."
        )
        check_array(
            weights.sum(axis=-1),
            expected,
            what=f"the row sums weights.sum(axis=-1) of {what} (1 for a query that may "
            "attend some key, 0 for a fully masked one)",
            dims="B T",
            mistakes={
                MASK_AFTER: sums(masking="after"),
                FULLY_MASKED_SUM_TO_ONE: sums(masking="-1e9"),
                NAN_ROW: sums(masking="nan"),
            },
        )

    @given(b=st.integers(1, 3), t=st.integers(1, 4), s=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
    def test_masked_positions_get_exactly_zero_weight(self, lesson, b, t, s, seed):
        """masked positions get a weight of exactly 0"""
        r = rng(seed)
        k = int(r.integers(1, 5))
        q, keys, v = qkv(r, lead=(b,), t=t, s=s, k=k, kv=2)
        mask = r.random((b, t, s)) < 0.5
        what = f"scaled_dot_product_attention(q {q.shape}, k {keys.shape}, v {v.shape}, mask)"
        _, weights = pair(lesson.scaled_dot_product_attention(q, keys, v, mask=mask), what)
        assert isinstance(weights, np.ndarray) and weights.shape == (b, t, s), (
            f"the weights of {what} should have shape (B, T, S) = {(b, t, s)}; got "
            f"{getattr(weights, 'shape', type(weights).__name__)}."
        )
        leaked = ~mask & (weights != 0)
        if leaked.any():
            first = [int(i) for i in np.argwhere(leaked)[0]]
            empty = fully_masked(mask, mask.shape)
            rows = leaked.any(axis=-1)
            message = (
                f"{what} gave {int(leaked.sum())} masked position(s) a weight that is not exactly 0; "
                f"the first at {first} has weight {weights[tuple(first)]:.4g}. A masked position "
                "must get exactly 0: True means may attend; put -inf where the mask is False, "
                "before the softmax."
            )
            nan_rows = np.isnan(weights).any(axis=-1)
            if nan_rows.any() and (nan_rows == empty).all():  # NaN in exactly the fully masked rows
                raise KnownMistake(message, NAN_ROW)
            partly = mask.any(axis=-1) & ~mask.all(axis=-1)  # where a flipped mask would leak too
            if empty[rows].all() and partly.any() and np.allclose(weights[rows], 1.0 / s):
                raise KnownMistake(message, FULLY_MASKED_UNIFORM)  # only fully masked rows, uniform
            raise AssertionError(message)

    @given(b=st.integers(1, 3), t=st.integers(1, 4), s=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
    def test_each_output_row_is_a_convex_combination_of_value_rows(self, lesson, b, t, s, seed):
        """each out row is a weighted average of the value rows it may attend"""
        r = rng(seed)
        k, kv = (int(n) for n in r.integers(1, 5, size=2))
        q, keys, v = qkv(r, lead=(b,), t=t, s=s, k=k, kv=kv)
        v = v * 10.0
        mask = r.random((b, t, s)) < 0.6
        what = f"scaled_dot_product_attention(q {q.shape}, k {keys.shape}, v {v.shape}, mask)"
        out, _ = pair(lesson.scaled_dot_product_attention(q, keys, v, mask=mask), what)
        assert isinstance(out, np.ndarray) and out.shape == (b, t, kv), (
            f"the out of {what} should have shape (B, T, Kv) = {(b, t, kv)}; got "
            f"{getattr(out, 'shape', type(out).__name__)}."
        )
        for i in range(b):
            for j in range(t):
                allowed = mask[i, j]
                row = out[i, j]
                if not allowed.any():
                    assert np.all(row == 0), (
                        f"out[{i}, {j}] of {what} is {row}, but query {j} of batch element {i} may "
                        f"attend no key: its output row must be all zeros (never NaN)."
                    )
                    continue
                lo, hi = v[i, allowed].min(axis=0), v[i, allowed].max(axis=0)
                inside = (row >= lo - 1e-9) & (row <= hi + 1e-9)
                assert inside.all(), (
                    f"out[{i}, {j}] of {what} is not a weighted average of the value rows that "
                    f"query may attend: it is {np.round(row, 4)}, while those rows range from "
                    f"{np.round(lo, 4)} to {np.round(hi, 4)} column by column. "
                    "Each output row must be weights @ v with weights >= 0 that sum to 1 over the "
                    "allowed keys (masked keys get 0)."
                )

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        s=st.integers(1, 5),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_permuting_keys_and_values_together_leaves_out_unchanged(self, lesson, b, t, s, masked, seed):
        """permuting keys and values together leaves out unchanged"""
        r = rng(seed)
        k, kv = (int(n) for n in r.integers(1, 5, size=2))
        q, keys, v = qkv(r, lead=(b,), t=t, s=s, k=k, kv=kv)
        mask = r.random((b, t, s)) < 0.6 if masked else None
        perm = r.permutation(s)
        what = f"scaled_dot_product_attention(q {q.shape}, k {keys.shape}, v {v.shape}, mask)"
        out, weights = pair(lesson.scaled_dot_product_attention(q, keys, v, mask=mask), what)
        out2, weights2 = pair(
            lesson.scaled_dot_product_attention(
                q, keys[:, perm], v[:, perm], mask=None if mask is None else mask[..., perm]
            ),
            what,
        )
        assert isinstance(out, np.ndarray) and isinstance(weights, np.ndarray), (
            f"{what} must return two numpy arrays (out, weights)."
        )
        moved = "keys, values and mask columns" if masked else "keys and values"
        check_array(
            out2,
            out,
            what=f"out after permuting the {moved} together by "
            f"{perm.tolist()} (attention must not depend on the order of the keys)",
            dims="B T Kv",
        )
        check_array(
            weights2,
            weights[..., perm],
            what=f"the weights after permuting the keys by {perm.tolist()} (they should "
            "be the old weights with their columns permuted the same way)",
            dims="B T S",
        )
