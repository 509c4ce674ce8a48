"""The tiny trained transformer that lessons 10 and 11 study, shipped as data.

`tools/train_tiny_model.py` trained it with PyTorch (seeded, CPU) and wrote `weights.npz` and
`card.json` here; nothing is downloaded or trained when the course runs. This module reads them
and holds the model's task and a plain numpy forward pass (the trusted reference: grading tests
and the model card use it, never a learner's code).

The model: token and position embeddings, `n_layers` causal self-attention layers of `n_heads`
heads with a residual connection each (attention only: no MLP, no layer norm), and an unembedding
to logits over the vocabulary. Its layers use the course's conventions: lesson 6's parameter dict
(w_q, w_k, w_v (D, H*K), w_o (H*K, D) and their biases), x @ w + b, head h in columns h*K:(h+1)*K.

The task ("copy"): a sequence of L random tokens in which a segment of 4 to 8 tokens reappears,
copied, later on. The model predicts the next token; it is scored only where the next token is
the second or a later token of the copy, the positions where the earlier occurrence tells what
comes next. Solving it takes two heads working together across the layers (an "induction
circuit", Olsson et al. 2022): a layer-0 head that looks at the previous token, and a layer-1
head that finds the earlier place where that token came and copies the token after it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

LAYER_KEYS = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")
SEGMENT = (4, 8)  # the copied segment has 4 .. 8 tokens
IGNORE = -1  # a target that is not scored


@lru_cache(maxsize=1)
def card() -> dict[str, Any]:
    """The model card: task, sizes, accuracy and what each head does (see card.json)."""
    return json.loads(resources.files(__name__).joinpath("card.json").read_text(encoding="utf-8"))


def config() -> dict[str, int]:
    """vocab_size, max_len, d_model, n_heads, n_layers."""
    return dict(card()["config"])


def load() -> dict[str, Any]:
    """The weights in float64: tok_emb (V, D), pos_emb (L, D), unembed (D, V), b_unembed (V,),
    layers: a list of lesson-6 parameter dicts (w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o).
    Every call returns fresh arrays, so a caller may change them freely."""
    with resources.files(__name__).joinpath("weights.npz").open("rb") as f, np.load(f) as data:
        arrays = {name: np.asarray(data[name], dtype=np.float64) for name in data.files}
    n_layers = config()["n_layers"]
    return {
        "tok_emb": arrays["tok_emb"],
        "pos_emb": arrays["pos_emb"],
        "unembed": arrays["unembed"],
        "b_unembed": arrays["b_unembed"],
        "layers": [{key: arrays[f"layers.{i}.{key}"] for key in LAYER_KEYS} for i in range(n_layers)],
    }


def make_task(n: int, seed: int, vocab_size: int | None = None, max_len: int | None = None):
    """n sequences of the copy task, reproducible from `seed`.

    Returns (tokens, targets, distance): tokens (n, L) int64; targets (n, L) int64, the next
    token where it is scored and IGNORE (-1) elsewhere; distance (n,) int64, how far back the
    copied segment's original lies (the copy starts `distance` positions after it).
    """
    V = vocab_size if vocab_size is not None else config()["vocab_size"]
    L = max_len if max_len is not None else config()["max_len"]
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, size=(n, L))
    targets = np.full((n, L), IGNORE, dtype=np.int64)
    distance = np.zeros(n, dtype=np.int64)
    for b in range(n):
        m = int(rng.integers(SEGMENT[0], SEGMENT[1] + 1))
        src = int(rng.integers(0, L - 2 * m + 1))
        dst = int(rng.integers(src + m, L - m + 1))
        tokens[b, dst : dst + m] = tokens[b, src : src + m]
        distance[b] = dst - src
        # position t predicts token t + 1; scored when t + 1 is the 2nd .. m-th copied token
        for t in range(dst, dst + m - 1):
            targets[b, t] = tokens[b, t + 1]
    return tokens.astype(np.int64), targets, distance


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def attention_layer(x: np.ndarray, params: dict, n_heads: int, head_mask=None):
    """One causal self-attention layer: (B, T, D) -> (out (B, T, D), weights (B, H, T, T)).
    head_mask (H,) multiplies each head's output before W_O (Michel et al. 2019's xi_h)."""
    B, T, D = x.shape
    q, k, v = (x @ params[f"w_{n}"] + params[f"b_{n}"] for n in "qkv")
    K = q.shape[-1] // n_heads
    q, k, v = (a.reshape(B, T, n_heads, K).transpose(0, 2, 1, 3) for a in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(K)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    weights = _softmax(scores)
    heads = weights @ v  # (B, H, T, K)
    if head_mask is not None:
        heads = heads * np.asarray(head_mask, dtype=np.float64)[None, :, None, None]
    out = heads.transpose(0, 2, 1, 3).reshape(B, T, n_heads * K) @ params["w_o"] + params["b_o"]
    return out, weights


def forward(model: dict, tokens: np.ndarray, head_masks=None, n_heads: int | None = None):
    """logits (B, T, V) and the attention weights of every layer, a list of (B, H, T, T).
    head_masks: None or (n_layers, H), one xi per head; n_heads defaults to the card's."""
    n_heads = n_heads or config()["n_heads"]
    T = tokens.shape[1]
    x = model["tok_emb"][tokens] + model["pos_emb"][:T]
    all_weights = []
    for i, params in enumerate(model["layers"]):
        out, weights = attention_layer(x, params, n_heads, None if head_masks is None else head_masks[i])
        x = x + out
        all_weights.append(weights)
    return x @ model["unembed"] + model["b_unembed"], all_weights


def loss_and_accuracy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over the scored positions (targets != IGNORE)."""
    scored = targets != IGNORE
    z = logits[scored]
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = logp[np.arange(len(z)), targets[scored]]
    return float(-picked.mean()), float((z.argmax(axis=-1) == targets[scored]).mean())
