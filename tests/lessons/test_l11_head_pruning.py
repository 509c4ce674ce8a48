"""Grading tests for lesson 11 (l11_head_pruning): masked_multi_head_attention, model_forward,
sequence_losses, ablation_importance, head_importance, pruning_curve.

Everything is graded on small random models built here with the tiny model's structure
(token and position embeddings, attention-only causal layers with a residual each, an
unembedding), never on the shipped weights. Sizes: attention B=2, T=5, S=6, H=4, K=3, D=12;
models V=7 tokens, L=8 positions, sequences of T=6 tokens, B=5 sequences, 2 layers of H=4 heads
(D=12, K=3), and a 3-layer model of 2 heads (K=6) to check that n_heads and every layer are used.

The expected answers come from slow oracles written here: attention one batch element, head and
query at a time, and a forward pass, a loss, an accuracy built on it; the importances loop over
the heads and the sequences. The same oracles with one rule changed (where xi is applied, which
rows of W_O a head owns, the sign, the normalisation, the finite difference) compute the classic
WRONG answers, only to name a mistake when an answer matches one of them.

head_importance at the default eps = 1e-3 is compared with the TRUE derivative (central
differences at eps = 1e-6 in float64, whose own error is below 1e-9), with a tolerance that a
central difference at 1e-3 meets by a wide margin and a one-sided one misses by a wide margin;
the test checks both margins on its model before grading.
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
    diagnose,
    exercise,
    failure,
    hand_checked,
    remembered,
    rng,
    variation,
)

# attention sizes
B, T, S, H, K = 2, 5, 6, 4, 3
D = H * K  # 12
# model sizes
V, L, T_SEQ, B_SEQ, N_LAYERS = 7, 8, 6, 5, 2
IGNORE = -1


def each_row_reordered(table, v):
    """``table`` (a list of rows) as an array, each row reordered by its own permutation drawn
    from the variation ``v`` (unchanged in public)."""
    return np.array([row[v.permutation(len(row))] for row in np.asarray(table, dtype=np.float64)])


def shown(values):
    """Numbers as a test's text quotes them: [[1, 0.5], [-2, 0]], each with :g."""
    if np.ndim(values) == 0:
        return f"{float(values):g}"
    return "[" + ", ".join(shown(v) for v in values) + "]"


# ---------------------------------------------------------------- oracles (slow and obvious)
def attention_loop(x_q, x_kv, params, n_heads, allowed=None, head_factor=None, score_factor=None, bias=True):
    """Multi-head attention head by head (a softmax over each query's allowed keys), in float64.

    Head h's output is multiplied by head_factor[h] before W_O (the head mask); score_factor[h],
    used only to compute a named WRONG answer, multiplies head h's scores before the softmax.
    allowed: booleans broadcastable to (B, T, S). Returns (out (B, T, D), weights (B, H, T, S))."""
    p = {name: np.asarray(a, np.float64) for name, a in params.items() if a is not None}
    x_q, x_kv = np.asarray(x_q, np.float64), np.asarray(x_kv, np.float64)
    n_b, n_t, _ = x_q.shape
    n_s = x_kv.shape[1]
    hk = p["w_q"].shape[1]
    k_w = hk // n_heads
    allowed = np.ones((n_b, n_t, n_s), bool) if allowed is None else np.broadcast_to(allowed, (n_b, n_t, n_s))
    head_factor = np.ones(n_heads) if head_factor is None else np.asarray(head_factor, np.float64)
    concat = np.zeros((n_b, n_t, hk))
    weights = np.zeros((n_b, n_heads, n_t, n_s))
    for b in range(n_b):
        for h in range(n_heads):
            cols = slice(h * k_w, (h + 1) * k_w)  # head h's columns
            q = x_q[b] @ p["w_q"][:, cols] + (p["b_q"][cols] if "b_q" in p else 0.0)  # (T, K)
            k = x_kv[b] @ p["w_k"][:, cols] + (p["b_k"][cols] if "b_k" in p else 0.0)  # (S, K)
            v = x_kv[b] @ p["w_v"][:, cols] + (p["b_v"][cols] if "b_v" in p else 0.0)  # (S, K)
            scores = q @ k.T / math.sqrt(k_w)  # (T, S): query t against key s
            if score_factor is not None:
                scores = scores * float(score_factor[h])
            scores = np.where(allowed[b], scores, -np.inf)  # keys query t may not see: -inf
            top = scores.max(axis=1, keepdims=True)  # (T, 1)
            e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))  # exp(-inf) = 0
            total = e.sum(axis=1, keepdims=True)  # (T, 1); 0 for a query that sees no key
            weights[b, h] = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
            concat[b, :, cols] = weights[b, h] @ v  # (T, S) @ (S, K)
            concat[b, :, cols] *= head_factor[h]  # the head mask xi_h, before W_O
    out = concat @ p["w_o"] + (p["b_o"] if bias and "b_o" in p else 0.0)
    return out, weights


def causal(n_t):
    """(T, T): query i may see keys 0 .. i."""
    return np.array([[j <= i for j in range(n_t)] for i in range(n_t)])


@remembered
def forward_loop(model, tokens, head_masks=None, n_heads=H, residual=True, use_causal=True, positions=True):
    """The tiny model's forward pass, built on attention_loop: (logits (B, T, V), [weights]).
    residual, use_causal and positions switch a part off, only to name a WRONG answer."""
    n_b, n_t = tokens.shape
    n_layers = len(model["layers"])
    head_masks = np.ones((n_layers, n_heads)) if head_masks is None else np.asarray(head_masks, np.float64)
    x = np.zeros((n_b, n_t, model["tok_emb"].shape[1]))
    for b in range(n_b):
        for t in range(n_t):
            x[b, t] = model["tok_emb"][tokens[b, t]] + (model["pos_emb"][t] if positions else 0.0)
    all_weights = []
    for layer, params in enumerate(model["layers"]):
        out, weights = attention_loop(
            x, x, params, n_heads, causal(n_t) if use_causal else None, head_factor=head_masks[layer]
        )
        x = x + out if residual else out
        all_weights.append(weights)
    return x @ model["unembed"] + model["b_unembed"], all_weights


def losses_loop(logits, targets):
    """(B,): each sequence's mean of -log softmax(logits[b, t])[target] over its scored t."""
    out = np.zeros(len(targets))
    for b in range(len(targets)):
        terms = []
        for t in range(targets.shape[1]):
            if targets[b, t] == IGNORE:
                continue
            z = [float(v) for v in logits[b, t]]
            top = max(z)
            log_sum = top + math.log(sum(math.exp(v - top) for v in z))
            terms.append(log_sum - z[int(targets[b, t])])
        out[b] = sum(terms) / len(terms)
    return out


def accuracy_loop(logits, targets):
    """Share of the scored positions whose largest logit is the target, pooled over the batch."""
    right = total = 0
    for b in range(len(targets)):
        for t in range(targets.shape[1]):
            if targets[b, t] != IGNORE:
                total += 1
                right += int(np.argmax(logits[b, t]) == targets[b, t])
    return right / total


@remembered
def loss_and_accuracy(model, tokens, targets, masks, n_heads=H):
    """(mean of the sequence losses, pooled accuracy) of the model with head masks."""
    logits, _ = forward_loop(model, tokens, masks, n_heads)
    return float(np.mean(losses_loop(logits, targets))), accuracy_loop(logits, targets)


def one_head(n_layers, n_heads, layer, head, value):
    """Head masks of ones with ``value`` at [layer, head]."""
    masks = np.ones((n_layers, n_heads))
    masks[layer, head] = value
    return masks


def ablation_loop(model, tokens, targets, n_heads=H, edit=None):
    """(loss_change, accuracy_change), each (n_layers, H): head (l, h) removed minus the full model.
    ``edit(w_o, h)``, only for named WRONG answers, removes a head by editing W_O instead."""
    n_layers = len(model["layers"])
    full_loss, full_accuracy = loss_and_accuracy(model, tokens, targets, None, n_heads)
    loss_change = np.zeros((n_layers, n_heads))
    accuracy_change = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            if edit is None:
                loss, accuracy = loss_and_accuracy(
                    model, tokens, targets, one_head(n_layers, n_heads, layer, head, 0.0), n_heads
                )
            else:
                edited = with_w_o(model, layer, edit(model["layers"][layer]["w_o"], head))
                loss, accuracy = loss_and_accuracy(edited, tokens, targets, None, n_heads)
            loss_change[layer, head] = loss - full_loss
            accuracy_change[layer, head] = accuracy - full_accuracy
    return loss_change, accuracy_change


