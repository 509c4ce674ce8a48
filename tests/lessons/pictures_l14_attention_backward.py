"""Pictures of lesson 14 (read by course.engine.pictures.load): Michel et al.'s head importance of
the SHIPPED tiny model, exactly from the learner's head_mask_gradient, beside lesson 11's estimate
by central differences, on the fixed batch of copy-task sequences lesson 11's map uses; then how
far finite differences stay from the learner's gradient as the step eps shrinks.

The learner's head_mask_gradient sees one attention layer: its input x and dL/d(out), the gradient
of the summed per-sequence losses with respect to that layer's attention output. Both come from a
trusted numpy forward and backward pass of the tiny model written here (course.tiny_model's forward,
layer by layer, and the backward of everything above each attention output), never from the
learner's code. The finite differences use the same trusted forward. No attention maps (MAPS): the
lesson's functions return gradients, not weights.
"""

from __future__ import annotations

import numpy as np

from course import tiny_model
from course.engine.testing import (
    LearnerError,
    LearnerModule,
    LineChart,
    NumberTable,
)

SEQUENCES, SEED = 300, 2019  # the fixed batch of lesson 11's map, not the card's evaluation set
EPS = 1e-3  # lesson 11's step
CHECK = 1e-5  # a smaller step: how far EPS's estimate is from the derivative, without the learner
STEPS = tuple(10.0**-p for p in range(1, 9))  # the chart's eps: 1e-1 .. 1e-8
AGREE = 1e-4  # exact and central differences at EPS agree to this relative difference
FLOOR = 1e-16  # a relative difference of 0 is drawn here (log10 of 0 is -inf)


# The trusted forward pass, layer by layer, keeping what the backward pass needs ---------------


def layer_forward(x: np.ndarray, params: dict, n_heads: int) -> dict:
    """One causal self-attention layer of the tiny model, as course.tiny_model.attention_layer
    computes it (no head mask), with its intermediates: q, k, v, heads (B, H, T, K), weights
    (B, H, T, T), out (B, T, D)."""
    B, T, _ = x.shape
    q, k, v = (x @ params[f"w_{n}"] + params[f"b_{n}"] for n in "qkv")  # (B, T, H*K) each
    K = q.shape[-1] // n_heads
    q, k, v = (a.reshape(B, T, n_heads, K).transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, K)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(K)  # (B, H, T, T)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)  # masked keys: exactly 0
    heads = weights @ v  # (B, H, T, K)
    out = heads.transpose(0, 2, 1, 3).reshape(B, T, n_heads * K) @ params["w_o"] + params["b_o"]
    return {"q": q, "k": k, "v": v, "weights": weights, "heads": heads, "out": out}


def head_output(cache: dict, params: dict, head: int) -> np.ndarray:
    """Head ``head``'s share of the layer's output, heads[:, h] @ W_O[h*K:(h+1)*K]: (B, T, D).
    The layer's out is b_o plus the sum of these over the heads."""
    K = cache["heads"].shape[-1]
    return cache["heads"][:, head] @ params["w_o"][head * K : (head + 1) * K]


def sequence_losses(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(B,): each sequence's mean cross-entropy over its scored positions (lesson 11's L_b)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # (B, T, V)
    scored = targets != tiny_model.IGNORE
    picked = np.take_along_axis(log_probs, np.where(scored, targets, 0)[..., None], axis=-1)[..., 0]
    return -np.where(scored, picked, 0.0).sum(axis=-1) / scored.sum(axis=-1)


