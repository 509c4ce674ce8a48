"""Grading tests for lesson 15 (l15_training): cross_entropy, layer_forward, layer_backward,
model_gradients, adamw_step, train.

Sizes are all different where they meet, so that a swapped axis shows: cross-entropy B=3, T=4,
V=7; a layer B=2, T=5, D=12 with H=3 heads of K=4 (multi-head) or H=6 heads of K=2 sharing G=2
key/value heads (r=3), G=3 or G=1; a model V=7 tokens, L=9 positions, D=12, 2 layers of H=3
heads (or H=6 heads with G=2 or G=1), B=3 sequences of T=6 tokens (T < L, so the position rows
T .. L-1 get no gradient), tokens repeated within the batch, one sequence with no scored
position; AdamW on small trees of arrays shaped like a model (a dict holding arrays, a dict and a
list of dicts; a list of dicts), one array with gradients near 1e-7, where eps matters; training
runs of a model of V=6 tokens, L=16 positions (the copy task's shortest), D=8, H=2 heads (or H=4
with G=2 or G=1), 1 or 2 layers, batches of 3 sequences, 3 to 5 steps.

The expected answers come from slow, plain computations written here: the cross-entropy one
position at a time; lesson 8's self-attention one head at a time; the whole model's forward pass
and loss; gradients by central differences in float64 of those forward passes (every entry of
every array stepped up and down by eps and eps / 2, combined as (4 D(eps / 2) - D(eps)) / 3 so
that their eps^2 errors cancel; about 1e-10 is left, the checks allow 1e-8 and a relative 1e-6);
AdamW entry by entry as PyTorch documents torch.optim.AdamW. The training runs are recorded:
tests/lessons/fixtures/l15_training.npz, made by tools/make_l15_fixtures.py from the reference
solution (tests/test_l15_fixtures.py keeps them in step).

The vectorised `ce_variant`, `layer_backward_variant`, `model_variant`, the `how` of `adamw_loop`
and `train_reference` compute the classic WRONG answers (the mean over every position, the
residual path dropped, `grad[tokens] += g`, Adam without its bias corrections, a batch picked by
the loop's counter, ...), only to name a mistake when an answer matches one of them.

Under an instructor's secret every random input comes from other streams (``rng``), the
hand-checked cases use other numbers (``variation``), and each recorded training run is another
recorded variant (another initial model and data seed) whose model has its features and its heads
reordered: a training run commutes with those reorderings (every step is equivariant, AdamW works
entry by entry), so the recorded answer, reordered the same way, stays the answer.
"""

import json
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
from course.tiny_model import IGNORE, LAYER_KEYS, make_task

CB, CT, CV = 3, 4, 7  # cross-entropy: batch, positions, vocabulary
B, T, D = 2, 5, 12  # a layer: batch, positions, width
H, K = 3, 4  # multi-head: 3 heads of 4
GH, GG, GK = 6, 2, 2  # grouped-query: 6 query heads sharing 2 key/value heads, K = 2
MV, ML, MD, MB, MT = 7, 9, 12, 3, 6  # a model: vocabulary, max_len, width, batch, positions
EPS = 2e-4  # the central differences' larger step (the smaller is EPS / 2)
ORACLE_ATOL = 1e-8  # float64: the oracle errs by about 1e-10, rounding included
FIXTURES = Path(__file__).parent / "fixtures" / "l15_training.npz"

# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    "cross_entropy": {"logits": "B T V", "targets": "B T"},
    "layer_forward": {"x": "B T D", "params": "", "n_heads": "", "n_kv_heads": "", "mask": "T T"},
    "layer_backward": {"cache": "", "params": "", "grad_out": "B T D"},
    "model_gradients": {"model": "", "tokens": "B T", "targets": "B T", "n_heads": "", "n_kv_heads": ""},
}


def shown(values):
    """Numbers as a test's text quotes them: [[1, 0.5], [-2, 0]], each with :g."""
    if np.ndim(values) == 0:
        return f"{float(values):g}"
    return "[" + ", ".join(shown(v) for v in values) + "]"


def swap(a):
    return np.swapaxes(a, -1, -2)


def causal(n):
    """(n, n): position i may see positions 0 .. i."""
    return np.array([[j <= i for j in range(n)] for i in range(n)])