@remembered
def derivatives_loop(model, tokens, targets, eps, n_heads=H, kind="central"):
    """(n_layers, H, B): dL(x)/dxi_h of every sequence by finite differences at xi = 1."""
    n_layers = len(model["layers"])
    out = np.zeros((n_layers, n_heads, len(tokens)))

    def losses(masks):
        return losses_loop(forward_loop(model, tokens, masks, n_heads)[0], targets)

    base = losses(None) if kind != "central" else None
    for layer in range(n_layers):
        for head in range(n_heads):
            up = losses(one_head(n_layers, n_heads, layer, head, 1.0 + eps)) if kind != "backward" else base
            down = losses(one_head(n_layers, n_heads, layer, head, 1.0 - eps)) if kind != "forward" else base
            out[layer, head] = (up - down) / ((2.0 if kind == "central" else 1.0) * eps)
    return out


def normalised(importance, how="layer-l2"):
    """Importance (n_layers, H) divided per layer by its l2 norm (or, for named WRONG answers,
    by the sum, by one norm over the whole model, not at all); a zero row stays zero."""
    if how == "none":
        return importance
    if how == "global-l2":
        norm = math.sqrt(sum(float(v) ** 2 for v in importance.ravel()))
        return importance / norm if norm > 0 else importance
    out = np.zeros_like(importance)
    for layer, row in enumerate(importance):
        norm = (
            sum(abs(float(v)) for v in row)
            if how == "layer-sum"
            else math.sqrt(sum(float(v) ** 2 for v in row))
        )
        out[layer] = row / norm if norm > 0 else 0.0
    return out


def importance_from(derivatives, how="layer-l2", abs_first=True):
    """E_x |dL/dxi| (or |E_x dL/dxi| when abs_first is False), then normalised."""
    if abs_first:
        raw = np.abs(derivatives).mean(axis=-1)
    else:
        raw = np.abs(derivatives.mean(axis=-1))
    return normalised(raw, how)


def prune_order_loop(importance):
    """(N, 2): (layer, head) by ascending importance, ties by layer then head."""
    heads = [
        (float(importance[layer, head]), layer, head)
        for layer in range(importance.shape[0])
        for head in range(importance.shape[1])
    ]
    return np.array([(layer, head) for _, layer, head in sorted(heads)], dtype=np.int64).reshape(-1, 2)


def prune_accuracies_loop(model, tokens, targets, order, n_heads, cumulative=True):
    """(N + 1,): accuracy after removing the first k heads of ``order``, k = 0 .. N."""
    n_layers = len(model["layers"])
    masks = np.ones((n_layers, n_heads))
    out = [loss_and_accuracy(model, tokens, targets, masks, n_heads)[1]]
    for layer, head in order:
        if not cumulative:
            masks = np.ones((n_layers, n_heads))
        masks[layer, head] = 0.0
        out.append(loss_and_accuracy(model, tokens, targets, masks, n_heads)[1])
    return np.array(out)


# ---------------------------------------------------------------- data
def make_params(r, d=D, n_heads=H, k=K, bias=True, sharp=1.0, dtype=np.float64):
    """Random attention parameters: w_q, w_k, w_v (D, H*K), w_o (H*K, D), biases."""
    s = 1.0 / math.sqrt(d)
    params = {
        "w_q": r.standard_normal((d, n_heads * k)) * s * 1.5 * sharp,
        "w_k": r.standard_normal((d, n_heads * k)) * s * 1.5 * sharp,
        "w_v": r.standard_normal((d, n_heads * k)) * s,
        "w_o": r.standard_normal((n_heads * k, d)) * s,
    }
    if bias:
        params.update(
            b_q=r.standard_normal(n_heads * k) * 0.3,
            b_k=r.standard_normal(n_heads * k) * 0.3,
            b_v=r.standard_normal(n_heads * k) * 0.3,
            b_o=r.standard_normal(d) * 0.3,
        )
    return {name: a.astype(dtype) for name, a in params.items()}


