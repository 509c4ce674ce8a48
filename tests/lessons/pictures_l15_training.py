"""Experiments of lesson 15 (read by course.engine.pictures.load; `course experiment 15 NAME`):
two claims measured with the learner's own train, called through the worker CHUNK steps at a
time, each call resuming from the optimizer state the one before returned.

- "uptraining" (Ainslie et al. 2023): the shipped tiny model converted to G = 2 and G = 1
  key/value heads by the learner's lesson 12 convert_model, then uptrained for 5% of the base
  model's steps with the recipe of tools/uptrain_gqa.py; the accuracy before and after, beside
  the shipped PyTorch figures (course/tiny_model/gqa_uptraining.json), within TOLERANCE.
- "heads" (Voita et al. 2019): the model trained from init_model's weights, measured every few
  steps as the model card measures it (course.tiny_model.measure): accuracy, and each head's
  role, confidence and copy share.

Everything measured is trusted: the forward pass that evaluates a model (``forward``: lesson 12's
GQA forward of the tiny model, float64), the evaluation set (the model card's) and the head
measures. The learner's code only trains (and converts). The reference figures recorded with the
reference solution (course/tiny_model/l15_experiments.json, tools/record_l15_experiments.py) are
shown beside the learner's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from course import tiny_model
from course.engine.testing import Experiment, LearnerError, LearnerModule, LineChart, NotStarted, NumberTable
from course.tiny_model import measure

RECORD = "l15_experiments.json"  # in course/tiny_model, beside the weights it was measured on
SHIPPED = "gqa_uptraining.json"  # tools/uptrain_gqa.py's PyTorch figures, in course/tiny_model
CHUNK = 50  # steps per call of the learner's train: about a second, far below the call limit
EVAL_CHUNK = 200  # sequences per trusted forward pass (small arrays: a quicker evaluation)
# The learner's uptraining accuracy may differ from PyTorch's float32 figures by this much (20
# of the evaluation's ~10,000 scored positions), at every checkpoint. The float64 numpy reference
# equals them to the 4 decimals recorded (36 of 36 figures): rounding moves no figure, so a
# correct learner's code lands as close. Of the 25 classic mistakes of tests/mistakes/
# l15_training.toml applied to the solution (tools/record_l15_experiments.py --mistakes), 15 land
# 0.0048 to 0.92 away (the nearest: the loss divided by B*T, 0.0048, and the batches numbered by
# the chunk's loop counter, 0.015); 10 move nothing by more than 0.0001, because this experiment
# never makes the case they get wrong (a reported loss wrong while its gradient is right, a state
# reused, T < L, float32 inputs, an underflowing softmax, sizes or decay other than the defaults,
# OneCycle's b1) or their effect is below rounding (eps before the bias correction, decay after
# the update): only the grading tests see those.
TOLERANCE = 0.002
EXACT = 5e-5  # below half the last recorded decimal: equal as recorded
PREVIOUS = -1  # the offset of a previous-token head, the first half of the induction circuit
LEARNED = 0.5  # the accuracy the seeds table dates: the model has found the copy


def role_code(role: str) -> str:
    """A card role in a table cell: a positional head's offset ("-1", "+0"), "copy", "·" mixed."""
    return role.split()[-1] if role.startswith("positional") else "·" if role == "mixed" else role


def role_letter(role: str) -> str:
    """A card role in one letter: P previous token (positional -1), another positional head's
    offset digit, C copy, · mixed."""
    return "P" if role == "positional -1" else "C" if role == "copy" else role_code(role)[-1]


# -- the plans: what each experiment runs (the project's tests run short ones) --------------------


@dataclass(frozen=True)
class UptrainingPlan:
    """Uptraining after conversion, tools/uptrain_gqa.py's recipe: AdamW at ``lr`` with a cosine
    decay over ``steps``, step i on make_task(batch, data_seed + i). ``until``: the last step
    run (None: all ``steps``; a test stops early, on the same schedule)."""

    kv_heads: tuple[int, ...] = (2, 1)
    methods: tuple[str, ...] = ("mean", "first", "random")
    steps: int = 400  # 5% of the base model's 8000 steps (a test checks it against the card)
    checkpoints: tuple[int, ...] = (0, 25, 50, 100, 200, 400)  # the shipped curves' steps
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch: int = 64
    data_seed: int = 50_000_000  # tools/uptrain_gqa.py: 50_000_000 + seed * 1_000_000, seed 0
    conversion_seed: int = 0  # convert_model's: "random" draws its picks with seed + layer
    until: int | None = None

    @property
    def last(self) -> int:
        return self.steps if self.until is None else self.until


