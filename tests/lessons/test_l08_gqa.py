"""Grading tests for lesson 8 (l08_gqa): kv_head_for_query_head, repeat_kv, grouped_query_attention,
kv_parameter_saving.

Sizes are all different (B=2, G=3, T=4, S=5, H=6, K=7, so D = H*K = 42) and every key/value head
serves H // G = 2 query heads, so that the classic mistakes give different numbers instead of
passing by coincidence: np.tile's head order 0, 1, 2, 0, 1, 2 differs from np.repeat's
0, 0, 1, 1, 2, 2, grouping by i % G differs from i // (H // G), and the scales 1/sqrt(K),
1/sqrt(G*K) and 1/sqrt(D) all differ. The expected answers come from slow loops below (for each
batch element, query head h and position, attend with key/value head h // (H // G)); the
vectorised `variant` function computes the classic WRONG answers, only to name a mistake when an
answer matches one of them.

kv_parameter_saving is where the course grades lesson 7's count_parameters with n_kv_heads < n_heads
(lesson 7 grades multi-head attention only, as grouped-query attention is taught here): every
check calls kv_parameter_saving first, then the learner's count_parameters through this lesson's
file (which imports it from lesson 7), and a wrong count is blamed on lesson 7's function.
"""

import math
import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
    Mistake,
    check_array,
    check_not_modified,
    check_scalar,
    check_tuple,
    diagnose,
    enumerable,
    exercise,
    hand_checked,
    remembered,
    rng,
    variation,
)

B, G, T, S, H, K = 2, 3, 4, 5, 6, 7
D = H * K  # 42
N_REP = H // G  # 2 query heads per key/value head
# Published models with grouped-query attention and no biases, K = D // H: (name, D, H, G). The
# first is the public case; an instructor's secret picks another.
GROUPED_MODELS = (
    ("Llama 2 70B", 8192, 64, 8),
    ("Mistral 7B", 4096, 32, 8),
    ("Llama 3.1 405B", 16384, 128, 8),
    ("Llama 3.2 3B", 3072, 24, 8),
    ("Llama 3.2 1B", 2048, 32, 8),
)
# (H, G) with G not dividing H: the first is the public case; an instructor's secret picks another.
NOT_DIVIDING = ((6, 4), (10, 4), (9, 6), (8, 3), (10, 6), (14, 4))


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    "repeat_kv": {"x": "B G S K"},
    "grouped_query_attention": {
        "x_q": "B T D",
        "x_kv": "B S D",
        "params": "",
        "n_heads": "",
        "n_kv_heads": "",
        "mask": "T S",
    },
}


