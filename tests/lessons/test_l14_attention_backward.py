"""Grading tests for lesson 14 (l14_attention_backward): softmax_backward, attention_backward,
multi_head_attention_backward, grouped_query_attention_backward, head_mask_gradient.

Sizes are all different, so that a swapped axis or a missing transpose shows as a wrong shape or
wrong numbers: attention B=2, H=3, T=4, S=5, K=6, Kv=7; multi-head attention the same B, T, S,
H, K with D = H*K = 18; grouped-query attention B=4, T=5, S=7, G=3 key/value heads, H=6 query
heads (r = 2 per key/value head), K=2, D=12. A missing transpose fits the shapes only when two
sizes agree, so the checks named "T == S" use as many queries as keys on purpose: there
grad_scores @ q is (T, T) @ (T, K) and gives numbers, wrong ones.

The expected gradients come from the forward passes alone, written here as loops over the
batch, the heads and the queries (a softmax over the keys each query may see), and from central
differences in float64 of the scalar loss L = sum(grad_out * out): dL/dx[i] is
(L(x + eps e_i) - L(x - eps e_i)) / (2 eps) for every entry of every input, taken at eps = 2e-4
and 1e-4 and combined as (4 D(eps / 2) - D(eps)) / 3 so that their eps^2 errors cancel (what is
left, rounding included, is about 1e-10; the float64 checks allow ORACLE_ATOL = 1e-8 and a
relative 1e-6). The loops run on a stack of perturbed copies at once (the forward takes a leading
axis of copies), so that a gradient of 300 entries costs one pass, and the results are remembered.
softmax_backward's reference is the row's Jacobian, written out entry by entry, times
grad_weights (exact); head_mask_gradient's is the central difference in xi of lesson 11's masked
output, sequence by sequence (out is linear in xi: exact up to rounding).

The vectorised `attention_variant` and `layer_variant` compute the classic WRONG gradients (a
scale left out, a transpose missing, a sum not taken, a group summed by modulo, ...), only to name
a mistake when an answer matches one of them.
"""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
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

B, H, T, S, K, KV = 2, 3, 4, 5, 6, 7  # attention; multi-head attention with D = H*K
D = H * K  # 18
GB, GT, GS, G, GH, GK = 4, 5, 7, 3, 6, 2  # grouped-query attention: r = GH // G = 2
GD = GH * GK  # 12
EPS = 2e-4  # the central differences' larger step (the smaller is EPS / 2)
ORACLE_ATOL = 1e-8  # float64: the oracle errs by about 1e-10, rounding included
BIASES = ("b_q", "b_k", "b_v", "b_o")


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    "softmax_backward": {"weights": "T S", "grad_weights": "T S", "axis": ""},
    "attention_backward": {
        "q": "T K",
        "k": "S K",
        "v": "S Kv",
        "grad_out": "T Kv",
        "mask": "T S",
        "scale": "",
    },
    "multi_head_attention_backward": {
        "x_q": "B T D",
        "x_kv": "B S D",
        "params": "",
        "n_heads": "",
        "grad_out": "B T D",
        "mask": "T S",
    },
    "grouped_query_attention_backward": {
        "x_q": "B T D",
        "x_kv": "B S D",
        "params": "",
        "n_heads": "",
        "n_kv_heads": "",
        "grad_out": "B T D",
        "mask": "T S",
    },
    "head_mask_gradient": {
        "x_q": "B T D",
        "x_kv": "B S D",
        "params": "",
        "n_heads": "",
        "grad_out": "B T D",
        "mask": "T S",
    },
}


def shown(values):
    """Numbers as a test's text quotes them: [[1, 0.5], [-2, 0]], each with :g."""
    if np.ndim(values) == 0:
        return f"{float(values):g}"
    return "[" + ", ".join(shown(v) for v in values) + "]"


# ---------------------------------------------------------------- oracles (slow and obvious)
@remembered
def softmax_backward_loop(weights, grad_weights, axis=-1):
    """The scores' gradient row by row through the softmax's Jacobian, entry by entry:
    dscores_j = sum over s of grad_weights_s * dW_s/dscores_j, dW_s/dscores_j = W_s (delta_sj - W_j)."""
    w = np.moveaxis(np.asarray(weights, np.float64), axis, -1)
    g = np.moveaxis(np.asarray(grad_weights, np.float64), axis, -1)
    out = np.zeros(w.shape)
    n = w.shape[-1]
    for idx in np.ndindex(*w.shape[:-1]):
        row, grad = [float(x) for x in w[idx]], [float(x) for x in g[idx]]
        for j in range(n):
            out[idx + (j,)] = sum(grad[s] * row[s] * ((1.0 if s == j else 0.0) - row[j]) for s in range(n))
    return np.moveaxis(out, -1, axis)


def central_differences(loss, inputs, names, eps=EPS):
    """{name: dL/d inputs[name]} for each of ``names``, by central differences, every entry of one
    input at once: ``loss(**arrays)`` takes each input with one extra leading axis of copies (of
    size 1 for the inputs held fixed) and returns one loss per copy. For an input of N entries
    the copies step each entry up and down by eps and by eps / 2, and the two central differences
    are combined as (4 D(eps / 2) - D(eps)) / 3 (Richardson): their eps^2 errors cancel."""
    fixed = {name: np.asarray(a, np.float64)[None] for name, a in inputs.items()}
    grads = {}
    for name in names:
        x = np.asarray(inputs[name], np.float64)
        n = x.size
        unit = np.eye(n).reshape((n,) + x.shape)  # copy i: 1 at entry i
        steps = [x + unit * eps, x - unit * eps, x + unit * (eps / 2), x - unit * (eps / 2)]
        losses = loss(**{**fixed, name: np.concatenate(steps)}).reshape(4, n)  # (4, N)
        wide = (losses[0] - losses[1]) / (2 * eps)
        narrow = (losses[2] - losses[3]) / eps
        grads[name] = ((4 * narrow - wide) / 3).reshape(x.shape)
    return grads


def attention_forward(q, k, v, mask, scale):
    """Lesson 3's output for a stack of copies: q (P, ..., T, K), k (P, ..., S, K), v (P, ..., S, Kv)
    with P copies or 1 each; the leading axes broadcast with the mask's. One query at a time, a
    softmax over the keys it may see; a query that may see none gets zeros. (P, ..., T, Kv)."""
    n_t, n_s, n_v = q.shape[-2], k.shape[-2], v.shape[-1]
    shapes = [q.shape[1:-2], k.shape[1:-2], v.shape[1:-2]]
    lead = np.broadcast_shapes(*shapes, () if mask is None else np.shape(mask)[:-2])
    n_p = max(q.shape[0], k.shape[0], v.shape[0])

    def full(a):  # (P or 1, lead..., N, F) -> (P, lead..., N, F), a view
        a = a.reshape(a.shape[:1] + (1,) * (len(lead) + 3 - a.ndim) + a.shape[1:])
        return np.broadcast_to(a, (n_p,) + lead + a.shape[-2:])

    q, k, v = full(q), full(k), full(v)
    allowed = np.ones(lead + (n_t, n_s), bool) if mask is None else np.broadcast_to(mask, lead + (n_t, n_s))
    out = np.zeros((n_p,) + lead + (n_t, n_v))
    every = (slice(None),)
    for idx in np.ndindex(*lead):
        for t in range(n_t):
            keys = np.flatnonzero(allowed[idx + (t,)])
            if keys.size == 0:  # every key masked: zero weights, zero output
                continue
            query, seen, values = q[every + idx + (t,)], k[every + idx][:, keys], v[every + idx][:, keys]
            scores = scale * (query[:, None, :] * seen).sum(axis=-1)  # (P, keys)
            e = np.exp(scores - scores.max(axis=1, keepdims=True))
            weights = e / e.sum(axis=1, keepdims=True)
            out[every + idx + (t,)] = (weights[:, :, None] * values).sum(axis=1)  # (P, Kv)
    return out