@dataclass(frozen=True)
class HeadsPlan:
    """Training from init_model(config, seed): AdamW with OneCycle at peak rate ``lr`` over
    ``steps`` (a shorter, hotter run than the base model's 8000 steps at 3e-3), step i on
    make_task(batch, data_seed + i), measured every ``every`` steps. ``until`` as above."""

    seed: int = 0  # the base model's seed
    steps: int = 3000
    every: int = 100
    lr: float = 1e-2
    weight_decay: float = 0.01
    batch: int = 64
    schedule: str = "onecycle"
    table_every: int = 500  # the roles table's columns
    until: int | None = None

    @property
    def last(self) -> int:
        return self.steps if self.until is None else self.until

    @property
    def data_seed(self) -> int:
        return 10_000 + self.seed * 1_000_000  # tools/train_tiny_model.py's stream


UPTRAINING = UptrainingPlan()
HEADS = HeadsPlan()
Progress = Callable[..., None]  # progress(done, total, status), see engine.pictures.experiments


# -- trusted data and measures --------------------------------------------------------------------


@functools.cache
def evaluation() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model card's evaluation sequences: tokens, targets (N, T) and distance (N,)."""
    card = tiny_model.card()["eval"]
    return tiny_model.make_task(card["sequences"], card["seed"])


def forward(model: dict, tokens: np.ndarray, n_heads: int, n_kv_heads: int) -> tuple[np.ndarray, list]:
    """The tiny model with G = n_kv_heads key/value heads per layer, query head h reading
    key/value head h // (H // G) (lesson 8's groups; G = H is course.tiny_model.forward):
    logits (N, T, V) and each layer's attention weights (N, H, T, T), EVAL_CHUNK sequences at
    a time."""
    parts = [
        _forward(model, tokens[i : i + EVAL_CHUNK], n_heads, n_kv_heads)
        for i in range(0, len(tokens), EVAL_CHUNK)
    ]
    layers = range(len(model["layers"]))
    return np.concatenate([p[0] for p in parts]), [np.concatenate([p[1][i] for p in parts]) for i in layers]


