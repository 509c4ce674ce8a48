"""Grading tests for lesson 6 (l06_multi_head): multi_head_attention, multi_head_attention_loop,
params_from_torch.

Sizes are all different (B=2, T=3, S=5, H=4, K=6, D=H*K=24) so that a swapped axis, keys taken
from the queries' sequence (T != S), a scale of 1/sqrt(D) instead of 1/sqrt(K) or heads cut in
the wrong places show as a wrong shape or wrong numbers instead of passing by coincidence. Two
mask tests use B == H and T == H on purpose: only then does a mask without its head axis give
numbers (wrong ones) instead of a broadcasting error, so the mistake can be named.

The expected answers come from `mha_loop` below (one batch element, one head, one query at a
time). The real PyTorch answers come from tests/lessons/fixtures/l06_multi_head.npz, made by
tools/make_l06_fixtures.py from torch.nn.MultiheadAttention modules (float64, random biases,
per-head weights), so these tests need no torch. The vectorised `variant` computes the classic
WRONG answers, only to name a mistake when an answer matches one of them.
"""

import math
from functools import cache
from pathlib import Path

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

B, T, S, H, K = 2, 3, 5, 4, 6
D = H * K  # 24
FIXTURES = Path(__file__).parent / "fixtures" / "l06_multi_head.npz"
BIASES = ("b_q", "b_k", "b_v", "b_o")


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    name: {"x_q": "B T D", "x_kv": "B S D", "params": "", "n_heads": "", "mask": "T S"}
    for name in ("multi_head_attention", "multi_head_attention_loop")
}


# ---------------------------------------------------------------- oracle (slow and obvious)
@remembered
def mha_loop(x_q, x_kv, params, n_heads, mask=None):
    """Oracle: for each batch element and head, that head's own projections; for each query,
    a softmax over the keys it may attend and a weighted sum of values; then Concat and W_O."""
    x_q, x_kv = np.asarray(x_q, np.float64), np.asarray(x_kv, np.float64)
    p = {name: np.asarray(a, np.float64) for name, a in params.items() if a is not None}
    n_b, n_t, _ = x_q.shape
    n_s = x_kv.shape[1]
    hk = p["w_q"].shape[1]
    k_w = hk // n_heads
    full = (n_b, n_t, n_s)
    allowed = np.ones(full, bool) if mask is None else np.broadcast_to(mask, full)
    concat = np.zeros((n_b, n_t, hk))
    weights = np.zeros((n_b, n_heads, n_t, n_s))
    for b in range(n_b):
        for h in range(n_heads):
            cols = slice(h * k_w, (h + 1) * k_w)  # head h's own W_Qh, W_Kh, W_Vh
            q = x_q[b] @ p["w_q"][:, cols] + (p["b_q"][cols] if "b_q" in p else 0.0)  # (T, K)
            k = x_kv[b] @ p["w_k"][:, cols] + (p["b_k"][cols] if "b_k" in p else 0.0)  # (S, K)
            v = x_kv[b] @ p["w_v"][:, cols] + (p["b_v"][cols] if "b_v" in p else 0.0)  # (S, K)
            for t in range(n_t):
                keys = [s for s in range(n_s) if allowed[b, t, s]]
                if not keys:  # every key blocked: zero weights, zero head output
                    continue
                scores = {s: sum(q[t, i] * k[s, i] for i in range(k_w)) / math.sqrt(k_w) for s in keys}
                top = max(scores.values())
                e = {s: math.exp(scores[s] - top) for s in keys}
                total = sum(e.values())
                for s in keys:
                    weights[b, h, t, s] = e[s] / total
                    concat[b, t, cols] += weights[b, h, t, s] * v[s]
    out = concat @ p["w_o"] + (p["b_o"] if "b_o" in p else 0.0)
    return out, weights