def logits_gradient(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """d(sum over b of L_b)/d(logits): (softmax - one-hot of the target) / (the sequence's number
    of scored positions) at a scored position, 0 elsewhere. (B, T, V)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    scored = targets != tiny_model.IGNORE
    one_hot = np.zeros_like(probs)
    np.put_along_axis(one_hot, np.where(scored, targets, 0)[..., None], 1.0, axis=-1)
    weight = scored / scored.sum(axis=-1, keepdims=True)  # (B, T): 1 / n_b where scored
    return (probs - one_hot) * weight[..., None]


# The trusted backward pass of everything above an attention output ----------------------------


def layer_input_gradient(cache: dict, params: dict, grad_out: np.ndarray) -> np.ndarray:
    """d(sum(grad_out * out))/dx for one causal self-attention layer (queries, keys and values all
    from x), from its forward intermediates: (B, T, D)."""
    B, H, T, K = cache["q"].shape
    weights, scale = cache["weights"], 1.0 / np.sqrt(K)
    grad_heads = (grad_out @ params["w_o"].T).reshape(B, T, H, K).transpose(0, 2, 1, 3)  # (B, H, T, K)
    grad_weights = grad_heads @ cache["v"].transpose(0, 1, 3, 2)  # (B, H, T, T)
    grad_v = weights.transpose(0, 1, 3, 2) @ grad_heads  # (B, H, T, K)
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(axis=-1, keepdims=True))
    grad_q = grad_scores @ cache["k"] * scale  # (B, H, T, K)
    grad_k = grad_scores.transpose(0, 1, 3, 2) @ cache["q"] * scale  # (B, H, T, K)

    def merged(a: np.ndarray) -> np.ndarray:
        return a.transpose(0, 2, 1, 3).reshape(B, T, H * K)

    return (
        merged(grad_q) @ params["w_q"].T + merged(grad_k) @ params["w_k"].T + merged(grad_v) @ params["w_v"].T
    )


def layer_inputs_and_gradients(model: dict, tokens: np.ndarray, targets: np.ndarray, n_heads: int):
    """The trusted passes of the tiny model on (tokens, targets). Returns (xs, caches, grads):
    xs[l] the input of layer l (B, T, D), caches[l] its intermediates (layer_forward), grads[l]
    d(sum over b of L_b)/d(out of layer l's attention) (B, T, D). Layer l's output is added to the
    residual stream, so that gradient is the gradient with respect to the stream after layer l:
    the unembedding's for the last layer, plus the backward of each attention layer above."""
    x = model["tok_emb"][tokens] + model["pos_emb"][: tokens.shape[1]]  # (B, T, D)
    xs, caches = [], []
    for params in model["layers"]:
        xs.append(x)
        caches.append(layer_forward(x, params, n_heads))
        x = x + caches[-1]["out"]  # the residual stream
    logits = x @ model["unembed"] + model["b_unembed"]  # (B, T, V)
    grad = logits_gradient(logits, targets) @ model["unembed"].T  # d/d(the last stream), (B, T, D)
    grads: list[np.ndarray] = []
    for params, cache in zip(reversed(model["layers"]), reversed(caches), strict=True):
        grads.insert(0, grad)  # the gradient of this layer's output = of the stream after it
        grad = grad + layer_input_gradient(cache, params, grad)  # the stream before it: both paths
    return xs, caches, grads


# Finite differences with the trusted forward ----------------------------------------------------


def losses_with_head_scaled(model, caches, xs, targets, n_heads, layer, head, xi) -> np.ndarray:
    """(B,): every sequence's loss with head (layer, head)'s output times xi (every other head
    kept), as course.tiny_model.forward with that head mask computes it. The layers below are
    unchanged and the head enters its layer's output linearly, so the forward starts from the
    cached stream: x_l + out_l + (xi - 1) * the head's share of out_l, then the layers above."""
    params = model["layers"][layer]
    x = xs[layer] + caches[layer]["out"] + (xi - 1.0) * head_output(caches[layer], params, head)
    for above in model["layers"][layer + 1 :]:
        x = x + layer_forward(x, above, n_heads)["out"]
    return sequence_losses(x @ model["unembed"] + model["b_unembed"], targets)


def finite_differences(model, caches, xs, targets, n_heads, eps, full) -> tuple[np.ndarray, np.ndarray]:
    """Michel et al.'s importance E_b |dL_b/dxi| of every head, (n_layers, H), by central
    differences (L_b(1 + eps) - L_b(1 - eps)) / (2 eps) as lesson 11's head_importance takes it
    (not normalised), and by one-sided ones (L_b(1 + eps) - L_b(1)) / eps; ``full`` is L_b(1)."""
    n_layers = len(model["layers"])
    central, one_sided = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            up = losses_with_head_scaled(model, caches, xs, targets, n_heads, layer, head, 1.0 + eps)
            down = losses_with_head_scaled(model, caches, xs, targets, n_heads, layer, head, 1.0 - eps)
            central[layer, head] = np.mean(np.abs((up - down) / (2 * eps)))
            one_sided[layer, head] = np.mean(np.abs((up - full) / eps))
    return central, one_sided


def relative_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / max(|a|, |b|) per entry (0 where both are 0)."""
    size = np.maximum(np.abs(a), np.abs(b))
    return np.divide(np.abs(a - b), size, out=np.zeros_like(size), where=size > 0)


# The learner's exact importance -----------------------------------------------------------------


def exact_importance(module: LearnerModule, model, xs, grads, n_heads) -> tuple[np.ndarray, np.ndarray]:
    """The learner's head_mask_gradient, layer by layer, on the trusted layer inputs and output
    gradients: (n_layers, B, H) per-sequence dL_b/dxi, and its importance E_b |dL_b/dxi|."""
    B, T, _ = xs[0].shape
    mask = np.tril(np.ones((T, T), dtype=bool))  # causal: query i sees keys 0 .. i
    per_sequence = []
    for layer, params in enumerate(model["layers"]):
        got = module.head_mask_gradient(xs[layer], xs[layer], params, n_heads, grads[layer], mask)
        if not isinstance(got, np.ndarray) or got.shape != (B, n_heads) or got.dtype.kind not in "iuf":
            shape = getattr(got, "shape", getattr(got, "type_name", type(got).__name__))  # Opaque: its type
            raise LearnerError(
                f"head_mask_gradient returned {shape} for layer {layer}; the picture needs (B, H) = "
                f"{(B, n_heads)} numbers."
            )
        got = np.asarray(got, dtype=np.float64)
        if not np.all(np.isfinite(got)):
            raise LearnerError(f"head_mask_gradient returned NaN or inf for layer {layer} of the tiny model.")
        per_sequence.append(got)
    derivatives = np.stack(per_sequence)  # (n_layers, B, H)
    return derivatives, np.abs(derivatives).mean(axis=1)


def figures(module: LearnerModule) -> list:
    """The learner's exact importance beside central differences, and the differences' error
    against eps."""
    model = tiny_model.load()
    n_layers, n_heads = len(model["layers"]), tiny_model.config()["n_heads"]
    tokens, targets, _ = tiny_model.make_task(SEQUENCES, SEED)
    xs, caches, grads = layer_inputs_and_gradients(model, tokens, targets, n_heads)
    _, exact = exact_importance(module, model, xs, grads, n_heads)

    x_top = xs[-1] + caches[-1]["out"]
    full = sequence_losses(x_top @ model["unembed"] + model["b_unembed"], targets)
    central, one_sided = {}, {}
    for eps in STEPS:
        central[eps], one_sided[eps] = finite_differences(model, caches, xs, targets, n_heads, eps, full)
    estimate = central[EPS]
    relative = relative_differences(exact, estimate)
    worst = np.unravel_index(np.argmax(relative), relative.shape)
    norm = np.sqrt(np.sum(exact**2, axis=1, keepdims=True))
    normalised = np.divide(exact, norm, out=np.zeros_like(exact), where=norm > 0)
    step_error = relative_differences(estimate, central[CHECK]).max()  # the step's own error
    where = f"(L{worst[0]} H{worst[1]})"
    if relative.max() <= AGREE:
        verdict = (
            f"They agree: the largest relative difference is {relative.max():.1e} {where}, about "
            f"what the step costs (eps = {EPS:g} and {CHECK:g} give estimates {step_error:.0e} apart)."
        )
    else:
        verdict = (
            f"They disagree: the largest relative difference is {relative.max():.1e} {where}, while "
            f"eps = {EPS:g} and {CHECK:g} give estimates only {step_error:.0e} apart, so the step "
            "does not explain it: check your head_mask_gradient against your own central differences."
        )
    roles = {(h["layer"], h["head"]): h["role"] for h in tiny_model.card().get("heads", [])}
    rows = tuple(
        (
            f"L{layer} H{head}",
            roles.get((layer, head), ""),
            float(exact[layer, head]),
            float(estimate[layer, head]),
            float(relative[layer, head]),
            float(normalised[layer, head]),
        )
        for layer in range(n_layers)
        for head in range(n_heads)
    )
    exponents = tuple(float(np.log10(eps)) for eps in STEPS)

    def error_curve(estimates: dict) -> tuple[float, ...]:
        return tuple(
            float(np.log10(max(relative_differences(exact, estimates[eps]).max(), FLOOR))) for eps in STEPS
        )

    return [
        NumberTable(
            f"Each head of the tiny model (L layer, H head) on {SEQUENCES} copy-task sequences (seed "
            f"{SEED}, lesson 11's batch): Michel et al.'s importance E|dL/dxi|, exact from your "
            "head_mask_gradient (one backward pass per layer, given dL/d(out) from a trusted "
            f"backward pass), beside lesson 11's central difference with eps = {EPS:g} (two forward "
            "passes per head). Neither is normalised; the last column is yours with each layer's row "
            f"of l2 norm 1, as lesson 11's head_importance returns it. {verdict}",
            ("head", "role (card)", "exact (yours)", "central diff.", "rel. diff.", "normalised"),
            rows,
            ("", "", ".6f", ".6f", ".1e", ".3f"),
        ),
        LineChart(
            f"The same {SEQUENCES} sequences: the largest relative difference over the "
            f"{n_layers * n_heads} heads between finite differences and your exact importance, "
            "against the step eps. Central differences err like eps^2, one-sided ones like eps, "
            "until rounding, which grows like 1/eps, takes over at small eps",
            exponents,
            {"central": error_curve(central), "one-sided": error_curve(one_sided)},
            x_label="log10 eps",
            y_label="log10 of the largest relative difference",
        ),
    ]