def make_model(r, n_layers=N_LAYERS, n_heads=H, d=D, vocab=V, max_len=L, sharp=1.0):
    """A random model of the tiny model's structure (float64)."""
    return {
        "tok_emb": r.standard_normal((vocab, d)),
        "pos_emb": r.standard_normal((max_len, d)),
        "unembed": r.standard_normal((d, vocab)) * 2.0 * sharp / math.sqrt(d),
        "b_unembed": r.standard_normal(vocab) * 0.5,
        "layers": [make_params(r, d, n_heads, d // n_heads, sharp=sharp) for _ in range(n_layers)],
    }


def make_batch(r, n=B_SEQ, n_t=T_SEQ, vocab=V, share=0.4):
    """tokens (n, T) and targets (n, T) with about ``share`` of them -1; every sequence has a
    scored position (the last one)."""
    tokens = r.integers(0, vocab, size=(n, n_t))
    targets = r.integers(0, vocab, size=(n, n_t))
    targets[r.random((n, n_t)) < share] = IGNORE
    targets[:, -1] = r.integers(0, vocab, size=n)
    return tokens, targets


def with_w_o(model, layer, w_o):
    """A copy of the model whose layer ``layer`` has this W_O."""
    layers = [dict(p) for p in model["layers"]]
    layers[layer]["w_o"] = w_o
    return {**model, "layers": layers}


def copy_model(model):
    return {**model, "layers": [dict(p) for p in model["layers"]]}


# ---------------------------------------------------------------- classic mistakes, by name
MASK_BEFORE_SOFTMAX = Mistake(
    "mask-before-softmax",
    "the head mask scaled the scores before the softmax: a score of 0 gives uniform weights, not "
    "zero ones; multiply the head's OUTPUT (or its weights after the softmax) by xi_h",
    exercises=("masked_multi_head_attention",),
)
MASK_AFTER_WO = Mistake(
    "mask-after-wo",
    "the head mask was applied after W_O, to blocks of output features (or to the columns of "
    "W_O): after W_O every feature mixes all the heads; multiply each head's output by xi_h "
    "BEFORE W_O (rows h*K:(h+1)*K of W_O are head h's)",
    misconception="head-mask-after-wo",
    exercises=("ablation_importance", "masked_multi_head_attention"),
)
WRONG_HEAD_ROWS = Mistake(
    "wrong-head-rows",
    "the mask of head h hit the W_O rows of another head ({which}); head h owns rows "
    "h*K:(h+1)*K of W_O, the block its output multiplies",
    exercises=("masked_multi_head_attention",),
)
INTERLEAVED_ROWS = Mistake(
    "interleaved-rows",
    "the mask was spread over the rows of W_O by tiling (row r got xi[r % H]) instead of "
    "repeating each xi_h K times: head h owns the contiguous rows h*K:(h+1)*K",
    misconception="interleaved-heads",
    exercises=("ablation_importance", "masked_multi_head_attention"),
)
ROWS_H_TIMES_D = Mistake(
    "rows-h-times-d",
    "the mask used rows h*D:(h+1)*D of W_O: W_O has only H*K = D rows, so head 0's xi scaled "
    "all of them and the other heads' nothing; head h owns rows h*K:(h+1)*K",
    exercises=("ablation_importance", "masked_multi_head_attention"),
)
BIAS_SCALED = Mistake(
    "bias-dropped",
    "b_o is missing from the output: b_o belongs to no head, add it once whatever the mask",
    exercises=("masked_multi_head_attention",),
)
WEIGHTS_SCALED = Mistake(
    "weights-scaled",
    "the returned weights were multiplied by the head mask: return them as the softmax made them",
    exercises=("masked_multi_head_attention", "model_forward"),
)
NO_RESIDUAL = Mistake(
    "no-residual",
    "the residual connection is missing: each layer must ADD its output to x (x = x + out), not replace it",
    exercises=("model_forward",),
)
NO_CAUSAL = Mistake(
    "no-causal-mask",
    "the layers attend without a causal mask: position t must not see later tokens; use causal_mask(T)",
    exercises=("model_forward",),
)
NO_POSITIONS = Mistake(
    "no-position-embeddings",
    "the position embeddings are missing: x = tok_emb[tokens] + pos_emb[:T]",
    exercises=("model_forward",),
)
MASKS_REVERSED = Mistake(
    "masks-reversed",
    "the head masks went to the wrong layers: row l of head_masks belongs to layer l",
    exercises=("model_forward",),
)
NO_UNEMBED_BIAS = Mistake(
    "no-unembed-bias", "b_unembed is missing: logits = x @ unembed + b_unembed", exercises=("model_forward",)
)
UNSCORED_COUNTED = Mistake(
    "unscored-counted",
    "the positions whose target is -1 were counted too (a -1 index picks the LAST token): "
    "average over the scored positions only",
    exercises=("sequence_losses",),
)
POOLED = Mistake(
    "pooled-loss",
    "the loss was pooled over the whole batch: every sequence needs its own mean",
    exercises=("sequence_losses",),
)
SUMMED = Mistake(
    "summed-loss",
    "each sequence's losses were summed, not averaged over its scored positions",
    exercises=("sequence_losses",),
)
UNSTABLE = Mistake(
    "unstable-softmax",
    "the log-softmax overflowed: subtract each row's maximum before exp (log_softmax = z - m - "
    "log(sum(exp(z - m))))",
    exercises=("sequence_losses",),
)
LOG_OF_SOFTMAX = Mistake(
    "log-of-softmax",
    "the log was taken of the softmax's probability, which underflows to 0 (log 0 = -inf) once "
    "another logit leads the target's by more than about 745: compute the log-softmax itself, "
    "z - m - log(sum(exp(z - m))), never log(softmax(z))",
    exercises=("sequence_losses",),
)
SIGN_FLIPPED = Mistake(
    "sign-flipped",
    "the sign is flipped: the change is (head removed) minus (full model)",
    exercises=("ablation_importance",),
)
NOT_CHANGES = Mistake(
    "not-changes",
    "the loss/accuracy of the ablated model was returned, not its change from the full model",
    exercises=("ablation_importance",),
)
POOLED_ABLATION = Mistake(
    "pooled-ablation-loss",
    "the loss was pooled over every scored position; this lesson's loss is the mean over the "
    "sequences of sequence_losses",
    exercises=("ablation_importance",),
)
PER_SEQUENCE_ACCURACY = Mistake(
    "per-sequence-accuracy",
    "the accuracy was averaged per sequence; scored_accuracy pools every scored position",
    exercises=("ablation_importance",),
)
NEXT_HEAD = Mistake(
    "next-head",
    "the head removed (or the W_O rows zeroed) was head h + 1's instead of head h's: head h "
    "owns rows h*K:(h+1)*K of W_O",
    exercises=("ablation_importance",),
)
LAYERS_SWAPPED = Mistake(
    "layers-swapped", "the layers are swapped: row l is layer l", exercises=("ablation_importance",)
)
ONE_SIDED = Mistake(
    "one-sided-difference",
    "a one-sided difference ({which}) was used: it errs by about eps/2 times the curvature; use "
    "the central (L(1 + eps) - L(1 - eps)) / (2 eps)",
    misconception="one-sided-difference",
    exercises=("head_importance",),
)
ABS_AFTER_MEAN = Mistake(
    "abs-after-mean",
    "the absolute value was taken after averaging over the sequences (|E dL/dxi| instead of "
    "E |dL/dxi|): a head that helps some sequences and hurts others must not cancel out",
    misconception="abs-after-mean",
    exercises=("head_importance",),
)
NOT_NORMALISED = Mistake(
    "not-normalised",
    "the importances are not normalised: divide each layer's row by its l2 norm",
    exercises=("head_importance",),
)
GLOBAL_NORM = Mistake(
    "global-norm",
    "the importances were normalised by one l2 norm over the whole model: normalise each "
    "layer's row by its own l2 norm",
    exercises=("head_importance",),
)
SUM_NORM = Mistake(
    "sum-norm",
    "each layer was divided by its sum (l1 norm) instead of its l2 norm sqrt(sum of squares)",
    exercises=("head_importance",),
)
IGNORES_EPS = Mistake(
    "ignores-eps", "eps was not used: the step must be the eps passed in", exercises=("head_importance",)
)
DESCENDING = Mistake(
    "descending",
    "the heads were pruned in DESCENDING importance: the least important head goes first",
    exercises=("pruning_curve",),
)
ORDER_COLUMNS_SWAPPED = Mistake(
    "order-columns-swapped",
    "the order holds (head, layer) pairs; each row must be (layer, head)",
    exercises=("pruning_curve",),
)
DIVMOD_BY_LAYERS = Mistake(
    "divmod-by-layers",
    "flat indices were turned back into (layer, head) with the number of layers; row-major "
    "index i is (i // H, i % H)",
    exercises=("pruning_curve",),
)
UNSTABLE_SORT = Mistake(
    "unstable-sort",
    "equal scores came out of order: np.argsort's default quicksort is not stable; use "
    'np.argsort(..., kind="stable") so that ties go lower layer, then lower head first',
    exercises=("pruning_curve",),
)
NOT_CUMULATIVE = Mistake(
    "not-cumulative",
    "each step removed only one head: heads removed earlier must stay removed",
    exercises=("pruning_curve",),
)


def w_o_rows_scaled(params, factor_per_row):
    """params with row r of w_o multiplied by factor_per_row[r]."""
    return {**params, "w_o": np.asarray(params["w_o"], np.float64) * np.asarray(factor_per_row)[:, None]}


def attention_mistakes(x_q, x_kv, params, n_heads, head_mask, allowed):
    """Named wrong outputs of masked_multi_head_attention (computed only on a failure)."""
    xi = np.asarray(head_mask, np.float64)
    hk = params["w_q"].shape[1]
    d = params["w_o"].shape[1]
    bias = params.get("b_o")
    bias = 0.0 if bias is None else np.asarray(bias, np.float64)

    def plain(p=params, **how):
        return attention_loop(x_q, x_kv, p, n_heads, allowed, **how)[0]

    def after(bias_scaled):
        """xi applied after W_O, to blocks of D // H output features (the same as scaling the
        columns of W_O), b_o scaled too or not."""
        out = attention_loop(x_q, x_kv, params, n_heads, allowed, bias=False)[0]
        feature_factor = np.repeat(xi, d // n_heads)  # (D,)
        return (out + bias) * feature_factor if bias_scaled else out * feature_factor + bias

    mistakes = {
        MASK_BEFORE_SOFTMAX: lambda: plain(score_factor=xi),
        MASK_AFTER_WO: lambda: after(False),
        MASK_AFTER_WO.plus(" (b_o was scaled too)"): lambda: after(True),
        WRONG_HEAD_ROWS.format(which="head h + 1's"): lambda: plain(head_factor=np.roll(xi, 1)),
        WRONG_HEAD_ROWS.format(which="head h - 1's"): lambda: plain(head_factor=np.roll(xi, -1)),
        INTERLEAVED_ROWS: lambda: plain(w_o_rows_scaled(params, xi[np.arange(hk) % n_heads])),
        ROWS_H_TIMES_D: lambda: plain(w_o_rows_scaled(params, np.full(hk, xi[0]))),
        BIAS_SCALED: lambda: plain(head_factor=xi, bias=False),
    }
    return mistakes


def check_attention(result, x_q, x_kv, params, n_heads, head_mask, mask, *, what, dtype=None):
    """Check (out, weights) of masked_multi_head_attention against the oracle."""
    out, weights = check_tuple(result, what, ("out", "weights"))
    n_b, n_t, _ = x_q.shape
    allowed = None if mask is None else np.broadcast_to(mask, (n_b, n_t, x_kv.shape[1]))
    exp_out, exp_w = attention_loop(x_q, x_kv, params, n_heads, allowed, head_factor=head_mask)
    dtype = dtype or x_q.dtype
    check_array(
        out,
        exp_out.astype(dtype),
        what=f"out of {what}",
        dims="B T D",
        mistakes=attention_mistakes(x_q, x_kv, params, n_heads, head_mask, allowed),
    )
    check_array(
        weights,
        exp_w.astype(dtype),
        what=f"weights of {what}",
        dims="B H T S",
        mistakes={
            WEIGHTS_SCALED: lambda: exp_w * np.asarray(head_mask, np.float64)[None, :, None, None],
            MASK_BEFORE_SOFTMAX: lambda: attention_loop(
                x_q, x_kv, params, n_heads, allowed, score_factor=np.asarray(head_mask, np.float64)
            )[1],
        },
    )


# ---------------------------------------------------------------- masked_multi_head_attention
@exercise("masked_multi_head_attention")
class TestMaskedMultiHeadAttention:
    def test_all_ones_gives_out_b_t_d_and_weights_b_h_t_s_as_in_lesson_6(self, lesson):
        """head_mask of ones: out (B, T, D), weights (B, H, T, S) as in lesson 6"""
        r = rng(1)
        params = make_params(r)
        x_q, x_kv = r.standard_normal((B, T, D)), r.standard_normal((B, S, D))
        check_attention(
            lesson.masked_multi_head_attention(x_q, x_kv, params, H, np.ones(H)),
            x_q,
            x_kv,
            params,
            H,
            np.ones(H),
            None,
            what="masked_multi_head_attention(x_q (B, T, D) = (2, 5, 12), x_kv (B, S, D) = "
            "(2, 6, 12), params, n_heads=4, head_mask=ones(4))",
        )

    def test_every_head_removed_leaves_only_b_o(self, lesson):
        """every head removed (head_mask of zeros) leaves only b_o"""
        r = rng(2)
        params = make_params(r)
        x = r.standard_normal((B, T, D))
        what = "masked_multi_head_attention(x, x, params, 4, head_mask=zeros(4))"
        out, weights = check_tuple(lesson.masked_multi_head_attention(x, x, params, H, np.zeros(H)), what)
        # no head contributes: the output is b_o at every position, and b_o alone
        check_array(
            out,
            np.broadcast_to(params["b_o"], (B, T, D)).copy(),
            what=f"out of {what} (b_o belongs to no head, so it is all that is left)",
            dims="B T D",
            mistakes={
                BIAS_SCALED: np.zeros((B, T, D)),
                **attention_mistakes(x, x, params, H, np.zeros(H), None),
            },
        )
        check_attention((out, weights), x, x, params, H, np.zeros(H), None, what=what)

    def test_removing_head_h_equals_zeroing_rows_h_k_to_h_plus_1_k_of_w_o(self, lesson):
        """removing head h equals zeroing rows h*K:(h+1)*K of W_O"""
        r = rng(3)
        params = make_params(r)
        x_q, x_kv = r.standard_normal((B, T, D)), r.standard_normal((B, S, D))
        for h in range(H):
            head_mask = np.ones(H)
            head_mask[h] = 0.0
            zeroed = {**params, "w_o": params["w_o"].copy()}
            zeroed["w_o"][h * K : (h + 1) * K] = 0.0  # head h's rows of W_O
            expected = attention_loop(x_q, x_kv, zeroed, H)[0]
            what = f"masked_multi_head_attention(x_q, x_kv, params, 4, head_mask with a 0 at head {h})"
            out, _ = check_tuple(lesson.masked_multi_head_attention(x_q, x_kv, params, H, head_mask), what)
            check_array(
                out,
                expected,
                what=f"out of {what} (it must equal zeroing rows {h * K}:{(h + 1) * K} of W_O)",
                dims="B T D",
                mistakes=attention_mistakes(x_q, x_kv, params, H, head_mask, None),
            )

    def test_any_real_head_mask_scales_each_heads_output_under_a_causal_mask(self, lesson):
        """any real head_mask scales each head's output, under a causal mask"""
        r = rng(4)
        params = make_params(r)
        x = r.standard_normal((B, T, D))
        # Under an instructor's secret: the heads' factors reordered.
        head_mask = np.array([2.0, -0.5, 0.0, 1.5])[variation("any real head_mask").permutation(H)]
        mask = causal(T)
        check_attention(
            lesson.masked_multi_head_attention(x, x, params, H, head_mask, mask),
            x,
            x,
            params,
            H,
            head_mask,
            mask,
            what=f"masked_multi_head_attention(x (2, 5, 12), x, params, 4, head_mask={shown(head_mask)}, "
            "mask=causal (T, T))",
        )

    def test_a_padding_mask_b_1_s_and_cross_attention(self, lesson):
        """a padding mask (B, 1, S) and cross-attention (T != S)"""
        r = rng(5)
        params = make_params(r)
        x_q, x_kv = r.standard_normal((B, T, D)), r.standard_normal((B, S, D))
        # Under an instructor's secret: another short length, the sequences and the heads' factors
        # reordered.
        v = variation("padding mask and cross-attention")
        lengths = np.array([S, v.integers(1, S, 3)])[v.permutation(B)]
        mask = (np.arange(S)[None, :] < lengths[:, None])[:, None, :]  # (B, 1, S)
        head_mask = np.array([0.5, 1.0, 3.0, -1.0])[v.permutation(H)]
        check_attention(
            lesson.masked_multi_head_attention(x_q, x_kv, params, H, head_mask, mask),
            x_q,
            x_kv,
            params,
            H,
            head_mask,
            mask,
            what="masked_multi_head_attention(x_q (2, 5, 12), x_kv (2, 6, 12), params, 4, "
            f"head_mask={shown(head_mask)}, mask (B, 1, S) of lengths {shown(lengths)})",
        )

    def test_without_biases(self, lesson):
        """params without biases"""
        r = rng(6)
        params = make_params(r, bias=False)
        x = r.standard_normal((B, T, D))
        # Under an instructor's secret: the heads' factors reordered.
        head_mask = np.array([1.0, 0.0, 0.25, 1.0])[variation("without biases").permutation(H)]
        check_attention(
            lesson.masked_multi_head_attention(x, x, params, H, head_mask),
            x,
            x,
            params,
            H,
            head_mask,
            None,
            what=f"masked_multi_head_attention(x, x, params without biases, 4, head_mask={shown(head_mask)})",
        )

    def test_float32_stays_float32_and_the_inputs_are_left_unchanged(self, lesson):
        """float32 stays float32 and the inputs are left unchanged"""
        r = rng(7)
        params = make_params(r, dtype=np.float32)
        x = r.standard_normal((B, T, D)).astype(np.float32)
        # Under an instructor's secret: the heads' factors reordered.
        order = variation("float32 stays float32").permutation(H)
        head_mask = np.array([1.0, 0.0, 2.0, 0.5])[order]  # float64 mask: must not promote
        what = "masked_multi_head_attention(x float32, x, params float32, 4, head_mask float64)"
        result = lesson.masked_multi_head_attention(x, x, params, H, head_mask)
        check_not_modified(lesson, what)
        check_attention(result, x, x, params, H, head_mask, None, what=what, dtype=np.float32)

    @given(
        b=st.integers(1, 2),
        t=st.integers(1, 4),
        s=st.integers(1, 4),
        n_heads=st.integers(1, 4),
        k=st.integers(1, 3),
        bias=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_head_by_head_oracle_for_any_sizes(self, lesson, b, t, s, n_heads, k, bias, seed):
        """matches a head-by-head reference for any sizes and head_mask"""
        r = rng(seed)
        d = n_heads * k
        params = make_params(r, d, n_heads, k, bias)
        x_q, x_kv = r.standard_normal((b, t, d)), r.standard_normal((b, s, d))
        head_mask = r.normal(size=n_heads) * 2
        mask = r.random((t, s)) < 0.7
        check_attention(
            lesson.masked_multi_head_attention(x_q, x_kv, params, n_heads, head_mask, mask),
            x_q,
            x_kv,
            params,
            n_heads,
            head_mask,
            mask,
            what=f"masked_multi_head_attention(x_q {x_q.shape}, x_kv {x_kv.shape}, params, "
            f"{n_heads}, head_mask {np.round(head_mask, 2).tolist()}, a random (T, S) mask)",
        )


# ---------------------------------------------------------------- model_forward
def forward_mistakes(model, tokens, head_masks, n_heads):
    n_layers = len(model["layers"])
    masks = np.ones((n_layers, n_heads)) if head_masks is None else np.asarray(head_masks)

    def logits(**how):
        return lambda: forward_loop(model, tokens, masks, n_heads, **how)[0]

    mistakes = {
        NO_RESIDUAL: logits(residual=False),
        NO_CAUSAL: logits(use_causal=False),
        NO_POSITIONS: logits(positions=False),
        NO_UNEMBED_BIAS: lambda: forward_loop(model, tokens, masks, n_heads)[0] - model["b_unembed"],
    }
    if n_layers > 1 and not np.array_equal(masks, masks[::-1]):
        mistakes[MASKS_REVERSED] = lambda: forward_loop(model, tokens, masks[::-1], n_heads)[0]
    return mistakes


def check_forward(lesson, model, tokens, head_masks, n_heads, *, what, pass_n_heads=False):
    args = (model, tokens, head_masks) + ((n_heads,) if pass_n_heads else ())
    logits, weights = check_tuple(lesson.model_forward(*args), what, ("logits", "weights"))
    exp_logits, exp_weights = forward_loop(model, tokens, head_masks, n_heads)
    n_layers = len(model["layers"])
    if not isinstance(weights, (list, tuple)) or len(weights) != n_layers:
        got = (
            f"a list of {len(weights)}"
            if isinstance(weights, (list, tuple))
            else f"a {type(weights).__name__}"
        )
        raise AssertionError(
            f"the weights of {what} are {got}; expected a list of n_layers = {n_layers} arrays "
            "(B, H, T, T), one per layer, layer 0 first."
        )
    check_array(
        logits,
        exp_logits,
        what=f"logits of {what}",
        dims="B T V",
        mistakes=forward_mistakes(model, tokens, head_masks, n_heads),
    )
    for layer, (w, expected) in enumerate(zip(weights, exp_weights, strict=True)):
        check_array(
            w,
            expected,
            what=f"weights[{layer}] of {what}",
            dims="B H T S",
            mistakes={
                MASKS_REVERSED: lambda layer=layer: forward_loop(
                    model, tokens, None if head_masks is None else np.asarray(head_masks)[::-1], n_heads
                )[1][layer],
                WEIGHTS_SCALED: lambda layer=layer, expected=expected: (
                    expected
                    * (1.0 if head_masks is None else np.asarray(head_masks)[layer][None, :, None, None])
                ),
            },
        )


@exercise("model_forward")
class TestModelForward:
    def test_logits_b_t_v_and_one_weights_array_per_layer(self, lesson):
        """logits (B, T, V) and one weights array (B, H, T, T) per layer"""
        r = rng(10)
        model = make_model(r)
        tokens, _ = make_batch(r)
        check_forward(
            lesson,
            model,
            tokens,
            None,
            H,
            what="model_forward(model (2 layers of 4 heads, D=12, V=7, L=8), tokens (B, T) = (5, 6))",
        )

    def test_head_masks_go_to_their_own_layers(self, lesson):
        """each row of head_masks goes to its own layer"""
        r = rng(11)
        model = make_model(r)
        tokens, _ = make_batch(r)
        # Under an instructor's secret: each layer's factors reordered.
        v = variation("head masks to their own layers")
        head_masks = each_row_reordered([[1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 1.0, -1.0]], v)
        check_forward(
            lesson,
            model,
            tokens,
            head_masks,
            H,
            what=f"model_forward(model, tokens (5, 6), head_masks={shown(head_masks)})",
        )

    def test_no_head_masks_means_all_ones(self, lesson):
        """head_masks of all ones gives the same as no head_masks"""
        r = rng(12)
        model = make_model(r)
        tokens, _ = make_batch(r)
        what = "model_forward(model, tokens, head_masks=ones((2, 4)))"
        check_forward(lesson, model, tokens, np.ones((N_LAYERS, H)), H, what=what)

    def test_every_head_removed_gives_embeddings_plus_biases(self, lesson):
        """every head removed gives the embeddings plus each layer's b_o"""
        r = rng(13)
        model = make_model(r)
        tokens, _ = make_batch(r)
        check_forward(
            lesson,
            model,
            tokens,
            np.zeros((N_LAYERS, H)),
            H,
            what="model_forward(model, tokens, head_masks=zeros((2, 4))) (only the b_o of each "
            "layer is added to the embeddings)",
        )

    def test_three_layers_of_two_heads_with_n_heads_passed(self, lesson):
        """3 layers of 2 heads, with n_heads=2 passed"""
        r = rng(14)
        model = make_model(r, n_layers=3, n_heads=2)
        tokens, _ = make_batch(r)
        # Under an instructor's secret: each layer's two factors swapped.
        v = variation("model_forward with 3 layers of 2 heads")
        head_masks = each_row_reordered([[1.0, 0.5], [0.0, 1.0], [2.0, 1.0]], v)
        check_forward(
            lesson,
            model,
            tokens,
            head_masks,
            2,
            pass_n_heads=True,
            what="model_forward(model of 3 layers, tokens, head_masks (3, 2), n_heads=2)",
        )

    def test_the_model_and_the_tokens_are_left_unchanged(self, lesson):
        """the model and the tokens are left unchanged"""
        r = rng(15)
        model = make_model(r)
        tokens, _ = make_batch(r)
        # Under an instructor's secret: each layer's factors reordered.
        v = variation("model_forward leaves its inputs")
        head_masks = each_row_reordered([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.5, 1.0]], v)
        lesson.model_forward(model, tokens, head_masks)
        check_not_modified(lesson, "model_forward(model, tokens, head_masks)")

    @given(
        n_layers=st.integers(1, 3),
        n_heads=st.integers(1, 3),
        n=st.integers(1, 3),
        n_t=st.integers(1, L),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_oracle_for_any_model(self, lesson, n_layers, n_heads, n, n_t, seed):
        """matches the reference forward pass for any model and head_masks"""
        r = rng(seed)
        model = make_model(r, n_layers=n_layers, n_heads=n_heads, d=2 * n_heads * 2)
        tokens, _ = make_batch(r, n=n, n_t=n_t)
        head_masks = r.normal(size=(n_layers, n_heads))
        check_forward(
            lesson,
            model,
            tokens,
            head_masks,
            n_heads,
            pass_n_heads=True,
            what=f"model_forward(model of {n_layers} layers of {n_heads} heads, tokens "
            f"{tokens.shape}, random head_masks, n_heads={n_heads})",
        )


# ---------------------------------------------------------------- sequence_losses
def losses_mistakes(logits, targets):
    def with_unscored():
        z = logits - logits.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # -1 -> last token
        return -picked.mean(axis=-1)

    def pooled():
        per = losses_loop(logits, targets)
        counts = (targets != IGNORE).sum(axis=-1)
        return np.full(len(targets), (per * counts).sum() / counts.sum())

    def unstable():
        with np.errstate(all="ignore"):
            e = np.exp(logits)
            logp = np.log(e / e.sum(axis=-1, keepdims=True))
        scored = targets != IGNORE
        picked = np.take_along_axis(logp, np.where(scored, targets, 0)[..., None], axis=-1)[..., 0]
        with np.errstate(all="ignore"):
            return -np.where(scored, picked, 0.0).sum(axis=-1) / scored.sum(axis=-1)

    return {
        UNSCORED_COUNTED: with_unscored,
        POOLED: pooled,
        SUMMED: lambda: losses_loop(logits, targets) * (targets != IGNORE).sum(axis=-1),
        UNSTABLE: unstable,
    }


def check_losses(lesson, logits, targets, *, what, result=None):
    check_array(
        lesson.sequence_losses(logits, targets) if result is None else result,
        losses_loop(logits, targets).astype(logits.dtype),
        what=what,
        dims="B",
        mistakes=losses_mistakes(logits, targets),
    )


@exercise("sequence_losses")
class TestSequenceLosses:
    def test_equal_logits_give_log_v_for_every_sequence(self, lesson):
        """equal logits give log V = log 7 for every sequence"""
        # Under an instructor's secret: every logit c instead of 0; the sequences, the positions
        # and the token ids reordered.
        v = variation("equal logits")
        c, rows, positions, ids = v.shift(), v.permutation(3), v.permutation(4), v.permutation(V)
        logits = np.zeros((3, 4, V)) + c
        targets = np.array([[2, -1, -1, 0], [-1, -1, -1, 6], [1, 1, 1, 1]])[rows][:, positions]
        targets = np.where(targets == IGNORE, IGNORE, ids[targets])
        check_array(
            lesson.sequence_losses(logits, targets),
            np.full(3, math.log(V)),
            what=f"sequence_losses({'zeros' if c == 0 else f'full of {c:g}'} (B, T, V) = (3, 4, 7), "
            "targets) (uniform: log 7 = 1.9459)",
            dims="B",
            mistakes={SUMMED: (targets != IGNORE).sum(axis=1) * math.log(V)},
        )

    @hand_checked
    def test_a_small_case_by_hand(self, lesson):
        """a small case by hand: losses -log(3/5) and -log(1/5)"""
        # sequence 0: position 0 predicts token 0 with logits [log 3, 0, 0]: p = 3/5, position 1
        # is not scored; sequence 1: both positions scored, p = 1/5 and 1/5
        # Under an instructor's secret: every logit shifted by c; the sequences, the positions and
        # the token ids reordered (token t is ids[t]).
        v = variation("sequence_losses by hand")
        c, rows, positions, ids = v.shift(), v.permutation(2), v.permutation(2), v.permutation(3)
        logits = np.log(np.array([[[3.0, 1, 1], [1, 1, 1]], [[3.0, 1, 1], [3.0, 1, 1]]]))
        logits = logits[rows][:, positions][..., np.argsort(ids)] + c
        targets = np.array([[0, -1], [1, 2]])[rows][:, positions]
        targets = np.where(targets == IGNORE, IGNORE, ids[targets])
        expected = np.array([-math.log(3 / 5), -math.log(1 / 5)])[rows]
        once = int(np.argmax(rows == 0))  # where sequence 0 went
        check_array(
            lesson.sequence_losses(logits, targets),
            expected,
            what=f"sequence_losses on the hand-checked case: sequence {once} scores p = 3/5 once, "
            f"sequence {1 - once} scores p = 1/5 twice",
            dims="B",
            mistakes=losses_mistakes(logits, targets),
        )

    def test_matches_the_oracle_with_unscored_positions(self, lesson):
        """matches the reference with unscored positions (targets of -1)"""
        r = rng(20)
        logits = r.standard_normal((B_SEQ, T_SEQ, V)) * 3
        _, targets = make_batch(r)
        check_losses(
            lesson,
            logits,
            targets,
            what="sequence_losses(logits (B, T, V) = (5, 6, 7), targets (5, 6) with -1s)",
        )

    def test_large_logits_stay_finite(self, lesson):
        """large logits (around 1000) stay finite"""
        r = rng(21)
        logits = r.standard_normal((B_SEQ, T_SEQ, V)) * 3 + 1000.0
        _, targets = make_batch(r)
        what = "sequence_losses(logits around 1000, targets)"
        result = lesson.sequence_losses(logits, targets)
        if isinstance(result, np.ndarray) and result.dtype.kind == "f" and not np.isfinite(result).all():
            raise KnownMistake(
                f"{what} returned {result.tolist()}: inf or NaN where finite losses were expected.",
                UNSTABLE,
            )
        check_losses(lesson, logits, targets, what=what, result=result)

    @hand_checked
    def test_a_target_far_below_the_top_logit_keeps_a_finite_loss(self, lesson):
        """a target 1000 below the top logit keeps a finite loss of 1000"""
        # Sequence 0 scores token 0 while token 1 leads by 1000: -log softmax = 1000 +
        # log(1 + 2 e^-1000) = 1000 in float64, where the probability itself, e^-1000, is 0 and
        # its log -inf. Sequence 1's target leads: -log softmax = log(1 + 2 e^-5) = 0.013386.
        # Under an instructor's secret: every logit shifted by c; the sequences and the token ids
        # reordered (token t is ids[t]).
        v = variation("a target far below the top logit")
        c, rows, ids = v.shift(), v.permutation(2), v.permutation(3)
        logits = np.array([[[0.0, 1000.0, 0.0]], [[5.0, 0.0, 0.0]]])[rows][..., np.argsort(ids)] + c
        targets = ids[np.array([[0], [0]])][rows]
        expected = np.array([1000.0, math.log1p(2 * math.exp(-5))])[rows]
        far = int(np.argmax(rows == 0))  # where the sequence whose target is 1000 below went
        what = f"sequence_losses(logits {shown(logits)}, targets {shown(targets)})"
        result = lesson.sequence_losses(logits, targets)
        if isinstance(result, np.ndarray) and result.shape == (2,) and result.dtype.kind == "f":
            if np.isinf(result[far]) and np.isfinite(result[1 - far]):  # seen: -log of a probability of 0
                listed = ", ".join(f"{e:.5g}" for e in expected)
                raise KnownMistake(f"{what} returned {result.tolist()}; expected [{listed}].", LOG_OF_SOFTMAX)
        check_array(
            result,
            expected,
            what=what,
            dims="B",
            mistakes=losses_mistakes(logits, targets),
        )

    def test_the_inputs_are_left_unchanged(self, lesson):
        """the logits and the targets are left unchanged"""
        r = rng(22)
        logits = r.standard_normal((B_SEQ, T_SEQ, V))
        _, targets = make_batch(r)
        lesson.sequence_losses(logits, targets)
        check_not_modified(lesson, "sequence_losses(logits, targets)")

    @given(
        n=st.integers(1, 4), n_t=st.integers(1, 5), vocab=st.integers(2, 6), seed=st.integers(0, 2**32 - 1)
    )
    def test_matches_the_oracle_for_any_sizes(self, lesson, n, n_t, vocab, seed):
        """matches the reference for any sizes (B, T, V)"""
        r = rng(seed)
        logits = r.standard_normal((n, n_t, vocab)) * 4
        _, targets = make_batch(r, n=n, n_t=n_t, vocab=vocab, share=0.5)
        check_losses(lesson, logits, targets, what=f"sequence_losses(logits {logits.shape}, targets)")


# ---------------------------------------------------------------- ablation_importance
def ablation_mistakes(model, tokens, targets, expected, n_heads, which):
    """Named wrong answers for ``which`` (0: loss_change, 1: accuracy_change)."""
    n_layers = len(model["layers"])
    full = loss_and_accuracy(model, tokens, targets, None, n_heads)[which]
    k_w = model["layers"][0]["w_o"].shape[0] // n_heads

    def edited(edit):
        return lambda: ablation_loop(model, tokens, targets, n_heads, edit)[which]

    def zero_rows(rows):
        def edit(w_o, h):
            w_o = w_o.copy()
            w_o[rows(h)] = 0.0
            return w_o

        return edit

    def columns(w_o, h):
        w_o = w_o.copy()
        w_o[:, h * k_w : (h + 1) * k_w] = 0.0
        return w_o

    mistakes = {
        SIGN_FLIPPED: -expected,
        NOT_CHANGES: expected + full,
        NEXT_HEAD: np.roll(expected, -1, axis=1),
        ROWS_H_TIMES_D: edited(zero_rows(lambda h: slice(h * n_heads * k_w, (h + 1) * n_heads * k_w))),
        INTERLEAVED_ROWS: edited(zero_rows(lambda h: slice(h, None, n_heads))),
        MASK_AFTER_WO: edited(columns),
    }
    if n_layers > 1:
        mistakes[LAYERS_SWAPPED] = expected[::-1]
    if which == 0:

        def pooled():
            def pooled_loss(masks):
                logits = forward_loop(model, tokens, masks, n_heads)[0]
                counts = (targets != IGNORE).sum(axis=-1)
                return float((losses_loop(logits, targets) * counts).sum() / counts.sum())

            base = pooled_loss(None)
            return np.array(
                [
                    [pooled_loss(one_head(n_layers, n_heads, la, h, 0.0)) - base for h in range(n_heads)]
                    for la in range(n_layers)
                ]
            )

        mistakes[POOLED_ABLATION] = pooled
    else:

        def per_sequence():
            def acc(masks):
                logits = forward_loop(model, tokens, masks, n_heads)[0]
                return float(
                    np.mean(
                        [accuracy_loop(logits[b : b + 1], targets[b : b + 1]) for b in range(len(tokens))]
                    )
                )

            base = acc(None)
            return np.array(
                [
                    [acc(one_head(n_layers, n_heads, la, h, 0.0)) - base for h in range(n_heads)]
                    for la in range(n_layers)
                ]
            )

        mistakes[PER_SEQUENCE_ACCURACY] = per_sequence
    return mistakes


def check_ablation(lesson, model, tokens, targets, n_heads, *, what, pass_n_heads=False):
    args = (model, tokens, targets) + ((n_heads,) if pass_n_heads else ())
    loss_change, accuracy_change = check_tuple(
        lesson.ablation_importance(*args), what, ("loss_change", "accuracy_change")
    )
    exp_loss, exp_accuracy = ablation_loop(model, tokens, targets, n_heads)
    for name, actual, expected, which in (
        ("loss_change", loss_change, exp_loss, 0),
        ("accuracy_change", accuracy_change, exp_accuracy, 1),
    ):
        check_array(
            actual,
            expected,
            what=f"{name} of {what}",
            dims="n_layers H",
            mistakes=ablation_mistakes(model, tokens, targets, expected, n_heads, which),
        )


@exercise("ablation_importance")
class TestAblationImportance:
    def test_one_change_per_layer_and_head_against_the_oracle(self, lesson):
        """one loss and accuracy change per layer and head, (n_layers, H)"""
        r = rng(30)
        model = make_model(r, sharp=2.0)
        tokens, targets = make_batch(r, n=8)
        check_ablation(
            lesson,
            model,
            tokens,
            targets,
            H,
            what="ablation_importance(model (2 layers of 4 heads), tokens (8, 6), targets)",
        )

    def test_a_head_whose_w_o_rows_are_zero_costs_nothing(self, lesson):
        """a head whose W_O rows are zero costs nothing"""
        r = rng(31)
        model = make_model(r, sharp=2.0)
        # Under an instructor's secret: another layer's or head's rows of W_O are zero.
        v = variation("a head that writes nothing")
        layer, head = v.integers(0, N_LAYERS, 1), v.integers(0, H, 2)
        w_o = model["layers"][layer]["w_o"].copy()
        w_o[head * K : (head + 1) * K] = 0.0  # this layer's head writes nothing
        model = with_w_o(model, layer, w_o)
        tokens, targets = make_batch(r, n=8)
        what = (
            f"ablation_importance(model whose layer-{layer} head {head} has zero rows "
            f"{head * K}:{(head + 1) * K} of W_O, tokens, targets)"
        )
        loss_change, accuracy_change = check_tuple(
            lesson.ablation_importance(model, tokens, targets), what, ("loss_change", "accuracy_change")
        )
        for name, actual in (("loss_change", loss_change), ("accuracy_change", accuracy_change)):
            if (
                isinstance(actual, np.ndarray)
                and actual.shape == (N_LAYERS, H)
                and abs(float(actual[layer, head])) > 1e-9
            ):
                raise AssertionError(
                    f"{name}[{layer}, {head}] of {what} is {float(actual[layer, head]):.4g}; removing a "
                    "head that writes nothing (its W_O rows are zero) must change nothing. Is the row "
                    f"of layer {layer}, head {head} the right one, and is the change (removed) minus (full)?"
                )
        check_ablation(lesson, model, tokens, targets, H, what=what)

    def test_three_layers_of_two_heads_with_n_heads_passed(self, lesson):
        """3 layers of 2 heads, with n_heads=2 passed"""
        r = rng(32)
        model = make_model(r, n_layers=3, n_heads=2, sharp=2.0)
        tokens, targets = make_batch(r, n=6)
        check_ablation(
            lesson,
            model,
            tokens,
            targets,
            2,
            pass_n_heads=True,
            what="ablation_importance(model of 3 layers of 2 heads, tokens (6, 6), targets, n_heads=2)",
        )

    def test_the_inputs_are_left_unchanged(self, lesson):
        """the model, tokens and targets are left unchanged"""
        r = rng(33)
        model = make_model(r)
        tokens, targets = make_batch(r)
        lesson.ablation_importance(model, tokens, targets)
        check_not_modified(lesson, "ablation_importance(model, tokens, targets)")


# ---------------------------------------------------------------- head_importance
IMPORTANCE_SEED = 9  # a model whose curvature separates central from one-sided differences
DEFAULT_EPS = 1e-3
TOLERANCE = 3.4e-6  # absolute; central error at eps = 1e-3: 5.5e-8, one-sided: 2.1e-4


def importance_mistakes(derivatives, one_sided, eps_used=None):
    """Named wrong importances from per-sequence derivatives (n_layers, H, B). ``one_sided(kind)``
    gives the forward or backward differences; like ``eps_used`` (a callable too), it is only
    called when the answer is wrong."""
    mistakes = {
        ONE_SIDED.format(which="(L(1 + eps) - L(1)) / eps"): lambda: importance_from(one_sided("forward")),
        ONE_SIDED.format(which="(L(1) - L(1 - eps)) / eps"): lambda: importance_from(one_sided("backward")),
        ABS_AFTER_MEAN: lambda: importance_from(derivatives, abs_first=False),
        NOT_NORMALISED: lambda: importance_from(derivatives, "none"),
        GLOBAL_NORM: lambda: importance_from(derivatives, "global-l2"),
        SUM_NORM: lambda: importance_from(derivatives, "layer-sum"),
        Mistake.any_of(ABS_AFTER_MEAN, NOT_NORMALISED): lambda: importance_from(
            derivatives, "none", abs_first=False
        ),
    }
    if eps_used is not None:
        mistakes[IGNORES_EPS] = eps_used
    return mistakes


def difference_errors(model, tokens, targets):
    """(the true derivatives, the largest error of a central difference at the default eps, the
    smaller largest error of the two one-sided ones), on the importances."""
    true = derivatives_loop(model, tokens, targets, 1e-6)
    expected = importance_from(true)
    central = derivatives_loop(model, tokens, targets, DEFAULT_EPS)
    one_sided = [
        derivatives_loop(model, tokens, targets, DEFAULT_EPS, kind=k) for k in ("forward", "backward")
    ]
    central_error = np.abs(importance_from(central) - expected).max()
    one_sided_error = min(np.abs(importance_from(d) - expected).max() for d in one_sided)
    return true, central_error, one_sided_error


def separates(model, tokens, targets):
    """The default-eps check's premise: on this model a central difference at eps = 1e-3 is far
    inside the tolerance and a one-sided one far outside it."""
    _, central_error, one_sided_error = difference_errors(model, tokens, targets)
    return central_error < TOLERANCE / 10 and one_sided_error > TOLERANCE * 10


def importance_setup(seed=IMPORTANCE_SEED, separating=True):
    """A model, tokens and targets for head_importance; separating: the first of the seed's draws
    whose curvature separates central from one-sided differences (the public seed's first does;
    under an instructor's secret about one draw in four does)."""
    for attempt in range(200):
        r = rng(seed if attempt == 0 else (seed, attempt))
        model = make_model(r)
        tokens, targets = make_batch(r)
        if not separating or separates(model, tokens, targets):
            return model, tokens, targets
    raise AssertionError("grader bug: no model in 200 draws separates central from one-sided differences")


@exercise("head_importance")
class TestHeadImportance:
    def test_default_eps_gives_the_true_derivative_within_the_tolerance(self, lesson):
        """the default eps = 1e-3 gives the true derivative within 3.4e-6"""
        # Under an instructor's secret: the model drawn until its curvature separates the two.
        model, tokens, targets = importance_setup()
        forward_d = derivatives_loop(model, tokens, targets, DEFAULT_EPS, kind="forward")
        backward_d = derivatives_loop(model, tokens, targets, DEFAULT_EPS, kind="backward")
        # the test's own premise: on this model a central difference at eps = 1e-3 is far
        # inside the tolerance and a one-sided one far outside it
        true, central_error, one_sided_error = difference_errors(model, tokens, targets)
        expected = importance_from(true)
        assert central_error < TOLERANCE / 10 and one_sided_error > TOLERANCE * 10, (
            f"grader bug: central error {central_error:.2g}, one-sided {one_sided_error:.2g}, "
            f"tolerance {TOLERANCE:g}"
        )
        what = "head_importance(model (2 layers of 4 heads), tokens (5, 6), targets) with the default eps"
        check_array(
            lesson.head_importance(model, tokens, targets),
            expected,
            what=what + f" against the true derivative (tolerance {TOLERANCE:g})",
            dims="n_layers H",
            rtol=0.0,
            atol=TOLERANCE,
            mistakes=importance_mistakes(true, {"forward": forward_d, "backward": backward_d}.get),
        )

    def test_each_layers_importances_have_l2_norm_1(self, lesson):
        """each layer's importances have l2 norm 1"""
        model, tokens, targets = importance_setup(IMPORTANCE_SEED + 1, separating=False)
        what = "head_importance(model, tokens, targets)"
        result = lesson.head_importance(model, tokens, targets)
        if isinstance(result, np.ndarray) and result.shape == (N_LAYERS, H):
            norms = np.sqrt((np.asarray(result, np.float64) ** 2).sum(axis=1))
            if not np.allclose(norms, 1.0, atol=1e-6):
                derivatives = derivatives_loop(model, tokens, targets, DEFAULT_EPS)
                message = (
                    f"the rows of {what} have l2 norms {np.round(norms, 4).tolist()}; every layer's "
                    "importances must have l2 norm 1 (divide each row by sqrt(sum of its squares))."
                )
                variants = {
                    mistake: importance_from(derivatives, how)
                    for mistake, how in (
                        (GLOBAL_NORM, "global-l2"),
                        (SUM_NORM, "layer-sum"),
                        (NOT_NORMALISED, "none"),
                    )
                }
                right = importance_from(derivatives)
                raise failure(message, diagnose(np.asarray(result, np.float64), variants, right, 1e-3, 1e-6))
        derivatives = derivatives_loop(model, tokens, targets, DEFAULT_EPS)
        check_array(
            result,
            importance_from(derivatives),
            what=what,
            dims="n_layers H",
            rtol=0.0,
            atol=TOLERANCE,
            mistakes=importance_mistakes(
                derivatives,
                lambda kind: derivatives_loop(model, tokens, targets, DEFAULT_EPS, kind=kind),
            ),
        )

    def test_a_large_eps_is_used_as_given(self, lesson):
        """a large eps (0.2) is used as given"""
        model, tokens, targets = importance_setup()
        eps = 0.2
        derivatives = derivatives_loop(model, tokens, targets, eps)
        check_array(
            lesson.head_importance(model, tokens, targets, eps=eps),
            importance_from(derivatives),
            what="head_importance(model, tokens, targets, eps=0.2) (the central difference at eps = 0.2)",
            dims="n_layers H",
            mistakes=importance_mistakes(
                derivatives,
                lambda kind: derivatives_loop(model, tokens, targets, eps, kind=kind),
                eps_used=lambda: importance_from(derivatives_loop(model, tokens, targets, DEFAULT_EPS)),
            ),
        )

    def test_a_layer_that_writes_nothing_gets_zeros_not_nan(self, lesson):
        """a layer that writes nothing (W_O = 0) gets zeros, not NaN"""
        model, tokens, targets = importance_setup()
        # Under an instructor's secret: the other layer writes nothing.
        layer = variation("a layer that writes nothing").integers(0, N_LAYERS, 0)
        silent = np.zeros_like(model["layers"][layer]["w_o"])
        model = with_w_o(model, layer, silent)  # the layer's heads write nothing
        derivatives = derivatives_loop(model, tokens, targets, DEFAULT_EPS)
        expected = importance_from(derivatives)
        assert np.all(expected[layer] == 0.0)
        check_array(
            lesson.head_importance(model, tokens, targets),
            expected,
            what=f"head_importance(model whose layer {layer} has W_O = 0, tokens, targets): layer {layer}'s "
            "derivatives are all 0, and 0 / 0 must give 0, not NaN",
            dims="n_layers H",
            rtol=0.0,
            atol=TOLERANCE,
        )

    def test_three_layers_of_two_heads_with_n_heads_passed(self, lesson):
        """3 layers of 2 heads, with eps=0.05 and n_heads=2 passed"""
        r = rng(42)
        model = make_model(r, n_layers=3, n_heads=2)
        tokens, targets = make_batch(r)
        eps = 0.05
        derivatives = derivatives_loop(model, tokens, targets, eps, n_heads=2)
        check_array(
            lesson.head_importance(model, tokens, targets, eps, 2),
            importance_from(derivatives),
            what="head_importance(model of 3 layers of 2 heads, tokens, targets, eps=0.05, n_heads=2)",
            dims="n_layers H",
            mistakes=importance_mistakes(
                derivatives,
                lambda kind: derivatives_loop(model, tokens, targets, eps, 2, kind=kind),
            ),
        )

    @given(
        n_heads=st.integers(1, 3),
        n=st.integers(1, 4),
        eps=st.sampled_from([0.01, 0.1, 0.3]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_central_difference_oracle_for_any_model(self, lesson, n_heads, n, eps, seed):
        """matches the central-difference reference for any model and eps"""
        r = rng(seed)
        model = make_model(r, n_heads=n_heads, d=4 * n_heads)
        tokens, targets = make_batch(r, n=n, n_t=4)
        derivatives = derivatives_loop(model, tokens, targets, eps, n_heads)
        check_array(
            lesson.head_importance(model, tokens, targets, eps, n_heads),
            importance_from(derivatives),
            what=f"head_importance(model of 2 layers of {n_heads} heads, tokens {tokens.shape}, "
            f"targets, eps={eps}, n_heads={n_heads})",
            dims="n_layers H",
            mistakes=importance_mistakes(
                derivatives,
                lambda kind: derivatives_loop(model, tokens, targets, eps, n_heads, kind=kind),
            ),
        )


# ---------------------------------------------------------------- pruning_curve
def as_int64(order):
    """The learner's order as int64 when it holds integers (int32 is fine too)."""
    if isinstance(order, np.ndarray) and order.dtype.kind in "iu":
        return order.astype(np.int64)
    return order


def order_mistakes(importance):
    n_layers, n_heads = importance.shape
    expected = prune_order_loop(importance)
    flat = np.array([layer * n_heads + head for layer, head in expected])
    return {
        DESCENDING: expected[::-1],
        DESCENDING.plus(" (equal scores lower layer first)"): lambda: prune_order_loop(-importance),
        Mistake.any_of(DESCENDING, ORDER_COLUMNS_SWAPPED): expected[::-1, ::-1],
        ORDER_COLUMNS_SWAPPED: expected[:, ::-1],
        DIVMOD_BY_LAYERS: np.stack([flat // n_layers, flat % n_layers], axis=1),
        UNSTABLE_SORT: lambda: np.stack(np.divmod(np.argsort(importance.reshape(-1)), n_heads), axis=1),
    }


def check_pruning(lesson, model, tokens, targets, importance, *, what):
    n_layers, n_heads = importance.shape
    order, accuracies = check_tuple(
        lesson.pruning_curve(model, tokens, targets, importance), what, ("order", "accuracies")
    )
    expected_order = prune_order_loop(importance)
    check_array(
        as_int64(order),
        expected_order,
        what=f"order of {what}",
        dims="N 2",
        mistakes=order_mistakes(importance),
    )
    n = n_layers * n_heads
    if isinstance(accuracies, np.ndarray) and accuracies.shape == (n,):
        raise AssertionError(
            f"accuracies of {what} has shape ({n},); expected (N + 1,) = ({n + 1},): the first "
            "entry is the full model, before any head is removed."
        )
    check_array(
        accuracies,
        prune_accuracies_loop(model, tokens, targets, expected_order, n_heads),
        what=f"accuracies of {what}",
        dims="N+1",
        mistakes={
            DESCENDING: lambda: prune_accuracies_loop(
                model, tokens, targets, prune_order_loop(-importance), n_heads
            ),
            NOT_CUMULATIVE: lambda: prune_accuracies_loop(
                model, tokens, targets, expected_order, n_heads, cumulative=False
            ),
        },
    )


@exercise("pruning_curve")
class TestPruningCurve:
    def test_order_n_2_and_accuracies_n_plus_1_least_important_first(self, lesson):
        """order (N, 2) and accuracies (N + 1,), least important head first"""
        r = rng(50)
        model = make_model(r, sharp=2.0)
        tokens, targets = make_batch(r, n=8)
        # Under an instructor's secret: the scores scaled by s and moved to other heads.
        v = variation("least important first")
        s, heads = v.scale(), v.permutation(N_LAYERS * H)
        importance = (
            np.array([[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.05, 0.6]]).ravel()[heads].reshape(N_LAYERS, H) * s
        )
        check_pruning(
            lesson,
            model,
            tokens,
            targets,
            importance,
            what="pruning_curve(model (2 layers of 4 heads), tokens, targets, "
            f"importance={shown(importance)})",
        )

    def test_equal_scores_go_lower_layer_then_lower_head_first(self, lesson):
        """equal scores go lower layer first, then lower head"""
        r = rng(51)
        model = make_model(r, sharp=2.0)
        tokens, targets = make_batch(r, n=6)
        # Under an instructor's secret: the scores scaled by s and shifted by c, each layer's
        # reordered.
        v = variation("equal scores")
        s, c = v.scale(), v.shift()
        importance = each_row_reordered([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]], v) * s + c
        check_pruning(
            lesson,
            model,
            tokens,
            targets,
            importance,
            what=f"pruning_curve(model, tokens, targets, importance={shown(importance)})",
        )

    def test_many_ties_need_a_stable_sort(self, lesson):
        """many ties (18 scores of three values) need a stable sort"""
        r = rng(52)
        model = make_model(r, n_layers=3, n_heads=6, d=12)
        tokens, targets = make_batch(r, n=4, n_t=4)
        importance = (np.arange(18).reshape(3, 6) * 7 % 3).astype(np.float64)  # 0, 1, 2 repeating
        # Under an instructor's secret: the scores scaled by s, shifted by c and moved to other heads.
        v = variation("many ties")
        importance = importance.ravel()[v.permutation(18)].reshape(3, 6) * v.scale() + v.shift()
        check_pruning(
            lesson,
            model,
            tokens,
            targets,
            importance,
            what="pruning_curve(model of 3 layers of 6 heads, tokens, targets, 18 scores of "
            "only three values)",
        )

    def test_the_last_accuracy_is_the_model_without_any_head(self, lesson):
        """the last accuracy is the model without any head, the first the full one"""
        r = rng(53)
        model = make_model(r, sharp=2.0)
        tokens, targets = make_batch(r, n=8)
        importance = r.random((N_LAYERS, H))
        what = "pruning_curve(model, tokens, targets, random importance)"
        _, accuracies = check_tuple(
            lesson.pruning_curve(model, tokens, targets, importance), what, ("order", "accuracies")
        )
        full = loss_and_accuracy(model, tokens, targets, None)[1]
        empty = loss_and_accuracy(model, tokens, targets, np.zeros((N_LAYERS, H)))[1]
        if isinstance(accuracies, np.ndarray) and accuracies.ndim == 1 and len(accuracies) >= 2:
            for index, value, name in ((0, full, "the full model"), (-1, empty, "no head left")):
                if not np.isclose(float(accuracies[index]), value, atol=1e-9):
                    raise AssertionError(
                        f"accuracies[{index}] of {what} is {float(accuracies[index]):.4g}; expected "
                        f"{value:.4g}, the accuracy of {name}."
                    )
        check_pruning(lesson, model, tokens, targets, importance, what=what)

    def test_the_inputs_are_left_unchanged(self, lesson):
        """the model, tokens, targets and importance are left unchanged"""
        r = rng(54)
        model = make_model(r)
        tokens, targets = make_batch(r)
        lesson.pruning_curve(model, tokens, targets, r.random((N_LAYERS, H)))
        check_not_modified(lesson, "pruning_curve(model, tokens, targets, importance)")

    @given(
        n_layers=st.integers(1, 3),
        n_heads=st.integers(1, 3),
        levels=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_matches_the_oracle_for_any_scores(self, lesson, n_layers, n_heads, levels, seed):
        """matches the reference for any scores, ties included"""
        r = rng(seed)
        model = make_model(r, n_layers=n_layers, n_heads=n_heads, d=2 * n_heads, sharp=2.0)
        tokens, targets = make_batch(r, n=3, n_t=4)
        importance = r.integers(0, levels, size=(n_layers, n_heads)).astype(np.float64)
        check_pruning(
            lesson,
            model,
            tokens,
            targets,
            importance,
            what=f"pruning_curve(model of {n_layers} layers of {n_heads} heads, tokens, targets, "
            f"importance {importance.tolist()})",
        )