# ---------------------------------------------------------------- classic mistakes, by name
AVERAGED = Mistake(
    "averaged",
    "the weights were averaged over the heads, giving (B, T, S) (PyTorch's default "
    "average_attn_weights=True); return one attention map per head, (B, H, T, S)",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
NO_OUT_PROJ = Mistake(
    "no-out-proj",
    "the output projection is missing: the merged heads must go through w_o and b_o "
    "(out = linear(merge_heads(heads), w_o, b_o))",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
ALL_BIASES = Mistake(
    "all-biases",
    "the biases were not added: use params.get('b_q'), params.get('b_k'), "
    "params.get('b_v') and params.get('b_o') (None when absent) in the projections",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
ONE_BIAS = Mistake(
    "one-bias",
    "the bias {name} is not added (params.get('{name}') belongs in its projection)",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
TRANSPOSED_W = Mistake(
    "transposed-w",
    "the weights were used transposed (x @ w.T, PyTorch's layout): course weights are "
    "stored (d_in, d_out) and applied as x @ w",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
SELF_ONLY = Mistake(
    "self-only",
    "x_q was used for the keys and values: keys and values come from x_kv (in "
    "cross-attention its length S differs from T)",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
SELF_PART = Mistake(
    "self-part",
    "x_q was used for the {which} (only the {other} came from x_kv): keys and values both come "
    "from x_kv, the sequence attended to (in cross-attention its length S differs from T)",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
SELF_KEYS, SELF_VALUES = (
    SELF_PART.format(which="keys", other="values"),
    SELF_PART.format(which="values", other="keys"),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code around
# the error (the grading plugin applies these to every check; testing.named_by_code). With T != S,
# keys or values from x_q alone make lesson 3's attention fail on mismatched shapes.
KEYS_FROM_X_Q = r"\blinear\(\s*x_q\s*,\s*params\[\s*[\"']w_k[\"']"
VALUES_FROM_X_Q = r"\blinear\(\s*x_q\s*,\s*params\[\s*[\"']w_v[\"']"
CODE_MISTAKES = {
    SELF_ONLY: (KEYS_FROM_X_Q, VALUES_FROM_X_Q),
    SELF_KEYS: KEYS_FROM_X_Q,
    SELF_VALUES: VALUES_FROM_X_Q,
}
SWAPPED_SOURCES = Mistake(
    "swapped-sources",
    "the queries came from x_kv and the keys and values from x_q: queries come "
    "from x_q, keys and values from x_kv",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
SCALE_D = Mistake(
    "scale-d",
    "the scores were scaled by 1/sqrt(D), D the model width, instead of 1/sqrt(K) with K "
    "the head width (D // H): each head's dot products are taken in K dimensions",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
SCALE_HK = Mistake(
    "scale-hk",
    "the scores were scaled by 1/sqrt(H*K), the width of all heads together, instead of "
    "1/sqrt(K) with K the head width",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
INTERLEAVED = Mistake(
    "interleaved",
    "head i used the interleaved columns i::H instead of its block i*K:(i+1)*K: the "
    "fused weights put each head's K columns side by side",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
MASK_NO_HEAD_AXIS = Mistake(
    "mask-no-head-axis",
    "the mask was used without a head axis: against (B, H, T, S) scores a "
    "(B, T, S) mask lines its batch axis up with the heads; broadcast it to "
    "(B, T, S), then mask[:, None] gives (B, 1, T, S)",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
MASK_TS_AS_BTS = Mistake(
    "mask-ts-as-bts",
    "a (T, S) mask was given a head axis as if it were (B, T, S): mask[:, None] "
    "made it (T, 1, S), lining T up with the heads; broadcast the mask to (B, T, S) "
    "first (np.broadcast_to), then add the head axis",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
MASK_IGNORED = Mistake(
    "mask-ignored",
    "the mask was ignored",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
MASK_FLIPPED = Mistake(
    "mask-flipped",
    "mask polarity flipped: True was treated as blocked (PyTorch's attn_mask "
    "convention), but in the course True means may attend",
    misconception="mask-polarity",
    exercises=("multi_head_attention", "multi_head_attention_loop"),
)
NOT_TRANSPOSED = Mistake(
    "not-transposed",
    "the PyTorch weights were copied without transposing: PyTorch stores "
    "(d_out, d_in) and computes x @ W.T, the course stores (d_in, d_out): take .T",
    exercises=("params_from_torch",),
)
WRONG_ORDER = Mistake(
    "wrong-order",
    "in_proj_weight was split in the wrong order: its rows hold W_Q (0:D), then W_K (D:2D), then W_V (2D:3D)",
    exercises=("params_from_torch",),
)
WRONG_ORDER_BIAS = Mistake(
    "wrong-order-bias",
    "in_proj_bias was split in the wrong order: it holds b_q (0:D), then b_k (D:2D), then b_v (2D:3D)",
    exercises=("params_from_torch",),
)
SHARES_STATE = Mistake(
    "shares-state",
    "the result shares memory with the PyTorch state (w_in[:D].T and the like are views of it): "
    "training the course parameters in place changed the PyTorch weights; copy each array "
    "(np.array(...) or .copy())",
    exercises=("params_from_torch",),
)


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
    mask=None,
    *,
    scale_width=None,
    source="x_kv",
    mask_mode="head axis",
    columns="block",
    out_proj=True,
    drop=(),
    transpose=False,
    average=False,
):
    """(out, weights) of multi-head attention done wrong in one named way (vectorised, float64).
    Raises when the wrong way cannot even be computed (the variant then simply does not match)."""
    p = {n: np.asarray(a, np.float64) for n, a in params.items() if a is not None and n not in drop}
    if transpose:
        for name in ("w_q", "w_k", "w_v", "w_o"):
            p[name] = p[name].T
    hk = p["w_q"].shape[1]
    k_w = hk // n_heads
    if columns == "interleaved":  # head i gets columns i, i+H, i+2H, ...
        order = np.array([i + n_heads * j for i in range(n_heads) for j in range(k_w)])
        for name in ("w_q", "w_k", "w_v"):
            p[name] = p[name][:, order]
        for name in ("b_q", "b_k", "b_v"):
            if name in p:
                p[name] = p[name][order]
    x_q, x_kv = np.asarray(x_q, np.float64), np.asarray(x_kv, np.float64)
    sources = {"x_kv": (x_q, x_kv, x_kv), "self": (x_q, x_q, x_q), "swapped": (x_kv, x_q, x_q)}
    sources |= {"self keys": (x_q, x_q, x_kv), "self values": (x_q, x_kv, x_q)}
    src_q, src_k, src_v = sources[source]

    def project(x, w, b):
        y = x @ p[w] + p.get(b, 0.0)  # (B, N, D) -> (B, N, H*K)
        n_b, n, _ = y.shape
        return y.reshape(n_b, n, n_heads, k_w).transpose(0, 2, 1, 3)  # -> (B, H, N, K)

    q = project(src_q, "w_q", "b_q")
    k, v = project(src_k, "w_k", "b_k"), project(src_v, "w_v", "b_v")
    n_b, _, n_t, _ = q.shape
    n_s = k.shape[2]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(scale_width or k_w)  # (B, H, T, S)
    if mask is not None and mask_mode != "ignored":
        m = np.asarray(mask)
        if mask_mode == "no head axis":
            m4 = m  # broadcasts as it is against (B, H, T, S)
        elif mask_mode == "mask[:, None]":
            m4 = m[:, None]
        else:
            m4 = np.broadcast_to(m, (n_b, n_t, n_s))[:, None]
            if mask_mode == "flipped":
                m4 = ~m4
        scores = np.where(np.broadcast_to(m4, scores.shape), scores, -np.inf)
    weights = _softmax(scores)
    heads = weights @ v  # (B, H, T, K)
    concat = heads.transpose(0, 2, 1, 3).reshape(n_b, n_t, hk)  # (B, T, H*K)
    out = concat @ p["w_o"] + p.get("b_o", 0.0) if out_proj else concat
    if average:
        weights = weights.mean(axis=1)
    return out, weights


def mha_mistakes(x_q, x_kv, params, n_heads, mask=None, part=0):
    """Every named wrong answer for (out, weights)[part]."""
    args = (x_q, x_kv, params, n_heads, mask)

    def named(**how):
        return lambda: variant(*args, **how)[part]

    mistakes = {}
    if part == 1:
        mistakes[AVERAGED] = named(average=True)
    else:
        mistakes[NO_OUT_PROJ] = named(out_proj=False)
    mistakes[SELF_ONLY] = named(source="self")
    mistakes[SELF_KEYS] = named(source="self keys")
    mistakes[SELF_VALUES] = named(source="self values")
    mistakes[SWAPPED_SOURCES] = named(source="swapped")
    mistakes[SCALE_D] = named(scale_width=np.shape(x_q)[-1])
    if params["w_q"].shape[1] != np.shape(x_q)[-1]:
        mistakes[SCALE_HK] = named(scale_width=params["w_q"].shape[1])
    mistakes[INTERLEAVED] = named(columns="interleaved")
    mistakes[TRANSPOSED_W] = named(transpose=True)
    present = [name for name in BIASES if params.get(name) is not None]
    if len(present) > 1:
        mistakes[ALL_BIASES] = named(drop=BIASES)
    for name in present:
        mistakes[ONE_BIAS.format(name=name)] = named(drop=(name,))
    if mask is not None:
        mistakes[MASK_NO_HEAD_AXIS] = named(mask_mode="no head axis")
        if np.ndim(mask) == 2:
            mistakes[MASK_TS_AS_BTS] = named(mask_mode="mask[:, None]")
        mistakes[MASK_FLIPPED] = named(mask_mode="flipped")
        mistakes[MASK_IGNORED] = named(mask_mode="ignored")
    return mistakes


# ---------------------------------------------------------------- data and helpers
def make_params(r, d=D, n_heads=H, k=K, bias=True, dtype=np.float64, bias_scale=0.5):
    """Random course parameters; weights ~ N(0, 1.5/sqrt(d)) keep the softmax far from uniform."""
    hk = n_heads * k
    params = {
        "w_q": r.standard_normal((d, hk)) * 1.5 / math.sqrt(d),
        "w_k": r.standard_normal((d, hk)) * 1.5 / math.sqrt(d),
        "w_v": r.standard_normal((d, hk)) / math.sqrt(d),
        "w_o": r.standard_normal((hk, d)) / math.sqrt(hk),
    }
    if bias:
        params.update(
            b_q=r.standard_normal(hk) * bias_scale,
            b_k=r.standard_normal(hk) * bias_scale,
            b_v=r.standard_normal(hk) * bias_scale,
            b_o=r.standard_normal(d) * bias_scale,
        )
    return {name: a.astype(dtype) for name, a in params.items()}


def inputs(r, b=B, t=T, s=S, d=D, dtype=np.float64):
    """x_q (b, t, d) and x_kv (b, s, d)."""
    x_q = (r.standard_normal((b, t, d)) * 1.5).astype(dtype)
    return x_q, (r.standard_normal((b, s, d)) * 1.5).astype(dtype)


def random_mask(r, shape, fully_masked_row=False):
    """Booleans, True = may attend, about 60% True; never an empty row unless asked for."""
    mask = r.random(shape) < 0.6
    mask[..., 0] |= ~mask.any(axis=-1)
    if fully_masked_row and shape[-2] > 1:
        mask[..., -1, :] = False
    return mask


def pair(result, what):
    """The learner's (out, weights), or a failure that says what came back instead."""
    return check_tuple(result, what, ("out", "weights"))


def check_mha(result, x_q, x_kv, params, n_heads, mask=None, *, what, expected=None, dtype=None):
    """Compare the learner's (out, weights) with the oracle (or `expected`), weights first."""
    out, weights = pair(result, what)
    expected_out, expected_weights = expected or mha_loop(x_q, x_kv, params, n_heads, mask)
    dtype = dtype or np.asarray(x_q).dtype
    check_array(
        weights,
        expected_weights.astype(dtype),
        what=f"the weights of {what}",
        dims="B H T S",
        mistakes=mha_mistakes(x_q, x_kv, params, n_heads, mask, part=1),
    )
    check_array(
        out,
        expected_out.astype(dtype),
        what=f"the out of {what}",
        dims="B T D",
        mistakes=mha_mistakes(x_q, x_kv, params, n_heads, mask, part=0),
    )


def check_loop(out, x_q, x_kv, params, n_heads, mask=None, *, what, expected=None, dtype=None):
    """Compare the learner's out of the loop version with the oracle (or `expected`)."""
    if isinstance(out, (tuple, list)):
        raise AssertionError(
            f"{what} returned a {type(out).__name__} of {len(out)} items; the "
            "loop version returns out only, one (B, T, D) array."
        )
    if expected is None:
        expected = mha_loop(x_q, x_kv, params, n_heads, mask)[0]
    dtype = dtype or np.asarray(x_q).dtype
    check_array(
        out,
        expected.astype(dtype),
        what=what,
        dims="B T D",
        mistakes=mha_mistakes(x_q, x_kv, params, n_heads, mask, part=0),
    )


@cache
def recorded():
    """{case: dict of arrays} from the PyTorch fixture file (see tools/make_l06_fixtures.py)."""
    with np.load(FIXTURES, allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    cases = {}
    for name in arrays["cases"]:
        prefix = f"{name}__"
        cases[str(name)] = {
            key.removeprefix(prefix): value for key, value in arrays.items() if key.startswith(prefix)
        }
    return cases


def fixtures():
    """The recorded PyTorch cases, each in other numbers under an instructor's secret."""
    return {name: varied(name, case) for name, case in recorded().items()}


def varied(name, case):
    """A recorded case with its answer still exact. Under an instructor's secret: batch elements,
    queries, keys (with their values and mask columns), heads (across in_proj and out_proj) and
    input and output features reordered, the inputs scaled by a and in_proj by 1/a (the same
    projections), out_proj and its bias scaled by s (out scaled by s)."""
    v = variation(f"torch case {name}")
    (n_b, n_t, d), n_s, h = case["x_q"].shape, case["x_kv"].shape[1], int(case["n_heads"])
    batch, queries, heads = v.permutation(n_b), v.permutation(n_t), v.permutation(h)
    keys = queries if name == "self" else v.permutation(n_s)  # self-attention stays self-attention
    features_in, features_out = v.permutation(d), v.permutation(d)
    a, s = v.scale(), v.scale()
    k = d // h
    cols = np.concatenate([np.arange(i * k, (i + 1) * k) for i in heads])  # head blocks moved
    rows = np.concatenate([cols, d + cols, 2 * d + cols])  # the same in W_Q, W_K and W_V
    out = dict(case)
    out["in_proj_weight"] = case["in_proj_weight"][rows][:, features_in] / a
    out["out_proj.weight"] = case["out_proj.weight"][features_out][:, cols] * s
    if "in_proj_bias" in case:
        out["in_proj_bias"] = case["in_proj_bias"][rows]
    if "out_proj.bias" in case:
        out["out_proj.bias"] = case["out_proj.bias"][features_out] * s
    out["x_q"] = case["x_q"][batch][:, queries][..., features_in] * a
    out["x_kv"] = case["x_kv"][batch][:, keys][..., features_in] * a
    out["out"] = case["out"][batch][:, queries][..., features_out] * s
    out["weights"] = case["weights"][batch][:, heads][:, :, queries][..., keys]
    if "mask" in case:
        mask = case["mask"][batch] if case["mask"].ndim == 3 else case["mask"]
        mask = mask[..., queries, :] if mask.shape[-2] == n_t else mask
        out["mask"] = mask[..., keys]
    return out


TORCH_KEYS = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")


def torch_state(case):
    """The case's state_dict arrays, as PyTorch stores them."""
    return {key: case[key] for key in TORCH_KEYS if key in case}


def torch_to_course(state):
    """The conversion, done plainly: split in_proj in Q, K, V order, transpose every weight."""
    w_in = state["in_proj_weight"]
    d = w_in.shape[1]
    params = {
        "w_q": w_in[0:d].T,
        "w_k": w_in[d : 2 * d].T,
        "w_v": w_in[2 * d : 3 * d].T,
        "w_o": state["out_proj.weight"].T,
    }
    if "in_proj_bias" in state:
        b_in = state["in_proj_bias"]
        params.update(b_q=b_in[0:d], b_k=b_in[d : 2 * d], b_v=b_in[2 * d : 3 * d])
    if "out_proj.bias" in state:
        params["b_o"] = state["out_proj.bias"]
    return {name: np.ascontiguousarray(a) for name, a in params.items()}


def describe_case(name, case):
    b, t, d = case["x_q"].shape
    s = case["x_kv"].shape[1]
    h = int(case["n_heads"])
    kind = "self-attention" if name == "self" else "cross-attention"
    mask = f", mask {case['mask'].shape}" if "mask" in case else ""
    bias = "" if "in_proj_bias" in case else ", bias=False"
    return (
        f"the torch.nn.MultiheadAttention case '{name}' ({kind}, B={b}, T={t}, S={s}, D={d}, "
        f"H={h}{bias}{mask})"
    )


def hand_checked_case(name):
    """x_q, x_kv, params, out and weights of a case small enough to check by hand."""
    # D=3, H=2, K=1 (H*K = 2 need not equal D). Feature 0 is head 0's query/key, feature 1
    # head 1's, feature 2 the value of both heads.
    # Under an instructor's secret: the values scaled by s, b_o shifted by c, the two keys (with
    # their values) and the two heads (columns of w_q, w_k, w_v, rows of w_o) swapped.
    v = variation(name)
    s, c, keys, heads = v.scale(), v.shift(), v.permutation(2), v.permutation(2)
    x_q = np.array([[[1.0, 1.0, 0.0]]])  # (B=1, T=1, D=3)
    x_kv = np.array([[[0.0, 0.0, 4.0 * s], [math.log(3.0), 0.0, 8.0 * s]]])[:, keys]  # (B=1, S=2, D=3)
    params = {
        "w_q": np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])[:, heads],
        "w_k": np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])[:, heads],
        "w_v": np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])[:, heads],
        "w_o": np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])[heads],  # (H*K=2, D=3)
        "b_o": np.array([0.0, 0.0, 100.0]) + c,
    }
    # head 0: q = 1, keys [0, ln 3], scale 1/sqrt(1): weights [1/4, 3/4], values [4, 8] -> 7
    # head 1: q = 1, keys [0, 0]: weights [1/2, 1/2], values [4, 8] -> 6
    # Concat [7, 6] @ w_o = [7, 6, 6]; + b_o = [7, 6, 106]
    weights = np.array([[[[0.25, 0.75]], [[0.5, 0.5]]]])[:, heads][..., keys]  # (B=1, H=2, T=1, S=2)
    out = np.array([[[7.0 * s, 6.0 * s, 6.0 * s + 100.0]]]) + c
    return x_q, x_kv, params, out, weights


# ---------------------------------------------------------------- multi_head_attention
@exercise("multi_head_attention")
class TestMultiHeadAttention:
    def test_returns_out_b_t_d_and_one_weight_map_per_head_b_h_t_s(self, lesson):
        """returns out (B, T, D) and one weight map per head (B, H, T, S)"""
        r = rng(1)
        x_q, x_kv = inputs(r)
        params = make_params(r)
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention(x_q (2, 3, 24), x_kv (2, 5, 24), params, n_heads=4)",
        )

    @hand_checked
    def test_small_case_by_hand(self, lesson):
        """a small case checked by hand (D=3, H=2, K=1)"""
        x_q, x_kv, params, expected_out, expected_weights = hand_checked_case("multi_head_attention by hand")
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, 2),
            x_q,
            x_kv,
            params,
            2,
            what="multi_head_attention on the hand-checked case (D=3, H=2, K=1)",
            expected=(expected_out, expected_weights),
        )

    def test_matches_torch_multihead_attention(self, lesson):
        """matches torch.nn.MultiheadAttention on its saved cases"""
        for name, case in fixtures().items():
            params = torch_to_course(torch_state(case))
            h, mask = int(case["n_heads"]), case.get("mask")
            check_mha(
                lesson.multi_head_attention(case["x_q"], case["x_kv"], params, h, mask=mask),
                case["x_q"],
                case["x_kv"],
                params,
                h,
                mask,
                what=f"multi_head_attention on {describe_case(name, case)}",
                expected=(case["out"], case["weights"]),
            )

    def test_keys_and_values_come_from_x_kv(self, lesson):
        """keys and values come from x_kv (T=3 queries, S=7 keys)"""
        r = rng(2)
        x_q, x_kv = inputs(r, s=7)  # T = 3 queries, S = 7 keys
        params = make_params(r)
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention(x_q (2, 3, 24), x_kv (2, 7, 24), params, 4): "
            "cross-attention, T=3 queries and S=7 keys",
        )

    def test_scores_are_scaled_by_the_head_width(self, lesson):
        """scores are scaled by 1/sqrt(K), the head width, not 1/sqrt(D)"""
        r = rng(3)
        x_q, x_kv = inputs(r)
        for n_heads, k in ((4, 6), (2, 12)):  # D = 24 both times, the head width differs
            params = make_params(r, n_heads=n_heads, k=k, bias=False)
            check_mha(
                lesson.multi_head_attention(x_q, x_kv, params, n_heads),
                x_q,
                x_kv,
                params,
                n_heads,
                what=f"multi_head_attention(x_q, x_kv, params, n_heads={n_heads}) with D=24, K={k}",
            )

    def test_every_bias_is_added(self, lesson):
        """every bias b_q, b_k, b_v, b_o is added, each one on its own too"""
        r = rng(4)
        x_q, x_kv = inputs(r)
        params = make_params(r, bias_scale=2.0)
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention(x_q, x_kv, params, 4) with large biases b_q, b_k, b_v, b_o",
        )
        for name in BIASES:  # one bias at a time: each must reach the output
            only = {**make_params(r, bias=False), name: params[name]}
            check_mha(
                lesson.multi_head_attention(x_q, x_kv, only, H),
                x_q,
                x_kv,
                only,
                H,
                what=f"multi_head_attention(x_q, x_kv, params, 4) with {name} as the only bias",
            )

    def test_absent_or_none_biases_are_not_added(self, lesson):
        """absent or None biases are not added"""
        r = rng(5)
        x_q, x_kv = inputs(r)
        params = make_params(r, bias=False)
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention(x_q, x_kv, params, 4) with no b_* keys in params",
        )
        with_none = {**params, "b_q": None, "b_k": None, "b_v": None, "b_o": None}
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, with_none, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention(x_q, x_kv, params, 4) with b_q = b_k = b_v = b_o = None",
        )

    def test_a_b_t_s_mask_gets_a_head_axis(self, lesson):
        """a (B, T, S) mask gets a head axis"""
        r = rng(6)
        b, t, s, h, k = 3, 2, 5, 3, 4  # B == H: a mask without head axis gives wrong numbers
        x_q, x_kv = inputs(r, b=b, t=t, s=s, d=h * k)
        params = make_params(r, d=h * k, n_heads=h, k=k)
        mask = random_mask(r, (b, t, s))
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, h, mask=mask),
            x_q,
            x_kv,
            params,
            h,
            mask,
            what="multi_head_attention(x_q (3, 2, 12), x_kv (3, 5, 12), params, "
            "n_heads=3, mask (B, T, S) = (3, 2, 5)), B = H = 3",
        )
        x_q, x_kv = inputs(r)
        mask = random_mask(r, (B, T, S))
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params := make_params(r), H, mask=mask),
            x_q,
            x_kv,
            params,
            H,
            mask,
            what="multi_head_attention(x_q (2, 3, 24), x_kv (2, 5, 24), params, n_heads=4, "
            "mask (B, T, S) = (2, 3, 5))",
        )

    def test_a_t_s_mask_is_shared_by_every_batch_element(self, lesson):
        """a (T, S) mask is shared by every batch element"""
        r = rng(7)
        b, t, s, h, k = 2, 3, 5, 3, 4  # T == H: mask[:, None] on a (T, S) mask gives numbers
        x_q, x_kv = inputs(r, b=b, t=t, s=s, d=h * k)
        params = make_params(r, d=h * k, n_heads=h, k=k)
        mask = np.tril(np.ones((t, s), bool), k=s - t)  # causal, aligned bottom-right
        mask[0, :2] = False
        # Under an instructor's secret: the mask's key columns reordered.
        mask = mask[:, variation("causal (T, S) mask").permutation(s)]
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, h, mask=mask),
            x_q,
            x_kv,
            params,
            h,
            mask,
            what="multi_head_attention(x_q (2, 3, 12), x_kv (2, 5, 12), params, "
            "n_heads=3, mask (T, S) = (3, 5)), T = H = 3",
        )
        x_q, x_kv = inputs(r)
        mask = random_mask(r, (T, S))
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params := make_params(r), H, mask=mask),
            x_q,
            x_kv,
            params,
            H,
            mask,
            what="multi_head_attention(x_q (2, 3, 24), x_kv (2, 5, 24), params, n_heads=4, "
            "mask (T, S) = (3, 5))",
        )

    def test_a_padding_mask_b_1_s_hides_keys_per_batch_element(self, lesson):
        """a (B, 1, S) padding mask hides keys per batch element"""
        r = rng(8)
        x_q, x_kv = inputs(r)
        params = make_params(r)
        # Under an instructor's secret: another length than 2, the two batch elements swapped.
        v = variation("padding mask lengths")
        lengths = np.array([S, v.integers(1, S, 2)])[v.permutation(2)]
        mask = (np.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S), lengths 5, 2
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H, mask=mask),
            x_q,
            x_kv,
            params,
            H,
            mask,
            what="multi_head_attention(x_q, x_kv, params, 4, mask) with a (B, 1, S) "
            f"= (2, 1, 5) padding mask of lengths {lengths.tolist()}",
        )

    def test_a_fully_masked_query_gets_zero_weights_and_out_b_o(self, lesson):
        """a fully masked query gets zero weights (no NaN) and out = b_o"""
        r = rng(9)
        x_q, x_kv = inputs(r)
        params = make_params(r)
        mask = random_mask(r, (B, T, S), fully_masked_row=True)  # the last query sees nothing
        what = "multi_head_attention(x_q, x_kv, params, 4, mask) where query 2 may attend no key"
        out, weights = pair(lesson.multi_head_attention(x_q, x_kv, params, H, mask=mask), what)
        for name, array in (("weights", weights), ("out", out)):
            assert not (
                isinstance(array, np.ndarray) and array.dtype.kind == "f" and np.isnan(array).any()
            ), (
                f"the {name} of {what} contain NaN. A query that may attend no key gets all-zero "
                "weights in every head, so its merged heads are zero and its out is just b_o: "
                "lesson 3's attention does this when its own softmax returns zeros for an all "
                "-inf row."
            )
        check_mha((out, weights), x_q, x_kv, params, H, mask, what=what)

    def test_keeps_float32(self, lesson):
        """keeps float32: float32 inputs give float32 out and weights"""
        r = rng(10)
        x_q, x_kv = inputs(r, dtype=np.float32)
        params = make_params(r, dtype=np.float32)
        mask = random_mask(r, (B, T, S))
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, H, mask=mask),
            x_q,
            x_kv,
            params,
            H,
            mask,
            what="multi_head_attention(...) in float32",
        )

    def test_leaves_its_inputs_unchanged(self, lesson):
        """leaves x_q, x_kv, params and mask unchanged"""
        r = rng(11)
        x_q, x_kv = inputs(r)
        mask = random_mask(r, (B, T, S))
        lesson.multi_head_attention(x_q, x_kv, make_params(r), H, mask=mask)
        check_not_modified(lesson, "multi_head_attention(x_q, x_kv, params, n_heads, mask)")

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        s=st.integers(1, 5),
        d=st.integers(1, 6),
        h=st.integers(1, 4),
        k=st.integers(1, 3),
        bias=st.booleans(),
        mask_form=st.sampled_from([None, "T S", "B T S", "B 1 S"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_loop_for_any_sizes(self, lesson, b, t, s, d, h, k, bias, mask_form, seed):
        """matches the slow loop for any sizes, biases and mask forms"""
        r = rng(seed)
        x_q, x_kv = inputs(r, b=b, t=t, s=s, d=d)
        params = make_params(r, d=d, n_heads=h, k=k, bias=bias)
        shape = {"T S": (t, s), "B T S": (b, t, s), "B 1 S": (b, 1, s)}.get(mask_form)
        mask = None if shape is None else r.random(shape) < 0.6  # empty rows allowed
        check_mha(
            lesson.multi_head_attention(x_q, x_kv, params, h, mask=mask),
            x_q,
            x_kv,
            params,
            h,
            mask,
            what=f"multi_head_attention(x_q {x_q.shape}, x_kv {x_kv.shape}, params "
            f"(H*K = {h * k}{'' if bias else ', no biases'}), n_heads={h}, "
            f"mask {None if shape is None else shape})",
        )

    @given(h=st.integers(2, 4), seed=st.integers(0, 2**32 - 1))
    def test_reordering_the_heads_reorders_the_weights_and_keeps_out(self, lesson, h, seed):
        """reordering the heads reorders the weights and keeps out"""
        r = rng(seed)
        k = 2
        x_q, x_kv = inputs(r, d=5)
        params = make_params(r, d=5, n_heads=h, k=k)
        perm = r.permutation(h)
        cols = np.concatenate([np.arange(i * k, (i + 1) * k) for i in perm])  # head blocks moved
        moved = {
            "w_q": params["w_q"][:, cols],
            "w_k": params["w_k"][:, cols],
            "w_v": params["w_v"][:, cols],
            "w_o": params["w_o"][cols],
            "b_q": params["b_q"][cols],
            "b_k": params["b_k"][cols],
            "b_v": params["b_v"][cols],
            "b_o": params["b_o"],
        }
        what = f"multi_head_attention(x_q, x_kv, params, n_heads={h})"
        out, weights = pair(lesson.multi_head_attention(x_q, x_kv, params, h), what)
        out2, weights2 = pair(lesson.multi_head_attention(x_q, x_kv, moved, h), what)
        assert all(isinstance(a, np.ndarray) for a in (out, weights, out2, weights2)), (
            f"{what} must return two numpy arrays (out, weights)."
        )
        want = (x_q.shape[0], h, x_q.shape[1], x_kv.shape[1])
        assert weights.shape == weights2.shape == want, (
            f"the weights of {what} should have shape (B, H, T, S) = {want}, one attention map "
            f"per head; got {weights.shape}."
        )
        check_array(
            out2,
            out,
            what=f"out after reordering the heads by {perm.tolist()} (the "
            "head blocks of w_q, w_k, w_v, their biases and the rows of "
            "w_o moved together: the sum over heads must not change)",
            dims="B T D",
        )
        check_array(
            weights2,
            weights[:, perm],
            what=f"the weights after reordering the heads by "
            f"{perm.tolist()} (they should be the old maps in the new head order)",
            dims="B H T S",
        )


# ---------------------------------------------------------------- multi_head_attention_loop
@exercise("multi_head_attention_loop")
class TestMultiHeadAttentionLoop:
    def test_loop_returns_out_b_t_d(self, lesson):
        """the loop version returns out (B, T, D) only"""
        r = rng(20)
        x_q, x_kv = inputs(r)
        params = make_params(r)
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention_loop(x_q (2, 3, 24), x_kv (2, 5, 24), params, n_heads=4)",
        )

    @hand_checked
    def test_loop_small_case_by_hand(self, lesson):
        """a small case checked by hand (D=3, H=2, K=1)"""
        # The case of test_small_case_by_hand: heads [7] and [6], Concat [7, 6] @ w_o + b_o.
        x_q, x_kv, params, expected_out, _ = hand_checked_case("multi_head_attention_loop by hand")
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, params, 2),
            x_q,
            x_kv,
            params,
            2,
            what="multi_head_attention_loop on the hand-checked case (D=3, H=2, K=1)",
            expected=expected_out,
        )

    def test_loop_matches_torch_multihead_attention(self, lesson):
        """matches torch.nn.MultiheadAttention on its saved cases"""
        for name, case in fixtures().items():
            params = torch_to_course(torch_state(case))
            h, mask = int(case["n_heads"]), case.get("mask")
            check_loop(
                lesson.multi_head_attention_loop(case["x_q"], case["x_kv"], params, h, mask=mask),
                case["x_q"],
                case["x_kv"],
                params,
                h,
                mask,
                what=f"multi_head_attention_loop on {describe_case(name, case)}",
                expected=case["out"],
            )

    def test_head_i_owns_columns_i_k_to_i_plus_1_k(self, lesson):
        """head i owns columns i*K:(i+1)*K (H=4, K=6 and H=3, K=8)"""
        r = rng(21)
        x_q, x_kv = inputs(r, s=7)
        for n_heads, k in ((4, 6), (3, 8)):
            params = make_params(r, n_heads=n_heads, k=k)
            check_loop(
                lesson.multi_head_attention_loop(x_q, x_kv, params, n_heads),
                x_q,
                x_kv,
                params,
                n_heads,
                what=f"multi_head_attention_loop(x_q (2, 3, 24), x_kv "
                f"(2, 7, 24), params, n_heads={n_heads}), K={k}",
            )

    def test_loop_adds_every_bias_and_works_without(self, lesson):
        """adds every bias, and works with no b_* keys or None biases"""
        r = rng(22)
        x_q, x_kv = inputs(r)
        params = make_params(r, bias_scale=2.0)
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, params, H),
            x_q,
            x_kv,
            params,
            H,
            what="multi_head_attention_loop(x_q, x_kv, params, 4) with large biases",
        )
        plain = make_params(r, bias=False)
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, plain, H),
            x_q,
            x_kv,
            plain,
            H,
            what="multi_head_attention_loop(x_q, x_kv, params, 4) with no b_* keys",
        )
        with_none = {**plain, "b_q": None, "b_k": None, "b_v": None, "b_o": None}
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, with_none, H),
            x_q,
            x_kv,
            plain,
            H,
            what="multi_head_attention_loop(x_q, x_kv, params, 4) with biases None",
        )

    def test_loop_applies_every_mask_form(self, lesson):
        """applies every mask form: (T, S), (B, T, S) and (B, 1, S)"""
        r = rng(23)
        x_q, x_kv = inputs(r)
        params = make_params(r)
        for shape in ((T, S), (B, T, S), (B, 1, S)):
            mask = random_mask(r, shape, fully_masked_row=shape[-2] > 1)
            check_loop(
                lesson.multi_head_attention_loop(x_q, x_kv, params, H, mask=mask),
                x_q,
                x_kv,
                params,
                H,
                mask,
                what=f"multi_head_attention_loop(x_q, x_kv, params, 4, mask {shape})",
            )

    def test_loop_keeps_float32_and_its_inputs(self, lesson):
        """keeps float32 and leaves its inputs unchanged"""
        r = rng(24)
        x_q, x_kv = inputs(r, dtype=np.float32)
        params = make_params(r, dtype=np.float32)
        mask = random_mask(r, (B, T, S))
        out = lesson.multi_head_attention_loop(x_q, x_kv, params, H, mask=mask)
        check_not_modified(lesson, "multi_head_attention_loop(x_q, x_kv, params, n_heads, mask)")
        check_loop(out, x_q, x_kv, params, H, mask, what="multi_head_attention_loop(...) in float32")

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        s=st.integers(1, 5),
        d=st.integers(1, 6),
        h=st.integers(1, 4),
        k=st.integers(1, 3),
        bias=st.booleans(),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_loop_matches_the_oracle_for_any_sizes(self, lesson, b, t, s, d, h, k, bias, masked, seed):
        """matches the slow oracle for any sizes, with or without a mask"""
        r = rng(seed)
        x_q, x_kv = inputs(r, b=b, t=t, s=s, d=d)
        params = make_params(r, d=d, n_heads=h, k=k, bias=bias)
        mask = r.random((b, t, s)) < 0.6 if masked else None
        check_loop(
            lesson.multi_head_attention_loop(x_q, x_kv, params, h, mask=mask),
            x_q,
            x_kv,
            params,
            h,
            mask,
            what=f"multi_head_attention_loop(x_q {x_q.shape}, x_kv "
            f"{x_kv.shape}, params (H*K = {h * k}), n_heads={h}, "
            f"mask {None if mask is None else mask.shape})",
        )


