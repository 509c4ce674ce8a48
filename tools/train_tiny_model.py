"""Train the tiny transformer that lessons 10 and 11 study and write it into the package.

    python tools/train_tiny_model.py            # about 90 s on 2 CPU cores

Writes course/tiny_model/weights.npz (float32) and course/tiny_model/card.json. Needs PyTorch;
taking the course does not (the weights ship with it). Seeded and single-threaded per step, so
a rerun on the same PyTorch build gives the same weights. The task, the forward pass and the
card's measurements live in course/tiny_model/ (read them there); the model below computes the
same forward pass in PyTorch, in the course's conventions, so the weights export as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course.tiny_model import IGNORE, LAYER_KEYS, make_task  # noqa: E402
from course.tiny_model.measure import card_text, measure  # noqa: E402

CONFIG = {"vocab_size": 32, "max_len": 24, "d_model": 64, "n_heads": 4, "n_layers": 2}
TRAIN = {"steps": 8000, "batch": 64, "lr": 3e-3, "weight_decay": 0.01, "seed": 0}


class TinyModel(torch.nn.Module):
    """Embeddings, attention-only causal layers with residuals, an unembedding (x @ w + b)."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int, n_heads: int, n_layers: int):
        super().__init__()
        self.n_heads = n_heads
        g = lambda *shape: torch.nn.Parameter(torch.randn(*shape) * 0.02)  # noqa: E731
        z = lambda *shape: torch.nn.Parameter(torch.zeros(*shape))  # noqa: E731
        self.tok_emb, self.pos_emb = g(vocab_size, d_model), g(max_len, d_model)
        self.unembed, self.b_unembed = g(d_model, vocab_size), z(vocab_size)
        self.layers = torch.nn.ModuleList()
        for _ in range(n_layers):
            layer = torch.nn.ParameterDict()
            for key in LAYER_KEYS:
                layer[key] = g(d_model, d_model) if key.startswith("w") else z(d_model)
            self.layers.append(layer)

    def forward(self, tokens: torch.Tensor, head_masks: torch.Tensor | None = None):
        B, T = tokens.shape
        x = self.tok_emb[tokens] + self.pos_emb[:T]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        all_weights = []
        for i, p in enumerate(self.layers):
            q, k, v = (x @ p[f"w_{n}"] + p[f"b_{n}"] for n in "qkv")
            K = q.shape[-1] // self.n_heads
            q, k, v = (a.view(B, T, self.n_heads, K).transpose(1, 2) for a in (q, k, v))
            scores = (q @ k.transpose(-1, -2)) / K**0.5
            weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            heads = weights @ v
            if head_masks is not None:
                heads = heads * head_masks[i][None, :, None, None]
            x = x + heads.transpose(1, 2).reshape(B, T, -1) @ p["w_o"] + p["b_o"]
            all_weights.append(weights)
        return x @ self.unembed + self.b_unembed, all_weights


def to_numpy(model: TinyModel) -> dict:
    """The weights as course.tiny_model.load() returns them (float64)."""
    arr = lambda t: t.detach().double().numpy().copy()  # noqa: E731
    return {
        "tok_emb": arr(model.tok_emb),
        "pos_emb": arr(model.pos_emb),
        "unembed": arr(model.unembed),
        "b_unembed": arr(model.b_unembed),
        "layers": [{key: arr(layer[key]) for key in LAYER_KEYS} for layer in model.layers],
    }


def train(steps: int, seed: int) -> TinyModel:
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # one thread: reductions in a fixed order, the same weights every run
    torch.use_deterministic_algorithms(True)
    model = TinyModel(**CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN["lr"], weight_decay=TRAIN["weight_decay"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=TRAIN["lr"], total_steps=steps)
    start = time.time()
    for step in range(steps):
        tokens, targets, _ = make_task(
            TRAIN["batch"], 10_000 + seed * 1_000_000 + step, CONFIG["vocab_size"], CONFIG["max_len"]
        )
        logits, _ = model(torch.from_numpy(tokens))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, CONFIG["vocab_size"]),
            torch.from_numpy(targets).reshape(-1),
            ignore_index=IGNORE,
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 500 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:5.1f} s", flush=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAIN["steps"])
    parser.add_argument("--seed", type=int, default=TRAIN["seed"])
    parser.add_argument("--out", type=Path, default=ROOT / "course" / "tiny_model")
    args = parser.parse_args()
    model = train(args.steps, args.seed)
    weights = to_numpy(model)
    flat = {name: weights[name].astype(np.float32) for name in ("tok_emb", "pos_emb", "unembed", "b_unembed")}
    for i, layer in enumerate(weights["layers"]):
        flat.update({f"layers.{i}.{key}": value.astype(np.float32) for key, value in layer.items()})
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "weights.npz", **flat)
    # the card is measured on the float32 weights as shipped, read back in float64
    shipped = {name: flat[name].astype(np.float64) for name in ("tok_emb", "pos_emb", "unembed", "b_unembed")}
    shipped["layers"] = [
        {key: flat[f"layers.{i}.{key}"].astype(np.float64) for key in LAYER_KEYS}
        for i in range(CONFIG["n_layers"])
    ]
    card = {
        "name": "tiny copy transformer",
        "task": (
            "copy: 24 random tokens of 32 in which a segment of 4-8 tokens reappears later;"
            " predict the next token inside the copy"
        ),
        "config": CONFIG,
        "training": dict(TRAIN, steps=args.steps, seed=args.seed, torch=torch.__version__),
        **measure(shipped, CONFIG),
    }
    (args.out / "card.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    (args.out / "README.md").write_text(card_text(card), encoding="utf-8")
    print(json.dumps({k: card[k] for k in ("accuracy", "loss")}))
    for head in card["heads"]:
        print(head)


if __name__ == "__main__":
    main()