@remembered
def attention_gradients(q, k, v, grad_out, mask=None, scale=None):
    """Oracle: (grad_q, grad_k, grad_v) of L = sum(grad_out * out) by central differences."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    grad_out = np.asarray(grad_out, np.float64)

    def loss(q, k, v):
        out = attention_forward(q, k, v, mask, scale)
        return (grad_out * out).reshape(len(out), -1).sum(axis=1)

    grads = central_differences(loss, {"q": q, "k": k, "v": v}, ("q", "k", "v"))
    return grads["q"], grads["k"], grads["v"]


def layer_forward(x_q, x_kv, p, n_heads, n_kv_heads, mask, head_factor):
    """Lesson 8's grouped-query attention (lesson 6's multi-head attention when G = H) for a stack
    of copies: every array has a leading axis of P copies or 1, p holds the parameters present.
    For each batch element b, query head h and query t, a softmax over the keys t may see with
    key/value head h // (H // G); head h's output times head_factor[:, h] (lesson 11's xi_h)
    before W_O. Returns (P, B, T, D)."""
    n_b, n_t = x_q.shape[1:3]
    n_s = x_kv.shape[2]
    n_k = p["w_q"].shape[-1] // n_heads
    group = n_heads // n_kv_heads
    arrays = [x_q, x_kv, head_factor, *p.values()]
    n_p = max(a.shape[0] for a in arrays)

    def project(x, w, b):  # (P, B, N, D) @ (P, D, F) + (P, F) -> (P, B, N, F)
        y = x @ w[:, None]
        return y if b is None else y + b[:, None, None]

    q = project(x_q, p["w_q"], p.get("b_q"))
    k = project(x_kv, p["w_k"], p.get("b_k"))
    v = project(x_kv, p["w_v"], p.get("b_v"))
    allowed = np.ones((n_b, n_t, n_s), bool) if mask is None else np.broadcast_to(mask, (n_b, n_t, n_s))
    concat = np.zeros((n_p, n_b, n_t, n_heads * n_k))
    for b in range(n_b):
        for h in range(n_heads):
            g = h // group  # the key/value head query head h reads
            qc, kc = slice(h * n_k, (h + 1) * n_k), slice(g * n_k, (g + 1) * n_k)
            for t in range(n_t):
                keys = np.flatnonzero(allowed[b, t])
                if keys.size == 0:  # every key masked: zero weights, zero head output
                    continue
                scores = (q[:, b, t, qc][:, None, :] * k[:, b][:, keys][:, :, kc]).sum(axis=-1)
                scores = scores / math.sqrt(n_k)  # (P, keys)
                e = np.exp(scores - scores.max(axis=1, keepdims=True))
                weights = e / e.sum(axis=1, keepdims=True)
                head = (weights[:, :, None] * v[:, b][:, keys][:, :, kc]).sum(axis=1)  # (P, K)
                concat[:, b, t, qc] = head_factor[:, h, None] * head
    return project(concat, p["w_o"], p.get("b_o"))


@remembered
def layer_gradients(x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask=None):
    """Oracle: (grad_x_q, grad_x_kv, grad_params) of L = sum(grad_out * out) by central
    differences; grad_params has the keys of params, None where params holds None."""
    present = [name for name, a in params.items() if a is not None]
    grad_out = np.asarray(grad_out, np.float64)

    def loss(x_q, x_kv, **p):
        out = layer_forward(x_q, x_kv, p, n_heads, n_kv_heads, mask, np.ones((1, n_heads)))
        return (grad_out * out).reshape(len(out), -1).sum(axis=1)

    inputs = {"x_q": x_q, "x_kv": x_kv, **{name: params[name] for name in present}}
    grads = central_differences(loss, inputs, list(inputs))
    return grads["x_q"], grads["x_kv"], {name: grads.get(name) for name in params}


@remembered
def head_mask_derivatives(x_q, x_kv, params, n_heads, grad_out, mask=None, eps=1e-3):
    """Oracle: (B, H), entry (b, h) the central difference in xi_h at xi = 1 of
    sum(grad_out[b] * out[b]), out lesson 11's output with head h's output times xi_h."""
    p = {name: np.asarray(a, np.float64)[None] for name, a in params.items() if a is not None}
    steps = np.eye(n_heads) * eps
    xi = np.concatenate([1.0 + steps, 1.0 - steps])  # (2H, H): copy h raises xi_h, copy H + h lowers it
    x_q, x_kv = np.asarray(x_q, np.float64)[None], np.asarray(x_kv, np.float64)[None]
    out = layer_forward(x_q, x_kv, p, n_heads, n_heads, mask, xi)  # (2H, B, T, D)
    per_sequence = (np.asarray(grad_out, np.float64) * out).sum(axis=(2, 3))  # (2H, B)
    return ((per_sequence[:n_heads] - per_sequence[n_heads:]) / (2 * eps)).T


# ---------------------------------------------------------------- named wrong answers
def swap(a):
    return np.swapaxes(a, -1, -2)


def safe_softmax(scores):
    """Softmax over the last axis, an all -inf row giving zeros (for the variants only)."""
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def reduced(grad, shape, how="sum"):
    """A gradient of the broadcast shape brought back to ``shape``: summed (right), averaged,
    the first copy kept, or left as it is."""
    if how == "none":
        return grad
    added = tuple(range(grad.ndim - len(shape)))
    pick = {"sum": np.sum, "mean": np.mean}.get(how)
    grad = pick(grad, axis=added) if pick else grad[(0,) * len(added)]
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if pick:
        return pick(grad, axis=stretched, keepdims=True)
    return grad[tuple(slice(0, 1) if i in stretched else slice(None) for i in range(grad.ndim))]


@remembered
def attention_variant(q, k, v, grad_out, mask=None, scale=None, how=()):
    """(grad_q, grad_k, grad_v) in float64, vectorised, with the rules named in ``how`` broken."""
    q, k, v, grad_out = (np.asarray(a, np.float64) for a in (q, k, v, grad_out))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None or "scale-default" in how else float(scale)
    if "scale-kv" in how:
        scale = 1.0 / math.sqrt(v.shape[-1])
    scores = q @ swap(k) * scale
    plain = safe_softmax(scores)
    weights = plain
    if mask is not None and "mask-ignored" not in how:
        fill = -1e9 if "minus-1e9" in how or "minus-1e9-remasked" in how else -np.inf
        weights = safe_softmax(np.where(mask, scores, fill))
    used = plain if "dv-unmasked" in how else weights
    grad_v = used @ grad_out if "dv-no-transpose" in how else swap(used) @ grad_out
    if "dv-scaled" in how:
        grad_v = grad_v * scale
    grad_weights = grad_out @ swap(v)
    if "no-sum-term" in how:
        grad_scores = weights * grad_weights
    else:
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(axis=-1, keepdims=True))
    if "minus-1e9-remasked" in how:
        grad_scores = np.where(mask, grad_scores, 0.0)  # the fill's gradient: only dv leaks
    grad_q = (swap(grad_scores) if "dq-transposed" in how else grad_scores) @ k
    grad_q = grad_q * (1.0 if "dq-no-scale" in how else scale)
    grad_k = (grad_scores if "dk-no-transpose" in how else swap(grad_scores)) @ q
    grad_k = grad_k * (1.0 if "dk-no-scale" in how else scale)
    reduce = next((r for r in ("none", "mean", "first") if f"reduce-{r}" in how), "sum")
    return tuple(reduced(g, x.shape, reduce) for g, x in ((grad_q, q), (grad_k, k), (grad_v, v)))


@remembered
def layer_variant(x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask=None, how=()):
    """(grad_x_q, grad_x_kv, grad_params) of grouped-query (G = H: multi-head) attention in
    float64, vectorised, with the rules named in ``how`` broken."""
    p = {name: np.asarray(a, np.float64) for name, a in params.items() if a is not None}
    x_q, x_kv, grad_out = (np.asarray(a, np.float64) for a in (x_q, x_kv, grad_out))
    n_b, n_t, _ = x_q.shape
    n_s = x_kv.shape[1]
    n_k = p["w_q"].shape[1] // n_heads
    group = n_heads // n_kv_heads
    heads_of = np.arange(n_heads) % n_kv_heads if "kv-tiled" in how else np.arange(n_heads) // group

    def split(y, n):  # (B, N, n*K) -> (B, n, N, K)
        return y.reshape(n_b, y.shape[1], n, n_k).transpose(0, 2, 1, 3)

    def merge(y):  # (B, n, N, K) -> (B, N, n*K)
        return y.transpose(0, 2, 1, 3).reshape(n_b, y.shape[2], -1)

    q = split(x_q @ p["w_q"] + p.get("b_q", 0.0), n_heads)
    k = split(x_kv @ p["w_k"] + p.get("b_k", 0.0), n_kv_heads)[:, heads_of]
    v = split(x_kv @ p["w_v"] + p.get("b_v", 0.0), n_kv_heads)[:, heads_of]
    full_mask = None if mask is None else np.broadcast_to(mask, (n_b, n_t, n_s))[:, None]
    weights = safe_softmax(
        np.where(True if full_mask is None else full_mask, q @ swap(k) / math.sqrt(n_k), -np.inf)
    )
    concat = merge(weights @ v)  # (B, T, H*K)
    grad_concat = grad_out if "skip-w-o" in how else grad_out @ p["w_o"].T
    grad_q, grad_k, grad_v = attention_variant(q, k, v, split(grad_concat, n_heads), full_mask)
    if "kv-first" in how:
        grad_k, grad_v = (g[:, ::group] for g in (grad_k, grad_v))
    elif "kv-mean" in how:
        grad_k, grad_v = (g.reshape(n_b, n_kv_heads, group, -1, n_k).mean(axis=2) for g in (grad_k, grad_v))
    elif "kv-modulo" in how or "kv-tiled" in how:
        grad_k, grad_v = (g.reshape(n_b, group, n_kv_heads, -1, n_k).sum(axis=1) for g in (grad_k, grad_v))
    else:
        grad_k, grad_v = (g.reshape(n_b, n_kv_heads, group, -1, n_k).sum(axis=2) for g in (grad_k, grad_v))
    grad_q, grad_k, grad_v = merge(grad_q), merge(grad_k), merge(grad_v)

    def weight(x, grad_y):
        if "weight-per-batch" in how:
            return np.einsum("bnd,bnf->bdf", x, grad_y)  # (B, d_in, d_out): not summed over B
        if "weight-transposed" in how:
            return np.einsum("bnd,bnf->fd", x, grad_y)  # grad_y^T @ x: (d_out, d_in)
        return np.einsum("bnd,bnf->df", x, grad_y)

    def bias(grad_y):
        for name, axes in (("bias-none", ()), ("bias-over-b", (0,)), ("bias-over-t", (1,))):
            if name in how:
                return grad_y.sum(axis=axes) if axes else grad_y
        return grad_y.mean(axis=(0, 1)) if "bias-mean" in how else grad_y.sum(axis=(0, 1))

    grads = {
        "w_o": weight(concat, grad_out),
        "b_o": bias(grad_out),
        "w_q": weight(x_q, grad_q),
        "w_k": weight(x_kv, grad_k),
        "w_v": weight(x_kv, grad_v),
        "b_q": bias(grad_q),
        "b_k": bias(grad_k),
        "b_v": bias(grad_v),
    }
    grad_x_q = grad_q @ p["w_q"].T
    grad_x_kv = (0.0 if "x-kv-v-only" in how else grad_k @ p["w_k"].T) + (
        0.0 if "x-kv-k-only" in how else grad_v @ p["w_v"].T
    )
    return grad_x_q, grad_x_kv, {name: None if params[name] is None else grads[name] for name in params}


@remembered
def head_mask_variant(x_q, x_kv, params, n_heads, grad_out, mask=None, how=()):
    """head_mask_gradient in float64, vectorised, with the rule named in ``how`` broken."""
    p = {name: np.asarray(a, np.float64) for name, a in params.items() if a is not None}
    x_q, x_kv, grad_out = (np.asarray(a, np.float64) for a in (x_q, x_kv, grad_out))
    n_b, n_t, n_d = x_q.shape
    n_s = x_kv.shape[1]
    n_k = p["w_q"].shape[1] // n_heads

    def split(y):
        return y.reshape(n_b, y.shape[1], n_heads, -1).transpose(0, 2, 1, 3)

    q = split(x_q @ p["w_q"] + p.get("b_q", 0.0))
    k = split(x_kv @ p["w_k"] + p.get("b_k", 0.0))
    v = split(x_kv @ p["w_v"] + p.get("b_v", 0.0))
    allowed = True if mask is None else np.broadcast_to(mask, (n_b, n_t, n_s))[:, None]
    heads = safe_softmax(np.where(allowed, q @ swap(k) / math.sqrt(n_k), -np.inf)) @ v  # (B, H, T, K)
    concat = heads.transpose(0, 2, 1, 3).reshape(n_b, n_t, -1)
    grad_concat = grad_out @ (p["w_o"] if "w-o-untransposed" in how else p["w_o"].T)  # (B, T, H*K)
    if "after-w-o" in how:  # xi_h on output features h*D/H:(h+1)*D/H
        return (split(concat @ p["w_o"]) * split(grad_out)).sum(axis=(2, 3))
    if "interleaved" in how:  # xi_h on the rows r of W_O with r % H == h
        per_row = (concat * grad_concat).sum(axis=1)  # (B, H*K)
        return per_row.reshape(n_b, n_k, n_heads).sum(axis=1)
    per_position = (heads * split(grad_concat)).sum(axis=3)  # (B, H, T)
    if "per-position" in how:
        return per_position
    per_sequence = per_position.sum(axis=2)  # (B, H)
    if "abs" in how:
        return np.abs(per_sequence)
    for name, total in (("batch-sum", per_sequence.sum(axis=0)), ("batch-mean", per_sequence.mean(axis=0))):
        if name in how:
            return np.broadcast_to(total, per_sequence.shape) if "rows" in how else total
    return per_sequence


# ---------------------------------------------------------------- classic mistakes, by name
NO_SUM_TERM = Mistake(
    "missing-sum-term",
    "the `- sum(grad_weights * weights)` term is missing: weights * grad_weights is only the "
    "diagonal of the softmax's Jacobian, but every weight of a row depends on every score of "
    "that row; subtract each row's dot product sum(grad_weights * weights, axis, keepdims=True) "
    "from grad_weights, then multiply by weights",
    misconception="softmax-jacobian-diagonal",
    exercises=("softmax_backward", "attention_backward"),
)
DIAGONAL_ONLY = Mistake(
    "jacobian-diagonal-only",
    "only the diagonal of the softmax's Jacobian was used, weights * (1 - weights) * "
    "grad_weights (the derivative of a sigmoid): the off-diagonal entries -W_s W_j count too, "
    "and together they give weights * (grad_weights - sum(grad_weights * weights, axis, "
    "keepdims=True))",
    misconception="softmax-jacobian-diagonal",
    exercises=("softmax_backward", "attention_backward"),
)
UNWEIGHTED_SUM = Mistake(
    "unweighted-sum",
    "each row's plain sum of grad_weights was subtracted: subtract the sum of grad_weights * "
    "weights (grad_weights averaged with the row's weights)",
    exercises=("softmax_backward", "attention_backward"),
)
NO_KEEPDIMS = Mistake(
    "sum-without-keepdims",
    "the row sums were taken without keepdims=True: the sums of (T, S) weights, shape (T,), then "
    "line up with the LAST axis (row t got the sums of other rows, one per column); keep the "
    "summed axis with size 1",
    exercises=("softmax_backward",),
)
WRONG_AXIS = Mistake(
    "sum-wrong-axis",
    "the row sums ran along axis {used} instead of axis={given}, the axis the softmax ran along",
    exercises=("softmax_backward",),
)
SUM_ALL = Mistake(
    "sum-over-everything",
    "sum(grad_weights * weights) was taken over the whole array: each row (each slice along "
    "axis) needs its own sum, with keepdims=True",
    exercises=("softmax_backward",),
)
PROMOTED = Mistake(
    "promoted",
    "float32 came back as float64: keep the inputs' dtype (a numpy float64 number such as "
    "1 / np.sqrt(K), or an array made without a dtype, promotes float32 arrays; use math.sqrt)",
    exercises=(
        "softmax_backward",
        "attention_backward",
        "multi_head_attention_backward",
        "grouped_query_attention_backward",
    ),
)
DQ_NO_SCALE = Mistake(
    "dq-without-scale",
    "grad_q lacks the scale: the scores are q @ k^T * scale, so grad_q = grad_scores @ k * scale",
    exercises=("attention_backward",),
)
DK_NO_SCALE = Mistake(
    "dk-without-scale",
    "grad_k lacks the scale: the scores are q @ k^T * scale, so grad_k = grad_scores^T @ q * scale",
    exercises=("attention_backward",),
)
NO_SCALE = Mistake.any_of(DQ_NO_SCALE, DK_NO_SCALE)
DV_SCALED = Mistake(
    "dv-scaled",
    "grad_v was multiplied by the scale: v never meets the scale, grad_v = weights^T @ grad_out",
    exercises=("attention_backward",),
)
DK_NO_TRANSPOSE = Mistake(
    "dk-without-transpose",
    "grad_k was computed as grad_scores @ q, without swapping the last two axes of grad_scores: "
    "key s gathers from every query t, a sum over T, the FIRST of grad_scores' two axes (with "
    "T == S the shapes fit and the numbers are wrong); grad_k = swapaxes(grad_scores, -1, -2) @ q "
    "* scale",
    exercises=("attention_backward",),
)
DQ_TRANSPOSED = Mistake(
    "dq-transposed",
    "grad_q was computed from grad_scores with its last two axes swapped: query t gathers over "
    "the keys s, the LAST axis of grad_scores; grad_q = grad_scores @ k * scale, no transpose",
    exercises=("attention_backward",),
)
DV_NO_TRANSPOSE = Mistake(
    "dv-without-transpose",
    "grad_v was computed as weights @ grad_out, without swapping the weights' last two axes: "
    "value s gathers from every query t; grad_v = swapaxes(weights, -1, -2) @ grad_out",
    exercises=("attention_backward",),
)
SCALE_KV = Mistake(
    "scale-from-kv",
    "the scale was 1/sqrt(Kv), Kv the width of v, instead of 1/sqrt(K), K = q.shape[-1]",
    exercises=("attention_backward",),
)
SCALE_IGNORED = Mistake(
    "scale-ignored",
    "the scale argument was ignored: the default 1/sqrt(K) was used instead of the scale passed in",
    exercises=("attention_backward",),
)
DV_UNMASKED = Mistake(
    "dv-unmasked-weights",
    "grad_v used the weights without the mask: the output was made from the masked weights, so "
    "grad_v = masked_weights^T @ grad_out, zero from every masked pair",
    exercises=("attention_backward",),
)
MASK_IGNORED = Mistake(
    "mask-ignored",
    "the mask was ignored: recompute the forward pass's weights with the mask",
    exercises=("attention_backward",),
)
MINUS_1E9 = Mistake(
    "fully-masked-uniform",
    "a fully masked query got uniform weights, as a -1e9 fill gives, instead of zeros, so keys "
    "got gradient from a query that may see none: recompute the weights with lesson 3's "
    "attention (-inf, then lesson 2's softmax), whose fully masked rows are all zero",
    misconception="minus-1e9",
    exercises=("attention_backward",),
)
NOT_SUMMED = Mistake(
    "broadcast-not-summed",
    "the gradient kept the broadcast shape: an input broadcast over leading axes is used once "
    "per copy, so its gradient is the SUM over the axes broadcasting added or stretched, "
    "brought back to the input's own shape",
    misconception="shared-input-gradient",
    exercises=("attention_backward",),
)
AVERAGED = Mistake(
    "broadcast-averaged",
    "the gradient was averaged over the broadcast axes: every copy contributes in full, so sum them",
    misconception="shared-input-gradient",
    exercises=("attention_backward",),
)
FIRST_COPY = Mistake(
    "broadcast-first-copy",
    "only the first copy's gradient was kept along the broadcast axes: every copy contributes, "
    "so sum over them",
    misconception="shared-input-gradient",
    exercises=("attention_backward",),
)
OUT_OF_ORDER = Mistake(
    "out-of-order",
    "the gradients are returned in the wrong order: return (grad_q, grad_k, grad_v)",
    exercises=("attention_backward",),
)
K_DOT_T = Mistake(
    "dot-t-on-batched",
    "`.T` was used on a batched array: it reverses EVERY axis, (B, H, T, S) -> (S, T, H, B); swap "
    "the last two axes with np.swapaxes(a, -1, -2)",
    exercises=("attention_backward",),
)
BIAS_NOT_SUMMED = Mistake(
    "bias-not-summed",
    "a bias's gradient was not summed over every position ({which}): the bias is added at every "
    "(b, t), so its gradient is the output gradient summed over B and T, one number per feature",
    misconception="shared-input-gradient",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
BIAS_AVERAGED = Mistake(
    "bias-averaged",
    "the bias gradients were averaged over the positions: each position adds its gradient in "
    "full, so sum over B and T",
    misconception="shared-input-gradient",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
WEIGHT_PER_BATCH = Mistake(
    "weight-not-summed",
    "a weight's gradient was not summed over the batch, (B, d_in, d_out): the weight serves every "
    "sequence, so sum x[b, t]^T grad_y[b, t] over b and t (view both as (B*T, .) rows)",
    misconception="shared-input-gradient",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
WEIGHT_TRANSPOSED = Mistake(
    "weight-gradient-transposed",
    "a weight's gradient came out transposed, grad_y^T @ x: a weight stored (d_in, d_out) gets "
    "x^T @ grad_y, (d_in, d_out) like the weight",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
W_O_SKIPPED = Mistake(
    "w-o-skipped",
    "the gradient skipped W_O on its way back: the heads reach out only through W_O, so the "
    "merged heads' gradient is grad_out @ w_o^T, not grad_out itself",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
X_KV_ONE_PATH = Mistake(
    "x-kv-one-path",
    "grad_x_kv holds only the {which} path: x_kv feeds the keys AND the values, so grad_x_kv = "
    "grad_k @ w_k^T + grad_v @ w_v^T",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
GROUP_NOT_SUMMED = Mistake(
    "kv-group-not-summed",
    "key/value head g's gradient is not the sum over its r = H // G query heads ({how}): each of "
    "them reads the head, so each adds its gradient",
    misconception="shared-input-gradient",
    exercises=("grouped_query_attention_backward",),
)
GROUP_MODULO = Mistake(
    "kv-group-by-modulo",
    "the query heads' gradients were summed by modulo (heads i with i % G == g, H*K viewed as "
    "(r, G, K)) instead of by group (heads g*r .. g*r + r - 1, i // r, H*K viewed as (G, r, K))",
    misconception="tiled-kv-heads",
    exercises=("grouped_query_attention_backward",),
)
KV_TILED = Mistake(
    "kv-heads-tiled",
    "the key/value heads were copied by tiling (query head i read key/value head i % G: np.tile's "
    "order 0, 1, 0, 1) and summed back the same way: query head i reads key/value head i // r, as "
    "in lesson 8 (np.repeat's 0, 0, 1, 1)",
    misconception="tiled-kv-heads",
    exercises=("grouped_query_attention_backward",),
)
NONE_ENTRY = Mistake(
    "none-entry",
    "grad_params must have exactly the keys of params, and an entry of params that is None gets None",
    exercises=("multi_head_attention_backward", "grouped_query_attention_backward"),
)
BATCH_LOSS = Mistake(
    "batch-loss",
    "the derivative was taken of the batch's {how} loss, not sequence by sequence: return (B, H), "
    "one derivative per sequence (Michel et al. take each sequence's |dL_b/dxi_h| before the "
    "mean, so that a head that helps some sequences and hurts others does not cancel out)",
    misconception="abs-after-mean",
    exercises=("head_mask_gradient",),
)
ABS_TAKEN = Mistake(
    "abs-taken",
    "the absolute value was taken: return the signed derivative dL_b/dxi_h (the importance takes "
    "|.| afterwards)",
    exercises=("head_mask_gradient",),
)
W_O_UNTRANSPOSED = Mistake(
    "w-o-not-transposed",
    "grad_out was multiplied by W_O, not by W_O transposed: out = concat @ W_O sends its gradient "
    "back as grad_out @ W_O^T, (B, T, D) @ (D, H*K) -> (B, T, H*K); with H*K == D both fit, so "
    "only the numbers show it",
    exercises=("head_mask_gradient",),
)
XI_AFTER_W_O = Mistake(
    "xi-after-w-o",
    "xi_h was applied after W_O, to output features h*D/H:(h+1)*D/H: after W_O every feature mixes "
    "all the heads; head h is the K features it hands to W_O (rows h*K:(h+1)*K of W_O)",
    misconception="head-mask-after-wo",
    exercises=("head_mask_gradient",),
)
INTERLEAVED_ROWS = Mistake(
    "interleaved-rows",
    "head h was given the rows r of W_O with r % H == h (every H-th): head h owns the contiguous "
    "rows h*K:(h+1)*K",
    misconception="interleaved-heads",
    exercises=("head_mask_gradient",),
)
PER_POSITION = Mistake(
    "per-position",
    "the derivative was not summed over the positions t: xi_h scales head h's output at every "
    "query, so dL_b/dxi_h sums over T (and K)",
    exercises=("head_mask_gradient",),
)
NOT_FLOAT64 = Mistake(
    "not-float64",
    "float32 came back: head_mask_gradient returns float64 whatever the inputs' dtype",
    exercises=("head_mask_gradient",),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code around
# the error (the grading plugin applies these to every check; testing.named_by_code): `.T` on a
# batched array, and the products that fit only when T == S: grad_k = grad_scores @ q,
# grad_v = weights @ grad_out, grad_q = swapaxes(grad_scores) @ k. The patterns ask for the
# product written directly on the line that assigns the gradient.
_SCORES = r"(ds|d_s|dscores|d_scores|grad_s|grad_scores)"
CODE_MISTAKES = {
    K_DOT_T: r"\.T\b",
    DK_NO_TRANSPOSE: rf"\b(dk|d_k|grad_k)\s*=\s*\(?\s*{_SCORES}\s*@\s*q\b",
    DV_NO_TRANSPOSE: r"\b(dv|d_v|grad_v)\s*=\s*\(?\s*(w|p|a|attn|probs|weights)\s*@\s*"
    r"(do|d_out|dout|grad_out)\b",
    DQ_TRANSPOSED: rf"\b(dq|d_q|grad_q)\s*=\s*\(?\s*np\.swapaxes\(\s*{_SCORES}\s*,\s*-1\s*,\s*-2\s*\)"
    r"\s*@\s*k\b",
}


# ---------------------------------------------------------------- data and checks
def tolerance(*arrays):
    """(rtol, atol) for gradients of these inputs against the float64 oracle: float32 precision
    when any input is float32 (a float64 answer from mixed inputs holds float32 steps)."""
    if any(np.asarray(a).dtype == np.float32 for a in arrays if a is not None):
        return 2e-4, 2e-5
    return 1e-6, ORACLE_ATOL


def make_params(r, d, n_heads, n_kv_heads, k, bias=True, spread=1.5, dtype=np.float64):
    """Random parameters: w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D), biases b_q (H*K,),
    b_k and b_v (G*K,), b_o (D,). Scores of size about ``spread``: weights far from uniform."""
    s = 1.0 / math.sqrt(d)
    params = {
        "w_q": r.standard_normal((d, n_heads * k)) * s * spread,
        "w_k": r.standard_normal((d, n_kv_heads * k)) * s * spread,
        "w_v": r.standard_normal((d, n_kv_heads * k)) * s,
        "w_o": r.standard_normal((n_heads * k, d)) * s,
    }
    if bias:
        params.update(
            b_q=r.standard_normal(n_heads * k) * 0.5,
            b_k=r.standard_normal(n_kv_heads * k) * 0.5,
            b_v=r.standard_normal(n_kv_heads * k) * 0.5,
            b_o=r.standard_normal(d) * 0.5,
        )
    return {name: a.astype(dtype) for name, a in params.items()}


def random_mask(r, shape, fully_masked=True):
    """Random booleans (about 70% True); with ``fully_masked`` the last query row of every
    (T, S) block sees no key and key 0 is seen by every other query."""
    mask = r.random(shape) < 0.7
    if fully_masked and shape[-2] > 1:
        mask[..., :-1, 0] = True
        mask[..., -1, :] = False
    return mask


def causal(n):
    """(n, n): query i may see keys 0 .. i."""
    return np.array([[j <= i for j in range(n)] for i in range(n)])


# ---------------------------------------------------------------- softmax_backward
def softmax_mistakes(weights, grad_weights, axis):
    w, g = np.asarray(weights, np.float64), np.asarray(grad_weights, np.float64)
    mistakes = {
        NO_SUM_TERM: lambda: w * g,
        DIAGONAL_ONLY: lambda: w * (1.0 - w) * g,
        UNWEIGHTED_SUM: lambda: w * (g - g.sum(axis=axis, keepdims=True)),
        NO_KEEPDIMS: lambda: w * (g - (g * w).sum(axis=axis)),
        SUM_ALL: lambda: w * (g - (g * w).sum()),
    }
    for other in range(w.ndim):
        if other != axis % w.ndim:
            used = other - w.ndim if axis < 0 else other
            mistakes[WRONG_AXIS.format(used=used, given=axis)] = lambda other=other: (
                w * (g - (g * w).sum(axis=other, keepdims=True))
            )
    return mistakes


def check_softmax(actual, weights, grad_weights, axis=-1, *, what, dims):
    dtype = np.result_type(weights, grad_weights)
    expected = softmax_backward_loop(weights, grad_weights, axis)
    mistakes = softmax_mistakes(weights, grad_weights, axis)
    if dtype == np.float32:
        mistakes[PROMOTED] = expected
    rtol, atol = tolerance(weights, grad_weights)
    check_array(actual, expected.astype(dtype), what=what, dims=dims, rtol=rtol, atol=atol, mistakes=mistakes)


def softmax_of(r, shape, axis=-1, masked=False, sharp=2.0):
    """Weights: the softmax along ``axis`` of random scores; with ``masked`` some scores are
    -inf and the first row along the other axes is masked entirely (all-zero weights)."""
    scores = r.standard_normal(shape) * sharp
    if masked:
        blocked = r.random(shape) < 0.3
        moved = np.moveaxis(blocked, axis, -1)
        moved[(0,) * (len(shape) - 1)] = True  # one row sees nothing
        scores = np.where(blocked, -np.inf, scores)
    return np.moveaxis(safe_softmax(np.moveaxis(scores, axis, -1)), -1, axis)


@exercise("softmax_backward")
class TestSoftmaxBackward:
    def test_the_scores_gradient_has_the_shape_of_the_weights(self, lesson):
        """the scores' gradient has the weights' shape (B, H, T, S)"""
        r = rng(1)
        weights = softmax_of(r, (B, H, T, S))
        grad_weights = r.standard_normal((B, H, T, S))
        check_softmax(
            lesson.softmax_backward(weights, grad_weights),
            weights,
            grad_weights,
            what="softmax_backward(weights (B, H, T, S) = (2, 3, 4, 5), grad_weights (B, H, T, S))",
            dims="B H T S",
        )

    @hand_checked
    def test_three_rows_by_hand(self, lesson):
        """three rows by hand: [0.5, 0.25, 0.25], [0.5, 0.5, 0] and a row of zeros"""
        # Row 1: sum(g * w) = 0.5, so w * (g - 0.5) = [0.25, -0.125, -0.125].
        # Row 2: sum(g * w) = 3, so w * (g - 3) = [-0.5, 0.5, 0].
        # Row 3: all-zero weights (a fully masked query): all-zero gradient.
        # Under an instructor's secret: rows and columns reordered, grad_weights scaled by s
        # (the answer too) and shifted by c (the answer does not change: the weights of a row
        # sum to 1, so the term - sum(g * w) takes a constant back out).
        v = variation("softmax by hand")
        s, c = v.scale(), v.shift()
        rows, cols = v.permutation(3), v.permutation(3)
        weights = np.array([[0.5, 0.25, 0.25], [0.5, 0.5, 0.0], [0.0, 0.0, 0.0]])[rows][:, cols]
        grad_weights = (np.array([[1.0, 0.0, 0.0], [2.0, 4.0, 8.0], [1.0, 2.0, 3.0]]) * s + c)[rows][:, cols]
        expected = np.array([[0.25, -0.125, -0.125], [-0.5, 0.5, 0.0], [0.0, 0.0, 0.0]])[rows][:, cols] * s
        check_array(
            lesson.softmax_backward(weights, grad_weights),
            expected,
            what=f"softmax_backward(weights={shown(weights)}, grad_weights={shown(grad_weights)})",
            dims="T S",
            mistakes=softmax_mistakes(weights, grad_weights, -1),
        )

    def test_matches_the_jacobian_along_any_axis(self, lesson):
        """axis=0 and axis=-2: the rows run along the axis given"""
        r = rng(2)
        for axis in (0, -2):
            weights = softmax_of(r, (T, S, KV), axis)
            grad_weights = r.standard_normal((T, S, KV))
            check_softmax(
                lesson.softmax_backward(weights, grad_weights, axis),
                weights,
                grad_weights,
                axis,
                what=f"softmax_backward(weights (T, S, Kv) = (4, 5, 7), grad_weights, axis={axis}) "
                f"(the weights sum to 1 along axis {axis})",
                dims="T S Kv",
            )

    def test_masked_entries_and_fully_masked_rows_get_zeros(self, lesson):
        """zero weights (masked keys, a fully masked row) get a zero gradient"""
        r = rng(3)
        weights = softmax_of(r, (B, T, S), masked=True)
        grad_weights = r.standard_normal((B, T, S))
        check_softmax(
            lesson.softmax_backward(weights, grad_weights),
            weights,
            grad_weights,
            what="softmax_backward(weights (B, T, S) with zeros where masked and row [0, 0] all "
            "zero, grad_weights)",
            dims="B T S",
        )

    def test_matches_central_differences_of_the_softmax(self, lesson):
        """matches central differences of sum(grad_weights * softmax(scores))"""
        r = rng(4)
        scores = r.standard_normal((B, T, S)) * 2.0
        grad_weights = r.standard_normal((B, T, S))
        weights = safe_softmax(scores)

        def loss(z):  # (P, B, T, S) -> (P,)
            return (grad_weights * safe_softmax(z)).reshape(len(z), -1).sum(axis=1)

        expected = central_differences(loss, {"z": scores}, ("z",))["z"]
        check_array(
            lesson.softmax_backward(weights, grad_weights),
            expected,
            what="softmax_backward(softmax(scores) (B, T, S), grad_weights) against the central "
            "differences of sum(grad_weights * softmax(scores)) in the scores",
            dims="B T S",
            atol=ORACLE_ATOL,
            mistakes=softmax_mistakes(weights, grad_weights, -1),
        )

    def test_float32_stays_float32_and_the_inputs_are_left_unchanged(self, lesson):
        """float32 stays float32, mixed dtypes follow np.result_type, inputs unchanged"""
        r = rng(5)
        weights = softmax_of(r, (T, S)).astype(np.float32)
        grad_weights = r.standard_normal((T, S)).astype(np.float32)
        what = "softmax_backward(weights float32 (T, S), grad_weights float32)"
        result = lesson.softmax_backward(weights, grad_weights)
        check_not_modified(lesson, what)
        check_softmax(result, weights, grad_weights, what=what, dims="T S")
        grad64 = grad_weights.astype(np.float64)
        check_softmax(
            lesson.softmax_backward(weights, grad64),
            weights,
            grad64,
            what="softmax_backward(weights float32 (T, S), grad_weights float64): float64, as "
            "np.result_type(float32, float64)",
            dims="T S",
        )

    @given(
        shape=st.lists(st.integers(1, 4), min_size=2, max_size=3),
        axis=st.integers(-2, 1),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_jacobian_for_any_shape_and_axis(self, lesson, shape, axis, masked, seed):
        """matches the Jacobian row by row for any shape and axis"""
        r = rng(seed)
        ndim = len(shape)
        weights = softmax_of(r, tuple(shape), axis, masked=masked)
        grad_weights = r.standard_normal(shape)
        check_softmax(
            lesson.softmax_backward(weights, grad_weights, axis),
            weights,
            grad_weights,
            axis,
            what=f"softmax_backward(weights {tuple(shape)}, grad_weights, axis={axis})",
            dims=" ".join(f"n{i}" for i in range(ndim)),
        )


# ---------------------------------------------------------------- attention_backward
GRAD_NAMES = ("grad_q", "grad_k", "grad_v")


def attention_mistakes(q, k, v, grad_out, mask, scale, i):
    """Named wrong answers for gradient ``i`` (0 grad_q, 1 grad_k, 2 grad_v), computed on failure."""

    def named(*how):
        return lambda: attention_variant(q, k, v, grad_out, mask, scale, how)[i]

    mistakes = {
        NO_SUM_TERM: named("no-sum-term"),
        DQ_NO_SCALE: named("dq-no-scale"),
        DK_NO_SCALE: named("dk-no-scale"),
        DV_SCALED: named("dv-scaled"),
        DK_NO_TRANSPOSE: named("dk-no-transpose"),
        DQ_TRANSPOSED: named("dq-transposed"),
        DV_NO_TRANSPOSE: named("dv-no-transpose"),
        SCALE_KV: named("scale-kv"),
        NOT_SUMMED: named("reduce-none"),
        AVERAGED: named("reduce-mean"),
        FIRST_COPY: named("reduce-first"),
    }
    if scale is not None:
        mistakes[SCALE_IGNORED] = named("scale-default")
    if mask is not None:
        mistakes[DV_UNMASKED] = named("dv-unmasked")
        if i < 2:  # for grad_v ignoring the mask and unmasked weights in grad_v look the same
            mistakes[MASK_IGNORED] = named("mask-ignored")
        mistakes[MINUS_1E9] = named("minus-1e9")
        mistakes[MINUS_1E9.plus(" (here grad_v took it from the uniform row's weights)")] = named(
            "minus-1e9-remasked"
        )
    for j in range(3):
        if j != i:
            mistakes[OUT_OF_ORDER.plus(f" ({GRAD_NAMES[j]} came back in the place of {GRAD_NAMES[i]})")] = (
                lambda j=j: attention_gradients(q, k, v, grad_out, mask, scale)[j]
            )
    return mistakes


def check_attention(result, q, k, v, grad_out, mask=None, scale=None, *, what, dims):
    """(grad_q, grad_k, grad_v) against the central differences, in that order; ``dims`` the
    letters of q, k and v."""
    dtype = np.result_type(q, k, v, grad_out)
    rtol, atol = tolerance(q, k, v, grad_out)
    grads = check_tuple(result, what, GRAD_NAMES)
    expected = attention_gradients(q, k, v, grad_out, mask, scale)
    for i, name in enumerate(GRAD_NAMES):
        mistakes = attention_mistakes(q, k, v, grad_out, mask, scale, i)
        if dtype == np.float32:
            mistakes[PROMOTED] = expected[i]
        check_array(
            grads[i],
            expected[i].astype(dtype),
            what=f"{name} of {what}",
            dims=dims[i],
            rtol=rtol,
            atol=atol,
            mistakes=mistakes,
        )


def call_attention(lesson, q, k, v, grad_out, mask=None, scale=None):
    kwargs = {} if mask is None else {"mask": mask}
    if scale is not None:
        kwargs["scale"] = scale
    return lesson.attention_backward(q, k, v, grad_out, **kwargs)


def attention_inputs(r, lead=(B, H), t=T, s=S, k=K, kv=KV, dtype=np.float64, sharp=1.5):
    """q (lead, T, K) with scores of size about ``sharp``, k (lead, S, K), v (lead, S, Kv), and
    grad_out (lead, T, Kv)."""
    q = r.standard_normal(lead + (t, k)) * sharp
    return tuple(
        a.astype(dtype)
        for a in (
            q,
            r.standard_normal(lead + (s, k)),
            r.standard_normal(lead + (s, kv)),
            r.standard_normal(lead + (t, kv)),
        )
    )


SHAPES = ("B H T K", "B H S K", "B H S Kv")


@exercise("attention_backward")
class TestAttentionBackward:
    def test_the_gradients_have_the_shapes_of_q_k_and_v(self, lesson):
        """grad_q (B, H, T, K), grad_k (B, H, S, K), grad_v (B, H, S, Kv)"""
        q, k, v, grad_out = attention_inputs(rng(10))
        check_attention(
            call_attention(lesson, q, k, v, grad_out),
            q,
            k,
            v,
            grad_out,
            what="attention_backward(q (B, H, T, K) = (2, 3, 4, 6), k (B, H, S, K) = (2, 3, 5, 6), "
            "v (B, H, S, Kv) = (2, 3, 5, 7), grad_out (B, H, T, Kv))",
            dims=SHAPES,
        )

    @hand_checked
    def test_one_query_and_two_keys_by_hand(self, lesson):
        """one query, two keys of equal score, by hand"""
        # q = [2, 0, 0, 0], keys [1, 1, 0, 0] and [1, 3, 0, 0]: both scores 0.5 * 2 = 1 (K = 4,
        # scale 1/2), weights [0.5, 0.5], out = 0.5 (v_0 + v_1).
        # grad_v = weights^T grad_out: each value row gets 0.5 * grad_out = [0.5, 1.5, 0].
        # grad_weights = grad_out . v_s = [17, 19], their weighted mean 18, so
        # grad_scores = 0.5 * ([17, 19] - 18) = [-0.5, 0.5];
        # grad_q = 0.5 * (-0.5 k_0 + 0.5 k_1) = [0, 0.5, 0, 0];
        # grad_k = 0.5 * grad_scores^T q = [[-0.5, 0, 0, 0], [0.5, 0, 0, 0]].
        # Under an instructor's secret: grad_out scaled by s (every gradient too), v shifted by c
        # (nothing changes: the softmax ignores a constant added to a row of grad_weights), the
        # two keys swapped, the columns of q and k reordered, those of v and grad_out too.
        var = variation("attention by hand")
        s, c = var.scale(), var.shift()
        keys, cols, vcols = var.permutation(2), var.permutation(4), var.permutation(3)
        q = np.array([[2.0, 0.0, 0.0, 0.0]])[:, cols]
        k = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 3.0, 0.0, 0.0]])[keys][:, cols]
        v = (np.array([[2.0, 5.0, -1.0], [4.0, 5.0, 1.0]]) + c)[keys][:, vcols]
        grad_out = np.array([[1.0, 3.0, 0.0]])[:, vcols] * s
        expected = (
            np.array([[0.0, 0.5, 0.0, 0.0]])[:, cols] * s,
            np.array([[-0.5, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])[keys][:, cols] * s,
            np.array([[0.5, 1.5, 0.0], [0.5, 1.5, 0.0]])[keys][:, vcols] * s,
        )
        what = f"attention_backward(q={shown(q)}, k={shown(k)}, v={shown(v)}, grad_out={shown(grad_out)})"
        grads = check_tuple(call_attention(lesson, q, k, v, grad_out), what, GRAD_NAMES)
        for i, name in enumerate(GRAD_NAMES):
            check_array(
                grads[i],
                expected[i],
                what=f"{name} of {what}",
                dims=("T K", "S K", "S Kv")[i],
                mistakes=attention_mistakes(q, k, v, grad_out, None, None, i),
            )

    def test_self_attention_sizes_t_equals_s(self, lesson):
        """T == S (self-attention): a missing transpose fits the shapes, not the numbers"""
        q, k, v, grad_out = attention_inputs(rng(11), t=S)
        check_attention(
            call_attention(lesson, q, k, v, grad_out),
            q,
            k,
            v,
            grad_out,
            what="attention_backward(q (B, H, T, K) = (2, 3, 5, 6), k (B, H, S, K) = (2, 3, 5, 6), "
            "v (B, H, S, Kv) = (2, 3, 5, 7), grad_out) with T == S = 5",
            dims=("B H T K", "B H S K", "B H S Kv"),
        )

    def test_a_scale_passed_in_is_used(self, lesson):
        """a scale passed in (0.3) is used for grad_q and grad_k"""
        q, k, v, grad_out = attention_inputs(rng(12))
        check_attention(
            call_attention(lesson, q, k, v, grad_out, scale=0.3),
            q,
            k,
            v,
            grad_out,
            scale=0.3,
            what="attention_backward(q (B, H, T, K), k, v, grad_out, scale=0.3)",
            dims=SHAPES,
        )

    def test_a_causal_mask_with_t_equals_s(self, lesson):
        """a causal (T, S) mask, T == S: masked pairs pass no gradient"""
        q, k, v, grad_out = attention_inputs(rng(13), t=S)
        mask = causal(S)
        check_attention(
            call_attention(lesson, q, k, v, grad_out, mask),
            q,
            k,
            v,
            grad_out,
            mask,
            what="attention_backward(q (B, H, T, K) = (2, 3, 5, 6), k, v, grad_out, mask=causal (T, S) "
            "= (5, 5))",
            dims=SHAPES,
        )

    def test_fully_masked_queries_give_no_gradient(self, lesson):
        """a fully masked query gives no gradient at all (zeros, not uniform weights)"""
        r = rng(14)
        q, k, v, grad_out = attention_inputs(r)
        mask = random_mask(r, (B, 1, T, S))  # query T-1 sees no key
        check_attention(
            call_attention(lesson, q, k, v, grad_out, mask),
            q,
            k,
            v,
            grad_out,
            mask,
            what=f"attention_backward(q (B, H, T, K), k, v, grad_out, mask (B, 1, T, S) in which query "
            f"{T - 1} sees no key)",
            dims=SHAPES,
        )

    def test_broadcast_inputs_get_the_sum_of_their_copies_gradients(self, lesson):
        """k (B, 1, S, K) and v (S, Kv) shared by the heads: their gradients are sums"""
        r = rng(15)
        q, _, _, grad_out = attention_inputs(r)
        k = r.standard_normal((B, 1, S, K))
        v = r.standard_normal((S, KV))
        check_attention(
            call_attention(lesson, q, k, v, grad_out),
            q,
            k,
            v,
            grad_out,
            what="attention_backward(q (B, H, T, K) = (2, 3, 4, 6), k (B, 1, S, K) = (2, 1, 5, 6), "
            "v (S, Kv) = (5, 7), grad_out (B, H, T, Kv))",
            dims=("B H T K", "B 1 S K", "S Kv"),
        )

    def test_a_mask_with_a_batch_axis_broadcasts_q_k_and_v(self, lesson):
        """q (T, K), k (S, K), v (S, Kv) with a (B, T, S) mask: every gradient summed over B"""
        r = rng(16)
        q, k, v, _ = attention_inputs(r, lead=())
        mask = random_mask(r, (B, T, S), fully_masked=False)
        grad_out = r.standard_normal((B, T, KV))
        check_attention(
            call_attention(lesson, q, k, v, grad_out, mask),
            q,
            k,
            v,
            grad_out,
            mask,
            what="attention_backward(q (T, K) = (4, 6), k (S, K) = (5, 6), v (S, Kv) = (5, 7), "
            "grad_out (B, T, Kv) = (2, 4, 7), mask (B, T, S))",
            dims=("T K", "S K", "S Kv"),
        )

    def test_float32_stays_float32_and_the_inputs_are_left_unchanged(self, lesson):
        """float32 stays float32, a float64 grad_out gives float64, inputs unchanged"""
        r = rng(17)
        q, k, v, grad_out = attention_inputs(r, dtype=np.float32)
        mask = random_mask(r, (T, S))
        what = "attention_backward(q, k, v, grad_out float32, mask (T, S))"
        result = call_attention(lesson, q, k, v, grad_out, mask)
        check_not_modified(lesson, what)
        check_attention(result, q, k, v, grad_out, mask, what=what, dims=SHAPES)
        grad64 = grad_out.astype(np.float64)
        check_attention(
            call_attention(lesson, q, k, v, grad64, mask),
            q,
            k,
            v,
            grad64,
            mask,
            what="attention_backward(q, k, v float32, grad_out float64, mask (T, S)): float64, as "
            "np.result_type gives",
            dims=SHAPES,
        )

    @given(
        b=st.integers(1, 2),
        h=st.integers(1, 2),
        t=st.integers(1, 3),
        s=st.integers(1, 3),
        k=st.integers(1, 3),
        kv=st.integers(1, 3),
        forms=st.tuples(*[st.sampled_from(["full", "shared", "plain"])] * 3),
        mask_form=st.sampled_from([None, "T S", "B 1 T S"]),
        scale=st.sampled_from([None, 0.7]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(
        self, lesson, b, h, t, s, k, kv, forms, mask_form, scale, seed
    ):
        """matches central differences for any sizes, broadcasting, mask and scale"""
        r = rng(seed)
        lead = {"full": (b, h), "shared": (b, 1), "plain": ()}
        q = r.standard_normal(lead[forms[0]] + (t, k)) * 1.5
        k_ = r.standard_normal(lead[forms[1]] + (s, k))
        v = r.standard_normal(lead[forms[2]] + (s, kv))
        mask = None
        if mask_form == "T S":
            mask = r.random((t, s)) < 0.7
        elif mask_form == "B 1 T S":
            mask = r.random((b, 1, t, s)) < 0.7
        out_lead = np.broadcast_shapes(
            q.shape[:-2], k_.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2]
        )
        grad_out = r.standard_normal(out_lead + (t, kv))
        letters = {"full": "B H ", "shared": "B 1 ", "plain": ""}
        check_attention(
            call_attention(lesson, q, k_, v, grad_out, mask, scale),
            q,
            k_,
            v,
            grad_out,
            mask,
            scale,
            what=f"attention_backward(q {q.shape}, k {k_.shape}, v {v.shape}, grad_out {grad_out.shape}, "
            f"mask {None if mask is None else mask.shape}, scale={scale})",
            dims=tuple(letters[f] + tail for f, tail in zip(forms, ("T K", "S K", "S Kv"), strict=True)),
        )


# ---------------------------------------------------------------- the layers' backward passes
def param_letters(name, gqa):
    kv = "G*K" if gqa else "H*K"
    return {
        "w_q": "D H*K",
        "w_k": f"D {kv}",
        "w_v": f"D {kv}",
        "w_o": "H*K D",
        "b_q": "H*K",
        "b_k": kv,
        "b_v": kv,
        "b_o": "D",
    }[name]


# The order of the checks: the backward pass's own order (the output projection first), so that
# the first gradient that is wrong is the one where the mistake happens.
CHECK_ORDER = ("b_o", "w_o", "w_v", "b_v", "w_k", "b_k", "w_q", "b_q")


def layer_mistakes(args, pick, gqa):
    """Named wrong answers for the gradient ``pick`` takes from (grad_x_q, grad_x_kv, grad_params)."""

    def named(*how):
        return lambda: pick(layer_variant(*args, how=how))

    mistakes = {
        W_O_SKIPPED: named("skip-w-o"),
        WEIGHT_PER_BATCH: named("weight-per-batch"),
        WEIGHT_TRANSPOSED: named("weight-transposed"),
        BIAS_NOT_SUMMED.format(which="it was summed over B only"): named("bias-over-b"),
        BIAS_NOT_SUMMED.format(which="it was summed over T only"): named("bias-over-t"),
        BIAS_NOT_SUMMED.format(which="it kept every position, (B, T, n)"): named("bias-none"),
        BIAS_AVERAGED: named("bias-mean"),
        X_KV_ONE_PATH.format(which="key"): named("x-kv-k-only"),
        X_KV_ONE_PATH.format(which="value"): named("x-kv-v-only"),
    }
    if gqa:
        mistakes[GROUP_NOT_SUMMED.format(how="only the first query head of each group was kept")] = named(
            "kv-first"
        )
        mistakes[GROUP_NOT_SUMMED.format(how="they were averaged")] = named("kv-mean")
        mistakes[GROUP_MODULO] = named("kv-modulo")
        mistakes[KV_TILED] = named("kv-tiled")
    return mistakes


def check_grad_params(grad_params, params, what):
    """grad_params is a dict with exactly the keys of params, None where params holds None."""
    if not isinstance(grad_params, dict):
        raise AssertionError(
            f"grad_params of {what} is {type(grad_params).__name__}; expected a dict with the keys "
            f"of params ({', '.join(params)})."
        )
    missing = [name for name in params if name not in grad_params]
    extra = [name for name in grad_params if name not in params]
    if missing or extra:
        raise KnownMistake(
            f"grad_params of {what} has the keys {sorted(grad_params)}; expected those of params, "
            f"{sorted(params)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + (f" (not in params: {', '.join(extra)})" if extra else "")
            + ".",
            NONE_ENTRY,
        )
    for name, value in params.items():
        if value is None and grad_params[name] is not None:
            raise KnownMistake(
                f"grad_params['{name}'] of {what} is {type(grad_params[name]).__name__}; params['{name}'] "
                "is None, so its gradient must be None.",
                NONE_ENTRY,
            )
        if value is not None and grad_params[name] is None:
            raise AssertionError(
                f"grad_params['{name}'] of {what} is None; params['{name}'] is an array of shape "
                f"{np.shape(value)}: return its gradient, of the same shape."
            )


def check_layer(result, x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask=None, *, what, gqa):
    """(grad_x_q, grad_x_kv, grad_params) against the central differences: grad_params first,
    in the order the backward pass makes them, then the inputs."""
    present = [a for a in params.values() if a is not None]
    dtype = np.result_type(x_q, x_kv, grad_out, *present)
    rtol, atol = tolerance(x_q, x_kv, grad_out, *present)
    grad_x_q, grad_x_kv, grad_params = check_tuple(result, what, ("grad_x_q", "grad_x_kv", "grad_params"))
    check_grad_params(grad_params, params, what)
    args = (x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask)
    exp_x_q, exp_x_kv, exp_params = layer_gradients(*args)
    checks = [
        (
            f"grad_params['{name}']",
            grad_params[name],
            exp_params[name],
            param_letters(name, gqa),
            lambda g, n=name: g[2][n],
        )
        for name in CHECK_ORDER
        if params.get(name) is not None
    ]
    checks += [
        ("grad_x_q", grad_x_q, exp_x_q, "B T D", lambda g: g[0]),
        ("grad_x_kv", grad_x_kv, exp_x_kv, "B S D", lambda g: g[1]),
    ]
    for name, actual, expected, letters, pick in checks:
        mistakes = layer_mistakes(args, pick, gqa)
        if dtype == np.float32:
            mistakes[PROMOTED] = expected
        check_array(
            actual,
            expected.astype(dtype),
            what=f"{name} of {what}",
            dims=letters,
            rtol=rtol,
            atol=atol,
            mistakes=mistakes,
        )


def mha_inputs(r, b=B, t=T, s=S, n_heads=H, k=K, bias=True, dtype=np.float64, self_attention=False):
    d = n_heads * k
    params = make_params(r, d, n_heads, n_heads, k, bias=bias, dtype=dtype)
    x_q = r.standard_normal((b, t, d)).astype(dtype)
    x_kv = x_q if self_attention else r.standard_normal((b, s, d)).astype(dtype)
    return x_q, x_kv, params, r.standard_normal((b, t, d)).astype(dtype)


def call_mha(lesson, x_q, x_kv, params, n_heads, grad_out, mask=None):
    kwargs = {} if mask is None else {"mask": mask}
    return lesson.multi_head_attention_backward(x_q, x_kv, params, n_heads, grad_out, **kwargs)


@exercise("multi_head_attention_backward")
class TestMultiHeadAttentionBackward:
    def test_every_gradient_has_the_shape_of_its_array(self, lesson):
        """grad_x_q (B, T, D), grad_x_kv (B, S, D), grad_params shaped like params"""
        x_q, x_kv, params, grad_out = mha_inputs(rng(20))
        check_layer(
            call_mha(lesson, x_q, x_kv, params, H, grad_out),
            x_q,
            x_kv,
            params,
            H,
            H,
            grad_out,
            what="multi_head_attention_backward(x_q (B, T, D) = (2, 4, 18), x_kv (B, S, D) = (2, 5, 18), "
            "params with biases, n_heads=3, grad_out (B, T, D))",
            gqa=False,
        )

    @hand_checked
    def test_b_o_sums_every_position_and_b_k_gets_nothing_by_hand(self, lesson):
        """grad_out = s everywhere: grad b_o = B*T*s = 8s, grad b_k = 0, by hand"""
        # b_o is added at each of the B*T = 8 positions, so its gradient is grad_out summed over
        # them: 8s in every feature. b_k adds the same vector to every key, which adds one
        # constant to each row of scores; the softmax ignores it, so its gradient is 0 (up to
        # rounding). Under an instructor's secret: another s.
        r = rng(21)
        x_q, x_kv, params, _ = mha_inputs(r)
        s = 0.5 * variation("b_o by hand").scale()
        grad_out = np.full((B, T, D), s)
        what = f"multi_head_attention_backward(x_q, x_kv, params, 3, grad_out = {s:g} everywhere (B, T, D))"
        result = call_mha(lesson, x_q, x_kv, params, H, grad_out)
        _, _, grad_params = check_tuple(result, what, ("grad_x_q", "grad_x_kv", "grad_params"))
        check_grad_params(grad_params, params, what)
        args = (x_q, x_kv, params, H, H, grad_out, None)
        check_array(
            grad_params["b_o"],
            np.full(D, B * T * s),
            what=f"grad_params['b_o'] of {what} (every feature: B*T*{s:g} = {B * T * s:g})",
            dims="D",
            mistakes=layer_mistakes(args, lambda g: g[2]["b_o"], False),
        )
        check_array(
            grad_params["b_k"],
            np.zeros(D),
            what=f"grad_params['b_k'] of {what} (0: the softmax ignores a constant added to a row of scores)",
            dims="H*K",
            atol=ORACLE_ATOL,
        )
        check_layer(result, *args, what=what, gqa=False)

    def test_self_attention_with_a_causal_mask(self, lesson):
        """self-attention (x_q is x_kv, T == S) with a causal mask"""
        x, _, params, grad_out = mha_inputs(rng(22), t=S, self_attention=True)
        mask = causal(S)
        check_layer(
            call_mha(lesson, x, x, params, H, grad_out, mask),
            x,
            x,
            params,
            H,
            H,
            grad_out,
            mask,
            what="multi_head_attention_backward(x (B, T, D) = (2, 5, 18), x, params, 3, grad_out, "
            "mask=causal (5, 5)): the caller adds grad_x_q and grad_x_kv, each is checked alone",
            gqa=False,
        )

    def test_a_mask_with_a_fully_masked_query(self, lesson):
        """a (B, T, S) mask in which a query sees no key"""
        r = rng(23)
        x_q, x_kv, params, grad_out = mha_inputs(r)
        mask = random_mask(r, (B, T, S))
        check_layer(
            call_mha(lesson, x_q, x_kv, params, H, grad_out, mask),
            x_q,
            x_kv,
            params,
            H,
            H,
            grad_out,
            mask,
            what=f"multi_head_attention_backward(x_q, x_kv, params, 3, grad_out, mask (B, T, S) in which "
            f"query {T - 1} sees no key)",
            gqa=False,
        )

    def test_absent_and_none_biases(self, lesson):
        """b_q None (its gradient None), b_k and b_v absent (no gradient), B=3, H=2 heads"""
        r = rng(24)
        x_q, x_kv, params, grad_out = mha_inputs(r, b=3, n_heads=2, k=4, bias=True)
        params = {name: params[name] for name in ("w_q", "w_k", "w_v", "w_o", "b_o")} | {"b_q": None}
        mask = random_mask(r, (3, 1, S), fully_masked=False)
        check_layer(
            call_mha(lesson, x_q, x_kv, params, 2, grad_out, mask),
            x_q,
            x_kv,
            params,
            2,
            2,
            grad_out,
            mask,
            what="multi_head_attention_backward(x_q (3, 4, 8), x_kv (3, 5, 8), params with b_q=None and "
            "no b_k, b_v, n_heads=2, grad_out, mask (B, 1, S))",
            gqa=False,
        )

    def test_float32_stays_float32_and_the_inputs_are_left_unchanged(self, lesson):
        """float32 stays float32 and the inputs are left unchanged"""
        r = rng(25)
        x_q, x_kv, params, grad_out = mha_inputs(r, dtype=np.float32)
        what = "multi_head_attention_backward(x_q, x_kv, params, 3, grad_out, all float32)"
        result = call_mha(lesson, x_q, x_kv, params, H, grad_out)
        check_not_modified(lesson, what)
        check_layer(result, x_q, x_kv, params, H, H, grad_out, what=what, gqa=False)

    @given(
        b=st.integers(1, 2),
        t=st.integers(1, 3),
        s=st.integers(1, 3),
        n_heads=st.integers(1, 3),
        k=st.integers(1, 2),
        bias=st.booleans(),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(self, lesson, b, t, s, n_heads, k, bias, masked, seed):
        """matches central differences for any sizes, biases and mask"""
        r = rng(seed)
        x_q, x_kv, params, grad_out = mha_inputs(r, b, t, s, n_heads, k, bias)
        mask = r.random((t, s)) < 0.7 if masked else None
        check_layer(
            call_mha(lesson, x_q, x_kv, params, n_heads, grad_out, mask),
            x_q,
            x_kv,
            params,
            n_heads,
            n_heads,
            grad_out,
            mask,
            what=f"multi_head_attention_backward(x_q {x_q.shape}, x_kv {x_kv.shape}, params "
            f"{'with' if bias else 'without'} biases, {n_heads}, grad_out, mask "
            f"{None if mask is None else mask.shape})",
            gqa=False,
        )


def gqa_inputs(r, b=GB, t=GT, s=GS, n_heads=GH, n_kv_heads=G, k=GK, bias=True, dtype=np.float64):
    d = n_heads * k
    params = make_params(r, d, n_heads, n_kv_heads, k, bias=bias, dtype=dtype)
    x_q = r.standard_normal((b, t, d)).astype(dtype)
    x_kv = r.standard_normal((b, s, d)).astype(dtype)
    return x_q, x_kv, params, r.standard_normal((b, t, d)).astype(dtype)


def call_gqa(lesson, x_q, x_kv, params, n_heads, n_kv_heads, grad_out, mask=None):
    kwargs = {} if mask is None else {"mask": mask}
    return lesson.grouped_query_attention_backward(x_q, x_kv, params, n_heads, n_kv_heads, grad_out, **kwargs)


# (H, G) with G not dividing H: the first is the public case; an instructor's secret picks another.
NOT_DIVIDING = ((6, 4), (4, 3), (6, 5), (8, 3), (9, 6))


@exercise("grouped_query_attention_backward")
class TestGroupedQueryAttentionBackward:
    def test_every_gradient_has_the_shape_of_its_array(self, lesson):
        """grad_params['w_k'] and ['w_v'] are (D, G*K), like w_k and w_v"""
        x_q, x_kv, params, grad_out = gqa_inputs(rng(30))
        check_layer(
            call_gqa(lesson, x_q, x_kv, params, GH, G, grad_out),
            x_q,
            x_kv,
            params,
            GH,
            G,
            grad_out,
            what="grouped_query_attention_backward(x_q (B, T, D) = (4, 5, 12), x_kv (B, S, D) = "
            "(4, 7, 12), params (w_k, w_v (D, G*K) = (12, 6)), n_heads=6, n_kv_heads=3, grad_out)",
            gqa=True,
        )

    @hand_checked
    def test_a_key_value_head_sums_its_query_heads_by_hand(self, lesson):
        """uniform weights, W_O = I: grad b_v = r*B*T*s = 40s, by hand"""
        # W_Q = W_K = 0: every score is b_q . b_k, each row the same, every weight 1/S. W_O = I
        # and grad_out = s everywhere: every head's output gets gradient s in each entry, so each
        # value row gets T * s / S from each query head that reads it, r = 2 of them, and b_v,
        # added to the S rows of the B sequences, gets B * S * 2 * T * s / S = 2 * 4 * 5 * s.
        # Under an instructor's secret: another s.
        r = rng(31)
        x_q, x_kv, params, _ = gqa_inputs(r)
        s = 0.5 * variation("gqa by hand").scale()
        params = {**params, "w_q": np.zeros((GD, GD)), "w_k": np.zeros((GD, G * GK)), "w_o": np.eye(GD)}
        grad_out = np.full((GB, GT, GD), s)
        n_rep = GH // G
        what = (
            "grouped_query_attention_backward(x_q, x_kv, params with w_q = w_k = 0 and w_o = I, 6, 3, "
            f"grad_out = {s:g} everywhere)"
        )
        result = call_gqa(lesson, x_q, x_kv, params, GH, G, grad_out)
        _, _, grad_params = check_tuple(result, what, ("grad_x_q", "grad_x_kv", "grad_params"))
        check_grad_params(grad_params, params, what)
        args = (x_q, x_kv, params, GH, G, grad_out, None)
        check_array(
            grad_params["b_v"],
            np.full(G * GK, n_rep * GB * GT * s),
            what=f"grad_params['b_v'] of {what} (every entry: r*B*T*{s:g} = {n_rep * GB * GT * s:g}, "
            "the sum over the r = 2 query heads of each key/value head)",
            dims="G*K",
            mistakes=layer_mistakes(args, lambda g: g[2]["b_v"], True),
        )
        check_layer(result, *args, what=what, gqa=True)

    def test_a_causal_mask_with_t_equals_s(self, lesson):
        """self-attention sizes (T == S) with a causal mask"""
        r = rng(32)
        x_q, x_kv, params, grad_out = gqa_inputs(r, s=GT)
        mask = causal(GT)
        check_layer(
            call_gqa(lesson, x_q, x_kv, params, GH, G, grad_out, mask),
            x_q,
            x_kv,
            params,
            GH,
            G,
            grad_out,
            mask,
            what="grouped_query_attention_backward(x_q (4, 5, 12), x_kv (4, 5, 12), params, 6, 3, "
            "grad_out, mask=causal (5, 5))",
            gqa=True,
        )

    def test_multi_query_and_multi_head_attention(self, lesson):
        """G = 1 (every query head shares one key/value head) and G = H (multi-head attention)"""
        r = rng(33)
        for n_kv in (1, GH):
            x_q, x_kv, params, grad_out = gqa_inputs(r, n_kv_heads=n_kv)
            mask = random_mask(r, (GB, GT, GS))
            check_layer(
                call_gqa(lesson, x_q, x_kv, params, GH, n_kv, grad_out, mask),
                x_q,
                x_kv,
                params,
                GH,
                n_kv,
                grad_out,
                mask,
                what=f"grouped_query_attention_backward(x_q, x_kv, params, 6, n_kv_heads={n_kv}, grad_out, "
                "mask (B, T, S) with a fully masked query)",
                gqa=True,
            )

    def test_absent_and_none_biases(self, lesson):
        """b_k None (its gradient None), b_q and b_v absent, B=6, G=2 of H=4 heads"""
        r = rng(34)
        x_q, x_kv, params, grad_out = gqa_inputs(r, b=6, n_heads=4, n_kv_heads=2, k=3)
        params = {name: params[name] for name in ("w_q", "w_k", "w_v", "w_o", "b_o")} | {"b_k": None}
        check_layer(
            call_gqa(lesson, x_q, x_kv, params, 4, 2, grad_out),
            x_q,
            x_kv,
            params,
            4,
            2,
            grad_out,
            what="grouped_query_attention_backward(x_q (6, 5, 12), x_kv (6, 7, 12), params with b_k=None "
            "and no b_q, b_v, n_heads=4, n_kv_heads=2, grad_out)",
            gqa=True,
        )

    def test_n_kv_heads_must_divide_n_heads(self, lesson):
        """n_kv_heads that does not divide n_heads raises ValueError"""
        # Under an instructor's secret: another pair.
        n_heads, n_kv = variation("gqa not divisible").pick(NOT_DIVIDING)
        r = rng(35)
        d = 2 * n_heads
        params = {
            "w_q": r.standard_normal((d, d)),
            "w_k": r.standard_normal((d, 2 * n_kv)),
            "w_v": r.standard_normal((d, 2 * n_kv)),
            "w_o": r.standard_normal((d, d)),
        }
        x = r.standard_normal((1, 3, d))
        what = (
            f"grouped_query_attention_backward(x, x, params, n_heads={n_heads}, n_kv_heads={n_kv}, grad_out)"
        )
        try:
            lesson.grouped_query_attention_backward(x, x, params, n_heads, n_kv, r.standard_normal((1, 3, d)))
        except LearnerError as error:
            if "ValueError" not in str(error):
                raise AssertionError(f"{what} must raise ValueError, but it raised:\n{error}") from None
            return
        raise AssertionError(
            f"{what} returned a result, but {n_kv} key/value heads cannot serve {n_heads} query heads "
            "equally: it must raise ValueError (lesson 8's kv_head_for_query_head does)."
        )

    def test_float32_stays_float32_and_the_inputs_are_left_unchanged(self, lesson):
        """float32 stays float32 and the inputs are left unchanged"""
        r = rng(36)
        x_q, x_kv, params, grad_out = gqa_inputs(r, dtype=np.float32)
        what = "grouped_query_attention_backward(x_q, x_kv, params, 6, 3, grad_out, all float32)"
        result = call_gqa(lesson, x_q, x_kv, params, GH, G, grad_out)
        check_not_modified(lesson, what)
        check_layer(result, x_q, x_kv, params, GH, G, grad_out, what=what, gqa=True)

    @given(
        b=st.integers(1, 2),
        t=st.integers(1, 3),
        s=st.integers(1, 3),
        n_kv=st.integers(1, 2),
        n_rep=st.integers(1, 3),
        k=st.integers(1, 2),
        bias=st.booleans(),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(
        self, lesson, b, t, s, n_kv, n_rep, k, bias, masked, seed
    ):
        """matches central differences for any sizes, groups, biases and mask"""
        r = rng(seed)
        n_heads = n_kv * n_rep
        x_q, x_kv, params, grad_out = gqa_inputs(r, b, t, s, n_heads, n_kv, k, bias)
        mask = r.random((b, t, s)) < 0.7 if masked else None
        check_layer(
            call_gqa(lesson, x_q, x_kv, params, n_heads, n_kv, grad_out, mask),
            x_q,
            x_kv,
            params,
            n_heads,
            n_kv,
            grad_out,
            mask,
            what=f"grouped_query_attention_backward(x_q {x_q.shape}, x_kv {x_kv.shape}, params "
            f"{'with' if bias else 'without'} biases, {n_heads}, {n_kv}, grad_out, mask "
            f"{None if mask is None else mask.shape})",
            gqa=True,
        )


# ---------------------------------------------------------------- head_mask_gradient
def head_mask_mistakes(x_q, x_kv, params, n_heads, grad_out, mask):
    def named(*how):
        return lambda: head_mask_variant(x_q, x_kv, params, n_heads, grad_out, mask, how)

    return {
        BATCH_LOSS.format(how="summed"): named("batch-sum"),
        BATCH_LOSS.format(how="mean"): named("batch-mean"),
        BATCH_LOSS.format(how="summed").plus(" (here the same numbers in every row)"): named(
            "batch-sum", "rows"
        ),
        BATCH_LOSS.format(how="mean").plus(" (here the same numbers in every row)"): named(
            "batch-mean", "rows"
        ),
        ABS_TAKEN: named("abs"),
        XI_AFTER_W_O: named("after-w-o"),
        INTERLEAVED_ROWS: named("interleaved"),
        PER_POSITION: named("per-position"),
        **(
            {W_O_UNTRANSPOSED: named("w-o-untransposed")}
            if np.shape(params["w_o"])[0] == np.shape(params["w_o"])[1]
            else {}
        ),
    }


def check_head_mask(actual, x_q, x_kv, params, n_heads, grad_out, mask=None, *, what, expected=None):
    present = [a for a in params.values() if a is not None]
    dtype = np.result_type(x_q, x_kv, grad_out, *present)
    rtol, atol = tolerance(x_q, x_kv, grad_out, *present)  # float64 out, as precise as the inputs
    if expected is None:
        expected = head_mask_derivatives(x_q, x_kv, params, n_heads, grad_out, mask)
    mistakes = head_mask_mistakes(x_q, x_kv, params, n_heads, grad_out, mask)
    if dtype == np.float32:
        mistakes[NOT_FLOAT64] = expected.astype(np.float32)
    check_array(actual, expected, what=what, dims="B H", rtol=rtol, atol=atol, mistakes=mistakes)


def call_head_mask(lesson, x_q, x_kv, params, n_heads, grad_out, mask=None):
    kwargs = {} if mask is None else {"mask": mask}
    return lesson.head_mask_gradient(x_q, x_kv, params, n_heads, grad_out, **kwargs)


@exercise("head_mask_gradient")
class TestHeadMaskGradient:
    def test_one_derivative_per_sequence_and_head(self, lesson):
        """(B, H) float64: one derivative per sequence and head"""
        x_q, x_kv, params, grad_out = mha_inputs(rng(40))
        check_head_mask(
            call_head_mask(lesson, x_q, x_kv, params, H, grad_out),
            x_q,
            x_kv,
            params,
            H,
            grad_out,
            what="head_mask_gradient(x_q (B, T, D) = (2, 4, 18), x_kv (B, S, D) = (2, 5, 18), params, "
            "n_heads=3, grad_out (B, T, D))",
        )

    @hand_checked
    def test_uniform_weights_and_identity_projections_by_hand(self, lesson):
        """W_Q = W_K = 0, W_V = W_O = I: dL_b/dxi_h = sum_t grad_out[b, t, h] * mean_s x_kv[b, s, h]"""
        # Two heads of width K = 1 (D = 2). W_Q = W_K = 0 makes every weight 1/S = 1/2, so head h
        # outputs the mean of x_kv[b, :, h] at every query, and W_O = I hands it to feature h.
        # Sequence 0: means [2, 4], grad_out summed over t [1, 1] -> [2, 4];
        # sequence 1: means [1, -1], grad_out summed over t [-1, -1] -> [-1, 1].
        # Under an instructor's secret: grad_out scaled by s, x_kv shifted by c, the two heads
        # swapped (the columns of x_kv and grad_out).
        v = variation("head mask by hand")
        s, c, heads = v.scale(), v.shift(), v.permutation(2)
        x_kv = (np.array([[[1.0, 2.0], [3.0, 6.0]], [[0.0, 1.0], [2.0, -3.0]]]) + c)[..., heads]
        grad_out = np.array([[[1.0, 0.5], [0.0, 0.5]], [[-2.0, -1.0], [1.0, 0.0]]])[..., heads] * s
        x_q = np.array([[[1.0, -1.0], [2.0, 0.5]], [[0.0, 3.0], [-1.0, 1.0]]])
        params = {"w_q": np.zeros((2, 2)), "w_k": np.zeros((2, 2)), "w_v": np.eye(2), "w_o": np.eye(2)}
        expected = grad_out.sum(axis=1) * x_kv.mean(axis=1)  # (B, H), worked out above
        check_head_mask(
            call_head_mask(lesson, x_q, x_kv, params, 2, grad_out),
            x_q,
            x_kv,
            params,
            2,
            grad_out,
            what=f"head_mask_gradient(x_q, x_kv={shown(x_kv)}, params (w_q = w_k = 0, w_v = w_o = I), 2, "
            f"grad_out={shown(grad_out)})",
            expected=expected,
        )

    def test_a_mask_with_a_fully_masked_query_and_biases(self, lesson):
        """a (B, T, S) mask with a fully masked query; b_o adds nothing"""
        r = rng(41)
        x_q, x_kv, params, grad_out = mha_inputs(r)
        mask = random_mask(r, (B, T, S))
        check_head_mask(
            call_head_mask(lesson, x_q, x_kv, params, H, grad_out, mask),
            x_q,
            x_kv,
            params,
            H,
            grad_out,
            mask,
            what=f"head_mask_gradient(x_q, x_kv, params, 3, grad_out, mask (B, T, S) in which query {T - 1} "
            "sees no key)",
        )

    def test_self_attention_with_a_causal_mask_and_no_biases(self, lesson):
        """self-attention, causal mask, no biases, B=3, H=2 heads of K=4"""
        x, _, params, grad_out = mha_inputs(
            rng(42), b=3, t=S, n_heads=2, k=4, bias=False, self_attention=True
        )
        mask = causal(S)
        check_head_mask(
            call_head_mask(lesson, x, x, params, 2, grad_out, mask),
            x,
            x,
            params,
            2,
            grad_out,
            mask,
            what="head_mask_gradient(x (3, 5, 8), x, params without biases, 2, grad_out, mask=causal (5, 5))",
        )

    def test_float32_inputs_give_float64_and_are_left_unchanged(self, lesson):
        """float32 inputs give float64 (B, H) and are left unchanged"""
        r = rng(43)
        x_q, x_kv, params, grad_out = mha_inputs(r, dtype=np.float32)
        what = "head_mask_gradient(x_q, x_kv, params, 3, grad_out, all float32)"
        result = call_head_mask(lesson, x_q, x_kv, params, H, grad_out)
        check_not_modified(lesson, what)
        check_head_mask(result, x_q, x_kv, params, H, grad_out, what=what)

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 3),
        s=st.integers(1, 3),
        n_heads=st.integers(1, 3),
        k=st.integers(1, 2),
        bias=st.booleans(),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(self, lesson, b, t, s, n_heads, k, bias, masked, seed):
        """matches central differences in xi for any sizes, biases and mask"""
        r = rng(seed)
        x_q, x_kv, params, grad_out = mha_inputs(r, b, t, s, n_heads, k, bias)
        mask = r.random((b, t, s)) < 0.7 if masked else None
        check_head_mask(
            call_head_mask(lesson, x_q, x_kv, params, n_heads, grad_out, mask),
            x_q,
            x_kv,
            params,
            n_heads,
            grad_out,
            mask,
            what=f"head_mask_gradient(x_q {x_q.shape}, x_kv {x_kv.shape}, params "
            f"{'with' if bias else 'without'} biases, {n_heads}, grad_out, mask "
            f"{None if mask is None else mask.shape})",
        )
