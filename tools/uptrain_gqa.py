"""Uptrain the tiny model converted to grouped-query attention (lesson 12) and record the result.

    python tools/uptrain_gqa.py            # about 30 s on 2 CPU cores

Reads course/tiny_model/weights.npz (the MHA model the lead trains with tools/train_tiny_model.py,
8000 steps), converts every layer to G = 1 and G = 2 key/value heads as lesson 12 does (the mean of
each group of consecutive heads, the group's first head, a random head of each group), continues
training each converted model for 5% of the base model's steps (Ainslie et al. 2023 uptrain with
5% of the pre-training compute), and writes course/tiny_model/gqa_uptraining.json: the accuracy
and loss on the model card's evaluation set before and during uptraining. The MHA model trained
for the same extra steps is recorded too, so that the gain of uptraining is not mistaken for the
gain of training longer. Needs PyTorch; the course reads only the JSON. Seeded and
single-threaded: a rerun on the same PyTorch build writes the same numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course import tiny_model  # noqa: E402
from course.tiny_model import IGNORE, LAYER_KEYS, make_task  # noqa: E402

SHARE = 0.05  # of the base model's training steps
LR, WEIGHT_DECAY, BATCH = 1e-3, 0.01, 64
METHODS = ("mean", "first", "random")
KV_HEADS = (1, 2)
CHECKPOINTS = (0, 25, 50, 100, 200, 400)  # steps at which the accuracy is recorded (<= steps)


def convert(w: np.ndarray, n_heads: int, n_kv_heads: int, method: str, seed: int) -> np.ndarray:
    """Lesson 12's conversions of the last axis of w ((D, H*K) or (H*K,)) to G*K columns."""
    r, k = n_heads // n_kv_heads, w.shape[-1] // n_heads
    heads = w.reshape(*w.shape[:-1], n_kv_heads, r, k)
    if method == "mean":
        pooled = heads.mean(axis=-2)
    else:
        picks = np.zeros(n_kv_heads, dtype=np.int64)
        if method == "random":
            picks = np.random.default_rng(seed).integers(0, r, size=n_kv_heads)
        pooled = np.stack([heads[..., g, picks[g], :] for g in range(n_kv_heads)], axis=-2)
    return pooled.reshape(*w.shape[:-1], n_kv_heads * k)


class GQAModel(torch.nn.Module):
    """The tiny model with G key/value heads per layer (key/value head h // (H // G) for query
    head h, as PyTorch's enable_gqa and lesson 8 repeat them)."""

    def __init__(self, weights: dict, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        p = lambda a: torch.nn.Parameter(torch.tensor(a, dtype=torch.float32))  # noqa: E731
        self.tok_emb, self.pos_emb = p(weights["tok_emb"]), p(weights["pos_emb"])
        self.unembed, self.b_unembed = p(weights["unembed"]), p(weights["b_unembed"])
        self.layers = torch.nn.ModuleList(
            torch.nn.ParameterDict({key: p(layer[key]) for key in LAYER_KEYS}) for layer in weights["layers"]
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, T = tokens.shape
        x = self.tok_emb[tokens] + self.pos_emb[:T]
        for p in self.layers:
            q, k, v = (x @ p[f"w_{n}"] + p[f"b_{n}"] for n in "qkv")
            K = q.shape[-1] // self.n_heads
            q = q.view(B, T, self.n_heads, K).transpose(1, 2)
            k, v = (a.view(B, T, self.n_kv_heads, K).transpose(1, 2) for a in (k, v))
            heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + heads.transpose(1, 2).reshape(B, T, -1) @ p["w_o"] + p["b_o"]
        return x @ self.unembed + self.b_unembed


def evaluate(model: GQAModel, tokens: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens)).double().numpy()
    loss, accuracy = tiny_model.loss_and_accuracy(logits, targets)
    return round(loss, 4), round(accuracy, 4)


def uptrain(model: GQAModel, steps: int, seed: int, evaluation) -> list[dict]:
    """AdamW with a cosine decay over ``steps``; the accuracy at the CHECKPOINTS."""
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    cfg = tiny_model.config()
    curve = []
    for step in range(steps + 1):
        if step in CHECKPOINTS or step == steps:
            loss, accuracy = evaluate(model, *evaluation)
            curve.append({"step": step, "loss": loss, "accuracy": accuracy})
        if step == steps:
            break
        tokens, targets, _ = make_task(
            BATCH, 50_000_000 + seed * 1_000_000 + step, cfg["vocab_size"], cfg["max_len"]
        )
        logits = model(torch.from_numpy(tokens))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, cfg["vocab_size"]), torch.from_numpy(targets).reshape(-1), ignore_index=IGNORE
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "course" / "tiny_model" / "gqa_uptraining.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    card, cfg = tiny_model.card(), tiny_model.config()
    base_steps = int(card["training"]["steps"])
    steps = round(SHARE * base_steps)
    evaluation = make_task(card["eval"]["sequences"], card["eval"]["seed"])[:2]
    weights = tiny_model.load()
    H = cfg["n_heads"]
    runs = []
    start = time.time()
    for n_kv_heads in (*KV_HEADS, H):
        for method in METHODS if n_kv_heads < H else ("mha",):
            converted = dict(weights)
            converted["layers"] = [
                {
                    key: (
                        convert(value, H, n_kv_heads, method, seed=i)
                        if key in ("w_k", "w_v", "b_k", "b_v") and n_kv_heads < H
                        else value
                    )
                    for key, value in layer.items()
                }
                for i, layer in enumerate(weights["layers"])
            ]
            model = GQAModel(converted, H, n_kv_heads)
            curve = uptrain(model, steps, seed=0, evaluation=evaluation)
            runs.append({"method": method, "n_kv_heads": n_kv_heads, "curve": curve})
            print(
                f"G={n_kv_heads} {method:6s} {curve[0]} -> {curve[-1]}  {time.time() - start:5.1f} s",
                flush=True,
            )
    result = {
        "what": (
            "the tiny model converted to G key/value heads (lesson 12's conversions; 'random' keeps "
            "head g*r + picks[g], picks = np.random.default_rng(layer).integers(0, r, size=G)), then "
            "uptrained; 'mha' is the unconverted model trained for the same extra steps"
        ),
        "base_steps": base_steps,
        "uptraining_steps": steps,
        "share": SHARE,
        "optimizer": {
            "name": "AdamW",
            "lr": LR,
            "weight_decay": WEIGHT_DECAY,
            "schedule": "cosine",
            "batch": BATCH,
        },
        "eval": card["eval"],
        "weights_sha256": hashlib.sha256(
            (ROOT / "course" / "tiny_model" / "weights.npz").read_bytes()
        ).hexdigest(),
        "torch": torch.__version__,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