# ---------------------------------------------------------------- params_from_torch
def params_mistakes(state, key):
    """Named wrong answers for one entry of the converted dict."""
    w_in = state["in_proj_weight"]
    d = w_in.shape[1]
    names = ("w_q", "w_k", "w_v")
    blocks = {"W_Q": w_in[0:d], "W_K": w_in[d : 2 * d], "W_V": w_in[2 * d : 3 * d]}
    mistakes = {}
    if key in names:
        right = ("W_Q", "W_K", "W_V")[names.index(key)]
        mistakes[NOT_TRANSPOSED] = blocks[right]
        for label, block in blocks.items():
            if label != right:
                mistakes[WRONG_ORDER.plus(f" ({key} holds the {label} block)")] = block.T
                mistakes[WRONG_ORDER.plus(f" ({key} holds the {label} block, not transposed either)")] = block
    elif key == "w_o":
        mistakes[NOT_TRANSPOSED] = state["out_proj.weight"]
    elif key in ("b_q", "b_k", "b_v") and "in_proj_bias" in state:
        b_in = state["in_proj_bias"]
        right = ("b_q", "b_k", "b_v").index(key)
        for j, label in enumerate(("b_q", "b_k", "b_v")):
            if j != right:
                mistakes[WRONG_ORDER_BIAS.plus(f" ({key} holds {label})")] = b_in[j * d : (j + 1) * d]
    return mistakes