# ---------------------------------------------------------------- trees
def leaves(tree, path=()):
    """(path, array) for every array of a tree of dicts and lists, in tree_map's order; a path
    is a tuple of keys and indices."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, (*path, key))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from leaves(value, (*path, i))
    else:
        yield path, tree


def at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def tree_map(f, *trees):
    """f applied to the matching arrays of trees of one shape (the lesson's given tree_map)."""
    first = trees[0]
    if isinstance(first, dict):
        return {key: tree_map(f, *(tree[key] for tree in trees)) for key in first}
    if isinstance(first, (list, tuple)):
        return [tree_map(f, *items) for items in zip(*trees, strict=True)]
    return f(*trees)


def where(path):
    """A path as Python reads it: ['layers'][1]['w_q']."""
    return "".join(f"[{key!r}]" for key in path)


def flat(model):
    """A model as {"tok_emb": ..., "layers.0.w_q": ...}: the arrays central differences step."""
    return {".".join(str(k) for k in path): np.asarray(a, np.float64) for path, a in leaves(model)}


def unflat(arrays, n_layers):
    """The model dict of ``flat``'s arrays."""
    model = {name: arrays[name] for name in ("tok_emb", "pos_emb", "unembed", "b_unembed")}
    model["layers"] = [{key: arrays[f"layers.{i}.{key}"] for key in LAYER_KEYS} for i in range(n_layers)]
    return model


def array_name(name, path, call):
    """How a check names an array of a tree: params['head']['b'] from adamw_step(...)."""
    return f"{name}{where(path)} from {call}"


def check_structure(actual, expected, name, call, path=()):
    """The learner's tree ``name`` (returned by ``call``) has the expected structure: dicts with
    the same keys, lists of the same length (the arrays are compared later)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise AssertionError(
                f"{array_name(name, path, call)} is {type(actual).__name__}; expected a dict with the keys "
                f"{', '.join(map(str, expected))}."
            )
        missing = [key for key in expected if key not in actual]
        extra = [key for key in actual if key not in expected]
        if missing or extra:
            raise AssertionError(
                f"{array_name(name, path, call)} has the keys {sorted(map(str, actual))}; expected "
                f"{sorted(map(str, expected))}"
                + (f" (missing: {', '.join(map(str, missing))})" if missing else "")
                + (f" (not expected: {', '.join(map(str, extra))})" if extra else "")
                + "."
            )
        for key, value in expected.items():
            check_structure(actual[key], value, name, call, (*path, key))
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            got = f"a {type(actual).__name__}" + (
                f" of {len(actual)} items" if isinstance(actual, (list, tuple)) else ""
            )
            raise AssertionError(
                f"{array_name(name, path, call)} is {got}; expected a list of {len(expected)} items."
            )
        for i, value in enumerate(expected):
            check_structure(actual[i], value, name, call, (*path, i))


def check_tree(actual, expected, *, name, call, letters, mistakes=None, order=None):
    """Every array of the learner's tree ``name`` (returned by ``call``) against the expected
    tree, in ``order`` (paths; default the tree's own order). ``letters(path)`` gives an array's
    dimension letters; ``mistakes`` maps a Mistake to a wrong tree (or a callable that computes
    one, on failure only)."""
    check_structure(actual, expected, name, call)
    for path in order or [path for path, _ in leaves(expected)]:
        check_array(
            at(actual, path),
            np.asarray(at(expected, path)),
            what=array_name(name, path, call),
            dims=letters(path),
            mistakes={
                mistake: (lambda tree=tree, path=path: at(tree() if callable(tree) else tree, path))
                for mistake, tree in (mistakes or {}).items()
            },
        )


def generic_letters(tree):
    """Letters for the arrays of a tree of any shapes: n0, n1, ... (a scalar: none)."""
    return lambda path: " ".join(f"n{i}" for i in range(np.ndim(at(tree, path))))


def model_letters(path):
    """The dimension letters of a model's (or its gradients') array."""
    return {
        "tok_emb": "V D",
        "pos_emb": "L D",
        "unembed": "D V",
        "b_unembed": "V",
        "w_q": "D H*K",
        "w_k": "D G*K",
        "w_v": "D G*K",
        "w_o": "H*K D",
        "b_q": "H*K",
        "b_k": "G*K",
        "b_v": "G*K",
        "b_o": "D",
    }[path[-1]]


def check_loss(actual, expected, *, what, mistakes=None, rtol=None, atol=None):
    """The learner's loss: one number (a Python float), equal to ``expected`` (NaN to NaN)."""
    if isinstance(actual, np.ndarray) and actual.ndim > 0:
        raise AssertionError(
            f"the loss of {what} is an array of shape {actual.shape}; it is one number, a Python "
            "float: float(...) of the mean."
        )
    if isinstance(actual, bool) or not isinstance(actual, (float, int, np.floating, np.integer, np.ndarray)):
        kind = "None (is a `return` missing?)" if actual is None else type(actual).__name__
        raise AssertionError(f"the loss of {what} is {kind}; expected a Python float.")
    check_array(
        np.asarray(float(actual)),
        np.asarray(float(expected)),
        what=f"the loss of {what}",
        dims="",
        mistakes=mistakes,
        rtol=rtol,
        atol=atol,
    )


# ---------------------------------------------------------------- oracles (slow and obvious)
@remembered
def cross_entropy_loop(logits, targets):
    """(loss, grad_logits) one position at a time: over the N scored positions, the mean of
    log(sum exp(z)) - z[target] (the maximum taken out first), and per scored position
    (softmax(z) - onehot(target)) / N; NaN and zeros when N = 0."""
    z = np.asarray(logits, np.float64)
    n_b, n_t, n_v = z.shape
    scored = [(b, t) for b in range(n_b) for t in range(n_t) if targets[b, t] != IGNORE]
    total, grad = 0.0, np.zeros(z.shape)
    for b, t in scored:
        row = [float(value) for value in z[b, t]]
        top = max(row)
        log_total = top + math.log(sum(math.exp(value - top) for value in row))
        target = int(targets[b, t])
        total += log_total - row[target]
        for v in range(n_v):
            grad[b, t, v] = math.exp(row[v] - log_total) - (1.0 if v == target else 0.0)
    if not scored:
        return math.nan, grad
    return total / len(scored), grad / len(scored)


def central_differences(loss, inputs, names, eps=EPS):
    """{name: dL/d inputs[name]} for each of ``names``, by central differences, every entry of one
    input at once: ``loss(**arrays)`` takes each input with one extra leading axis of copies (of
    size 1 for the inputs held fixed) and returns one loss per copy. The copies step each entry
    up and down by eps and by eps / 2, and the two central differences are combined as
    (4 D(eps / 2) - D(eps)) / 3 (Richardson): their eps^2 errors cancel."""
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


def self_attention(x, p, n_heads, n_kv_heads, mask):
    """Lesson 8's self-attention for a stack of copies: x (P, B, T, D), each p[name] (P or 1, ...)
    -> (P, B, T, D). One query head h at a time, with key/value head h // (H // G): scores
    q_h k_g^T / sqrt(K), blocked where the mask is False, a softmax over each row, the weighted
    values; the heads side by side, then W_O. Every row of the masks used here sees a key."""
    n_k = p["w_q"].shape[-1] // n_heads
    group = n_heads // n_kv_heads

    def project(w, b):  # (P, B, T, D) @ (P, 1, D, F) + (P, 1, 1, F) -> (P, B, T, F)
        return x @ w[:, None] + b[:, None, None]

    q, k, v = project(p["w_q"], p["b_q"]), project(p["w_k"], p["b_k"]), project(p["w_v"], p["b_v"])
    heads = []
    for h in range(n_heads):
        g = h // group
        qc, kc = slice(h * n_k, (h + 1) * n_k), slice(g * n_k, (g + 1) * n_k)
        scores = q[..., qc] @ swap(k[..., kc]) / math.sqrt(n_k)  # (P, B, T, T)
        scores = np.where(mask, scores, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        heads.append(e / e.sum(axis=-1, keepdims=True) @ v[..., kc])  # (P, B, T, K)
    concat = np.concatenate(heads, axis=-1)  # (P, B, T, H*K)
    return concat @ p["w_o"][:, None] + p["b_o"][:, None, None]


@remembered
def layer_out(x, params, n_heads, n_kv_heads, mask):
    """The layer's output (B, T, D)."""
    p = {name: np.asarray(a, np.float64)[None] for name, a in params.items()}
    return self_attention(np.asarray(x, np.float64)[None], p, n_heads, n_kv_heads, mask)[0]


@remembered
def layer_gradients(x, params, n_heads, n_kv_heads, mask, grad_out):
    """Oracle: (grad_x, grads) of L = sum(grad_out * out) by central differences, grad_x through
    the attention only (the layer's output, not x + out)."""
    grad_out = np.asarray(grad_out, np.float64)

    def loss(x, **p):
        out = self_attention(x, p, n_heads, n_kv_heads, mask)
        return (grad_out * out).reshape(len(out), -1).sum(axis=1)

    grads = central_differences(loss, {"x": x, **params}, ["x", *params])
    return grads.pop("x"), {name: grads[name] for name in params}


def model_losses(arrays, tokens, targets, n_heads, n_kv_heads, n_layers):
    """The model's loss for a stack of copies of its arrays (``flat``'s names, each with a
    leading axis of P copies or 1): embed, each layer adds its causal self-attention, unembed,
    then the mean over the scored positions of -log_softmax(logits)[target]. (P,)"""
    n_t = tokens.shape[1]
    x = arrays["tok_emb"][:, tokens] + arrays["pos_emb"][:, None, :n_t]  # (P, B, T, D)
    mask = causal(n_t)
    for i in range(n_layers):
        p = {key: arrays[f"layers.{i}.{key}"] for key in LAYER_KEYS}
        x = x + self_attention(x, p, n_heads, n_kv_heads, mask)
    logits = x @ arrays["unembed"][:, None] + arrays["b_unembed"][:, None, None]  # (P, B, T, V)
    scored = targets != IGNORE
    z = logits - logits.max(axis=-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.where(scored, targets, 0)[None, ..., None], axis=-1)[..., 0]
    return -(picked * scored).sum(axis=(1, 2)) / scored.sum()


@remembered
def model_gradients_oracle(model, tokens, targets, n_heads, n_kv_heads):
    """Oracle: (loss, grads) of the model, grads shaped like the model, by central differences
    of its loss in every entry of every array."""
    n_layers = len(model["layers"])
    arrays = flat(model)

    def loss(**stacked):
        return model_losses(stacked, tokens, targets, n_heads, n_kv_heads, n_layers)

    value = float(
        model_losses({k: a[None] for k, a in arrays.items()}, tokens, targets, n_heads, n_kv_heads, n_layers)[
            0
        ]
    )
    grads = central_differences(loss, arrays, list(arrays))
    return value, unflat(grads, n_layers)


# ---------------------------------------------------------------- named wrong answers
@remembered
def ce_variant(logits, targets, how=()):
    """(loss, grad_logits) in float64, vectorised, with the rules named in ``how`` broken:
    "over-bt" the mean over all B*T positions; "minus-one" a target of -1 read as the last class
    (every position counted, divided by N; "minus-one-bt": by B*T); "unscored-grad" the softmax
    left in the gradient of unscored positions; "log-of-softmax" log(softmax(z)), which is
    -inf where the softmax underflows; "no-max" the exponentials taken without the maximum."""
    z = np.asarray(logits, np.float64)
    n_v = z.shape[-1]
    scored = targets != IGNORE
    n = int(scored.sum())
    with np.errstate(all="ignore"):
        if "no-max" in how:
            e = np.exp(z)
            log_probs = z - np.log(e.sum(axis=-1, keepdims=True))
        elif "log-of-softmax" in how:
            e = np.exp(z - z.max(axis=-1, keepdims=True))
            log_probs = np.log(e / e.sum(axis=-1, keepdims=True))
        else:
            shifted = z - z.max(axis=-1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        softmax = np.exp(log_probs)
        counted = np.ones_like(scored) if "minus-one" in how or "minus-one-bt" in how else scored
        picks = np.where(scored, targets, n_v - 1 if counted is not scored else 0)
        picked = np.take_along_axis(log_probs, picks[..., None], axis=-1)[..., 0]
        divisor = scored.size if "over-bt" in how or "minus-one-bt" in how else n
        loss = -float(np.sum(picked, where=counted)) / divisor if divisor else math.nan
        onehot = np.eye(n_v)[picks] * counted[..., None]
        kept = np.ones_like(scored) if "unscored-grad" in how else counted
        grad = (softmax - onehot) * kept[..., None] / max(divisor, 1)
    return loss, grad


def split(y, n):
    """(B, T, n*K) -> (B, n, T, K)"""
    n_b, n_t, width = y.shape
    return y.reshape(n_b, n_t, n, width // n).transpose(0, 2, 1, 3)


def merge(y):
    """(B, n, T, K) -> (B, T, n*K)"""
    n_b, n, n_t, n_k = y.shape
    return y.transpose(0, 2, 1, 3).reshape(n_b, n_t, n * n_k)


def layer_pass(x, p, n_heads, n_kv_heads, mask):
    """The layer's forward pass in float64, vectorised: q (B, H, T, K), k and v repeated to H
    heads, the weights (B, H, T, T), the merged heads (B, T, H*K) and the output."""
    p = {name: np.asarray(a, np.float64) for name, a in p.items()}
    r = n_heads // n_kv_heads
    q = split(x @ p["w_q"] + p["b_q"], n_heads)
    k = np.repeat(split(x @ p["w_k"] + p["b_k"], n_kv_heads), r, axis=1)
    v = np.repeat(split(x @ p["w_v"] + p["b_v"], n_kv_heads), r, axis=1)
    scores = np.where(mask, q @ swap(k) / math.sqrt(q.shape[-1]), -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    concat = merge(weights @ v)
    return {"q": q, "k": k, "v": v, "weights": weights, "concat": concat, "out": concat @ p["w_o"] + p["b_o"]}


def rows(a):
    """(B, T, F) -> (B*T, F)"""
    return a.reshape(-1, a.shape[-1])


@remembered
def layer_backward_variant(x, params, n_heads, n_kv_heads, mask, grad_out, how=()):
    """(grad_x, grads) of the layer in float64, vectorised, with the rules named in ``how``
    broken: "residual" grad_out added to grad_x; "w-o-skipped"; "dq-no-scale", "dk-no-scale";
    "kv-first", "kv-mean", "kv-modulo" (a key/value head's gradient from its query heads);
    "x-q-only" (grad_x through the queries alone)."""
    x = np.asarray(x, np.float64)
    p = {name: np.asarray(a, np.float64) for name, a in params.items()}
    grad_out = np.asarray(grad_out, np.float64)
    f = layer_pass(x, p, n_heads, n_kv_heads, mask)
    n_b, _, n_t, n_k = f["q"].shape
    r = n_heads // n_kv_heads
    grads = {"w_o": rows(f["concat"]).T @ rows(grad_out), "b_o": grad_out.sum(axis=(0, 1))}
    grad_heads = split(grad_out if "w-o-skipped" in how else grad_out @ p["w_o"].T, n_heads)
    weights = f["weights"]
    grad_v = swap(weights) @ grad_heads
    grad_weights = grad_heads @ swap(f["v"])
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(axis=-1, keepdims=True))
    scale = 1.0 / math.sqrt(n_k)
    grad_q = grad_scores @ f["k"] * (1.0 if "dq-no-scale" in how else scale)
    grad_k = swap(grad_scores) @ f["q"] * (1.0 if "dk-no-scale" in how else scale)

    def group(g):  # (B, H, T, K) -> (B, G, T, K)
        if "kv-first" in how:
            return g[:, ::r]
        if "kv-mean" in how:
            return g.reshape(n_b, n_kv_heads, r, n_t, n_k).mean(axis=2)
        if "kv-modulo" in how:
            return g.reshape(n_b, r, n_kv_heads, n_t, n_k).sum(axis=1)
        return g.reshape(n_b, n_kv_heads, r, n_t, n_k).sum(axis=2)

    merged = {"q": merge(grad_q), "k": merge(group(grad_k)), "v": merge(group(grad_v))}
    for name, g in merged.items():
        grads[f"w_{name}"] = rows(x).T @ rows(g)
        grads[f"b_{name}"] = rows(g).sum(axis=0)
    grad_x = merged["q"] @ p["w_q"].T
    if "x-q-only" not in how:
        grad_x = grad_x + merged["k"] @ p["w_k"].T + merged["v"] @ p["w_v"].T
    if "residual" in how:
        grad_x = grad_x + grad_out
    return grad_x, {name: grads[name] for name in params}


@remembered
def model_variant(model, tokens, targets, n_heads, n_kv_heads, how=()):
    """(loss, grads) of the model in float64, vectorised: the forward pass, ``ce_variant`` and the
    chain rule back down, with the rules named in ``how`` broken (those of ``ce_variant`` and of
    ``layer_backward_variant``, and "no-residual" the stream's gradient not added to a layer's
    input; "buffered" grad[tokens] += g; "pos-mean" the position rows averaged over the batch;
    "layers-reversed" the layers' gradients in backward order)."""
    n_b, n_t = tokens.shape
    x = np.asarray(model["tok_emb"], np.float64)[tokens] + np.asarray(model["pos_emb"], np.float64)[:n_t]
    mask = causal(n_t)
    inputs = []
    for p in model["layers"]:
        inputs.append(x)
        x = x + layer_pass(x, p, n_heads, n_kv_heads, mask)["out"]
    unembed = np.asarray(model["unembed"], np.float64)
    logits = x @ unembed + np.asarray(model["b_unembed"], np.float64)
    loss, grad_logits = ce_variant(logits, targets, how)
    grads = {"unembed": rows(x).T @ rows(grad_logits), "b_unembed": grad_logits.sum(axis=(0, 1))}
    grad_x = grad_logits @ unembed.T
    layer_grads = []
    for x_in, p in zip(reversed(inputs), reversed(model["layers"]), strict=True):
        grad_attention, grad_p = layer_backward_variant(x_in, p, n_heads, n_kv_heads, mask, grad_x, how)
        grad_x = grad_attention if "no-residual" in how else grad_x + grad_attention
        layer_grads.append(grad_p)
    grads["layers"] = layer_grads if "layers-reversed" in how else layer_grads[::-1]
    grads["pos_emb"] = np.zeros(np.shape(model["pos_emb"]))
    grads["pos_emb"][:n_t] = grad_x.mean(axis=0) if "pos-mean" in how else grad_x.sum(axis=0)
    grads["tok_emb"] = np.zeros(np.shape(model["tok_emb"]))
    if "buffered" in how:
        grads["tok_emb"][tokens] += grad_x  # a repeated token keeps one of its rows: the mistake
    else:
        np.add.at(grads["tok_emb"], tokens, grad_x)
    return loss, {name: grads[name] for name in ("tok_emb", "pos_emb", "unembed", "b_unembed", "layers")}


def rebuild(template, values):
    """A tree shaped like ``template`` holding ``values`` (in tree order)."""
    found = iter(values)
    return tree_map(lambda _: next(found), template)


@remembered
def adamw_loop(start, grads_steps, lr, betas, eps, weight_decay, how=(), first=None):
    """PyTorch's documented torch.optim.AdamW (one parameter group), entry by entry, for one step
    per tree of ``grads_steps``, from the state ``first`` (None: zero moments, step 0):

        t = t + 1                                       one count, shared by every array
        p = p - lr * weight_decay * p                   decoupled weight decay, first
        m = b1 * m + (1 - b1) * g,  v = b2 * v + (1 - b2) * g**2
        m_hat = m / (1 - b1**t),    v_hat = v / (1 - b2**t)
        p = p - lr * m_hat / (sqrt(v_hat) + eps)

    Returns [(params, {"step": t, "m": ..., "v": ...}) after each step]. ``how`` breaks a rule
    (the classic mistakes): "no-bias-correction", "m-not-corrected", "v-not-corrected",
    "eps-before", "eps-inside", "l2", "decay-after", "decay-without-lr", "no-decay-1d",
    "step-per-array", "restart" (moments from zero and t = 1 at every step), "restart-keep-step"
    (moments from zero, t counted)."""
    b1, b2 = betas
    params = [np.array(a, np.float64) for _, a in leaves(start)]
    m = [
        np.zeros_like(a) if first is None else np.array(at(first["m"], path), np.float64)
        for path, a in leaves(start)
    ]
    v = [
        np.zeros_like(a) if first is None else np.array(at(first["v"], path), np.float64)
        for path, a in leaves(start)
    ]
    base = 0 if first is None else int(first["step"])
    count = base
    trajectory = []
    for step, grads in enumerate(grads_steps, base + 1):
        for i, (_, g) in enumerate(leaves(grads)):
            count += 1
            t = count if "step-per-array" in how else 1 if "restart" in how else step
            restart = "restart" in how or "restart-keep-step" in how
            p, new_m, new_v = params[i].copy(), np.zeros_like(params[i]), np.zeros_like(params[i])
            decay = 0.0 if "no-decay-1d" in how and p.ndim <= 1 else weight_decay
            for idx in np.ndindex(*p.shape):
                value, grad = float(p[idx]), float(g[idx])
                old_m, old_v = (0.0, 0.0) if restart else (float(m[i][idx]), float(v[i][idx]))
                if "l2" in how:
                    grad += decay * value
                elif "decay-without-lr" in how:
                    value -= decay * value
                elif "decay-after" not in how:
                    value -= lr * decay * value
                mi = b1 * old_m + (1 - b1) * grad
                vi = b2 * old_v + (1 - b2) * grad * grad
                m_hat = mi if "no-bias-correction" in how or "m-not-corrected" in how else mi / (1 - b1**t)
                v_hat = vi if "no-bias-correction" in how or "v-not-corrected" in how else vi / (1 - b2**t)
                if "eps-before" in how:
                    denominator = (math.sqrt(vi) + eps) / math.sqrt(1 - b2**t)
                elif "eps-inside" in how:
                    denominator = math.sqrt(v_hat + eps)
                else:
                    denominator = math.sqrt(v_hat) + eps
                value -= lr * m_hat / denominator
                if "decay-after" in how:
                    value -= lr * decay * value
                p[idx], new_m[idx], new_v[idx] = value, mi, vi
            params[i], m[i], v[i] = p, new_m, new_v
        state = {
            "step": count if "step-per-array" in how else step,
            "m": rebuild(start, m),
            "v": rebuild(start, v),
        }
        trajectory.append((rebuild(start, params), state))
    return trajectory


def adamw_vectorised(params, grads, state, lr, betas, eps, weight_decay):
    """The same AdamW step, array by array (for the recorded training runs' wrong variants)."""
    b1, b2 = betas
    if state is None:
        state = {"step": 0, "m": tree_map(np.zeros_like, params), "v": tree_map(np.zeros_like, params)}
    t = state["step"] + 1
    m = tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)

    def update(p, m, v):
        p = p * (1 - lr * weight_decay)
        return p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)

    return tree_map(update, params, m, v), {"step": t, "m": m, "v": v}


def schedule_at(schedule, step, total_steps, lr):
    """The lesson's given schedule_at: (rate, b1) at ``step`` of ``total_steps``."""
    if schedule is None:
        return float(lr), 0.9
    if schedule == "cosine":
        return lr * (1 + math.cos(math.pi * step / total_steps)) / 2, 0.9
    low = lr / 25
    peak_step = 0.3 * total_steps - 1

    def anneal(start, end, pct):
        return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)

    if step <= peak_step:
        pct = step / peak_step
        return anneal(low, lr, pct), anneal(0.95, 0.85, pct)
    pct = (step - peak_step) / (total_steps - 1 - peak_step)
    return anneal(lr, low / 1e4, pct), anneal(0.85, 0.95, pct)


@remembered
def train_reference(model, steps, batch_size, lr, data_seed, n_heads, n_kv_heads, run, how=()):
    """(model, losses, state) of ``steps`` training steps (``run``: weight_decay, schedule,
    state, start_step, total_steps), with the rules named in ``how`` broken: "counter-data" and
    "counter-schedule" (the loop's counter j instead of start_step + j), "total-ignored" (the
    schedule over start_step + steps), "b1-fixed", "wd-default", "schedule-ignored",
    "state-ignored" (the state passed in not used)."""
    start_step, total_steps = run["start_step"], run["total_steps"]
    total = start_step + steps if total_steps is None or "total-ignored" in how else total_steps
    n_v, n_l = np.shape(model["tok_emb"])[0], np.shape(model["pos_emb"])[0]
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    state = None if "state-ignored" in how else run["state"]
    losses = []
    for j in range(steps):
        i = start_step + j
        tokens, targets, _ = make_task(batch_size, data_seed + (j if "counter-data" in how else i), n_v, n_l)
        loss, grads = model_variant(model, tokens, targets, n_heads, n_kv)
        schedule = None if "schedule-ignored" in how else run["schedule"]
        rate, b1 = schedule_at(schedule, j if "counter-schedule" in how else i, total, lr)
        betas = (0.9 if "b1-fixed" in how else b1, 0.999)
        decay = 0.01 if "wd-default" in how else run["weight_decay"]
        model, state = adamw_vectorised(model, grads, state, rate, betas, 1e-8, decay)
        losses.append(loss)
    return model, np.array(losses), state


# ---------------------------------------------------------------- classic mistakes, by name
OVER_BT = Mistake(
    "mean-over-every-position",
    "the mean ran over every position, B*T of them, instead of over the N scored ones: the loss "
    "is the sum over the scored positions divided by N = (targets != -1).sum(), and the gradient "
    "of each scored position is divided by N too",
    misconception="unscored-positions-counted",
    exercises=("cross_entropy",),
)
MINUS_ONE = Mistake(
    "minus-one-as-index",
    "a target of -1 was used as an index: numpy reads index -1 as the last class (V-1), so each "
    "unscored position counted as if its target were V-1; -1 marks a position that is not "
    "scored: pick at a valid index (np.where(scored, targets, 0)) and give those positions "
    "weight 0",
    misconception="unscored-positions-counted",
    exercises=("cross_entropy",),
)
UNSCORED_GRAD = Mistake(
    "gradient-at-unscored-positions",
    "the unscored positions kept a gradient (their softmax / N): a position whose target is -1 "
    "adds nothing to the loss, so its row of grad_logits is all zeros",
    misconception="unscored-positions-counted",
    exercises=("cross_entropy",),
)
LOG_OF_SOFTMAX = Mistake(
    "log-of-softmax",
    "the log was taken of the softmax: exp underflows to 0 for a logit far below its row's "
    "maximum, and log(0) = -inf; compute log_softmax directly, z - max - log(sum(exp(z - max)))",
    exercises=("cross_entropy",),
)
NO_MAX = Mistake(
    "exp-without-max",
    "the exponentials were taken without subtracting each row's maximum first: exp(1e4) "
    "overflows to inf, and inf / inf is NaN (the maximum changes nothing else: log_softmax is "
    "the same for z and z - max)",
    exercises=("cross_entropy",),
)
PROMOTED = Mistake(
    "promoted",
    "float32 logits gave a float64 gradient: return grad_logits in the logits' dtype "
    "(.astype(logits.dtype, copy=False))",
    exercises=("cross_entropy",),
)
RESIDUAL_IN_LAYER = Mistake(
    "residual-in-layer-gradient",
    "grad_x includes the residual path (grad_out itself): layer_backward returns the gradient "
    "through the queries, keys and values only; model_gradients adds the stream's gradient",
    exercises=("layer_backward",),
)
W_O_SKIPPED = Mistake(
    "w-o-skipped",
    "the gradient skipped W_O on its way back: the heads reach out only through W_O, so the "
    "merged heads' gradient is grad_out @ w_o^T, not grad_out itself",
    exercises=("layer_backward",),
)
DQ_NO_SCALE = Mistake(
    "dq-without-scale",
    "grad_q lacks the scale: the scores are q @ k^T * scale, so grad_q = grad_scores @ k * scale "
    "(scale = 1/sqrt(K))",
    exercises=("layer_backward",),
)
DK_NO_SCALE = Mistake(
    "dk-without-scale",
    "grad_k lacks the scale: the scores are q @ k^T * scale, so grad_k = grad_scores^T @ q * "
    "scale (scale = 1/sqrt(K))",
    exercises=("layer_backward",),
)
GROUP_NOT_SUMMED = Mistake(
    "kv-group-not-summed",
    "key/value head g's gradient is not the sum over its r = H // G query heads ({how}): each of "
    "them read the head, so each adds its gradient (reshape (B, G, r, T, K), sum over r)",
    misconception="shared-input-gradient",
    exercises=("layer_backward",),
)
GROUP_MODULO = Mistake(
    "kv-group-by-modulo",
    "the query heads' gradients were summed by modulo (heads i with i % G == g, viewed as "
    "(B, r, G, T, K)) instead of by group (heads g*r .. g*r + r - 1, viewed as (B, G, r, T, K))",
    misconception="tiled-kv-heads",
    exercises=("layer_backward",),
)
X_QUERIES_ONLY = Mistake(
    "x-through-queries-only",
    "grad_x holds only the queries' path: x also made the keys and the values, so grad_x = "
    "grad_q @ w_q^T + grad_k @ w_k^T + grad_v @ w_v^T (each with its heads merged)",
    exercises=("layer_backward",),
)
RESIDUAL_DROPPED = Mistake(
    "residual-gradient-dropped",
    "the residual path was dropped on the way back: x_{l+1} = x_l + attention(x_l), so the "
    "gradient of x_l is the gradient of x_{l+1} PLUS what layer_backward sends back through the "
    "attention",
    misconception="residual-gradient-dropped",
    exercises=("model_gradients",),
)
BUFFERED = Mistake(
    "buffered-scatter",
    "a token that appears more than once got the gradient of one of its positions, not their "
    "sum: grad[tokens] += g writes each repeated row once (numpy evaluates the right side for "
    "every index, then assigns); np.add.at(grad, tokens, g) adds every position",
    misconception="shared-input-gradient",
    exercises=("model_gradients",),
)
POS_MEAN = Mistake(
    "position-gradient-averaged",
    "the position rows' gradients were averaged over the batch: pos_emb[t] is added in every "
    "sequence, so its gradient is the SUM over b of the stream's gradient at t",
    misconception="shared-input-gradient",
    exercises=("model_gradients",),
)
POS_NOT_PADDED = Mistake(
    "position-gradient-not-padded",
    "pos_emb's gradient holds only the T rows used: it has the shape of pos_emb, (L, D), and "
    "rows T .. L-1, positions this batch did not use, are zeros",
    exercises=("model_gradients",),
)
LAYERS_REVERSED = Mistake(
    "layer-gradients-reversed",
    "the layers' gradients are in backward order (the last layer's first): reverse the list, so "
    "that grads['layers'][i] belongs to model['layers'][i]",
    exercises=("model_gradients",),
)
NO_BIAS_CORRECTION = Mistake(
    "no-bias-correction",
    "the moments were not bias-corrected: m and v start at zero, so after t steps they are too "
    "small by the factors 1 - b1**t and 1 - b2**t; divide m by 1 - b1**t and v by 1 - b2**t",
    misconception="adam-bias-correction",
    exercises=("adamw_step",),
)
EPS_BEFORE = Mistake(
    "eps-before-bias-correction",
    "eps was added before the bias correction of v, (sqrt(v) + eps) / sqrt(1 - b2**t): PyTorch "
    "adds it after, sqrt(v) / sqrt(1 - b2**t) + eps (the first form makes eps about 30 times "
    "larger at t = 1)",
    exercises=("adamw_step",),
)
EPS_INSIDE = Mistake(
    "eps-inside-sqrt",
    "eps was added inside the square root, sqrt(v_hat + eps): it is added after it, sqrt(v_hat) + eps",
    exercises=("adamw_step",),
)
L2_DECAY = Mistake(
    "l2-not-decoupled",
    "the weight decay was added to the gradient (g + weight_decay * p, L2 regularisation), so it "
    "went through Adam's scaling and into m and v: AdamW decouples it, p = p * (1 - lr * "
    "weight_decay) before the Adam update",
    misconception="l2-not-weight-decay",
    exercises=("adamw_step",),
)
DECAY_AFTER = Mistake(
    "decay-after-update",
    "the weight decay was applied after the Adam update: PyTorch shrinks p first, p * (1 - lr * "
    "weight_decay), then subtracts the update",
    exercises=("adamw_step",),
)
DECAY_WITHOUT_LR = Mistake(
    "decay-without-lr",
    "the weights shrank by 1 - weight_decay: AdamW's factor is 1 - lr * weight_decay",
    exercises=("adamw_step",),
)
BIASES_NOT_DECAYED = Mistake(
    "biases-not-decayed",
    "the 1-D arrays (the biases) were not decayed: with one parameter group, as in the lesson, "
    "every array decays",
    exercises=("adamw_step",),
)
STEP_PER_ARRAY = Mistake(
    "step-per-array",
    "the step count advanced once per array, not once per call: t counts the updates, and one "
    "call updates every array at once, all with t = state['step'] + 1",
    exercises=("adamw_step",),
)
MOMENTS_RESTARTED = Mistake(
    "moments-restarted",
    "the moments started from zero again: m and v come from the state passed in (zeros only when "
    "it is None), and t from its step",
    exercises=("adamw_step",),
)
STATE_MODIFIED = Mistake(
    "state-modified-in-place",
    "the state passed in was changed in place: the caller may still use it (to retry a step, or "
    "to resume from it), so make new arrays for m and v (m = b1 * m + ..., not m *= b1)",
    exercises=("adamw_step",),
)
DATA_FROM_COUNTER = Mistake(
    "data-seed-from-counter",
    "the batches came from data_seed + j, j counting this call's steps from 0: step i of the run "
    "trains on make_task(batch_size, data_seed + i), i = start_step + j, so that a resumed run "
    "does not see its first batches again",
    exercises=("train",),
)
SCHEDULE_FROM_COUNTER = Mistake(
    "schedule-from-counter",
    "the schedule was read at j, the loop's counter, instead of at the step's number i = "
    "start_step + j: a resumed run started its schedule over",
    exercises=("train",),
)
TOTAL_IGNORED = Mistake(
    "total-steps-ignored",
    "the schedule ran over start_step + steps, this call's end, instead of total_steps, the "
    "whole run's length: a run cut in chunks follows one schedule from its first step to its last",
    exercises=("train",),
)
B1_FIXED = Mistake(
    "schedule-b1-ignored",
    "Adam's b1 stayed 0.9: schedule_at gives the rate AND b1 of each step (OneCycle moves b1 "
    "between 0.95 and 0.85); pass betas=(b1, 0.999)",
    exercises=("train",),
)
WD_IGNORED = Mistake(
    "weight-decay-ignored",
    "the weight_decay argument did not reach adamw_step (its default 0.01 was used): pass "
    "weight_decay=weight_decay",
    exercises=("train",),
)
SCHEDULE_IGNORED = Mistake(
    "schedule-ignored",
    "the learning rate stayed lr at every step: the schedule's rate for step i is "
    "schedule_at(schedule, i, total, lr)[0]",
    exercises=("train",),
)
STATE_IGNORED = Mistake(
    "state-ignored",
    "the state passed in was not used: the optimizer started again from zero moments and step 0 "
    "instead of continuing from the state the previous chunk returned",
    exercises=("train",),
)
TASK_SIZES = Mistake(
    "make-task-sizes",
    "make_task was called without the model's sizes: without them it draws tokens and positions "
    "for the shipped model (V = 32, L = 24); pass V = tok_emb.shape[0] and L = pos_emb.shape[0]",
    exercises=("train",),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code around
# the error: make_task given two arguments only (its tokens then index past tok_emb's rows).
CODE_MISTAKES = {TASK_SIZES: r"\bmake_task\(\s*[^,()]+,\s*[^,()]+\)"}


# ---------------------------------------------------------------- cross_entropy
def ce_mistakes(logits, targets, part):
    """Named wrong answers for the loss (part 0) or the gradient (part 1)."""

    def named(*how):
        return lambda: ce_variant(logits, targets, how)[part]

    mistakes = {
        OVER_BT: named("over-bt"),
        MINUS_ONE: named("minus-one"),
        MINUS_ONE.plus(" (here the mean ran over all B*T positions)"): named("minus-one-bt"),
        LOG_OF_SOFTMAX: named("log-of-softmax"),
        NO_MAX: named("no-max"),
    }
    if part == 1:
        mistakes[UNSCORED_GRAD] = named("unscored-grad")
    return mistakes


def check_cross_entropy(result, logits, targets, *, what, expected=None):
    """(loss, grad_logits) against the loop (or ``expected``): the loss first, then the gradient."""
    loss, grad = check_tuple(result, what, ("loss", "grad_logits"))
    want_loss, want_grad = cross_entropy_loop(logits, targets) if expected is None else expected
    check_loss(loss, want_loss, what=what, mistakes=ce_mistakes(logits, targets, 0))
    mistakes = ce_mistakes(logits, targets, 1)
    dtype = np.asarray(logits).dtype
    if dtype == np.float32:
        mistakes[PROMOTED] = want_grad
    check_array(
        grad,
        np.asarray(want_grad).astype(dtype),
        what=f"grad_logits of {what}",
        dims="B T V",
        mistakes=mistakes,
    )


def ce_inputs(r, b=CB, t=CT, v=CV, scored=0.6, spread=2.0, dtype=np.float64):
    """Random logits (B, T, V) and targets, about ``scored`` of the positions scored (the rest
    IGNORE), the first position of the batch always scored."""
    logits = (r.standard_normal((b, t, v)) * spread).astype(dtype)
    targets = np.where(r.random((b, t)) < scored, r.integers(0, v, size=(b, t)), IGNORE)
    targets[0, 0] = r.integers(0, v)
    return logits, targets.astype(np.int64)


@exercise("cross_entropy")
class TestCrossEntropy:
    def test_a_float_loss_and_a_gradient_shaped_like_the_logits(self, lesson):
        """a float loss and grad_logits (B, T, V)"""
        logits, targets = ce_inputs(rng(1))
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what="cross_entropy(logits (B, T, V) = (3, 4, 7), targets (B, T))",
        )

    @hand_checked
    def test_two_scored_positions_and_one_unscored_by_hand(self, lesson):
        """two scored positions and one unscored, by hand: loss = (ln 4 + ln 2) / 2"""
        # Position 0: logits [0, 0, 0, 0], target 2: softmax 1/4 each, -log(1/4) = ln 4, gradient
        # [1/4, 1/4, -3/4, 1/4]. Position 1: logits [ln 3, 0, 0, 0], target 0: softmax
        # [1/2, 1/6, 1/6, 1/6], -log(1/2) = ln 2, gradient [-1/2, 1/6, 1/6, 1/6]. Position 2:
        # target -1, not scored: no loss, a zero gradient. N = 2: the loss is (ln 4 + ln 2) / 2
        # and each scored row of the gradient is halved.
        # Under an instructor's secret: each row shifted by a constant (the softmax does not
        # change), the classes and the positions reordered.
        var = variation("cross entropy by hand")
        classes, positions = var.permutation(4), var.permutation(3)
        shift = np.array([var.shift(), var.shift(), var.shift()])[:, None]
        logits = np.array([[0.0, 0.0, 0.0, 0.0], [math.log(3), 0.0, 0.0, 0.0], [2.0, -1.0, 0.0, 1.0]]) + shift
        relabel = np.argsort(classes)  # old class c is new class relabel[c]
        targets = np.array([relabel[2], relabel[0], IGNORE])
        grad = np.array([[0.25, 0.25, -0.75, 0.25], [-0.5, 1 / 6, 1 / 6, 1 / 6], [0.0, 0.0, 0.0, 0.0]]) / 2
        logits, targets = logits[:, classes][positions][None], targets[positions][None]
        expected = (1.5 * math.log(2), grad[:, classes][positions][None])
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what=f"cross_entropy(logits={shown(logits)}, targets={shown(targets)})",
            expected=expected,
        )

    def test_matches_the_loop_over_scored_positions(self, lesson):
        """loss and gradient equal the position-by-position loop; N counts scored positions only"""
        r = rng(2)
        logits, targets = ce_inputs(r, b=4, t=5, v=6, scored=0.4)
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what=f"cross_entropy(logits (B, T, V) = (4, 5, 6), targets with {int((targets != IGNORE).sum())} "
            "of the 20 positions scored)",
        )

    def test_an_unscored_target_is_not_the_last_class(self, lesson):
        """-1 is not a token: reading it as an index picks the last class, which changes the loss"""
        # At every unscored position the last class has a logit far below the others: read as
        # a target (index -1), it would add about 30 to the loss and -1 to its gradient.
        r = rng(3)
        logits, targets = ce_inputs(r, scored=0.5)
        logits[..., -1] = np.where(targets == IGNORE, -30.0, logits[..., -1])
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what=f"cross_entropy(logits (3, 4, 7), targets with {int((targets == IGNORE).sum())} unscored "
            "positions (-1), where the last class's logit is -30)",
        )

    def test_nothing_scored_gives_nan_and_a_zero_gradient(self, lesson):
        """N = 0: the loss is NaN (a mean of nothing) and the gradient all zeros"""
        r = rng(4)
        logits, _ = ce_inputs(r)
        targets = np.full((CB, CT), IGNORE, dtype=np.int64)
        what = "cross_entropy(logits (3, 4, 7), targets all -1: nothing scored)"
        loss, grad = check_tuple(lesson.cross_entropy(logits, targets), what, ("loss", "grad_logits"))
        check_loss(loss, math.nan, what=what + " (NaN, as PyTorch's mean over no position)")
        check_array(grad, np.zeros(logits.shape), what=f"grad_logits of {what}", dims="B T V")

    def test_logits_1e4_apart_stay_finite(self, lesson):
        """logits 1e4 apart: log-softmax form, every value finite"""
        r = rng(5)
        logits, targets = ce_inputs(r)
        logits = logits + r.integers(-1, 2, size=logits.shape) * 1e4
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what="cross_entropy(logits (3, 4, 7) with entries 1e4 apart, targets)",
        )

    def test_float32_gives_a_float32_gradient_and_the_logits_are_left_unchanged(self, lesson):
        """float32 logits give a float32 gradient; logits and targets are left unchanged"""
        r = rng(6)
        logits, targets = ce_inputs(r, dtype=np.float32)
        what = "cross_entropy(logits float32 (3, 4, 7), targets)"
        result = lesson.cross_entropy(logits, targets)
        check_not_modified(lesson, what)
        loss, grad = check_tuple(result, what, ("loss", "grad_logits"))
        want_loss, want_grad = cross_entropy_loop(logits, targets)
        check_loss(loss, want_loss, what=what, rtol=2e-4, atol=2e-5)
        check_array(
            grad,
            want_grad.astype(np.float32),
            what=f"grad_logits of {what}",
            dims="B T V",
            mistakes={PROMOTED: want_grad},
        )

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        v=st.integers(1, 5),
        scored=st.floats(0.0, 1.0),
        spread=st.sampled_from([0.5, 3.0, 30.0]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_loop_for_any_sizes(self, lesson, b, t, v, scored, spread, seed):
        """matches the loop for any sizes, share of scored positions and size of logits"""
        logits, targets = ce_inputs(rng(seed), b, t, v, scored, spread)
        check_cross_entropy(
            lesson.cross_entropy(logits, targets),
            logits,
            targets,
            what=f"cross_entropy(logits {logits.shape} of size about {spread:g}, targets with "
            f"{int((targets != IGNORE).sum())} scored)",
        )


# ---------------------------------------------------------------- layer_forward, layer_backward
def layer_params(r, d, n_heads, n_kv_heads, k, spread=1.5):
    """Random parameters: w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D), every bias. Scores of
    size about ``spread``: weights far from uniform."""
    s = 1.0 / math.sqrt(d)
    return {
        "w_q": r.standard_normal((d, n_heads * k)) * s * spread,
        "b_q": r.standard_normal(n_heads * k) * 0.5,
        "w_k": r.standard_normal((d, n_kv_heads * k)) * s * spread,
        "b_k": r.standard_normal(n_kv_heads * k) * 0.5,
        "w_v": r.standard_normal((d, n_kv_heads * k)) * s,
        "b_v": r.standard_normal(n_kv_heads * k) * 0.5,
        "w_o": r.standard_normal((n_heads * k, d)) * s,
        "b_o": r.standard_normal(d) * 0.5,
    }


def layer_inputs(r, b=B, t=T, n_heads=H, n_kv_heads=None, k=K):
    """x (B, T, D) with D = H*K, a layer's parameters, grad_out (B, T, D)."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    d = n_heads * k
    return r.standard_normal((b, t, d)), layer_params(r, d, n_heads, n_kv, k), r.standard_normal((b, t, d))


def random_mask(r, t):
    """(T, T) booleans, about 60% True, the diagonal always True (every position sees itself)."""
    return (r.random((t, t)) < 0.6) | np.eye(t, dtype=bool)


def check_layer_out(result, x, params, n_heads, n_kv_heads, mask, *, what, expected=None):
    """(out, cache): out against lesson 8's self-attention, the cache a dict. Returns the cache."""
    out, cache = check_tuple(result, what, ("out", "cache"))
    if not isinstance(cache, dict):
        kind = "None" if cache is None else type(cache).__name__
        raise AssertionError(
            f"the cache of {what} is {kind}; it must be a dict of arrays (what layer_backward reads)."
        )
    want = layer_out(x, params, n_heads, n_kv_heads, mask) if expected is None else expected
    check_array(out, want, what=f"out of {what}", dims="B T D")
    return cache


@exercise("layer_forward")
class TestLayerForward:
    def test_out_has_the_shape_of_x_and_the_cache_is_a_dict(self, lesson):
        """out (B, T, D) and a cache dict"""
        x, params, _ = layer_inputs(rng(20))
        mask = causal(T)
        check_layer_out(
            lesson.layer_forward(x, params, H, H, mask),
            x,
            params,
            H,
            H,
            mask,
            what="layer_forward(x (B, T, D) = (2, 5, 12), params (3 heads of K=4), 3, 3, causal mask (T, T))",
        )

    @hand_checked
    def test_uniform_weights_average_the_positions_seen_by_hand(self, lesson):
        """w_q = w_k = 0, w_v = w_o = I: out[b, t] is the mean of x[b, 0 .. t]"""
        # Every score is 0, so each query spreads its weight evenly over the t + 1 positions the
        # causal mask lets it see; the values are x itself (w_v = I, no biases) and w_o = I, so
        # out[b, t] = (x[b, 0] + ... + x[b, t]) / (t + 1), whatever the heads.
        r = rng(21)
        x = r.standard_normal((B, T, D)).round(1)
        params = {
            "w_q": np.zeros((D, D)),
            "b_q": np.zeros(D),
            "w_k": np.zeros((D, D)),
            "b_k": np.zeros(D),
            "w_v": np.eye(D),
            "b_v": np.zeros(D),
            "w_o": np.eye(D),
            "b_o": np.zeros(D),
        }
        expected = np.cumsum(x, axis=1) / np.arange(1, T + 1)[None, :, None]
        check_layer_out(
            lesson.layer_forward(x, params, H, H, causal(T)),
            x,
            params,
            H,
            H,
            causal(T),
            what=f"layer_forward(x (2, 5, 12), params with w_q = w_k = 0 and w_v = w_o = I, 3, 3, causal "
            f"mask) (x[0, :, 0] = {shown(x[0, :, 0])})",
            expected=expected,
        )

    def test_the_mask_passed_in_is_used(self, lesson):
        """a mask other than the causal one: the layer uses the mask it is given"""
        r = rng(22)
        x, params, _ = layer_inputs(r)
        mask = random_mask(r, T)
        check_layer_out(
            lesson.layer_forward(x, params, H, H, mask),
            x,
            params,
            H,
            H,
            mask,
            what=f"layer_forward(x (2, 5, 12), params, 3, 3, mask={shown(mask.astype(int))})",
        )

    def test_grouped_query_attention(self, lesson):
        """G = 2 and G = 1 key/value heads for H = 6 query heads (w_k, w_v (D, G*K))"""
        r = rng(23)
        for n_kv in (GG, 1):
            x, params, _ = layer_inputs(r, n_heads=GH, n_kv_heads=n_kv, k=GK)
            check_layer_out(
                lesson.layer_forward(x, params, GH, n_kv, causal(T)),
                x,
                params,
                GH,
                n_kv,
                causal(T),
                what=f"layer_forward(x (2, 5, 12), params (w_k, w_v (D, G*K) = (12, {n_kv * GK})), "
                f"n_heads=6, n_kv_heads={n_kv}, causal mask)",
            )

    def test_the_inputs_are_left_unchanged(self, lesson):
        """x, params and the mask are left unchanged"""
        r = rng(24)
        x, params, _ = layer_inputs(r, n_heads=GH, n_kv_heads=3, k=GK)
        what = "layer_forward(x, params, 6, 3, causal mask)"
        result = lesson.layer_forward(x, params, GH, 3, causal(T))
        check_not_modified(lesson, what)
        check_layer_out(result, x, params, GH, 3, causal(T), what=what)

    @given(
        b=st.integers(1, 2),
        t=st.integers(1, 4),
        n_kv=st.integers(1, 2),
        r=st.integers(1, 3),
        k=st.integers(1, 3),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_lesson_8_for_any_sizes(self, lesson, b, t, n_kv, r, k, masked, seed):
        """matches lesson 8's self-attention for any sizes, groups and mask"""
        g = rng(seed)
        n_heads = n_kv * r
        x, params, _ = layer_inputs(g, b, t, n_heads, n_kv, k)
        mask = random_mask(g, t) if masked else causal(t)
        check_layer_out(
            lesson.layer_forward(x, params, n_heads, n_kv, mask),
            x,
            params,
            n_heads,
            n_kv,
            mask,
            what=f"layer_forward(x {x.shape}, params, {n_heads}, {n_kv}, mask {shown(mask.astype(int))})",
        )


# The order of the checks: the backward pass's own order (the output projection first), so that
# the first gradient that is wrong is the one where the mistake happens; grad_x last.
LAYER_ORDER = ("b_o", "w_o", "w_v", "b_v", "w_k", "b_k", "w_q", "b_q")


def layer_mistakes(args, pick, grouped):
    """Named wrong answers for the gradient ``pick`` takes from (grad_x, grads)."""

    def named(*how):
        return lambda: pick(layer_backward_variant(*args, how=how))

    mistakes = {
        RESIDUAL_IN_LAYER: named("residual"),
        W_O_SKIPPED: named("w-o-skipped"),
        DQ_NO_SCALE: named("dq-no-scale"),
        DK_NO_SCALE: named("dk-no-scale"),
        X_QUERIES_ONLY: named("x-q-only"),
    }
    if grouped:
        mistakes[GROUP_NOT_SUMMED.format(how="only the first query head of each group was kept")] = named(
            "kv-first"
        )
        mistakes[GROUP_NOT_SUMMED.format(how="they were averaged")] = named("kv-mean")
        mistakes[GROUP_MODULO] = named("kv-modulo")
    return mistakes


def check_layer_backward(result, x, params, n_heads, n_kv_heads, mask, grad_out, *, what, expected=None):
    """(grad_x, grads) against the central differences of the layer's output: the parameters in
    the backward pass's order, then grad_x."""
    grad_x, grads = check_tuple(result, what, ("grad_x", "grad_params"))
    if not isinstance(grads, dict):
        kind = "None" if grads is None else type(grads).__name__
        raise AssertionError(f"grad_params of {what} is {kind}; expected a dict with the keys of params.")
    check_structure(grads, params, "grad_params", what)
    args = (x, params, n_heads, n_kv_heads, mask, grad_out)
    want_x, want = layer_gradients(*args) if expected is None else expected
    grouped = n_kv_heads < n_heads
    for name in LAYER_ORDER:
        check_array(
            grads[name],
            want[name],
            what=f"grad_params[{name!r}] of {what}",
            dims=model_letters((name,)),
            atol=ORACLE_ATOL,
            mistakes=layer_mistakes(args, lambda g, n=name: g[1][n], grouped),
        )
    check_array(
        grad_x,
        want_x,
        what=f"grad_x of {what}",
        dims="B T D",
        atol=ORACLE_ATOL,
        mistakes=layer_mistakes(args, lambda g: g[0], grouped),
    )


def backward_through(lesson, x, params, n_heads, n_kv_heads, mask, grad_out):
    """The learner's layer_backward on the cache of the learner's layer_forward, once that
    forward pass is seen to be right (a wrong cache would make a right backward pass wrong)."""
    what = f"layer_forward(x, params, {n_heads}, {n_kv_heads}, mask)"
    out, cache = check_tuple(
        lesson.layer_forward(x, params, n_heads, n_kv_heads, mask), what, ("out", "cache")
    )
    want = layer_out(x, params, n_heads, n_kv_heads, mask)
    if not isinstance(out, np.ndarray) or out.shape != want.shape or not np.allclose(out, want, 1e-6, 1e-9):
        raise AssertionError(
            f"layer_backward is checked on the cache your layer_forward returns, and {what} returned "
            "a wrong output here: fix layer_forward first (its own checks say how), then check again."
        )
    return lesson.layer_backward(cache, params, grad_out)


@exercise("layer_backward")
class TestLayerBackward:
    def test_every_gradient_has_the_shape_of_its_array(self, lesson):
        """grad_x (B, T, D) and grad_params with the keys and shapes of params"""
        x, params, grad_out = layer_inputs(rng(30))
        mask = causal(T)
        check_layer_backward(
            backward_through(lesson, x, params, H, H, mask, grad_out),
            x,
            params,
            H,
            H,
            mask,
            grad_out,
            what="layer_backward(cache of layer_forward(x (2, 5, 12), params, 3, 3, causal mask), "
            "params, grad_out (B, T, D))",
        )

    @hand_checked
    def test_a_key_value_head_sums_its_query_heads_by_hand(self, lesson):
        """uniform weights, W_O = I, grad_out = s: grad b_v = r*B*T*s for every entry"""
        # W_Q = W_K = 0: every score is b_q . b_k, the same along each row, so each query spreads
        # its weight evenly over the positions it sees, weights summing to 1. W_O = I and
        # grad_out = s everywhere: each head's output gets gradient s in every entry, so the
        # values of key/value head g get, summed over every position, T * s from each of the
        # r = 3 query heads that read it, in each of the B sequences: grad b_v = 3 * 2 * 5 * s.
        # Under an instructor's secret: another s.
        r = rng(31)
        x, params, _ = layer_inputs(r, n_heads=GH, n_kv_heads=GG, k=GK)
        s = 0.5 * variation("layer backward by hand").scale()
        params = {**params, "w_q": np.zeros((D, D)), "w_k": np.zeros((D, GG * GK)), "w_o": np.eye(D)}
        grad_out = np.full((B, T, D), s)
        n_rep = GH // GG
        what = (
            "layer_backward(cache, params with w_q = w_k = 0 and w_o = I (6 query heads, 2 key/value "
            f"heads), grad_out = {s:g} everywhere)"
        )
        result = backward_through(lesson, x, params, GH, GG, causal(T), grad_out)
        _, grads = check_tuple(result, what, ("grad_x", "grad_params"))
        if not isinstance(grads, dict) or "b_v" not in grads:
            raise AssertionError(f"grad_params of {what} must be a dict with the keys of params.")
        args = (x, params, GH, GG, causal(T), grad_out)
        check_array(
            grads["b_v"],
            np.full(GG * GK, n_rep * B * T * s),
            what=f"grad_params['b_v'] of {what} (every entry: r*B*T*{s:g} = {n_rep * B * T * s:g}, the "
            "sum over the r = 3 query heads of each key/value head)",
            dims="G*K",
            mistakes=layer_mistakes(args, lambda g: g[1]["b_v"], True),
        )
        check_layer_backward(result, *args, what=what)

    def test_multi_head_attention_matches_central_differences(self, lesson):
        """H = 3 heads (G = H) with a mask other than the causal one: central differences"""
        r = rng(32)
        x, params, grad_out = layer_inputs(r)
        mask = random_mask(r, T)
        check_layer_backward(
            backward_through(lesson, x, params, H, H, mask, grad_out),
            x,
            params,
            H,
            H,
            mask,
            grad_out,
            what=f"layer_backward(cache of layer_forward(x (2, 5, 12), params, 3, 3, "
            f"mask={shown(mask.astype(int))}), params, grad_out)",
        )

    def test_grouped_query_attention_matches_central_differences(self, lesson):
        """H = 6 query heads with G = 2, then G = 1: a key/value head's gradient sums its group"""
        r = rng(33)
        for n_kv in (GG, 1):
            x, params, grad_out = layer_inputs(r, n_heads=GH, n_kv_heads=n_kv, k=GK)
            check_layer_backward(
                backward_through(lesson, x, params, GH, n_kv, causal(T), grad_out),
                x,
                params,
                GH,
                n_kv,
                causal(T),
                grad_out,
                what=f"layer_backward(cache of layer_forward(x (2, 5, 12), params (w_k, w_v (D, G*K) = "
                f"(12, {n_kv * GK})), 6, {n_kv}, causal mask), params, grad_out)",
            )

    def test_grad_x_leaves_the_residual_path_to_the_caller(self, lesson):
        """grad_x is the attention's alone: with w_o = 0 nothing flows back to x"""
        # With W_O = 0 the layer's output is b_o whatever x is: the gradient of x through the
        # attention is exactly zero. The residual path (grad_out) belongs to model_gradients.
        r = rng(34)
        x, params, grad_out = layer_inputs(r, n_heads=GH, n_kv_heads=3, k=GK)
        params = {**params, "w_o": np.zeros((D, D))}
        what = (
            "layer_backward(cache of layer_forward(x, params with w_o = 0, 6, 3, causal mask), params, "
            "grad_out)"
        )
        result = backward_through(lesson, x, params, GH, 3, causal(T), grad_out)
        grad_x, _ = check_tuple(result, what, ("grad_x", "grad_params"))
        args = (x, params, GH, 3, causal(T), grad_out)
        check_array(
            grad_x,
            np.zeros((B, T, D)),
            what=f"grad_x of {what} (all zeros: x reaches the output only through w_o)",
            dims="B T D",
            atol=ORACLE_ATOL,
            mistakes=layer_mistakes(args, lambda g: g[0], True),
        )
        check_layer_backward(result, *args, what=what)

    def test_the_inputs_are_left_unchanged(self, lesson):
        """the cache, params and grad_out are left unchanged"""
        r = rng(35)
        x, params, grad_out = layer_inputs(r, n_heads=GH, n_kv_heads=GG, k=GK)
        what = "layer_backward(cache of layer_forward(x, params, 6, 2, causal mask), params, grad_out)"
        result = backward_through(lesson, x, params, GH, GG, causal(T), grad_out)
        check_not_modified(lesson, what)
        check_layer_backward(result, x, params, GH, GG, causal(T), grad_out, what=what)

    @given(
        b=st.integers(1, 2),
        t=st.integers(1, 4),
        n_kv=st.integers(1, 2),
        r=st.integers(1, 3),
        k=st.integers(1, 2),
        masked=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(self, lesson, b, t, n_kv, r, k, masked, seed):
        """matches central differences for any sizes, groups and mask"""
        g = rng(seed)
        n_heads = n_kv * r
        x, params, grad_out = layer_inputs(g, b, t, n_heads, n_kv, k)
        mask = random_mask(g, t) if masked else causal(t)
        check_layer_backward(
            backward_through(lesson, x, params, n_heads, n_kv, mask, grad_out),
            x,
            params,
            n_heads,
            n_kv,
            mask,
            grad_out,
            what=f"layer_backward(cache of layer_forward(x {x.shape}, params, {n_heads}, {n_kv}, mask "
            f"{shown(mask.astype(int))}), params, grad_out)",
        )


# ---------------------------------------------------------------- model_gradients
def random_model(r, v=MV, n_l=ML, d=MD, n_heads=H, n_kv_heads=None, n_layers=2, spread=2.0):
    """A random model in the tiny model's layout, its attention far from uniform."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return {
        "tok_emb": r.standard_normal((v, d)),
        "pos_emb": r.standard_normal((n_l, d)) * 0.5,
        "unembed": r.standard_normal((d, v)) / math.sqrt(d),
        "b_unembed": r.standard_normal(v) * 0.1,
        "layers": [layer_params(r, d, n_heads, n_kv, d // n_heads, spread) for _ in range(n_layers)],
    }


def model_task(r, b=MB, t=MT, v=MV, tokens_from=None):
    """Tokens (B, T) (from 0 .. ``tokens_from`` - 1 when given, so that they repeat more) and
    targets: about half the positions scored, sequence 1 none at all, sequence 0 at least one."""
    tokens = r.integers(0, tokens_from or v, size=(b, t))
    targets = np.where(r.random((b, t)) < 0.5, r.integers(0, v, size=(b, t)), IGNORE)
    targets[0, r.integers(0, t)] = r.integers(0, v)
    if b > 1:
        targets[1] = IGNORE
    return tokens.astype(np.int64), targets.astype(np.int64)


def model_mistakes(args, path):
    """Named wrong answers for the gradient at ``path`` of (loss, grads)."""

    def named(*how):
        return lambda: at(model_variant(*args, how=how)[1], path)

    mistakes = {
        RESIDUAL_DROPPED: named("no-residual"),
        BUFFERED: named("buffered"),
        POS_MEAN: named("pos-mean"),
    }
    if len(args[0]["layers"]) > 1:
        mistakes[LAYERS_REVERSED] = named("layers-reversed")
    return mistakes


def backward_order(model):
    """The paths of the model's arrays in the order the backward pass reaches them: the
    unembedding, the layers from the last to the first, then the embeddings."""
    paths = [("b_unembed",), ("unembed",)]
    for i in reversed(range(len(model["layers"]))):
        paths += [("layers", i, name) for name in LAYER_ORDER]
    return paths + [("pos_emb",), ("tok_emb",)]


def check_model_gradients(result, model, tokens, targets, n_heads, n_kv_heads, *, what, expected=None):
    """(loss, grads): the loss against the model's forward pass, every gradient against central
    differences, in the backward pass's order (the first wrong one is nearest its cause)."""
    loss, grads = check_tuple(result, what, ("loss", "grads"))
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    want_loss, want = (
        model_gradients_oracle(model, tokens, targets, n_heads, n_kv) if expected is None else expected
    )
    check_loss(loss, want_loss, what=what)
    position = grads.get("pos_emb") if isinstance(grads, dict) else None
    n_t, (n_l, n_d) = tokens.shape[1], np.shape(model["pos_emb"])
    if isinstance(position, np.ndarray) and position.shape == (n_t, n_d) and n_t < n_l:
        raise KnownMistake(
            f"grads['pos_emb'] of {what} has the shape (T, D) = {position.shape}; expected pos_emb's "
            f"shape (L, D) = {(n_l, n_d)}, "
            + (f"row {n_t} zero." if n_l - n_t == 1 else f"rows {n_t} .. {n_l - 1} zero."),
            POS_NOT_PADDED,
        )
    args = (model, tokens, targets, n_heads, n_kv)
    check_structure(grads, model, "grads", what)
    for path in backward_order(model):
        check_array(
            at(grads, path),
            at(want, path),
            what=array_name("grads", path, what),
            dims=model_letters(path),
            atol=ORACLE_ATOL,
            mistakes=model_mistakes(args, path),
        )


def model_what(model, tokens, targets, n_heads, n_kv_heads):
    (n_v, n_d), n_l = np.shape(model["tok_emb"]), np.shape(model["pos_emb"])[0]
    kv = "" if n_kv_heads is None else f", n_kv_heads={n_kv_heads}"
    layers = len(model["layers"])
    return (
        f"model_gradients(model (V={n_v}, L={n_l}, D={n_d}, {layers} layer{'' if layers == 1 else 's'}), "
        f"tokens (B, T) = "
        f"{tokens.shape}, targets ({int((targets != IGNORE).sum())} scored), n_heads={n_heads}{kv})"
    )


def call_model_gradients(lesson, model, tokens, targets, n_heads, n_kv_heads=None):
    if n_kv_heads is None:
        return lesson.model_gradients(model, tokens, targets, n_heads)
    return lesson.model_gradients(model, tokens, targets, n_heads, n_kv_heads)


@exercise("model_gradients")
class TestModelGradients:
    def test_the_loss_and_gradients_shaped_like_the_model(self, lesson):
        """a float loss and grads shaped like the model (multi-head, n_kv_heads left out)"""
        r = rng(40)
        model = random_model(r)
        tokens, targets = model_task(r)
        check_model_gradients(
            call_model_gradients(lesson, model, tokens, targets, H),
            model,
            tokens,
            targets,
            H,
            None,
            what=model_what(model, tokens, targets, H, None),
        )

    @hand_checked
    def test_embeddings_and_unembedding_alone_by_hand(self, lesson):
        """no layers, one token twice: tok_emb row 0 gets both positions' gradients, 2 * s/2"""
        # V = 2, D = 1, L = 4, no layers; every embedding is 0, so x = 0, the logits are b_unembed
        # = [0, 0] and the softmax [1/2, 1/2] at every position. Tokens [0, 0, 1], targets
        # [1, 1, -1]: N = 2, the loss ln 2, grad_logits [1/4, -1/4] at the two scored positions
        # and 0 at the third. unembed = [[s, -s]], so the stream's gradient there is
        # 1/4 * s - 1/4 * (-s) = s/2. tok_emb: row 0 gets s/2 twice (token 0 sits at both
        # scored positions): s; row 1 gets 0. pos_emb: rows 0 and 1 get s/2, rows 2 and 3 (the
        # unscored position, and a position past T = 3) get 0. unembed: x = 0, so 0;
        # b_unembed: [1/4, -1/4] summed over the positions: [1/2, -1/2].
        # Under an instructor's secret: another s, the two classes swapped or not.
        var = variation("model gradients by hand")
        s = var.scale()
        swap_classes = var.pick([False, True])
        classes = [1, 0] if swap_classes else [0, 1]
        model = {
            "tok_emb": np.zeros((2, 1)),
            "pos_emb": np.zeros((4, 1)),
            "unembed": np.array([[s, -s]])[:, classes],
            "b_unembed": np.zeros(2),
            "layers": [],
        }
        tokens = np.array([[0, 0, 1]])
        target = classes.index(1)  # class 1, wherever the swap put it
        targets = np.array([[target, target, IGNORE]])
        expected = (
            math.log(2),
            {
                "tok_emb": np.array([[s], [0.0]]),
                "pos_emb": np.array([[s / 2], [s / 2], [0.0], [0.0]]),
                "unembed": np.zeros((1, 2)),
                "b_unembed": np.array([0.5, -0.5])[classes],
                "layers": [],
            },
        )
        check_model_gradients(
            lesson.model_gradients(model, tokens, targets, 1),
            model,
            tokens,
            targets,
            1,
            None,
            what=f"model_gradients(model without layers (unembed = {shown(model['unembed'])}, every other "
            f"array 0), tokens=[[0, 0, 1]], targets={shown(targets)}, n_heads=1)",
            expected=expected,
        )

    def test_grouped_query_attention_matches_central_differences(self, lesson):
        """H = 6 query heads sharing G = 2 key/value heads: central differences"""
        r = rng(41)
        model = random_model(r, n_heads=GH, n_kv_heads=GG)
        tokens, targets = model_task(r)
        check_model_gradients(
            call_model_gradients(lesson, model, tokens, targets, GH, GG),
            model,
            tokens,
            targets,
            GH,
            GG,
            what=model_what(model, tokens, targets, GH, GG),
        )

    def test_position_rows_past_t_get_zeros(self, lesson):
        """T = 4 < L = 9 with multi-query attention (G = 1): pos_emb rows 4 .. 8 get zeros"""
        r = rng(42)
        model = random_model(r, n_heads=GH, n_kv_heads=1)
        tokens, targets = model_task(r, t=4)
        check_model_gradients(
            call_model_gradients(lesson, model, tokens, targets, GH, 1),
            model,
            tokens,
            targets,
            GH,
            1,
            what=model_what(model, tokens, targets, GH, 1),
        )

    def test_a_token_repeated_many_times_adds_every_gradient(self, lesson):
        """tokens from 3 of the 7 words only, each repeated: its row sums every position's gradient"""
        r = rng(43)
        model = random_model(r)
        tokens, targets = model_task(r, b=4, tokens_from=3)
        check_model_gradients(
            call_model_gradients(lesson, model, tokens, targets, H),
            model,
            tokens,
            targets,
            H,
            None,
            what=model_what(model, tokens, targets, H, None) + f" (tokens={shown(tokens)})",
        )

    def test_the_model_is_left_unchanged(self, lesson):
        """the model, tokens and targets are left unchanged"""
        r = rng(44)
        model = random_model(r, n_heads=GH, n_kv_heads=3)
        tokens, targets = model_task(r)
        what = model_what(model, tokens, targets, GH, 3)
        result = call_model_gradients(lesson, model, tokens, targets, GH, 3)
        check_not_modified(lesson, what)
        check_model_gradients(result, model, tokens, targets, GH, 3, what=what)

    @given(
        v=st.integers(2, 5),
        n_l=st.integers(1, 4),
        short=st.integers(0, 2),
        b=st.integers(1, 2),
        n_kv=st.integers(1, 2),
        r=st.integers(1, 2),
        k=st.integers(1, 2),
        n_layers=st.integers(0, 2),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_central_differences_for_any_sizes(
        self, lesson, v, n_l, short, b, n_kv, r, k, n_layers, seed
    ):
        """matches central differences for any sizes, heads, groups and number of layers"""
        g = rng(seed)
        n_heads = n_kv * r
        model = random_model(g, v, n_l + short, n_heads * k, n_heads, n_kv, n_layers)
        tokens, targets = model_task(g, b, n_l, v)
        check_model_gradients(
            call_model_gradients(lesson, model, tokens, targets, n_heads, n_kv),
            model,
            tokens,
            targets,
            n_heads,
            n_kv,
            what=model_what(model, tokens, targets, n_heads, n_kv),
        )


# ---------------------------------------------------------------- adamw_step
# Trees of arrays. TREE is shaped like a model: arrays, a dict, and a list of layers, each a
# dict holding a 2-D and a 1-D array. Its array "b" of "head" has gradients near 1e-7, so small
# that eps (1e-8) is not negligible beside sqrt(v): where eps goes shows.
TREE = {
    "emb": (4, 3),
    "head": {"w": (3, 2), "b": (2,)},
    "layers": [{"w": (3, 3), "b": (3,)}, {"w": (3, 5), "b": (5,)}],
}
TREE_SHOWN = (
    "{'emb': (4, 3), 'head': {'w': (3, 2), 'b': (2,)}, 'layers': [{'w': (3, 3), 'b': (3,)}, "
    "{'w': (3, 5), 'b': (5,)}]}"
)
SMALL = ("head", "b")
LIST_TREE = [{"w": (2, 3), "b": (3,)}, {"w": (3, 2), "b": (2,)}]


def random_tree(r, shapes, scale=1.0, small=None):
    """A tree of random arrays shaped as ``shapes`` says (dicts and lists of shape tuples); the
    array at the path ``small``, if any, 1e-7 times smaller."""

    def build(node):
        if isinstance(node, dict):
            return {key: build(value) for key, value in node.items()}
        if isinstance(node, list):
            return [build(value) for value in node]
        return np.asarray(r.standard_normal(node) * scale)

    tree = build(shapes)
    if small is not None:
        *head, last = small
        at(tree, head)[last] = at(tree, small) * 1e-7
    return tree


def adamw_inputs(r, shapes=TREE, steps=10, small=SMALL):
    """A start tree and the gradients of ``steps`` steps."""
    start = random_tree(r, shapes)
    grads = [random_tree(r, shapes, small=small) for _ in range(steps)]
    return start, grads


ADAM_VARIANTS = {
    NO_BIAS_CORRECTION: ("no-bias-correction",),
    NO_BIAS_CORRECTION.plus(" (here m was left uncorrected)"): ("m-not-corrected",),
    NO_BIAS_CORRECTION.plus(" (here v was left uncorrected)"): ("v-not-corrected",),
    EPS_BEFORE: ("eps-before",),
    EPS_INSIDE: ("eps-inside",),
    L2_DECAY: ("l2",),
    DECAY_AFTER: ("decay-after",),
    DECAY_WITHOUT_LR: ("decay-without-lr",),
    BIASES_NOT_DECAYED: ("no-decay-1d",),
    STEP_PER_ARRAY: ("step-per-array",),
    MOMENTS_RESTARTED: ("restart",),
    MOMENTS_RESTARTED.plus(" (here the step count went on)"): ("restart-keep-step",),
}


def adamw_mistakes(args, index, part):
    """Named wrong answers: part ("params", "m" or "v") of step ``index`` (0-based) of the
    trajectory adamw_loop(*args) with a rule broken."""
    start, grads, lr, betas, eps, decay, first = args

    def named(how):
        def variant():
            params, state = adamw_loop(start, grads, lr, betas, eps, decay, how, first)[index]
            return params if part == "params" else state[part]

        return variant

    return {mistake: named(how) for mistake, how in ADAM_VARIANTS.items()}


def check_unchanged(lesson, what):
    """Nothing passed to adamw_step changed; the state changed in place is a known mistake."""
    touched = [label for label in lesson.mutated if label.startswith(("argument 3", "state"))]
    if touched:
        raise KnownMistake(
            f"{what} changed the state passed in, in place ({', '.join(touched)}).", STATE_MODIFIED
        )
    check_not_modified(lesson, what)


def check_state(state, expected, per_array_step, *, what, mistakes):
    """{"step": t, "m": tree, "v": tree} against the loop's."""
    if not isinstance(state, dict) or not {"step", "m", "v"} <= set(state):
        kind = (
            f"a dict with the keys {sorted(map(str, state))}"
            if isinstance(state, dict)
            else type(state).__name__
        )
        raise AssertionError(
            f"the state returned by {what} is {kind}; expected {{'step': t, 'm': tree, 'v': tree}}, t "
            "the number of updates so far, m and v trees shaped like params."
        )
    step, t = state["step"], expected["step"]
    if isinstance(step, np.ndarray) and step.ndim == 0:
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise AssertionError(
            f"state['step'] returned by {what} is {type(step).__name__}; expected the integer {t}."
        )
    if step != t:
        message = f"state['step'] returned by {what} is {step}; expected {t}, the number of updates so far."
        if step == per_array_step != t:
            raise KnownMistake(message, STEP_PER_ARRAY)
        raise AssertionError(message)
    for part in ("m", "v"):
        check_tree(
            state[part],
            expected[part],
            name=f"state[{part!r}]",
            call=what,
            letters=generic_letters(expected[part]),
            mistakes=mistakes(part),
        )


def smallest_gradients_first(grads):
    """The paths of a tree of gradients, the arrays of the smallest gradients first. A wrong
    answer is explained from the first array found wrong, and where eps is added shows the most
    beside small gradients: elsewhere it may move a weight by less than the margin within which
    a wrong answer is not told from the right one (and so not named)."""
    return sorted((path for path, _ in leaves(grads)), key=lambda path: float(np.abs(at(grads, path)).max()))


def run_adamw(lesson, start, grads, lr, *, what, first=None, **options):
    """adamw_step once per tree of ``grads``, each call given the params and state the one before
    returned (``first`` and ``start`` for the first): each step's params and state against the
    loop's. ``options``: betas, eps, weight_decay, passed on when given."""
    betas, eps = options.get("betas", (0.9, 0.999)), options.get("eps", 1e-8)
    decay = options.get("weight_decay", 0.01)
    args = (start, grads, lr, betas, eps, decay, first)
    expected = adamw_loop(*args[:6], (), first)
    params, state = start, first
    for index, g in enumerate(grads):
        call = f"adamw_step(params, grads, {'None' if state is None else 'state'}, lr={lr:g}" + "".join(
            f", {key}={value}" for key, value in options.items()
        )
        step = f"{call}) at step {index + 1} of {what}"
        result = lesson.adamw_step(params, g, state, lr, **options)
        check_unchanged(lesson, step)
        params, state = check_tuple(result, step, ("params", "state"))
        want_params, want_state = expected[index]
        check_tree(
            params,
            want_params,
            name="params",
            call=step,
            letters=generic_letters(want_params),
            mistakes=adamw_mistakes(args, index, "params"),
            order=smallest_gradients_first(g),
        )
        check_state(
            state,
            want_state,
            adamw_loop(*args[:6], ("step-per-array",), first)[index][1]["step"],
            what=step,
            mistakes=lambda part, index=index: adamw_mistakes(args, index, part),
        )


@exercise("adamw_step")
class TestAdamWStep:
    def test_one_step_returns_params_and_a_state_shaped_like_the_tree(self, lesson):
        """new params shaped like the tree and the state {"step": 1, "m": tree, "v": tree}"""
        start, grads = adamw_inputs(rng(50), steps=1)
        run_adamw(
            lesson,
            start,
            grads,
            0.05,
            what=f"a tree {TREE_SHOWN} from state None",
        )

    @hand_checked
    def test_the_first_step_moves_each_weight_by_lr_after_the_decay_by_hand(self, lesson):
        """the first step: p * (1 - lr * wd) - lr * g / (|g| + eps): each weight moves by about lr"""
        # At t = 1, m = (1 - b1) g and v = (1 - b2) g**2, so the bias corrections give m_hat = g
        # and v_hat = g**2 exactly: the update is lr * g / (|g| + eps), lr times the sign of g up
        # to eps. Before it, the decoupled decay multiplies p by 1 - lr * wd = 1 - 0.1 * 0.5 =
        # 0.95. p = [1, -2, 0.5], g = [0.5, -4, 0.25]: [0.95 - 0.1, -1.9 + 0.1, 0.475 - 0.1] =
        # [0.85, -1.8, 0.375] (eps shifts each by about 1e-8); m = 0.1 g, v = 0.001 g**2.
        # (One row of three, a 2-D array: the biases, 1-D, are the ones some leave undecayed.)
        # Under an instructor's secret: g scaled by s (the update hardly changes), p shifted by c,
        # the three weights reordered.
        var = variation("adamw by hand")
        s, c, order = var.scale(), var.shift(), var.permutation(3)
        p = (np.array([[1.0, -2.0, 0.5]]) + c)[:, order]
        g = (np.array([[0.5, -4.0, 0.25]]) * s)[:, order]
        expected_p = p * 0.95 - 0.1 * g / (np.abs(g) + 1e-8)
        what = f"adamw_step({{'w': {shown(p)}}}, {{'w': {shown(g)}}}, None, lr=0.1, weight_decay=0.5)"
        result = lesson.adamw_step({"w": p}, {"w": g}, None, 0.1, weight_decay=0.5)
        check_unchanged(lesson, what)
        params, state = check_tuple(result, what, ("params", "state"))
        args = ({"w": p}, [{"w": g}], 0.1, (0.9, 0.999), 1e-8, 0.5, None)
        check_tree(
            params,
            {"w": expected_p},
            name="params",
            call=what,
            letters=lambda path: "1 n",
            mistakes=adamw_mistakes(args, 0, "params"),
        )
        check_state(
            state,
            {"step": 1, "m": {"w": 0.1 * g}, "v": {"w": 0.001 * g * g}},
            1,  # one array: counted per array, the step is 1 all the same
            what=what,
            mistakes=lambda part: adamw_mistakes(args, 0, part),
        )

    def test_ten_steps_match_pytorchs_adamw(self, lesson):
        """ten steps, each from the state the step before returned: PyTorch's AdamW, entry by entry"""
        r = rng(51)
        start, grads = adamw_inputs(r)
        lr = float(r.uniform(0.02, 0.1))
        run_adamw(
            lesson,
            start,
            grads,
            lr,
            what=f"ten steps on a tree {TREE_SHOWN} whose ['head']['b'] has gradients near 1e-7",
        )

    def test_betas_eps_and_weight_decay_passed_in(self, lesson):
        """betas, eps and weight_decay passed in, on a list of dicts, for five steps"""
        r = rng(52)
        start, grads = adamw_inputs(r, LIST_TREE, steps=5, small=(1, "b"))
        run_adamw(
            lesson,
            start,
            grads,
            float(r.uniform(0.02, 0.1)),
            what="five steps on a list [{'w': (2, 3), 'b': (3,)}, {'w': (3, 2), 'b': (2,)}]",
            betas=(0.8, 0.99),
            eps=1e-6,
            weight_decay=0.1,
        )

    def test_a_state_passed_in_is_continued(self, lesson):
        """a state at step 7 with its own moments: t = 8, m and v continue from the state's"""
        r = rng(53)
        start, grads = adamw_inputs(r, steps=2)
        first = {
            "step": 7,
            "m": random_tree(r, TREE, 0.1),
            "v": tree_map(lambda a: np.abs(a) * 0.01, random_tree(r, TREE)),
        }
        run_adamw(
            lesson,
            start,
            grads,
            float(r.uniform(0.02, 0.1)),
            what=f"two steps on a tree {TREE_SHOWN}, starting from a state {{'step': 7, 'm': ..., 'v': ...}}",
            first=first,
        )

    @given(
        shapes=st.lists(
            st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple), min_size=1, max_size=3
        ),
        steps=st.integers(1, 3),
        lr=st.floats(1e-3, 0.3),
        b1=st.sampled_from([0.0, 0.5, 0.9]),
        b2=st.sampled_from([0.9, 0.999]),
        eps=st.sampled_from([1e-8, 1e-3]),
        decay=st.sampled_from([0.0, 0.01, 0.3]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_pytorchs_adamw_for_any_tree(self, lesson, shapes, steps, lr, b1, b2, eps, decay, seed):
        """matches PyTorch's AdamW for any tree of arrays and any betas, eps and weight_decay"""
        r = rng(seed)
        tree = {f"p{i}": shape for i, shape in enumerate(shapes)}
        start, grads = adamw_inputs(r, tree, steps, small=None)
        run_adamw(
            lesson,
            start,
            grads,
            lr,
            what=f"{steps} steps on a dict of arrays of shapes {shapes}",
            betas=(b1, b2),
            eps=eps,
            weight_decay=decay,
        )


# ---------------------------------------------------------------- train
def init_model(config, seed):
    """The lesson's given init_model: normal(0, 0.02) weights, zero biases, in this order (the
    recorded runs start from it; tests/test_l15_fixtures.py checks that it draws the same)."""
    draw = np.random.default_rng(seed)
    n_v, n_l, n_d = config["vocab_size"], config["max_len"], config["d_model"]

    def weight(*shape):
        return draw.normal(0.0, 0.02, size=shape)

    model = {
        "tok_emb": weight(n_v, n_d),
        "pos_emb": weight(n_l, n_d),
        "unembed": weight(n_d, n_v),
        "b_unembed": np.zeros(n_v),
    }
    model["layers"] = [
        {key: weight(n_d, n_d) if key.startswith("w") else np.zeros(n_d) for key in LAYER_KEYS}
        for _ in range(config["n_layers"])
    ]
    return model


def start_model(spec, init_seed):
    """A recorded run's first model: init_model's, its key/value projections cut to their first
    G*K columns when G < H (tools/make_l15_fixtures.py)."""
    model = init_model(spec["config"], init_seed)
    n_kv = spec["n_kv_heads"] or spec["n_heads"]
    width = n_kv * spec["config"]["d_model"] // spec["n_heads"]
    for layer in model["layers"]:
        for key in ("w_k", "w_v", "b_k", "b_v"):
            layer[key] = layer[key][..., :width].copy()
    return model


@cache
def recorded():
    """{case: {"spec", "losses", "step", "model", and "middle" for a run with chunks}} from the
    fixture file (see tools/make_l15_fixtures.py)."""
    with np.load(FIXTURES, allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    runs = {}
    for name in arrays["cases"]:
        name = str(name)
        runs[name] = {"spec": json.loads(str(arrays[f"{name}__spec"]))}
        for part in ("losses", "step", "model", "middle"):
            if f"{name}__{part}" in arrays:
                runs[name][part] = arrays[f"{name}__{part}"]
    return runs


def recorded_model(spec, values):
    """A model of a run from its raveled arrays (in the order of the spec's leaves)."""
    model = {"layers": [{} for _ in range(spec["config"]["n_layers"])]}
    offset = 0
    for path, shape in spec["leaves"]:
        size = int(np.prod(shape))
        array = np.array(values[offset : offset + size]).reshape(shape)
        offset += size
        keys = path.split(".")
        if keys[0] == "layers":
            model["layers"][int(keys[1])][keys[2]] = array
        else:
            model[keys[0]] = array
    return model


def reordered(model, features, query_heads, kv_heads, n_heads):
    """The model with its D features reordered (in every array that reads or writes the residual
    stream) and its heads: query head i of the new model is query head ``query_heads[i]`` of the
    old, key/value head g is ``kv_heads[g]``. Every step of a training run commutes with this:
    the losses stay, the trained model is reordered the same way."""
    k = model["tok_emb"].shape[1] // n_heads
    q_cols = np.concatenate([np.arange(h * k, (h + 1) * k) for h in query_heads])
    kv_cols = np.concatenate([np.arange(g * k, (g + 1) * k) for g in kv_heads])
    new = {
        "tok_emb": model["tok_emb"][:, features],
        "pos_emb": model["pos_emb"][:, features],
        "unembed": model["unembed"][features],
        "b_unembed": model["b_unembed"].copy(),
        "layers": [],
    }
    for p in model["layers"]:
        new["layers"].append(
            {
                "w_q": p["w_q"][features][:, q_cols],
                "b_q": p["b_q"][q_cols],
                "w_k": p["w_k"][features][:, kv_cols],
                "b_k": p["b_k"][kv_cols],
                "w_v": p["w_v"][features][:, kv_cols],
                "b_v": p["b_v"][kv_cols],
                "w_o": p["w_o"][q_cols][:, features],
                "b_o": p["b_o"][features],
            }
        )
    return new


def recorded_run(name):
    """The recorded run ``name``: {"spec", "start" (the model it starts from), "data_seed",
    "losses", "model" (trained), "step", "middle" (after the first chunk, if any)}. Variant 0 in
    a public grade; under an instructor's secret another recorded variant, its models' features
    and heads reordered (the query heads moved with their key/value head's group, and within it)."""
    run = recorded()[name]
    spec = run["spec"]
    var = variation(f"train {name}")
    index = var.pick(list(range(len(spec["variants"]))))
    seeds = spec["variants"][index]
    models = {
        "start": start_model(spec, seeds["init_seed"]),
        "model": recorded_model(spec, run["model"][index]),
    }
    if "middle" in run:
        models["middle"] = recorded_model(spec, run["middle"][index])
    if var.secret:
        n_heads = spec["n_heads"]
        n_kv = spec["n_kv_heads"] or n_heads
        r = n_heads // n_kv
        groups = var.permutation(n_kv)
        query_heads = [int(g) * r + int(j) for g in groups for j in var.permutation(r)]
        features = var.permutation(spec["config"]["d_model"])
        models = {key: reordered(m, features, query_heads, groups, n_heads) for key, m in models.items()}
    return {
        "spec": spec,
        "data_seed": seeds["data_seed"],
        "losses": np.array(run["losses"][index]),
        "step": int(run["step"][index]),
        **models,
    }


def train_call(spec, data_seed, steps=None, start_step=None, state=None):
    """The positional and keyword arguments of a recorded run's train call (n_kv_heads, state,
    start_step and total_steps only when they are not the defaults)."""
    args = [
        spec["steps"] if steps is None else steps,
        spec["batch_size"],
        spec["lr"],
        data_seed,
        spec["n_heads"],
    ]
    if spec["n_kv_heads"] is not None:
        args.append(spec["n_kv_heads"])
    kwargs = {"weight_decay": spec["weight_decay"], "schedule": spec["schedule"]}
    if state is not None:
        kwargs["state"] = state
    first = spec["start_step"] if start_step is None else start_step
    if first:
        kwargs["start_step"] = first
    if spec["total_steps"] is not None:
        kwargs["total_steps"] = spec["total_steps"]
    return args, kwargs


def train_what(spec, args, kwargs):
    config = spec["config"]
    layers = config["n_layers"]
    model = (
        f"model (V={config['vocab_size']}, L={config['max_len']}, D={config['d_model']}, "
        f"{layers} layer{'' if layers == 1 else 's'})"
    )
    names = ["steps", "batch_size", "lr", "data_seed", "n_heads", "n_kv_heads"]
    shown_args = ", ".join(f"{n}={a!r}" for n, a in zip(names, args, strict=False))
    shown_kwargs = "".join(f", {k}={'state' if k == 'state' else repr(v)}" for k, v in kwargs.items())
    return f"train({model}, {shown_args}{shown_kwargs})"


def reference_run(kwargs, state):
    """train_reference's ``run`` for a call with these keyword arguments and this state."""
    return {
        "weight_decay": kwargs["weight_decay"],
        "schedule": kwargs["schedule"],
        "state": state,
        "start_step": kwargs.get("start_step", 0),
        "total_steps": kwargs.get("total_steps"),
    }


def train_mistakes(model, args, kwargs, state, path=None):
    """Named wrong answers for train(model, *args, **kwargs) (``state``: the right state passed
    in, or None): its losses (``path`` None) or the array at ``path`` of its trained model."""
    steps, batch_size, lr, data_seed, n_heads = args[:5]
    n_kv = args[5] if len(args) > 5 else None
    run = reference_run(kwargs, state)

    def named(*how):
        def variant():
            trained, losses, _ = train_reference(
                model, steps, batch_size, lr, data_seed, n_heads, n_kv, run, how
            )
            return losses if path is None else at(trained, path)

        return variant

    mistakes = {
        DATA_FROM_COUNTER: named("counter-data"),
        SCHEDULE_FROM_COUNTER: named("counter-schedule"),
        Mistake.any_of(DATA_FROM_COUNTER, SCHEDULE_FROM_COUNTER): named("counter-data", "counter-schedule"),
        TOTAL_IGNORED: named("total-ignored"),
        B1_FIXED: named("b1-fixed"),
        WD_IGNORED: named("wd-default"),
        SCHEDULE_IGNORED: named("schedule-ignored"),
    }
    if state is not None:
        mistakes[STATE_IGNORED] = named("state-ignored")
    return mistakes


def check_train(result, start, args, kwargs, state, want, *, what, losses_from=0, model="model", step=None):
    """(model, losses, state) of train(start, *args, **kwargs) against the recorded run ``want``:
    the losses (from ``losses_from`` on in the recorded ones), every array of the trained model
    (``want[model]``), the state's step count (``step``, default the recorded run's). Returns
    the trained model and the state."""
    trained, losses, new_state = check_tuple(result, what, ("model", "losses", "state"))
    want_losses = want["losses"][losses_from : losses_from + args[0]]
    mistakes = train_mistakes(start, args, kwargs, state)
    if isinstance(losses, np.ndarray) and losses.shape == want_losses.shape:
        # The first loss comes before any update: only the batch and the loss can make it wrong.
        # A wrong update shows more clearly in the weights than in the next losses.
        check_array(
            losses[:1],
            want_losses[:1],
            what=f"the first loss of {what} (the loss of its first batch, before any update)",
            dims="steps",
            mistakes={DATA_FROM_COUNTER: lambda: mistakes[DATA_FROM_COUNTER]()[:1]},
        )
    check_structure(trained, want[model], "model", what)
    for path, expected in leaves(want[model]):
        check_array(
            at(trained, path),
            expected,
            what=array_name("model", path, what),
            dims=model_letters(path),
            mistakes=train_mistakes(start, args, kwargs, state, path),
        )
    check_array(
        losses,
        want_losses,
        what=f"the losses of {what} (each step's loss on its batch, before its update)",
        dims="steps",
        mistakes=mistakes,
    )
    want_step = want["step"] if step is None else step
    found = new_state.get("step") if isinstance(new_state, dict) else new_state
    if isinstance(found, np.ndarray) and found.ndim == 0:
        found = found.item()
    if isinstance(found, bool) or not isinstance(found, (int, np.integer)) or found != want_step:
        shown_step = f"step {found!r}" if isinstance(new_state, dict) else f"{type(new_state).__name__}"
        raise AssertionError(
            f"the state returned by {what} is {shown_step}; expected adamw_step's state after "
            f"{want_step} updates, {{'step': {want_step}, 'm': ..., 'v': ...}}."
        )
    return trained, new_state


def check_recorded_run(lesson, name):
    want = recorded_run(name)
    args, kwargs = train_call(want["spec"], want["data_seed"])
    what = train_what(want["spec"], args, kwargs)
    check_train(
        lesson.train(want["start"], *args, **kwargs), want["start"], args, kwargs, None, want, what=what
    )


@exercise("train")
class TestTrain:
    def test_returns_a_model_shaped_like_the_input_float64_losses_and_a_state(self, lesson):
        """the trained model shaped like the model, losses (steps,) float64, a state dict"""
        want = recorded_run("later_steps")
        spec = want["spec"]
        args, kwargs = train_call(spec, want["data_seed"])
        what = train_what(spec, args, kwargs)
        trained, losses, state = check_tuple(
            lesson.train(want["start"], *args, **kwargs), what, ("model", "losses", "state")
        )
        check_structure(trained, want["model"], "model", what)
        for path, expected in leaves(want["model"]):
            value = at(trained, path)
            if not isinstance(value, np.ndarray) or value.shape != expected.shape:
                shape = getattr(value, "shape", type(value).__name__)
                raise AssertionError(
                    f"{array_name('model', path, what)} is {shape}; expected the shape of the model's "
                    f"array, {expected.shape}."
                )
        if (
            not isinstance(losses, np.ndarray)
            or losses.shape != (spec["steps"],)
            or losses.dtype != np.float64
        ):
            got = (
                f"{losses.dtype} {losses.shape}" if isinstance(losses, np.ndarray) else type(losses).__name__
            )
            raise AssertionError(
                f"the losses of {what} are {got}; expected a float64 array of shape (steps,) = "
                f"({spec['steps']},), one loss per step."
            )
        if not isinstance(state, dict):
            raise AssertionError(
                f"the state returned by {what} is {type(state).__name__}; expected adamw_step's dict."
            )

    def test_a_constant_rate_matches_the_recorded_run(self, lesson):
        """schedule None, multi-head, weight_decay=0.1: the losses and the trained model"""
        check_recorded_run(lesson, "constant_mha")

    def test_a_cosine_schedule_with_grouped_query_attention(self, lesson):
        """schedule "cosine" over 4 steps, H = 4 query heads sharing G = 2 key/value heads"""
        check_recorded_run(lesson, "cosine_gqa")

    def test_one_cycle_over_total_steps(self, lesson):
        """schedule "onecycle": the first 4 steps of a run of total_steps=10"""
        check_recorded_run(lesson, "onecycle_part")

    def test_a_run_that_starts_at_a_later_step(self, lesson):
        """start_step=4 of a 10-step one-cycle run, no state: the batches and rates of steps 4, 5, 6"""
        check_recorded_run(lesson, "later_steps")

    def test_two_chunks_equal_one_run(self, lesson):
        """2 steps, then 3 more from the state and start_step=2: the same as one run of 5 steps"""
        # 2 layers of grouped-query attention, a one-cycle schedule over total_steps=5: the second
        # chunk continues every layer's moments, and the rate and b1 of the whole run's schedule.
        want = recorded_run("resumed")
        spec = want["spec"]
        first, second = spec["chunks"]
        args, kwargs = train_call(spec, want["data_seed"], steps=first)
        what = train_what(spec, args, kwargs) + f" (the first {first} of {spec['steps']} steps)"
        result = lesson.train(want["start"], *args, **kwargs)
        check_not_modified(lesson, what)
        trained, state = check_train(
            result, want["start"], args, kwargs, None, want, what=what, model="middle", step=first
        )
        n_kv = args[5] if len(args) > 5 else None
        _, _, right_state = train_reference(want["start"], *args[:5], n_kv, reference_run(kwargs, None))
        args, kwargs = train_call(spec, want["data_seed"], steps=second, start_step=first, state=state)
        what = train_what(spec, args, kwargs) + (
            f" (the last {second} steps, from the model and the state the first {first} returned)"
        )
        check_train(
            lesson.train(trained, *args, **kwargs),
            want["middle"],
            args,
            kwargs,
            right_state,
            want,
            what=what,
            losses_from=first,
        )

    def test_the_model_passed_in_is_left_unchanged(self, lesson):
        """the model passed in is left unchanged (train returns new arrays)"""
        want = recorded_run("cosine_gqa")
        args, kwargs = train_call(want["spec"], want["data_seed"])
        what = train_what(want["spec"], args, kwargs)
        lesson.train(want["start"], *args, **kwargs)
        check_not_modified(lesson, what)