def _forward(model: dict, tokens: np.ndarray, H: int, G: int) -> tuple[np.ndarray, list]:
    B, T = tokens.shape
    x = model["tok_emb"][tokens] + model["pos_emb"][:T]  # (B, T, D)
    allowed = np.tril(np.ones((T, T), dtype=bool))  # query t sees keys 0 .. t
    all_weights = []
    for p in model["layers"]:
        q, k, v = (x @ p[f"w_{n}"] + p[f"b_{n}"] for n in "qkv")  # (B, T, H*K), (B, T, G*K) twice
        K = q.shape[-1] // H
        q = q.reshape(B, T, G, H // G, K).transpose(0, 2, 3, 1, 4)  # (B, G, r, T, K): head g*r + j
        k = k.reshape(B, T, G, 1, K).transpose(0, 2, 3, 1, 4)  # (B, G, 1, T, K): read by its r heads
        v = v.reshape(B, T, G, 1, K).transpose(0, 2, 3, 1, 4)
        scores = np.where(allowed, q @ k.swapaxes(-1, -2) / math.sqrt(K), -np.inf)  # (B, G, r, T, T)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        heads = (weights @ v).transpose(0, 3, 1, 2, 4)  # (B, T, G, r, K): the heads in order
        x = x + heads.reshape(B, T, H * K) @ p["w_o"] + p["b_o"]
        all_weights.append(weights.reshape(B, H, T, T))
    return x @ model["unembed"] + model["b_unembed"], all_weights


def scored(model: dict, n_heads: int, n_kv_heads: int) -> dict[str, float]:
    """Loss and accuracy on the evaluation sequences (the shipped curves' rounding)."""
    tokens, targets, _ = evaluation()
    loss, accuracy = tiny_model.loss_and_accuracy(forward(model, tokens, n_heads, n_kv_heads)[0], targets)
    return {"loss": round(loss, 4), "accuracy": round(accuracy, 4)}


def head_measures(model: dict, n_heads: int) -> dict[str, Any]:
    """The model card's measures on its evaluation sequences (no ablations): loss, accuracy, and
    per head in card order (layer by layer) the role, confidence, previous-token share (the
    share of rows whose largest weight is on the token before) and copy share."""
    tokens, targets, distance = evaluation()
    logits, all_weights = forward(model, tokens, n_heads, n_heads)
    loss, accuracy = tiny_model.loss_and_accuracy(logits, targets)
    found: dict[str, Any] = {"loss": round(loss, 4), "accuracy": round(accuracy, 4)}
    found.update(role=[], confidence=[], previous_share=[], copy_share=[])
    for weights in all_weights:
        stats = measure.head_statistics(weights, targets, distance)
        for h in range(n_heads):
            found["role"].append(measure.head_role(stats, h)[0])
            found["confidence"].append(round(float(stats["confidence"][h]), 4))
            found["previous_share"].append(round(float(stats["shares"][PREVIOUS][h]), 4))
            found["copy_share"].append(round(float(stats["copy"][h]), 4))
    return found


def init_model(config: dict[str, int], seed: int) -> dict:
    """The lesson's given init_model, here in trusted code (a test checks that both make the same
    arrays): every weight from normal(0, 0.02) of default_rng(seed), every bias 0."""
    rng = np.random.default_rng(seed)
    V, L, D = config["vocab_size"], config["max_len"], config["d_model"]

    def weight(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape)

    model: dict[str, Any] = {
        "tok_emb": weight(V, D),
        "pos_emb": weight(L, D),
        "unembed": weight(D, V),
        "b_unembed": np.zeros(V),
    }
    model["layers"] = [
        {key: weight(D, D) if key.startswith("w") else np.zeros(D) for key in tiny_model.LAYER_KEYS}
        for _ in range(config["n_layers"])
    ]
    return model


# -- the learner's calls ------------------------------------------------------------------------


def shapes_of(model: dict) -> dict:
    """The shapes of a model's arrays, a tree like the model."""
    top = {key: model[key].shape for key in ("tok_emb", "pos_emb", "unembed", "b_unembed")}
    return {
        **top,
        "layers": [{key: layer[key].shape for key in tiny_model.LAYER_KEYS} for layer in model["layers"]],
    }


def checked_model(got: Any, shapes: dict, what: str) -> dict:
    """``got`` as a model of exactly ``shapes`` (float64 copies, nothing else kept), or a
    LearnerError naming the first thing wrong."""

    def array(value: Any, shape: tuple, where: str) -> np.ndarray:
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf" or value.shape != shape:
            seen = getattr(value, "shape", type(value).__name__)
            raise LearnerError(f"{what} has {where} of {seen}; expected an array of shape {shape}.")
        if not np.all(np.isfinite(value)):
            raise LearnerError(f"{what} has NaN or inf in {where}: the training diverged.")
        return np.array(value, dtype=np.float64)

    layers = got.get("layers") if isinstance(got, dict) else None
    if not isinstance(layers, list) or len(layers) != len(shapes["layers"]):
        raise LearnerError(f"{what} is not a model dict with a list of {len(shapes['layers'])} layers.")
    model: dict[str, Any] = {
        key: array(got.get(key), shape, key) for key, shape in shapes.items() if key != "layers"
    }
    model["layers"] = []
    for i, (layer, layer_shapes) in enumerate(zip(layers, shapes["layers"], strict=True)):
        if not isinstance(layer, dict):
            raise LearnerError(f"{what} has layer {i} of type {type(layer).__name__}; expected a dict.")
        model["layers"].append(
            {
                key: array(layer.get(key), shape, f"layers[{i}]['{key}']")
                for key, shape in layer_shapes.items()
            }
        )
    return model


def train_chunk(
    module: LearnerModule, model: dict, state: Any, start: int, steps: int, required: tuple, **recipe: Any
) -> tuple:
    """``steps`` steps of the learner's train from step ``start``, resuming from ``state``:
    (model, losses, state), the model and losses checked. ``required``: train's other required
    arguments (batch_size, lr, data_seed, n_heads, n_kv_heads); ``recipe``: its keywords."""
    got = module.train(model, steps, *required, state=state, start_step=start, **recipe)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise LearnerError("train returned something other than (model, losses, state).")
    trained, losses, state = got
    trained = checked_model(trained, shapes_of(model), f"The model train returned after step {start + steps}")
    if not isinstance(losses, np.ndarray) or losses.dtype.kind not in "iuf" or losses.shape != (steps,):
        shape = getattr(losses, "shape", type(losses).__name__)
        raise LearnerError(
            f"train(model, {steps}, ...) returned losses {shape}; expected ({steps},) numbers."
        )
    if not np.all(np.isfinite(losses)):
        raise LearnerError(
            f"train returned a loss of NaN or inf by step {start + steps}: the training diverged."
        )
    return trained, losses, state


def chunks(last: int, boundaries: Iterable[int]) -> list[tuple[int, int]]:
    """(start, stop) pairs covering steps 0 .. last, cut at every boundary and every CHUNK steps."""
    cuts = sorted({0, last, *range(0, last, CHUNK), *(b for b in boundaries if 0 < b < last)})
    return list(zip(cuts, cuts[1:], strict=False))


# -- uptraining ---------------------------------------------------------------------------------


def uptraining_runs(
    module: LearnerModule, progress: Progress, plan: UptrainingPlan = UPTRAINING, lesson_12: Any = None
) -> list[dict]:
    """Convert the shipped model with lesson 12's convert_model (``lesson_12``, default: the
    learner's, beside ``module``) and uptrain each conversion with ``module``'s train. One run
    per (G, method): {"method", "n_kv_heads", "curve": [{"step", "loss", "accuracy"}, ...]} at
    the plan's checkpoints, as the shipped JSON records them."""
    H = tiny_model.config()["n_heads"]
    base = tiny_model.load()
    total, done = len(plan.kv_heads) * len(plan.methods) * plan.last, 0
    progress(0, total, "converting the tiny model with your lesson 12 convert_model")
    opened = lesson_12 is None
    if opened:
        lesson_12 = LearnerModule(module.source_dir, "l12_gqa_conversion", limits=module.limits)
    runs = []
    try:
        for G in plan.kv_heads:
            for method in plan.methods:
                model = converted(lesson_12, base, H, G, method, plan.conversion_seed)
                curve, state = [{"step": 0, **scored(model, H, G)}], None
                for start, stop in chunks(plan.last, plan.checkpoints):
                    model, losses, state = train_chunk(
                        module,
                        model,
                        state,
                        start,
                        stop - start,
                        required=(plan.batch, plan.lr, plan.data_seed, H, G),
                        weight_decay=plan.weight_decay,
                        schedule="cosine",
                        total_steps=plan.steps,
                    )
                    if stop in plan.checkpoints or stop == plan.last:
                        curve.append({"step": stop, **scored(model, H, G)})
                    done += stop - start
                    status = f"G = {G}, {method}: step {stop} of {plan.last}, loss {losses[-1]:.3f}"
                    progress(done, total, status)
                runs.append({"method": method, "n_kv_heads": G, "curve": curve})
    finally:
        if opened:
            lesson_12.close()
    return runs


def converted(lesson_12: Any, base: dict, H: int, G: int, method: str, seed: int) -> dict:
    """convert_model(base, H, G, method, seed) of lesson 12, checked: w_k, w_v G*K wide."""
    try:
        got = lesson_12.convert_model(base, H, G, method, seed)
    except NotStarted:
        raise LearnerError(
            "Your lesson 12 convert_model still raises NotImplementedError: this experiment converts "
            "the tiny model with it. Finish lesson 12 first."
        ) from None
    shapes = shapes_of(base)
    width = base["layers"][0]["w_q"].shape[1] // H * G  # G*K
    for layer in shapes["layers"]:
        layer.update(w_k=(layer["w_k"][0], width), w_v=(layer["w_v"][0], width), b_k=(width,), b_v=(width,))
    return checked_model(got, shapes, f"convert_model(model, {H}, {G}, {method!r}, {seed})")


def recorded() -> dict | None:
    """The reference figures tools/record_l15_experiments.py recorded, or None."""
    return _data(RECORD)


def _data(name: str) -> dict | None:
    found = resources.files(tiny_model.__name__).joinpath(name)
    return json.loads(found.read_text(encoding="utf-8")) if found.is_file() else None


def _stale(data: dict) -> str:
    weights = resources.files(tiny_model.__name__).joinpath("weights.npz").read_bytes()
    return (
        ""
        if data.get("weights_sha256") == hashlib.sha256(weights).hexdigest()
        else " (recorded for earlier weights)"
    )


def accuracy_at(runs: list[dict], G: int, method: str, step: int) -> float:
    """The accuracy of run (G, method) at ``step`` in recorded runs; NaN when not recorded."""
    for run in runs:
        if run["n_kv_heads"] == G and run["method"] == method:
            for point in run["curve"]:
                if point["step"] == step:
                    return float(point["accuracy"])
    return math.nan


def uptraining_figures(runs: list[dict], plan: UptrainingPlan = UPTRAINING) -> list:
    """The table of accuracy before and after, yours beside the numpy reference and PyTorch, with
    the verdict; a chart of accuracy against step per G."""
    shipped = _data(SHIPPED) or {"runs": []}
    reference = recorded()
    numpy_runs = reference["uptraining"]["runs"] if reference else []
    last, base = plan.last, tiny_model.card()["training"]["steps"]
    rows = []
    for run in runs:
        G, method = run["n_kv_heads"], run["method"]
        before, after = accuracy_at([run], G, method, 0), accuracy_at([run], G, method, last)
        torch_before = accuracy_at(shipped["runs"], G, method, 0)
        torch_after = accuracy_at(shipped["runs"], G, method, last)
        numpy_after = accuracy_at(numpy_runs, G, method, last)
        rows.append((G, method, before, torch_before, after, numpy_after, torch_after, after - torch_after))
    gaps = [
        (abs(point["accuracy"] - torch), run["n_kv_heads"], run["method"], point["step"])
        for run in runs
        for point in run["curve"]
        if not math.isnan(
            torch := accuracy_at(shipped["runs"], run["n_kv_heads"], run["method"], point["step"])
        )
    ]
    worst = max(gaps, default=(math.nan, 0, "", 0))
    where = f"G = {worst[1]}, {worst[2]}, step {worst[3]}"
    if not gaps:
        verdict = "PyTorch recorded no figure at these steps to compare with."
    elif worst[0] < EXACT:
        verdict = (
            "Within the tolerance: at every checkpoint of the charts below your accuracy equals "
            "PyTorch's to the 4 decimals recorded. Your training reproduces the shipped uptraining."
        )
    elif worst[0] <= TOLERANCE:
        verdict = (
            f"Within the tolerance: at every checkpoint of the charts below your accuracy is within "
            f"{TOLERANCE} of PyTorch's (the largest difference is {worst[0]:.4f}, {where}). Your "
            "training reproduces the shipped uptraining."
        )
    else:
        verdict = (
            f"Outside the tolerance: your accuracy at {where} differs from PyTorch's by {worst[0]:.4f}, "
            f"more than {TOLERANCE}. The reference lands within it, so look at your optimizer and "
            "gradients (course check 15), or at your lesson 12 conversion if 'before' differs."
        )
    gap = reference_gap(numpy_runs, shipped["runs"])
    if math.isnan(gap):
        agreement = ""
    elif gap < EXACT:
        agreement = " (the numpy reference equals them to the 4 decimals recorded, at every checkpoint)"
    else:
        agreement = f" (the numpy reference is within {gap:.4f} of them at every checkpoint)"
    evaluation_set = tiny_model.card()["eval"]
    sequences = (
        f"the model card's {evaluation_set['sequences']} evaluation sequences (seed {evaluation_set['seed']})"
    )
    share = f"{plan.steps / base:.0%} of the base model's {base}"
    steps = (
        f"uptraining {last} steps ({share})"
        if last == plan.steps
        else f"{last} of {plan.steps} uptraining steps"
    )
    figures: list = [
        NumberTable(
            f"Accuracy of the tiny model converted to G key/value heads by your lesson 12 "
            f"convert_model, before and after {steps} with your train, on {sequences}; beside the "
            f"numpy reference (float64, recorded{_stale(reference) if reference else ': none shipped'}) "
            f"and PyTorch's figures (float32, tools/uptrain_gqa.py{_stale(shipped)}). Tolerance "
            f"±{TOLERANCE} against PyTorch{agreement}. {verdict}",
            (
                "G",
                "method",
                "before yours",
                "before PyTorch",
                "after yours",
                "after reference",
                "after PyTorch",
                "after yours − PyTorch",
            ),
            tuple(rows),
            ("d", "", ".3f", ".3f", ".3f", ".3f", ".3f", "+.3f"),
        )
    ]
    at = [c for c in plan.checkpoints if c <= last]
    for G in plan.kv_heads:
        series = {method: tuple(accuracy_at(runs, G, method, s) for s in at) for method in plan.methods}
        for method in plan.methods:
            series[f"{method} (PyTorch)"] = tuple(accuracy_at(shipped["runs"], G, method, s) for s in at)
        kind = " (multi-query attention)" if G == 1 else ""
        figures.append(
            LineChart(
                f"Accuracy during uptraining at G = {G}{kind}: yours and PyTorch's, on {sequences}",
                tuple(float(s) for s in at),
                series,
                x_label="uptraining step",
                y_label="accuracy",
                height=20,  # a row per 0.05 of accuracy
            )
        )
    return figures


def reference_gap(numpy_runs: list[dict], torch_runs: list[dict]) -> float:
    """The largest |numpy reference - PyTorch| accuracy over every recorded run and checkpoint."""
    gaps = [
        abs(point["accuracy"] - accuracy_at(torch_runs, run["n_kv_heads"], run["method"], point["step"]))
        for run in numpy_runs
        for point in run["curve"]
    ]
    return max((gap for gap in gaps if not math.isnan(gap)), default=math.nan)


def uptraining(
    module: LearnerModule, progress: Progress, plan: UptrainingPlan = UPTRAINING, lesson_12: Any = None
) -> list:
    """The experiment "uptraining": the runs, then their figures."""
    return uptraining_figures(uptraining_runs(module, progress, plan, lesson_12), plan)


# -- heads specialise -----------------------------------------------------------------------------


def heads_run(module: LearnerModule, progress: Progress, plan: HeadsPlan = HEADS) -> dict:
    """Train from init_model(config, plan.seed) with ``module``'s train and measure the model
    every plan.every steps: {"seed", "steps", "loss", "accuracy", "heads": [per head in card
    order {"layer", "head", "role", "confidence", "previous_share", "copy_share"}, each a list
    over the steps]}."""
    config = tiny_model.config()
    H = config["n_heads"]
    model, state = init_model(config, plan.seed), None
    progress(0, plan.last, "measuring the untrained model")
    measured = [(0, head_measures(model, H))]
    for start, stop in chunks(plan.last, range(plan.every, plan.last, plan.every)):
        model, losses, state = train_chunk(
            module,
            model,
            state,
            start,
            stop - start,
            required=(plan.batch, plan.lr, plan.data_seed, H, H),
            weight_decay=plan.weight_decay,
            schedule=plan.schedule,
            total_steps=plan.steps,
        )
        status = f"step {stop} of {plan.last}, loss {losses[-1]:.3f}"
        if stop % plan.every == 0 or stop == plan.last:
            measured.append((stop, head_measures(model, H)))
            status += f", accuracy {measured[-1][1]['accuracy']:.3f}"
        progress(stop, plan.last, status)
    heads = []
    for i in range(config["n_layers"] * H):
        head: dict[str, Any] = {"layer": i // H, "head": i % H}
        head.update(
            {
                key: [m[key][i] for _, m in measured]
                for key in ("role", "confidence", "previous_share", "copy_share")
            }
        )
        heads.append(head)
    return {
        "seed": plan.seed,
        "steps": [step for step, _ in measured],
        "loss": [m["loss"] for _, m in measured],
        "accuracy": [m["accuracy"] for _, m in measured],
        "heads": heads,
    }


def first_step(run: dict, layer: int, test: Callable[[dict, int], bool]) -> int | None:
    """The first measured step at which some head of ``layer`` passes ``test(head, index)``."""
    for index, step in enumerate(run["steps"]):
        if any(head["layer"] == layer and test(head, index) for head in run["heads"]):
            return step
    return None


def milestones(run: dict) -> dict[str, int | None]:
    """When the run reached accuracy LEARNED, its first copy head in layer 1, its first head in
    layer 0 with previous-token share 0.5, and its first positional -1 head (card's roles)."""
    learned = next((s for s, a in zip(run["steps"], run["accuracy"], strict=True) if a >= LEARNED), None)
    return {
        "learned": learned,
        "copy": first_step(run, 1, lambda head, i: head["role"][i] == "copy"),
        "half previous": first_step(run, 0, lambda head, i: head["previous_share"][i] >= 0.5),
        "previous": first_step(run, 0, lambda head, i: head["role"][i] == "positional -1"),
    }


def order_finding(runs: list[dict]) -> str:
    """What the runs say about the order of the roles: in how many the first copy head came
    before, with or after the first previous-token head, and how far the previous-token
    attention had come when the copy heads appeared."""
    marks = [milestones(run) for run in runs]
    n = len(marks)
    both = [  # (first copy, first positional -1, first previous share 0.5) of the runs with both
        (copy, previous, m["half previous"])
        for m in marks
        if (copy := m["copy"]) is not None and (previous := m["previous"]) is not None
    ]
    before = sum(copy < previous for copy, previous, _ in both)
    same = sum(copy == previous for copy, previous, _ in both)
    after = len(both) - before - same
    text = (
        "By the card's roles, the first copy head (layer 1) came before the first positional -1 head "
        f"(layer 0) in {before} of {n} seeds"
    )
    text += f", at the same step in {same}" if same else ""
    text += f", after it in {after}" if after else ""
    text += f"; {n - len(both)} never had both" if len(both) < n else ""
    together = sum(half is not None and half <= copy for copy, _, half in both)
    if together:
        text += (
            f". In {together} of {n}, a layer-0 head already had a previous share of 0.5 or more when "
            "the first copy head appeared"
        )
        if together == before == n:
            text += (
                ": the two halves of the induction circuit form together, and the previous-token "
                "head sharpens past the card's 0.9 later"
            )
    return text + "."


def heads_figures(run: dict, plan: HeadsPlan = HEADS) -> list:
    """The roles over training (yours), accuracy beside the reference, the key heads' measures,
    and the reference's seeds (recorded)."""
    steps, n_heads = run["steps"], tiny_model.config()["n_heads"]
    reference = recorded()
    seeds = reference["heads"]["runs"] if reference else []
    same = next((r for r in seeds if r["seed"] == plan.seed), None)
    columns = [s for s in steps if s % plan.table_every == 0 or s == steps[-1]]
    at = [steps.index(s) for s in columns]
    rows = [("accuracy", *(f"{run['accuracy'][i]:.2f}" for i in at), "")]
    for head in run["heads"]:
        final = head["role"][-1]
        since = next(steps[i] for i in range(len(steps)) if all(r == final for r in head["role"][i:]))
        codes = (role_code(head["role"][i]) for i in at)
        rows.append((f"L{head['layer']} H{head['head']}", *codes, f"{role_code(final)} since {since}"))
    evaluation_set = tiny_model.card()["eval"]
    on = f"on the model card's {evaluation_set['sequences']} evaluation sequences"
    figures: list = [
        NumberTable(
            f"Each head's role during your training from init_model (seed {plan.seed}; {plan.last} "
            f"steps of batch {plan.batch}, AdamW with OneCycle at lr {plan.lr:g}), measured {on} as "
            "the card measures it: -1 positional -1 (the previous token), +0 positional +0, copy "
            "(the token after the current token's earlier occurrence), · mixed. Columns: training step.",
            ("head", *(str(s) for s in columns), "final role"),
            tuple(rows),
            ("",) * (len(columns) + 2),
        )
    ]
    series = {"yours": tuple(float(a) for a in run["accuracy"])}
    if same is not None and same["steps"][: len(steps)] == steps:
        series[f"reference (seed {plan.seed})"] = tuple(float(a) for a in same["accuracy"][: len(steps)])
        gap = max(abs(a - b) for a, b in zip(series["yours"], same["accuracy"], strict=False))
        if gap < EXACT:
            note = "; the two agree at every step measured, to the 4 decimals recorded"
        else:
            note = f"; they differ by at most {gap:.4f}"
    else:
        note = ""
    figures.append(
        LineChart(
            f"Accuracy during your training {on}, beside the numpy reference's recorded run{note}",
            tuple(float(s) for s in steps),
            series,
            x_label="training step",
            y_label="accuracy",
        )
    )
    previous = max((h for h in run["heads"] if h["layer"] == 0), key=lambda h: h["previous_share"][-1])
    copy = max((h for h in run["heads"] if h["layer"] == 1), key=lambda h: h["copy_share"][-1])
    p, c = f"L0 H{previous['head']}", f"L1 H{copy['head']}"
    figures.append(
        LineChart(
            f"The two halves of the induction circuit in your run: {p}, the layer-0 head that ends "
            f"most on the previous token (its share of rows whose largest weight is there, and its "
            f"confidence), and {c}, the layer-1 head that ends copying most (its copy share and "
            "confidence), with the accuracy",
            tuple(float(s) for s in steps),
            {
                "accuracy": tuple(float(a) for a in run["accuracy"]),
                f"{p} previous-token share": tuple(previous["previous_share"]),
                f"{p} confidence": tuple(previous["confidence"]),
                f"{c} copy share": tuple(copy["copy_share"]),
                f"{c} confidence": tuple(copy["confidence"]),
            },
            x_label="training step",
            y_label="share, confidence, accuracy",
            height=20,
        )
    )
    if seeds and reference:
        figures.append(seeds_table(seeds, n_heads, reference, run))
    return figures


def seeds_table(seeds: list[dict], n_heads: int, reference: dict, yours: dict | None = None) -> NumberTable:
    """The recorded reference runs of every seed, and ``yours`` last when given: when each
    milestone came, and the final roles (one letter per head, layer by layer)."""
    rows = []
    for label, run in [
        *((r["seed"], r) for r in seeds),
        *([(f"yours ({yours['seed']})", yours)] if yours else []),
    ]:
        marks = milestones(run)
        letters = "".join(role_letter(h["role"][-1]) for h in run["heads"])
        final = "|".join(letters[i : i + n_heads] for i in range(0, len(letters), n_heads))
        when = (
            "never" if marks[k] is None else marks[k]
            for k in ("learned", "copy", "half previous", "previous")
        )
        rows.append((label, *when, run["accuracy"][-1], final))
    plan = reference["heads"]["plan"]
    return NumberTable(
        f"The numpy reference's recorded runs of this recipe from seeds {seeds[0]['seed']} .. "
        f"{seeds[-1]['seed']} (none left out), measured every {plan['every']} steps: the step at "
        f"which the accuracy first reached {LEARNED}, a layer-1 head first became copy, a layer-0 "
        "head first put its largest weight on the previous token in half of its rows (previous "
        "share), a layer-0 head first became positional -1 (share 0.9); the final roles, one "
        "letter per head, layer 0 | layer 1 (P positional -1, C copy, · mixed, a digit another "
        f"offset). {order_finding(seeds)}{' Your run is the last row.' if yours else ''}",
        (
            "seed",
            f"accuracy {LEARNED}",
            "copy head",
            "previous share 0.5",
            "-1 head",
            "final accuracy",
            "final roles",
        ),
        tuple(rows),
        ("d", "", "", "", "", ".3f", ""),
    )


def heads(module: LearnerModule, progress: Progress, plan: HeadsPlan = HEADS) -> list:
    """The experiment "heads": the run, then its figures."""
    return heads_figures(heads_run(module, progress, plan), plan)


EXPERIMENTS = (
    Experiment(
        "uptraining",
        "Uptraining a model converted to grouped-query attention (Ainslie et al. 2023)",
        "Converts the tiny model to 2 and to 1 key/value heads with your lesson 12 convert_model "
        f"(mean, first, random), uptrains each for {UPTRAINING.steps} steps (5% of its training) with "
        "your train, and compares the accuracy before and after with PyTorch's figures. About a minute.",
        uptraining,
    ),
    Experiment(
        "heads",
        "Heads specialise while the model learns (Voita et al. 2019)",
        f"Trains the tiny model from init_model (seed {HEADS.seed}) for {HEADS.steps} steps with your "
        f"train and measures, every {HEADS.every} steps, the accuracy and each head's role, confidence "
        "and copy share as the model card does; beside the reference's recorded runs of several seeds. "
        "About a minute and a half.",
        heads,
    ),
)