def check_converted(result, state, *, what):
    """Compare the learner's dict with the plain conversion, entry by entry."""
    expected = torch_to_course(state)
    kind = getattr(result, "type_name", type(result).__name__)  # Opaque: the learner's type
    got = "None (is a `return` missing?)" if result is None else f"a {kind}"
    assert isinstance(result, dict), (
        f"{what} returned {got}; "
        "it must return a dict with the keys w_q, w_k, w_v, w_o (and b_q, b_k, b_v, b_o when the "
        "state has biases)."
    )
    missing = [key for key in expected if result.get(key) is None]
    assert not missing, f"{what} has no {', '.join(missing)}; expected the keys {', '.join(expected)}."
    extra = [key for key in BIASES if key not in expected and result.get(key) is not None]
    assert not extra, (
        f"{what} holds {', '.join(extra)}, but the state has no bias keys (the "
        "module was built with bias=False): leave the b_* entries out."
    )
    for key, value in expected.items():
        check_array(
            result[key],
            value,
            what=f"{what}['{key}']",
            dims="D HK" if key in ("w_q", "w_k", "w_v") else "HK D" if key == "w_o" else "D",
            mistakes=params_mistakes(state, key),
        )


@exercise("params_from_torch")
class TestParamsFromTorch:
    def test_params_from_torch_returns_the_course_dict(self, lesson):
        """returns the course dict w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o"""
        case = fixtures()["cross_batch_mask"]
        state = torch_state(case)
        result = lesson.params_from_torch(state, int(case["n_heads"]))
        check_converted(
            result, state, what="params_from_torch(state of MultiheadAttention(20, 4), n_heads=4)"
        )

    @hand_checked
    def test_params_from_torch_small_case_by_hand(self, lesson):
        """a small D=2 state checked by hand"""
        # Under an instructor's secret: every number scaled by s and shifted by c.
        v = variation("params_from_torch by hand")
        s, c = v.scale(), v.shift()
        state = {
            "in_proj_weight": np.arange(12.0).reshape(6, 2) * s + c,  # (3D, D), D = 2
            "in_proj_bias": np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) * s + c,
            "out_proj.weight": np.array([[1.0, 2.0], [3.0, 4.0]]) * s + c,
            "out_proj.bias": np.array([7.0, 8.0]) * s + c,
        }
        # rows 0:2 = [[0, 1], [2, 3]] are W_Q as PyTorch stores it: w_q = its .T = [[0, 2], [1, 3]]
        # rows 2:4 -> w_k = [[4, 6], [5, 7]]; rows 4:6 -> w_v = [[8, 10], [9, 11]]
        # w_o = [[1, 3], [2, 4]]; b_q = [1, 2], b_k = [3, 4], b_v = [5, 6], b_o = [7, 8]
        result = lesson.params_from_torch(state, 2)
        check_converted(result, state, what="params_from_torch(the hand-checked D=2 state, 2)")
        check_array(
            result["w_q"],
            np.array([[0.0, 2.0], [1.0, 3.0]]) * s + c,
            what="params_from_torch(the hand-checked D=2 state, 2)['w_q']",
            dims="D HK",
        )

    def test_each_course_weight_is_its_pytorch_block_transposed(self, lesson):
        """each course weight is its PyTorch block, transposed"""
        for name, case in fixtures().items():
            state = torch_state(case)
            check_converted(
                lesson.params_from_torch(state, int(case["n_heads"])),
                state,
                what=f"params_from_torch(state, n_heads) for {describe_case(name, case)}",
            )

    def test_a_state_without_biases_gives_no_biases(self, lesson):
        """a state without biases (bias=False) gives no b_* entries"""
        case = fixtures()["cross_no_bias_shared_mask"]
        state = torch_state(case)
        assert "in_proj_bias" not in state
        check_converted(
            lesson.params_from_torch(state, int(case["n_heads"])),
            state,
            what="params_from_torch(state of MultiheadAttention(10, 2, bias=False), 2)",
        )

    def test_converted_params_reproduce_torch_end_to_end(self, lesson):
        """converted params reproduce PyTorch's output end to end"""
        for name, case in fixtures().items():
            h = int(case["n_heads"])
            result = lesson.params_from_torch(torch_state(case), h)
            what = f"params_from_torch(state, {h}) for {describe_case(name, case)}"
            check_converted(result, torch_state(case), what=what)
            out, _ = mha_loop(case["x_q"], case["x_kv"], result, h, case.get("mask"))
            check_array(
                out,
                case["out"],
                what=f"multi-head attention (the grader's own) with the "
                f"params of {what}, compared with PyTorch's output",
                dims="B T D",
            )

    def test_params_from_torch_keeps_float32_and_the_state(self, lesson):
        """keeps float32 and leaves the state unchanged"""
        case = fixtures()["self"]
        state = {key: a.astype(np.float32) for key, a in torch_state(case).items()}
        result = lesson.params_from_torch(state, int(case["n_heads"]))
        check_not_modified(lesson, "params_from_torch(state, n_heads)")
        check_converted(result, state, what="params_from_torch(state, n_heads) in float32")

    def test_the_result_holds_copies_not_views_of_the_state(self, lesson):
        """the result holds copies, not views, of the state's arrays"""
        # "Copies, not views" cannot be seen in arrays that come back as bytes. The lesson's
        # given fine_tune_step converts and subtracts 0.5 from every course array in place, in
        # the same worker call: a view of the state makes the state change, which the grader
        # reads back from the input file it owns (lesson.mutated) and in the state returned.
        for name in ("self", "cross_no_bias_shared_mask"):
            case = fixtures()[name]
            state = torch_state(case)
            what = (
                f"fine_tune_step(state, {int(case['n_heads'])}) (your params_from_torch, then "
                "w -= 0.5 in place)"
            )
            result = lesson.fine_tune_step(state, int(case["n_heads"]))
            changed = [label.replace("argument 1", "state") for label in lesson.mutated]
            back = result[1] if isinstance(result, (tuple, list)) and len(result) == 2 else None
            if isinstance(back, dict) and not changed:
                changed = [
                    f"state[{key!r}]"
                    for key, value in state.items()
                    if key not in back or not np.array_equal(np.asarray(back[key]), value)
                ]
            if changed:
                raise KnownMistake(
                    f"{what} changed the state ({', '.join(changed)}).",
                    SHARES_STATE,
                )
            assert back is not None and isinstance(result[0], dict), (
                f"{what} did not return (params, state): fine_tune_step is given in the lesson "
                "file; restore it as it was."
            )
            # The step must have been taken in place, or a view would go unseen.
            for key, want in torch_to_course(state).items():
                got = result[0].get(key)
                if isinstance(got, np.ndarray) and got.shape == want.shape and np.allclose(got, want):
                    raise AssertionError(
                        f"{what}: {key} was not updated in place; fine_tune_step is given in the "
                        "lesson file, restore it as it was."
                    )

    @given(
        d_over_h=st.integers(1, 3), h=st.integers(1, 4), bias=st.booleans(), seed=st.integers(0, 2**32 - 1)
    )
    def test_params_from_torch_for_any_width(self, lesson, d_over_h, h, bias, seed):
        """params_from_torch works for any D and H, with or without biases"""
        r = rng(seed)
        d = d_over_h * h
        state = {
            "in_proj_weight": r.standard_normal((3 * d, d)),
            "out_proj.weight": r.standard_normal((d, d)),
        }
        if bias:
            state.update({"in_proj_bias": r.standard_normal(3 * d), "out_proj.bias": r.standard_normal(d)})
        check_converted(
            lesson.params_from_torch(state, h),
            state,
            what=f"params_from_torch(state of MultiheadAttention({d}, {h}"
            f"{'' if bias else ', bias=False'}), {h})",
        )