# ---------------------------------------------------------------- oracles (slow and obvious)
def groups_oracle(n_heads, n_kv_heads):
    """Oracle: the groups written out: H // G query heads use kv head 0, the next H // G kv head 1..."""
    mapping = []
    for g in range(n_kv_heads):
        mapping += [g] * (n_heads // n_kv_heads)
    return np.array(mapping, dtype=np.int64)


def repeat_loop(x, n_rep):
    """Oracle: head g of x becomes heads g*n_rep, ..., g*n_rep + n_rep - 1 of the result."""
    n_b, n_g, n_s, n_k = x.shape
    out = np.zeros((n_b, n_g * n_rep, n_s, n_k), dtype=x.dtype)
    for b in range(n_b):
        for g in range(n_g):
            for r in range(n_rep):
                out[b, g * n_rep + r] = x[b, g]
    return out


@remembered
def gqa_loop(x_q, x_kv, params, n_heads, n_kv_heads, mask=None):
    """Oracle: for each batch element b, query head h and query t, attend with kv head h // (H // G)."""
    n_b, n_t, n_d = x_q.shape
    n_s = x_kv.shape[1]
    n_k = n_d // n_heads
    group = n_heads // n_kv_heads
    p = {name: np.asarray(a, np.float64) for name, a in params.items() if a is not None}
    x_q, x_kv = np.asarray(x_q, np.float64), np.asarray(x_kv, np.float64)
    b_q = p.get("b_q", np.zeros(n_heads * n_k))
    b_k = p.get("b_k", np.zeros(n_kv_heads * n_k))
    b_v = p.get("b_v", np.zeros(n_kv_heads * n_k))
    b_o = p.get("b_o", np.zeros(n_d))
    allowed = np.ones((n_b, n_t, n_s), bool) if mask is None else np.broadcast_to(mask, (n_b, n_t, n_s))
    weights = np.zeros((n_b, n_heads, n_t, n_s))
    concat = np.zeros((n_b, n_t, n_heads * n_k))
    for b in range(n_b):
        for h in range(n_heads):
            g = h // group  # the key/value head that query head h uses
            qc, kc = slice(h * n_k, (h + 1) * n_k), slice(g * n_k, (g + 1) * n_k)
            keys = [x_kv[b, s] @ p["w_k"][:, kc] + b_k[kc] for s in range(n_s)]
            values = [x_kv[b, s] @ p["w_v"][:, kc] + b_v[kc] for s in range(n_s)]
            for t in range(n_t):
                query = x_q[b, t] @ p["w_q"][:, qc] + b_q[qc]
                seen = [s for s in range(n_s) if allowed[b, t, s]]
                if not seen:  # every key blocked: zero weights, zero attention output
                    continue
                scores = {s: float(query @ keys[s]) / math.sqrt(n_k) for s in seen}
                top = max(scores.values())
                e = {s: math.exp(score - top) for s, score in scores.items()}
                total = sum(e.values())
                for s in seen:
                    weights[b, h, t, s] = e[s] / total
                    concat[b, t, qc] += weights[b, h, t, s] * values[s]
    out = np.zeros((n_b, n_t, n_d))
    for b in range(n_b):
        for t in range(n_t):
            out[b, t] = concat[b, t] @ p["w_o"] + b_o
    return out, weights


# ---------------------------------------------------------------- classic mistakes, by name
MODULO = Mistake(
    "modulo",
    "query heads were grouped by modulo, i % G (the order 0, 1, 0, 1 that np.tile gives), "
    "instead of i // (H // G) (0, 0, 1, 1): consecutive query heads share a key/value head",
    misconception="tiled-kv-heads",
    exercises=("kv_head_for_query_head",),
)
DIV_BY_G = Mistake(
    "div-by-g",
    "query head i was mapped to i // G, dividing by the number of key/value heads, "
    "instead of i // (H // G), dividing by the group size H // G",
    exercises=("kv_head_for_query_head",),
)
GROUP_G_OVER_H = Mistake(
    "group-g-over-h",
    "every query head was mapped to key/value head 0, so the divisor was larger than every "
    "head number, or the group size came out 0 (G // H is 0 when G < H): divide by the group "
    "size H // G, the number of query heads per key/value head",
    exercises=("kv_head_for_query_head",),
)
TILED = Mistake(
    "tiled",
    "the whole block of key/value heads was repeated (np.tile or np.concatenate([x] * n_rep, "
    "axis=1): head order 0, 1, 0, 1) instead of each head in place (np.repeat(x, n_rep, "
    "axis=1): order 0, 0, 1, 1)",
    misconception="tiled-kv-heads",
    exercises=("repeat_kv",),
)
REPEAT_AXIS = Mistake(
    "repeat-axis",
    "the heads were repeated along axis {axis} ({letter}) instead of axis 1, the "
    "key/value heads: np.repeat(x, n_rep, axis=1)",
    exercises=("repeat_kv",),
)
REPEAT_FLAT = Mistake(
    "repeat-flat",
    "np.repeat was called without axis=1, so it flattened the array",
    exercises=("repeat_kv",),
)
REPEAT_FLAT_RESHAPED = REPEAT_FLAT.plus(
    " (reshaping it back to (B, H, S, K) does not undo that: each number was repeated in "
    "place, so the heads hold runs of the same number): np.repeat(x, n_rep, axis=1)"
)
GQA_TILED = Mistake(
    "gqa-tiled",
    "query head i used key/value head i % G (the order 0, 1, 0, 1 of np.tile, or of "
    "grouping by modulo) instead of key/value head i // (H // G) (the order 0, 0, 1, 1 "
    "of np.repeat(x, n_rep, axis=1))",
    misconception="tiled-kv-heads",
    exercises=("grouped_query_attention",),
)
GQA_AXIS2 = Mistake(
    "gqa-axis2",
    "the key/value heads were repeated along axis 2 (S, the positions) instead of axis 1 (the heads)",
    exercises=("grouped_query_attention",),
)
SCALE_D = Mistake(
    "scale-d",
    "the scores were scaled by 1/sqrt(D), D the model width, instead of 1/sqrt(K), K = D // H the head width",
    exercises=("grouped_query_attention",),
)
SCALE_GK = Mistake(
    "scale-gk",
    "the scores were scaled by 1/sqrt(G*K), the width of all key/value heads together, "
    "instead of 1/sqrt(K), the width of one head",
    exercises=("grouped_query_attention",),
)
SCALE_MISSING = Mistake(
    "missing-scale",
    "the scores are not scaled: the 1/sqrt(K) factor is missing",
    misconception="missing-scale",
    exercises=("grouped_query_attention",),
)
NO_B_Q = Mistake(
    "no-b-q",
    "the bias b_q was not added to the queries",
    exercises=("grouped_query_attention",),
)
NO_B_V = Mistake(
    "no-b-v",
    "the bias b_v was not added to the values",
    exercises=("grouped_query_attention",),
)
NO_B_O = Mistake(
    "no-b-o",
    "the output bias b_o was not added",
    exercises=("grouped_query_attention",),
)
PER_KV_HEAD = Mistake(
    "per-kv-head",
    "the weights have one map per key/value head, (B, G, T, S), instead of one per "
    "query head, (B, H, T, S): query heads that share keys still have their own queries "
    "and their own weights",
    exercises=("grouped_query_attention",),
)
PROMOTED = Mistake(
    "promoted",
    "float32 came back as float64: keep the dtype of the inputs (a numpy float64 such as "
    "np.sqrt(K) promotes float32 arrays; use math.sqrt or leave the scale to lesson 3)",
    exercises=("grouped_query_attention",),
)
MASK_IGNORED = Mistake(
    "mask-ignored",
    "the mask was ignored",
    exercises=("grouped_query_attention",),
)
SWAPPED = Mistake(
    "swapped",
    "out and weights are returned in the wrong order: return out, weights",
    exercises=("grouped_query_attention",),
)
KV_SPLIT_H = Mistake(
    "kv-split-into-h-heads",
    "k or v was split into H = n_heads heads: w_k and w_v are (D, G*K), so k and v have only "
    "G = n_kv_heads heads of width K: split_heads(k, n_kv_heads), then repeat_kv",
    exercises=("grouped_query_attention",),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code around
# the error (the grading plugin applies these to every check; testing.named_by_code): split
# into H heads, G*K features raise in lesson 5's split_heads ("... not divisible by ...").
CODE_MISTAKES = {KV_SPLIT_H: r"split_heads\(\s*[kv]\w*\s*,\s*(?:H|n_heads)\s*\)"}


def _softmax(x):
    """A safe softmax over the last axis (an all -inf row gives zeros), for the variants only."""
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def variant(
    x_q,
    x_kv,
    params,
    n_heads,
    n_kv_heads,
    mask=None,
    *,
    order="interleave",
    scale=None,
    skip_bias=(),
    use_mask=True,
):
    """(out, weights) of grouped-query attention done wrong in one named way (vectorised)."""
    n_b, n_t, n_d = x_q.shape
    n_s = x_kv.shape[1]
    n_k, n_rep = n_d // n_heads, n_heads // n_kv_heads
    p = {
        name: np.asarray(a, np.float64)
        for name, a in params.items()
        if a is not None and name not in skip_bias
    }
    x_q, x_kv = np.asarray(x_q, np.float64), np.asarray(x_kv, np.float64)

    def heads(x, w, bias, n):
        y = x @ p[w] + p.get(bias, 0.0)
        return y.reshape(y.shape[0], y.shape[1], n, n_k).transpose(0, 2, 1, 3)

    q = heads(x_q, "w_q", "b_q", n_heads)  # (B, H, T, K)
    k = heads(x_kv, "w_k", "b_k", n_kv_heads)  # (B, G, S, K)
    v = heads(x_kv, "w_v", "b_v", n_kv_heads)
    if order == "axis2":
        k, v = np.repeat(k, n_rep, axis=2), np.repeat(v, n_rep, axis=2)  # broadcasts only if G = 1
    else:
        index = np.arange(n_heads) // n_rep if order == "interleave" else np.arange(n_heads) % n_kv_heads
        k, v = k[:, index], v[:, index]
    scale = 1.0 / math.sqrt(n_k) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None and use_mask:
        scores = np.where(np.broadcast_to(mask, (n_b, n_t, n_s))[:, None], scores, -np.inf)
    weights = _softmax(scores)
    concat = (weights @ v).transpose(0, 2, 1, 3).reshape(n_b, n_t, n_heads * n_k)
    return concat @ p["w_o"] + p.get("b_o", 0.0), weights


def gqa_mistakes(x_q, x_kv, params, n_heads, n_kv_heads, mask=None, part=1):
    """Every named wrong answer for (out, weights)[part]."""
    args = (x_q, x_kv, params, n_heads, n_kv_heads, mask)
    n_k = x_q.shape[-1] // n_heads

    def named(**how):
        return lambda: variant(*args, **how)[part]

    mistakes = {
        GQA_TILED: named(order="modulo"),
        GQA_AXIS2: named(order="axis2"),
        SCALE_D: named(scale=1.0 / math.sqrt(x_q.shape[-1])),
        SCALE_GK: named(scale=1.0 / math.sqrt(n_kv_heads * n_k)),
        SCALE_MISSING: named(scale=1.0),
    }
    if mask is not None:
        mistakes[MASK_IGNORED] = named(use_mask=False)
    if part == 1:
        if params.get("b_q") is not None:
            mistakes[NO_B_Q] = named(skip_bias=("b_q",))
        mistakes[SWAPPED] = lambda: variant(*args)[0]
    else:
        for name, description in (("b_q", NO_B_Q), ("b_v", NO_B_V), ("b_o", NO_B_O)):
            if params.get(name) is not None:
                mistakes[description] = named(skip_bias=(name,))
        mistakes[SWAPPED] = lambda: variant(*args)[1]
    return mistakes


# ---------------------------------------------------------------- helpers for the checks
def pair(result, what):
    """The learner's (out, weights), or a failure that says what came back instead."""
    return check_tuple(result, what, ("out", "weights"))


def call_gqa(lesson, what, x_q, x_kv, params, n_heads, n_kv_heads, mask=None):
    """The learner's (out, weights); a shape error inside it is explained in GQA terms."""
    kwargs = {} if mask is None else {"mask": mask}
    try:
        result = lesson.grouped_query_attention(x_q, x_kv, params, n_heads, n_kv_heads, **kwargs)
    except LearnerError as error:
        text = str(error)
        if "broadcast" not in text and "mismatch" not in text:
            raise
        causes = [
            "k or v was not repeated to H heads (both go through repeat_kv before the attention)",
            "the repeat count was G // H instead of n_rep = H // G",
            "the heads were repeated along the wrong axis (the heads of (B, G, S, K) are axis 1)",
        ]
        if mask is not None and np.ndim(mask) == 3:
            causes.append(
                "the 3-D mask ((B, T, S) or (B, 1, S)) was used without a head axis: "
                "broadcast it to (B, T, S), then mask[:, None] is (B, 1, T, S)"
            )
        raise AssertionError(
            f"{what} failed where numpy could not line up two shapes:\n{text}\n"
            f"With H = {n_heads} query heads and G = {n_kv_heads} key/value heads the usual causes "
            "are: " + "; ".join(causes) + "."
        ) from None
    return pair(result, what)


def check_gqa(result, x_q, x_kv, params, n_heads, n_kv_heads, mask=None, *, what):
    """Compare (out, weights) with the loop oracle; weights first, as out is built from them."""
    out, weights = result
    expected_out, expected_weights = gqa_loop(x_q, x_kv, params, n_heads, n_kv_heads, mask)
    dtype = x_q.dtype
    n_b, n_t, _ = x_q.shape
    n_s = x_kv.shape[1]
    per_kv = (n_b, n_kv_heads, n_t, n_s)
    if n_kv_heads != n_heads and isinstance(weights, np.ndarray) and weights.shape == per_kv:
        raise KnownMistake(
            f"the weights of {what} have shape (B, G, T, S) = {per_kv}; expected "
            f"(B, H, T, S) = {expected_weights.shape}.",
            PER_KV_HEAD,
        )
    promoted = {PROMOTED: expected_weights} if dtype == np.float32 else {}
    check_array(
        weights,
        expected_weights.astype(dtype),
        what=f"the weights of {what}",
        dims="B H T S",
        mistakes={**promoted, **gqa_mistakes(x_q, x_kv, params, n_heads, n_kv_heads, mask, 1)},
    )
    promoted = {PROMOTED: expected_out} if dtype == np.float32 else {}
    check_array(
        out,
        expected_out.astype(dtype),
        what=f"the out of {what}",
        dims="B T D",
        mistakes={**promoted, **gqa_mistakes(x_q, x_kv, params, n_heads, n_kv_heads, mask, 0)},
    )


def make_params(r, d, n_heads, n_kv_heads, bias=True, dtype=np.float64, spread=1.0):
    """Random GQA parameters: w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D), biases."""
    n_k = d // n_heads
    shapes = {
        "w_q": (d, n_heads * n_k),
        "w_k": (d, n_kv_heads * n_k),
        "w_v": (d, n_kv_heads * n_k),
        "w_o": (n_heads * n_k, d),
    }
    if bias:
        shapes.update(
            {"b_q": (n_heads * n_k,), "b_k": (n_kv_heads * n_k,), "b_v": (n_kv_heads * n_k,), "b_o": (d,)}
        )
    # weights of size ~ spread / sqrt(D) keep the scores O(spread): the softmax is far from uniform
    return {
        name: (r.standard_normal(shape) * (spread / math.sqrt(d) if name[0] == "w" else 1.0)).astype(dtype)
        for name, shape in shapes.items()
    }


def inputs(r, b=B, t=T, s=S, d=D, dtype=np.float64):
    return (r.standard_normal((b, t, d)).astype(dtype), r.standard_normal((b, s, d)).astype(dtype))


def random_mask(r, shape):
    """Random booleans with some fully masked query rows (like padded queries)."""
    mask = r.random(shape) < 0.6
    mask[..., 0, 0] = True
    if shape[-2] > 1:
        mask[..., -1, :] = False
    return mask


def check_raises_value_error(call, what, numbers, example):
    """The learner's code must raise ValueError with a message that names the numbers."""
    try:
        call()
    except LearnerError as error:
        text = str(error)
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("ValueError")]
        if not starts:
            raise AssertionError(f"{what} must raise ValueError, but it raised:\n{text}") from None
        message = "\n".join(lines[starts[-1] :])
        named = all(re.search(rf"(?<![\d.]){n}(?![\d.])", message) for n in numbers)
        # deliberate: the learner's own `raise` line (shown just above the message), or words
        # that explain the sizes; a ValueError from numpy's reshape or broadcasting is neither
        raised_here = starts[-1] > 0 and lines[starts[-1] - 1].strip().startswith("raise")
        explains = raised_here or re.search(r"divis|divid|multiple", message, re.IGNORECASE)
        if not (named and explains):
            raise AssertionError(
                f"{what} raised {message!r}, but it must raise ValueError with a message that "
                f"says which numbers disagree, e.g. ValueError({example!r}). (An error numpy raises "
                "later, while reshaping or broadcasting, does not count: check the sizes "
                "first.)"
            ) from None
        return
    raise AssertionError(
        f"{what} returned a result, but it must raise ValueError, e.g. ValueError({example!r})."
    )


# ---------------------------------------------------------------- kv_head_for_query_head
def check_map(actual, expected, what, mistakes=None):
    if isinstance(actual, np.ndarray) and actual.dtype.kind not in "iu":
        raise AssertionError(
            f"{what} returned dtype {actual.dtype}; expected integers (head "
            "numbers index arrays): divide with //, not /."
        )
    if isinstance(actual, np.ndarray):
        expected = expected.astype(actual.dtype)  # any integer dtype will do
        if actual.shape == expected.shape and expected.any() and not actual.any():
            # Seen, not matched: its sentence says what was seen, then where it comes from.
            raise KnownMistake(
                f"{what} returned {actual.tolist()}; expected {expected.tolist()}.", GROUP_G_OVER_H
            )
    check_array(actual, expected, what=what, dims="H", mistakes=mistakes)


def map_mistakes(n_heads, n_kv_heads):
    heads = np.arange(n_heads)
    return {
        MODULO: heads % n_kv_heads,
        DIV_BY_G: heads // n_kv_heads,
    }


# Sizes of the property check below: under a secret the other checks take G or H // G from 6 on,
# so that none of their calls is one of its calls in a public grade.
MAX_PROPERTY_G = MAX_PROPERTY_REP = 5


@exercise("kv_head_for_query_head")
class TestKvHeadForQueryHead:
    def test_map_has_one_kv_head_per_query_head(self, lesson):
        """the map has one key/value head per query head (H=6, G=3)"""
        # Under an instructor's secret: G key/value heads from 6 to 9, each serving 2 query heads.
        g = variation("map sizes").integers(MAX_PROPERTY_G + 1, 10, public=G)
        h = g * N_REP
        check_map(
            lesson.kv_head_for_query_head(h, g),
            groups_oracle(h, g),
            what=f"kv_head_for_query_head({h}, {g})",
            mistakes=map_mistakes(h, g),
        )

    @hand_checked
    def test_consecutive_query_heads_share_a_kv_head_by_hand(self, lesson):
        """consecutive query heads share a key/value head, checked by hand"""
        # Under an instructor's secret: groups of n = 6 to 9 query heads instead of 2 and 4.
        v = variation("groups by hand")
        n = v.integers(MAX_PROPERTY_REP + 1, 10, public=2)
        # H = 6, G = 3: groups of 6 // 3 = 2 consecutive query heads -> [0, 0, 1, 1, 2, 2]
        # (i % 3 would give [0, 1, 2, 0, 1, 2], i // 3 would give [0, 0, 0, 1, 1, 1])
        check_map(
            lesson.kv_head_for_query_head(3 * n, 3),
            np.array([0, 1, 2]).repeat(n),
            what=f"kv_head_for_query_head({3 * n}, 3)",
            mistakes=map_mistakes(3 * n, 3),
        )
        # H = 8, G = 2: groups of 4 -> [0, 0, 0, 0, 1, 1, 1, 1]
        n = v.integers(MAX_PROPERTY_REP + 1, 10, public=4)
        check_map(
            lesson.kv_head_for_query_head(2 * n, 2),
            np.array([0, 1]).repeat(n),
            what=f"kv_head_for_query_head({2 * n}, 2)",
            mistakes=map_mistakes(2 * n, 2),
        )

    def test_multi_head_attention_is_g_equals_h(self, lesson):
        """G = H is multi-head attention: query head i uses kv head i"""
        # G = H: every query head has its own key/value head, i -> i
        # Under an instructor's secret: G = H from 6 to 11.
        h = variation("multi-head map").integers(MAX_PROPERTY_G + 1, 12, public=5)
        check_map(
            lesson.kv_head_for_query_head(h, h),
            np.arange(h),
            what=f"kv_head_for_query_head({h}, {h}) (multi-head attention)",
        )

    def test_multi_query_attention_is_g_equals_1(self, lesson):
        """G = 1 is multi-query attention: every query head uses kv head 0"""
        # G = 1: every query head uses key/value head 0
        # Under an instructor's secret: H from 7 to 12.
        h = variation("multi-query map").integers(MAX_PROPERTY_REP + 1, 13, public=6)
        check_map(
            lesson.kv_head_for_query_head(h, 1),
            np.zeros(h, np.int64),
            what=f"kv_head_for_query_head({h}, 1) (multi-query attention)",
            mistakes={DIV_BY_G: np.arange(h)},
        )

    def test_llama_2_70b_shares_each_kv_head_among_8_query_heads(self, lesson):
        """Llama 2 70B shares each key/value head among 8 query heads"""
        # Llama 2 70B: 64 query heads, 8 key/value heads -> heads 8g ... 8g + 7 use kv head g
        # Under an instructor's secret: another published model's heads (GROUPED_MODELS).
        name, _, h, g = variation("published model map").pick(GROUPED_MODELS)
        check_map(
            lesson.kv_head_for_query_head(h, g),
            np.arange(h) // (h // g),
            what=f"kv_head_for_query_head({h}, {g}) ({name})",
            mistakes=map_mistakes(h, g),
        )

    def test_map_rejects_g_that_does_not_divide_h(self, lesson):
        """H = 6, G = 4 raises a ValueError that names 6 and 4"""
        # Under an instructor's secret: another G that does not divide H.
        h, g = variation("map not divisible").pick(NOT_DIVIDING)
        check_raises_value_error(
            lambda: lesson.kv_head_for_query_head(h, g),
            f"kv_head_for_query_head({h}, {g})",
            (h, g),
            f"n_heads={h} is not divisible by n_kv_heads={g}",
        )

    @enumerable("draws only two small head counts (G and H // G up to 5)")
    @given(n_kv=st.integers(1, MAX_PROPERTY_G), n_rep=st.integers(1, MAX_PROPERTY_REP))
    def test_map_matches_the_groups_for_any_sizes(self, lesson, n_kv, n_rep):
        """the map matches the groups i // (H // G) for any sizes"""
        n_heads = n_kv * n_rep
        check_map(
            lesson.kv_head_for_query_head(n_heads, n_kv),
            groups_oracle(n_heads, n_kv),
            what=f"kv_head_for_query_head({n_heads}, {n_kv})",
            mistakes=map_mistakes(n_heads, n_kv),
        )


# ---------------------------------------------------------------- repeat_kv
def repeat_mistakes(x, n_rep):
    b_, g_, s_, k_ = x.shape
    mistakes = {
        TILED: lambda: np.tile(x, (1, n_rep, 1, 1)),
        REPEAT_FLAT: lambda: np.repeat(x, n_rep),
        REPEAT_FLAT_RESHAPED: lambda: np.repeat(x, n_rep).reshape(b_, g_ * n_rep, s_, k_),
    }
    for axis, letter in ((0, "B"), (2, "S"), (3, "K")):
        mistakes[REPEAT_AXIS.format(axis=axis, letter=letter)] = lambda axis=axis: np.repeat(
            x, n_rep, axis=axis
        )
    return mistakes


@exercise("repeat_kv")
class TestRepeatKv:
    def test_repeat_kv_maps_b_g_s_k_to_b_h_s_k(self, lesson):
        """repeat_kv maps (B, G, S, K) to (B, H, S, K)"""
        x = rng(10).standard_normal((B, G, S, K))
        check_array(
            lesson.repeat_kv(x, N_REP),
            repeat_loop(x, N_REP),
            what=f"repeat_kv(x, {N_REP})",
            dims="B H S K",
            mistakes=repeat_mistakes(x, N_REP),
        )

    @hand_checked
    def test_repeat_kv_small_case_by_hand(self, lesson):
        """a small case by hand: heads 10, 20, 30 give 10, 10, 20, 20, 30, 30"""
        # Under an instructor's secret: every number scaled by s and shifted by c.
        v = variation("repeat_kv by hand")
        s, c = v.scale(), v.shift()
        x = np.array([10.0, 20.0, 30.0]).reshape(1, 3, 1, 1) * s + c  # (B=1, G=3, S=1, K=1), head g = 10(g+1)
        # each head twice, in place: 10, 10, 20, 20, 30, 30 (np.tile: 10, 20, 30, 10, 20, 30)
        expected = np.array([10.0, 10.0, 20.0, 20.0, 30.0, 30.0]).reshape(1, 6, 1, 1) * s + c
        heads = ", ".join(f"{value:g}" for value in x.ravel())
        check_array(
            lesson.repeat_kv(x, 2),
            expected,
            what=f"repeat_kv(x, 2) with x's three heads holding {heads}",
            dims="B H S K",
            mistakes={TILED: np.array([10.0, 20.0, 30.0] * 2).reshape(1, 6, 1, 1) * s + c},
        )

    def test_repeated_head_h_is_kv_head_h_over_n_rep(self, lesson):
        """repeated head h is key/value head h // n_rep"""
        x = rng(11).standard_normal((B, G, S, K))
        n_rep = 3
        out = lesson.repeat_kv(x, n_rep)
        check_array(
            out,
            repeat_loop(x, n_rep),
            what=f"repeat_kv(x, {n_rep})",
            dims="B H S K",
            mistakes=repeat_mistakes(x, n_rep),
        )
        for h in range(G * n_rep):
            check_array(
                out[:, h],
                x[:, h // n_rep],
                what=f"repeat_kv(x, {n_rep})[:, {h}]",
                dims="B S K",
                mistakes={TILED: x[:, h % G]},
            )

    def test_n_rep_1_returns_the_same_heads(self, lesson):
        """n_rep = 1 returns the same heads"""
        x = rng(12).standard_normal((B, G, S, K))
        check_array(
            lesson.repeat_kv(x, 1),
            x,
            what="repeat_kv(x, 1) (multi-head attention: nothing to repeat)",
            dims="B G S K",
        )

    def test_one_kv_head_serves_every_query_head(self, lesson):
        """one key/value head (G = 1) serves every query head"""
        x = rng(13).standard_normal((B, 1, S, K))  # multi-query attention: G = 1
        check_array(
            lesson.repeat_kv(x, H),
            repeat_loop(x, H),
            what=f"repeat_kv(x, {H}) with G = 1",
            dims="B H S K",
            mistakes=repeat_mistakes(x, H),
        )

    def test_repeat_kv_keeps_float32_and_inputs(self, lesson):
        """repeat_kv keeps float32 and leaves its input unchanged"""
        x = rng(14).standard_normal((B, G, S, K)).astype(np.float32)
        out = lesson.repeat_kv(x, N_REP)
        check_not_modified(lesson, f"repeat_kv(x, {N_REP})")
        check_array(out, repeat_loop(x, N_REP), what=f"repeat_kv(x, {N_REP}) in float32", dims="B H S K")

    @given(
        b=st.integers(1, 3),
        g=st.integers(1, 4),
        s=st.integers(1, 4),
        k=st.integers(1, 4),
        n_rep=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_repeat_kv_matches_the_loop_for_any_sizes(self, lesson, b, g, s, k, n_rep, seed):
        """repeat_kv matches the slow loop for any sizes"""
        x = rng(seed).standard_normal((b, g, s, k))
        check_array(
            lesson.repeat_kv(x, n_rep),
            repeat_loop(x, n_rep),
            what=f"repeat_kv(x {x.shape}, {n_rep})",
            dims="B H S K",
            mistakes=repeat_mistakes(x, n_rep),
        )


# ---------------------------------------------------------------- grouped_query_attention
@exercise("grouped_query_attention")
class TestGroupedQueryAttention:
    def test_gqa_returns_out_b_t_d_and_weights_b_h_t_s(self, lesson):
        """returns out (B, T, D) and weights (B, H, T, S)"""
        r = rng(20)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, spread=2.0)
        what = (
            f"grouped_query_attention(x_q {x_q.shape}, x_kv {x_kv.shape}, params, "
            f"n_heads={H}, n_kv_heads={G})"
        )
        check_gqa(call_gqa(lesson, what, x_q, x_kv, params, H, G), x_q, x_kv, params, H, G, what=what)

    @hand_checked
    def test_gqa_small_case_by_hand(self, lesson):
        """a small case checked by hand (H = 4, G = 2, K = 1)"""
        # H = 4 query heads, G = 2 key/value heads, K = 1, D = 4; one query, two keys.
        # Every query head asks q = ln 3. kv head 0 has keys [1, 0] and values [4, 0]; kv head 1
        # has keys [0, 1] and values [0, 8]. Scale 1/sqrt(K) = 1.
        #   query heads 0, 1 use kv head 0: scores [ln 3, 0] -> weights [3/4, 1/4] -> 3
        #   query heads 2, 3 use kv head 1: scores [0, ln 3] -> weights [1/4, 3/4] -> 6
        # w_o is the identity: out = [3, 3, 6, 6]. (Tiled heads 0, 1, 0, 1 give [3, 6, 3, 6].)
        # Under an instructor's secret: the two keys swapped (with their values and weight columns),
        # every value scaled by s and shifted by c (so out is too: the weights sum to 1).
        v = variation("gqa by hand")
        s, c, order = v.scale(), v.shift(), v.permutation(2)
        ln3 = math.log(3.0)
        x_q = np.array([[[1.0, 0.0, 0.0, 0.0]]])  # (B=1, T=1, D=4)
        x_kv = np.array([[[1.0, 0.0, 4.0, 0.0], [0.0, 1.0, 0.0, 8.0]]])[:, order]  # (B=1, S=2, D=4)
        x_kv[..., 2:] = x_kv[..., 2:] * s + c  # the features w_v reads
        params = {
            "w_q": np.vstack([np.full((1, 4), ln3), np.zeros((3, 4))]),  # (D, H*K)
            "w_k": np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),  # (D, G*K)
            "w_v": np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),  # (D, G*K)
            "w_o": np.eye(4),
        }  # (H*K, D)
        expected_weights = np.array([[[[0.75, 0.25]], [[0.75, 0.25]], [[0.25, 0.75]], [[0.25, 0.75]]]])[
            ..., order
        ]  # (1, H, 1, S)
        expected_out = np.array([[[3.0, 3.0, 6.0, 6.0]]]) * s + c
        what = "grouped_query_attention on the hand-checked example (H = 4, G = 2, K = 1)"
        out, weights = call_gqa(lesson, what, x_q, x_kv, params, 4, 2)
        if isinstance(weights, np.ndarray) and weights.shape == (1, 2, 1, 2):
            raise KnownMistake(
                f"the weights of {what} have shape (B, G, T, S) = (1, 2, 1, 2).",
                PER_KV_HEAD,
            )
        check_array(
            weights,
            expected_weights,
            what=f"the weights of {what}",
            dims="B H T S",
            mistakes={
                GQA_TILED: expected_weights[:, [0, 2, 0, 2]],
                **gqa_mistakes(x_q, x_kv, params, 4, 2, part=1),
            },
        )
        check_array(
            out,
            expected_out,
            what=f"the out of {what}",
            dims="B T D",
            mistakes={
                GQA_TILED: np.array([[[3.0, 6.0, 3.0, 6.0]]]) * s + c,
                **gqa_mistakes(x_q, x_kv, params, 4, 2, part=0),
            },
        )

    @hand_checked
    def test_mqa_small_case_by_hand(self, lesson):
        """a multi-query case checked by hand (H = 2, G = 1, K = 1)"""
        # H = 2 query heads share G = 1 key/value head; K = 1, D = 2, w_q and w_o the identity.
        # keys [ln 3, 0], values [4, 8]; query head 0 asks 1, query head 1 asks 2:
        #   head 0: scores [ln 3, 0]   -> weights [3/4, 1/4]   -> 3 + 2 = 5
        #   head 1: scores [2 ln 3, 0] -> weights [9/10, 1/10] -> 3.6 + 0.8 = 4.4
        # Under an instructor's secret: the two keys swapped (with their values and weight columns),
        # every value scaled by s and shifted by c (so out is too: the weights sum to 1).
        v = variation("mqa by hand")
        s, c, order = v.scale(), v.shift(), v.permutation(2)
        ln3 = math.log(3.0)
        x_q = np.array([[[1.0, 2.0]]])  # (B=1, T=1, D=2)
        x_kv = np.array([[[ln3, 4.0 * s + c], [0.0, 8.0 * s + c]]])[:, order]  # (B=1, S=2, D=2)
        params = {
            "w_q": np.eye(2),
            "w_k": np.array([[1.0], [0.0]]),
            "w_v": np.array([[0.0], [1.0]]),
            "w_o": np.eye(2),
        }
        what = "grouped_query_attention on the hand-checked example (H = 2, G = 1, K = 1)"
        out, weights = call_gqa(lesson, what, x_q, x_kv, params, 2, 1)
        if isinstance(weights, np.ndarray) and weights.shape == (1, 1, 1, 2):
            raise KnownMistake(
                f"the weights of {what} have shape (B, G, T, S) = (1, 1, 1, 2).",
                PER_KV_HEAD,
            )
        check_array(
            weights,
            np.array([[[[0.75, 0.25]], [[0.9, 0.1]]]])[..., order],
            what=f"the weights of {what}",
            dims="B H T S",
            mistakes=gqa_mistakes(x_q, x_kv, params, 2, 1, part=1),
        )
        check_array(
            out,
            np.array([[[5.0, 4.4]]]) * s + c,
            what=f"the out of {what}",
            dims="B T D",
            mistakes=gqa_mistakes(x_q, x_kv, params, 2, 1, part=0),
        )

    def test_query_head_h_uses_kv_head_h_over_group_size(self, lesson):
        """query head h uses key/value head h // (H // G)"""
        r = rng(21)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, spread=3.0)  # sharp softmax: a wrong pairing shows
        what = f"grouped_query_attention(x_q, x_kv, params, n_heads={H}, n_kv_heads={G})"
        check_gqa(call_gqa(lesson, what, x_q, x_kv, params, H, G), x_q, x_kv, params, H, G, what=what)

    def test_scores_are_scaled_by_the_head_width(self, lesson):
        """scores are scaled by 1/sqrt(K), not 1/sqrt(G*K) or 1/sqrt(D)"""
        r = rng(22)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, bias=False, spread=2.0)
        what = (
            f"grouped_query_attention(..., n_heads={H}, n_kv_heads={G}) with K = {K}, G*K = {G * K}, D = {D}"
        )
        check_gqa(call_gqa(lesson, what, x_q, x_kv, params, H, G), x_q, x_kv, params, H, G, what=what)

    def test_g_equals_h_is_multi_head_attention(self, lesson):
        """G = H is multi-head attention"""
        r = rng(23)
        n_heads = 3
        d = n_heads * K
        x_q, x_kv = inputs(r, d=d)
        params = make_params(r, d, n_heads, n_heads, spread=2.0)
        what = f"grouped_query_attention(..., n_heads={n_heads}, n_kv_heads={n_heads}) (multi-head attention)"
        check_gqa(
            call_gqa(lesson, what, x_q, x_kv, params, n_heads, n_heads),
            x_q,
            x_kv,
            params,
            n_heads,
            n_heads,
            what=what,
        )

    def test_g_equals_1_is_multi_query_attention(self, lesson):
        """G = 1 is multi-query attention"""
        r = rng(24)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, 1, spread=2.0)  # w_k and w_v are (D, K): one kv head
        what = f"grouped_query_attention(..., n_heads={H}, n_kv_heads=1) (multi-query attention)"
        check_gqa(call_gqa(lesson, what, x_q, x_kv, params, H, 1), x_q, x_kv, params, H, 1, what=what)

    def test_a_causal_t_by_s_mask_applies_to_every_head(self, lesson):
        """a causal (T, S) mask applies to every head"""
        r = rng(25)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, spread=2.0)
        mask = np.tril(np.ones((T, S), bool), k=S - T)  # causal, aligned bottom-right
        mask[0] = False  # query 0 may attend nothing: zero weights, out = b_o
        what = "grouped_query_attention(..., mask) with a causal (T, S) = (4, 5) mask"
        check_gqa(
            call_gqa(lesson, what, x_q, x_kv, params, H, G, mask), x_q, x_kv, params, H, G, mask, what=what
        )

    def test_a_padding_mask_b_1_s_hides_keys_per_batch_element(self, lesson):
        """a (B, 1, S) padding mask hides keys per batch element"""
        r = rng(26)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, spread=2.0)
        mask = (np.arange(S) < np.array([S, 2])[:, None])[:, None, :]  # (B, 1, S), lengths 5, 2
        what = "grouped_query_attention(..., mask) with a (B, 1, S) = (2, 1, 5) padding mask"
        check_gqa(
            call_gqa(lesson, what, x_q, x_kv, params, H, G, mask), x_q, x_kv, params, H, G, mask, what=what
        )

    def test_a_b_t_s_mask_gives_each_batch_element_its_own_mask(self, lesson):
        """a (B, T, S) mask gives each batch element its own mask"""
        r = rng(27)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, spread=2.0)
        mask = random_mask(r, (B, T, S))
        what = "grouped_query_attention(..., mask) with a (B, T, S) = (2, 4, 5) mask"
        check_gqa(
            call_gqa(lesson, what, x_q, x_kv, params, H, G, mask), x_q, x_kv, params, H, G, mask, what=what
        )

    def test_gqa_without_biases(self, lesson):
        """works with params that hold no biases"""
        r = rng(28)
        x_q, x_kv = inputs(r)
        params = make_params(r, D, H, G, bias=False, spread=2.0)
        what = "grouped_query_attention(...) with params that hold no biases"
        check_gqa(call_gqa(lesson, what, x_q, x_kv, params, H, G), x_q, x_kv, params, H, G, what=what)

    def test_gqa_keeps_float32_and_inputs(self, lesson):
        """keeps float32 and leaves its inputs unchanged"""
        r = rng(29)
        x_q, x_kv = inputs(r, dtype=np.float32)
        params = make_params(r, D, H, G, dtype=np.float32, spread=2.0)
        mask = random_mask(r, (B, T, S))
        what = "grouped_query_attention(...) in float32"
        result = call_gqa(lesson, what, x_q, x_kv, params, H, G, mask)
        check_not_modified(lesson, what)
        check_gqa(result, x_q, x_kv, params, H, G, mask, what=what)

    def test_h_not_divisible_by_g_raises_value_error(self, lesson):
        """H = 6, G = 4 raises a ValueError that names 6 and 4"""
        r = rng(30)
        x_q, x_kv = inputs(r, d=12)
        params = {
            "w_q": r.standard_normal((12, 12)),
            "w_k": r.standard_normal((12, 8)),
            "w_v": r.standard_normal((12, 8)),
            "w_o": r.standard_normal((12, 12)),
        }
        check_raises_value_error(
            lambda: lesson.grouped_query_attention(x_q, x_kv, params, 6, 4),
            "grouped_query_attention(..., n_heads=6, n_kv_heads=4)",
            (6, 4),
            "n_heads=6 is not divisible by n_kv_heads=4",
        )

    def test_d_not_divisible_by_h_raises_value_error(self, lesson):
        """D = 10, H = 4 raises a ValueError that names 10 and 4"""
        r = rng(31)
        x_q, x_kv = inputs(r, d=10)
        params = {
            "w_q": r.standard_normal((10, 8)),
            "w_k": r.standard_normal((10, 4)),
            "w_v": r.standard_normal((10, 4)),
            "w_o": r.standard_normal((8, 10)),
        }
        check_raises_value_error(
            lambda: lesson.grouped_query_attention(x_q, x_kv, params, 4, 2),
            "grouped_query_attention(x_q (2, 4, 10), ..., n_heads=4, n_kv_heads=2)",
            (10, 4),
            "the model width D=10 is not divisible by n_heads=4",
        )

    @given(
        g=st.integers(1, 3),
        n_rep=st.integers(1, 3),
        k=st.integers(1, 3),
        b=st.integers(1, 2),
        t=st.integers(1, 3),
        s=st.integers(1, 4),
        masked=st.booleans(),
        bias=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_gqa_matches_the_loop_for_any_sizes(self, lesson, g, n_rep, k, b, t, s, masked, bias, seed):
        """matches the slow loop for any sizes, with or without mask and biases"""
        r = rng(seed)
        n_heads = g * n_rep
        d = n_heads * k
        x_q, x_kv = inputs(r, b=b, t=t, s=s, d=d)
        params = make_params(r, d, n_heads, g, bias=bias, spread=2.0)
        mask = random_mask(r, (b, t, s)) if masked else None
        what = (
            f"grouped_query_attention(x_q {x_q.shape}, x_kv {x_kv.shape}, params, "
            f"n_heads={n_heads}, n_kv_heads={g}{', mask' if masked else ''})"
        )
        check_gqa(
            call_gqa(lesson, what, x_q, x_kv, params, n_heads, g, mask),
            x_q,
            x_kv,
            params,
            n_heads,
            g,
            mask,
            what=what,
        )


# ---------------------------------------------------------------- kv_parameter_saving
def count_oracle(d, h, g, bias=True):
    """Oracle: the parameters of a layer, from the conventions' shapes (w_k, w_v (D, G*K), ...)."""
    k = d // h
    shapes = [(d, h * k), (d, g * k), (d, g * k), (h * k, d)]
    if bias:
        shapes += [(h * k,), (g * k,), (g * k,), (d,)]
    return sum(math.prod(shape) for shape in shapes)


def saving_oracle(d, h, g, bias=True):
    return count_oracle(d, h, h, bias) - count_oracle(d, h, g, bias)


LESSON_7 = "your count_parameters from lesson 7 (l07_why_heads.py)"
KV_SQUARE = Mistake(
    "kv-counted-square",
    "in your count_parameters (lesson 7), W_K and W_V were counted as D x D (as if n_kv_heads "
    "were left out), but with G key/value heads they are D x (G*K)",
    exercises=("kv_parameter_saving",),
)
KV_WITHOUT_K = Mistake(
    "kv-counted-without-k",
    "in your count_parameters (lesson 7), W_K and W_V were counted as D x G instead of D x (G*K)",
    exercises=("kv_parameter_saving",),
)
KV_BIASES_D = Mistake(
    "kv-biases-counted-d",
    "in your count_parameters (lesson 7), b_k and b_v were counted with D entries each, but they have G*K",
    exercises=("kv_parameter_saving",),
)
COUNT_FLOAT = Mistake(
    "float-count", "the count is a float: / was used where // was needed", exercises=("kv_parameter_saving",)
)
SAVING_REVERSED = Mistake(
    "saving-reversed",
    "the saving is the grouped-query count minus the multi-head count: subtract the other way round",
    exercises=("kv_parameter_saving",),
)
BIAS_NOT_PASSED = Mistake(
    "bias-not-passed",
    "bias was not passed on to count_parameters: both layers must be counted with the bias asked for",
    exercises=("kv_parameter_saving",),
)
ONE_OF_K_AND_V = Mistake(
    "only-one-of-k-and-v",
    "only one of W_K and W_V (with its bias) was counted as shrinking: both have G*K columns",
    exercises=("kv_parameter_saving",),
)


def gqa_count_mistakes(d, h, g, bias):
    """Known wrong counts of count_parameters(d, h, n_kv_heads=g, bias=bias): mistake -> count."""
    k, b = d // h, int(bias)
    return {
        KV_SQUARE: 4 * d * d + 4 * d * b,
        KV_WITHOUT_K: 2 * d * d + 2 * d * g + b * (2 * d + 2 * g),
        KV_BIASES_D: 2 * d * d + 2 * d * g * k + b * 4 * d,
    }


def saving_mistakes(d, h, g, bias):
    """Known wrong savings (with a right count_parameters): mistake -> saving."""
    right = saving_oracle(d, h, g, bias)
    return {
        SAVING_REVERSED: -right,
        BIAS_NOT_PASSED: saving_oracle(d, h, g, not bias),
        ONE_OF_K_AND_V: right // 2,
    }


def number(value):
    return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value


def is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def learner_count(lesson, d, h, g, bias):
    """The learner's count_parameters (lesson 7), called through lesson 8's file, which imports it."""
    try:
        if g is None:
            return lesson.count_parameters(d, h, bias=bias) if not bias else lesson.count_parameters(d, h)
        if not bias:
            return lesson.count_parameters(d, h, n_kv_heads=g, bias=False)
        return lesson.count_parameters(d, h, n_kv_heads=g)
    except LearnerError as error:
        if error.kind != "MissingFunction":
            raise
    raise AssertionError(
        "Lesson 8 grades your count_parameters from lesson 7 with n_kv_heads through the "
        "import at the top of l08_gqa.py, and there is none: put back "
        "`from l07_why_heads import count_parameters`."
    )


def check_lesson_7_count(lesson, d, h, g, bias, before=""):
    """count_parameters(d, h, n_kv_heads=g) of lesson 7 is right; a wrong one is blamed there."""
    what = (
        f"count_parameters({d}, {h}"
        + (f", n_kv_heads={g}" if g is not None else "")
        + (", bias=False" if not bias else "")
        + ")"
    )
    actual = number(learner_count(lesson, d, h, g, bias))
    expected = count_oracle(d, h, h if g is None else g, bias)
    intro = f"{before}{LESSON_7[0].upper()}{LESSON_7[1:]}, which kv_parameter_saving builds on: "
    if isinstance(actual, float) and actual == expected:
        raise KnownMistake(
            f"{intro}{what} returned the float {actual!r}; a count is an int. Use // (integer "
            "division) for K = D // H: / always gives a float.",
            COUNT_FLOAT,
        )
    if is_int(actual) and actual != expected:
        known = None
        if g is not None:
            known = diagnose(np.asarray(int(actual)), gqa_count_mistakes(d, h, g, bias), np.asarray(expected))
        gk = (g or h) * (d // h)
        shapes = f"W_Q and W_O are D x D = {d} x {d}, W_K and W_V D x (G*K) = {d} x {gk}"
        if bias:
            shapes += f", b_k and b_v have G*K = {gk} entries"
        if known:
            raise KnownMistake(f"{intro}{what} returned {actual}; expected {expected} ({shapes}).", known)
        raise AssertionError(f"{intro}{what} returned {actual}; expected {expected} ({shapes}).")
    check_scalar(actual, expected, what=f"{intro}{what}")
    assert is_int(actual), f"{intro}{what} returned {actual!r}, a {type(actual).__name__}; a count is an int."


def check_saving(lesson, d, h, g, bias=True):
    what = f"kv_parameter_saving({d}, {h}, {g}" + (", bias=False" if not bias else "") + ")"
    if bias:
        actual = number(lesson.kv_parameter_saving(d, h, g))
    else:
        actual = number(lesson.kv_parameter_saving(d, h, g, bias=False))
    expected = saving_oracle(d, h, g, bias)
    got = f"{what} returned {actual!r}; expected {expected}.\n" if actual != expected else ""
    check_lesson_7_count(lesson, d, h, None, bias, before=got)  # graded in lesson 7 already
    check_lesson_7_count(lesson, d, h, g, bias, before=got)
    if isinstance(actual, float) and actual == expected:
        raise KnownMistake(f"{what} returned the float {actual!r}; a count is an int.", COUNT_FLOAT)
    if is_int(actual) and actual != expected:
        known = diagnose(np.asarray(int(actual)), saving_mistakes(d, h, g, bias), np.asarray(expected))
        explain = (
            f"count_parameters({d}, {h}) - count_parameters({d}, {h}, n_kv_heads={g})"
            + (" with bias=False" if not bias else "")
            + f" = {count_oracle(d, h, h, bias)} - {count_oracle(d, h, g, bias)} = {expected}"
        )
        if known:
            raise KnownMistake(f"{what} returned {actual}; expected {explain}.", known)
        raise AssertionError(f"{what} returned {actual}; expected {explain}.")
    check_scalar(actual, expected, what=what)
    assert is_int(actual), f"{what} returned {actual!r}, a {type(actual).__name__}; a count is an int."


# The head width K of the property check below: under a secret the other checks take K from 9 on,
# so that none of their calls is one of its calls in a public grade.
MAX_PROPERTY_K = 8


def head_width(name, public):
    """K: ``public`` in a public grade, another width above MAX_PROPERTY_K under a secret."""
    return variation(name).integers(MAX_PROPERTY_K + 1, 17, public=public)


@exercise("kv_parameter_saving")
class TestKvParameterSaving:
    def test_gqa_saves_the_columns_w_k_and_w_v_lose(self, lesson):
        """GQA saves the columns W_K and W_V lose (D=16, H=8, G=2: 408)"""
        # D=16, H=8, G=2, K=2: MHA 4 * 256 + 4 * 16 = 1088; GQA 2 * 256 + 2 * 16*4 + 16 + 4 + 4 + 16
        # = 680: saves 408 = 2 * 16 * 6 * 2 + 2 * 6 * 2
        # Under an instructor's secret: another head width K from 9 to 16 (D = 8K).
        check_saving(lesson, 8 * head_width("saving K", 2), 8, 2)

    def test_multi_query_attention_saves_with_and_without_biases(self, lesson):
        """multi-query attention (D=12, H=4, G=1) saves 234, or 216 without biases"""
        # D=12, H=4, G=1, K=3: 624 - 390 = 234 with biases, 576 - 360 = 216 without
        # Under an instructor's secret: another head width K from 9 to 16 (D = 4K).
        d = 4 * head_width("multi-query saving K", 3)
        check_saving(lesson, d, 4, 1)
        check_saving(lesson, d, 4, 1, bias=False)

    def test_g_equals_h_saves_nothing(self, lesson):
        """G = H saves nothing"""
        # Under an instructor's secret: another head width K from 9 to 16 (D = 6K).
        check_saving(lesson, 6 * head_width("multi-head saving K", 5), 6, 6)

    def test_llama_2_70b_saves_117_million_parameters_per_layer(self, lesson):
        """Llama 2 70B saves 117,440,512 parameters per layer"""
        # D=8192, H=64, G=8, K=128, no biases: 2 * 8192 * 56 * 128 = 117,440,512
        # Under an instructor's secret: another published model's sizes (GROUPED_MODELS).
        _, d, h, g = variation("published model saving").pick(GROUPED_MODELS)
        check_saving(lesson, d, h, g, bias=False)

    def test_h_not_divisible_by_g_raises_value_error(self, lesson):
        """H = 6, G = 4 raises a ValueError that names 6 and 4"""
        # Under an instructor's secret: another G that does not divide H (D = 5H).
        h, g = variation("saving not divisible").pick(NOT_DIVIDING)
        d = 5 * h
        example = f"n_heads={h} is not divisible by n_kv_heads={g}"
        try:
            check_raises_value_error(
                lambda: lesson.kv_parameter_saving(d, h, g),
                f"kv_parameter_saving({d}, {h}, {g})",
                (h, g),
                example,
            )
        except AssertionError as problem:
            check_raises_value_error(
                lambda: learner_count(lesson, d, h, g, True),
                f"{problem}\n{LESSON_7[0].upper()}{LESSON_7[1:]}: count_parameters({d}, {h}, n_kv_heads={g})",
                (h, g),
                example,
            )
            raise

    @enumerable("draws only small sizes (K up to 8, G and H // G up to 4) and whether there are biases")
    @given(k=st.integers(1, MAX_PROPERTY_K), g=st.integers(1, 4), rep=st.integers(1, 4), bias=st.booleans())
    def test_saving_matches_the_parameter_shapes_for_any_sizes(self, lesson, k, g, rep, bias):
        """the saving matches the parameter shapes for any sizes"""
        h = g * rep
        check_saving(lesson, h * k, h, g, bias)
