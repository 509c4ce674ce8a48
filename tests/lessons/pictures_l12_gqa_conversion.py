"""Pictures of lesson 12 (read by course.engine.pictures.load): the engine's sentence through an MHA
layer of four heads converted by the learner's mean_pool_kv_heads to two key/value heads (each
query head's weights, with the key/value head it reads), and the conversion table of the shipped
tiny model measured with the learner's conversion_table: error, loss and accuracy per method and
number of key/value heads, and the KV cache each needs; then, from
course/tiny_model/gqa_uptraining.json (written by tools/uptrain_gqa.py, trusted data, no learner
code), the accuracy of the converted models during 5% of uptraining."""

import hashlib
import json
from importlib import resources

import numpy as np

from course import tiny_model
from course.engine.testing import (
    LearnerError,
    LineChart,
    NumberTable,
    maps,
)

HEADS, KV_HEADS = 4, 2
METHODS = ("mean", "first", "random", "modulo")
MEASURED_ON = 500  # sequences of the copy task (course.tiny_model.make_task, seed 1234)


def pooled_reference(w, n_heads, n_kv_heads):
    """Trusted mean-pooling of the columns of w (D, H*K) over groups of consecutive heads."""
    d, width = w.shape
    k = width // n_heads
    return w.reshape(d, n_kv_heads, n_heads // n_kv_heads, k).mean(axis=2).reshape(d, n_kv_heads * k)


def converted_weights(e, w_k):
    """The sentence's causal weights (H, T, T): the MHA example's queries against pooled keys
    w_k (D, G*K), key/value head g read by query heads g*r .. g*r + r - 1."""
    mha = maps.example(HEADS)
    q = maps.split(mha.x @ mha.params["w_q"], HEADS)
    k = maps.split(mha.x @ w_k, KV_HEADS)
    return maps.reference_attention(q, k[:, e.groups()], e.causal)[0]


def learner(module, e):
    mha = maps.example(HEADS)
    converted = module.mean_pool_kv_heads(mha.params, HEADS, KV_HEADS)
    want = (maps.WIDTH, maps.WIDTH // HEADS * KV_HEADS)
    w_k = converted.get("w_k") if isinstance(converted, dict) else None
    if not isinstance(w_k, np.ndarray) or w_k.shape != want:
        shape = getattr(w_k, "shape", None)
        raise LearnerError(
            f"mean_pool_kv_heads(params, 4, 2) returned a w_k of shape {shape}; expected (D, G*K) = {want}."
        )
    return converted_weights(e, w_k)


def reference(e):
    return converted_weights(e, pooled_reference(maps.example(HEADS).params["w_k"], HEADS, KV_HEADS))


MAPS = maps.MapPipeline(learner=learner, reference=reference, heads=HEADS, kv_heads=KV_HEADS)


def measured(module, model, tokens, targets, n_heads, counts, method):
    """The learner's conversion_table for one method (one call each, within the call limit)."""
    table = module.conversion_table(model, tokens, targets, n_heads, counts, (method,), 0)
    shapes = {"relative_error": (1, len(counts)), "loss": (1, len(counts)), "accuracy": (1, len(counts))}
    if not isinstance(table, dict) or any(
        not isinstance(table.get(name), np.ndarray) or table[name].shape != shape
        for name, shape in shapes.items()
    ):
        raise LearnerError(
            "conversion_table did not return a dict of relative_error, loss and accuracy, each (M, N)."
        )
    cache = table.get("cache_bytes")
    if not isinstance(cache, np.ndarray) or cache.shape != (len(counts),):
        raise LearnerError("conversion_table's cache_bytes is not an array (N,).")
    return table


def figures(module):
    """The conversion table of the shipped tiny model, measured with the learner's functions."""
    cfg = tiny_model.config()
    n_heads = cfg["n_heads"]
    counts = tuple(g for g in range(1, n_heads + 1) if n_heads % g == 0)  # 1, 2, 4
    model = tiny_model.load()
    seed = tiny_model.card()["eval"]["seed"]
    tokens, targets, _ = tiny_model.make_task(MEASURED_ON, seed=seed)
    tables = {m: measured(module, model, tokens, targets, n_heads, counts, m) for m in METHODS}
    cache = tables["mean"]["cache_bytes"]
    rows = []
    for method in METHODS:
        t = tables[method]
        for j, g in enumerate(counts):
            rows.append(
                (
                    method,
                    g,
                    float(t["relative_error"][0, j]),
                    float(t["loss"][0, j]),
                    float(t["accuracy"][0, j]),
                    int(cache[j]),
                )
            )
    return [
        NumberTable(
            f"tiny model converted to G key/value heads, no uptraining ({MEASURED_ON} copy-task sequences "
            f"drawn with seed {seed}; G = {n_heads} is the MHA model; chance accuracy "
            f"{1 / cfg['vocab_size']:.3f})",
            ("method", "G", "logit error", "loss", "accuracy", "KV bytes/seq"),
            tuple(rows),
            ("", "d", ".3f", ".3f", ".3f", "d"),
        ),
        LineChart(
            f"accuracy against the number of key/value heads G (the {MEASURED_ON} sequences of the "
            "table above)",
            tuple(float(g) for g in counts),
            {m: tuple(float(a) for a in tables[m]["accuracy"][0]) for m in METHODS},
            x_label="key/value heads G",
            y_label="accuracy",
        ),
        *uptraining_figures(),
    ]


def uptraining_figures() -> list:
    """The recorded uptraining (tools/uptrain_gqa.py), when the package ships it."""
    files = resources.files(tiny_model.__name__)
    recorded = files.joinpath("gqa_uptraining.json")
    if not recorded.is_file():
        return []
    data = json.loads(recorded.read_text(encoding="utf-8"))
    weights = hashlib.sha256(files.joinpath("weights.npz").read_bytes()).hexdigest()
    stale = "" if data.get("weights_sha256") == weights else "; recorded for earlier weights"
    steps, base = data["uptraining_steps"], data["base_steps"]
    rows = tuple(
        (
            run["method"],
            run["n_kv_heads"],
            run["curve"][0]["accuracy"],
            run["curve"][-1]["accuracy"],
            run["curve"][-1]["loss"],
        )
        for run in data["runs"]
    )
    curves = [run for run in data["runs"] if run["n_kv_heads"] == 1 or run["method"] == "mha"]
    evaluation = data.get("eval", tiny_model.card()["eval"])
    sequences = f"the model card's {evaluation['sequences']} evaluation sequences (seed {evaluation['seed']})"
    return [
        NumberTable(
            f"after uptraining {steps} steps ({steps / base:.0%} of the base model's {base}; "
            f"tools/uptrain_gqa.py{stale}; 'mha': the MHA model trained {steps} steps more), "
            f"measured on {sequences}: other sequences than the {MEASURED_ON} of the first table, "
            "so 'accuracy before' differs a little from its accuracy",
            ("method", "G", "accuracy before", "accuracy after", "loss after"),
            rows,
            ("", "d", ".3f", ".3f", ".3f"),
        ),
        LineChart(
            f"accuracy during uptraining on {sequences}: mean, first and random at G = 1 "
            "(multi-query attention), mha the unconverted model (G = 4)",
            tuple(float(point["step"]) for point in curves[0]["curve"]),
            {run["method"]: tuple(float(p["accuracy"]) for p in run["curve"]) for run in curves},
            x_label="uptraining step",
            y_label="accuracy",
            height=20,  # a row per 0.05 of accuracy: the values the lesson quotes can be read
        ),
    ]
