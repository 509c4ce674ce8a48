"""Measures the tiny model's card from its weights: accuracy, and for every head its confidence,
positional share, copy share, role and ablation cost. The training tool writes the card with it
and a test re-measures the shipped card with it, so the card cannot drift from the weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from course.tiny_model import IGNORE, forward, loss_and_accuracy, make_task

EVAL_SEED = 1234  # the evaluation sequences; training uses other seeds
EVAL_SIZE = 2000
OFFSETS = (-3, -2, -1, 0)
POSITIONAL = 0.9  # Voita et al. 2019: a positional head attends to its offset in >= 90% of cases
COPY = 0.5  # a copy head puts its largest weight on the token after the earlier occurrence


def head_statistics(weights: np.ndarray, targets: np.ndarray, distance: np.ndarray) -> dict[str, np.ndarray]:
    """weights (B, H, T, T) of one layer -> per head (H,): confidence, share at each offset and
    copy share (on the scored rows: argmax at the earlier occurrence's next position)."""
    B, H, T, _ = weights.shape
    confidence = weights.max(axis=-1).mean(axis=(0, 2))
    argmax = weights.argmax(axis=-1)  # (B, H, T)
    rows = np.arange(T)
    shares = {}
    for offset in OFFSETS:
        valid = (rows + offset >= 0) & (rows + offset < T)
        shares[offset] = (argmax[:, :, valid] == (rows + offset)[valid]).mean(axis=(0, 2))
    # at a scored row t the earlier occurrence of token t is t - distance; the token to copy
    # sits one after it
    scored = targets != IGNORE  # (B, T)
    b_idx, t_idx = np.nonzero(scored)
    want = t_idx - distance[b_idx] + 1  # (N,)
    copy = (argmax[b_idx, :, t_idx] == want[:, None]).mean(axis=0)  # (N, H) -> (H,)
    return {"confidence": confidence, "shares": shares, "copy": copy}


def head_role(stats: dict[str, Any], head: int) -> tuple[str, int, float]:
    """The card's role of ``head`` from its layer's ``head_statistics``: (role, the offset its
    rows most often put their largest weight on, that offset's share). Positional when the share
    reaches POSITIONAL, else copy when the copy share reaches COPY, else mixed."""
    best = max(OFFSETS, key=lambda o: stats["shares"][o][head])
    share = float(stats["shares"][best][head])
    copy = float(stats["copy"][head])
    role = f"positional {best:+d}" if share >= POSITIONAL else "copy" if copy >= COPY else "mixed"
    return role, best, share


def measure(model: dict, config: dict[str, int]) -> dict[str, Any]:
    """The card's measured part: accuracy and loss on the evaluation set and one entry per head."""
    tokens, targets, distance = make_task(EVAL_SIZE, EVAL_SEED, config["vocab_size"], config["max_len"])
    logits, all_weights = forward(model, tokens, n_heads=config["n_heads"])
    loss, accuracy = loss_and_accuracy(logits, targets)
    n_layers, n_heads = config["n_layers"], config["n_heads"]
    heads = []
    for layer, weights in enumerate(all_weights):
        stats = head_statistics(weights, targets, distance)
        for h in range(n_heads):
            masks = np.ones((n_layers, n_heads))
            masks[layer, h] = 0.0
            ablated_loss, ablated_accuracy = loss_and_accuracy(
                forward(model, tokens, masks, config["n_heads"])[0], targets
            )
            role, best, share = head_role(stats, h)
            copy = float(stats["copy"][h])
            heads.append(
                {
                    "layer": layer,
                    "head": h,
                    "confidence": round(float(stats["confidence"][h]), 4),
                    "offset": best,
                    "positional_share": round(share, 4),
                    "copy_share": round(copy, 4),
                    "role": role,
                    "accuracy_without": round(ablated_accuracy, 4),
                    "loss_without": round(ablated_loss, 4),
                }
            )
    return {
        "eval": {"seed": EVAL_SEED, "sequences": EVAL_SIZE},
        "accuracy": round(accuracy, 4),
        "loss": round(loss, 4),
        "heads": heads,
    }


def card_text(card: dict[str, Any]) -> str:
    """The card for people (README.md beside the weights), written from the card's data."""
    cfg = card["config"]
    lines = [
        f"# Model card: {card['name']}",
        "",
        "Written by tools/train_tiny_model.py from card.json; re-measured from weights.npz by",
        "tests/test_tiny_model.py. Lessons 10 and 11 study this model.",
        "",
        f"- Task: {card['task']}.",
        f"- Sizes: vocabulary {cfg['vocab_size']}, length {cfg['max_len']}, d_model {cfg['d_model']},"
        f" {cfg['n_layers']} attention-only causal layers of {cfg['n_heads']} heads"
        f" (head width {cfg['d_model'] // cfg['n_heads']}), learned positions, no MLP, no layer norm.",
        f"- Training: {card['training']['steps']} steps of {card['training']['batch']} sequences, AdamW,"
        f" seed {card['training']['seed']}, PyTorch {card['training']['torch']} on CPU.",
        f"- Accuracy {card['accuracy']:.3f}, loss {card['loss']:.3f} on {card['eval']['sequences']}"
        f" held-out sequences (seed {card['eval']['seed']}), scored inside the copy only.",
        "",
        f"A head's role: positional when at least {POSITIONAL:.0%} of its rows put their largest weight"
        f" at one offset (Voita et al. 2019), copy when at least {COPY:.0%} of the scored rows put it on"
        " the token after the earlier occurrence of the current token, mixed otherwise.",
        "",
        "| layer | head | role | confidence | positional share (offset) | copy share | accuracy without it |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in card["heads"]:
        lines.append(
            f"| {h['layer']} | {h['head']} | {h['role']} | {h['confidence']:.2f} |"
            f" {h['positional_share']:.2f} ({h['offset']:+d}) | {h['copy_share']:.2f} |"
            f" {h['accuracy_without']:.3f} |"
        )
    return "\n".join(lines) + "\n"
