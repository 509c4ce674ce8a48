"""Build the recorded training runs of lesson 15: tests/lessons/fixtures/l15_training.npz.

The grading tests of lesson 15 check the learner's `train` against short training runs recorded
here with the reference solution (solutions/l15_training.py): a model from the lesson's given
`init_model`, a few steps of AdamW on batches of the copy task, with each schedule, multi-head
and grouped-query attention, a run that starts at a later step, and a run that the tests cut in
two chunks. The grading tests check the solution's model_gradients and adamw_step on their own
(central differences, a loop of PyTorch's AdamW algorithm); these runs hold what only the whole
loop shows: which batch and which rate each step uses, and what a resumed run continues from.

For each case (``cases``) the file holds

    <case>__spec     JSON: the model's config (vocab_size, max_len, d_model, n_layers,
                     n_heads), n_heads, n_kv_heads (null: G = H), steps, batch_size, lr,
                     weight_decay, schedule, start_step, total_steps, chunks (how the tests cut
                     the run, or null), the variants [{"init_seed", "data_seed"}, ...] and the
                     model's leaves [[path, shape], ...] (paths such as tok_emb, layers.0.w_q)
    <case>__losses   (variants, steps) float64: train's losses, one row per variant
    <case>__step     (variants,) the state's step count after each run
    <case>__model    (variants, N) float64: each trained model, its leaves raveled in the
                     order of the spec's and concatenated
    <case>__middle   (variants, N), for a run with chunks: the model after the first chunk
                     (a call of train for chunks[0] steps, the same total_steps)

The model a variant starts from is ``init_model(config, init_seed)``, which the grading tests
recompute (the lesson's init_model is given code: tests/test_l15_fixtures.py checks that their
copy draws the same numbers); with G < H (init_model makes multi-head layers) its w_k, w_v, b_k
and b_v are cut to their first G*K columns (``start_model``). A public grade uses variant 0; an
instructor's secret picks another variant and reorders the model's features and heads (see the
grading tests).

The tool is deterministic: tests/test_l15_fixtures.py rebuilds the arrays and compares them with
the committed file, so a change to the solution cannot drift from its fixtures.

    python tools/make_l15_fixtures.py            write the file
    python tools/make_l15_fixtures.py --check    compare with the committed file, write nothing
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "lessons" / "fixtures" / "l15_training.npz"
SOLUTIONS = REPO / "solutions"

# The copy task needs max_len >= 16 (a segment of up to 8 tokens and its copy). Every size of a
# model differs from the others (V=6, L=16, D=8), so a swapped axis cannot pass.
SMALL = {"vocab_size": 6, "max_len": 16, "d_model": 8}
VARIANTS = [
    {"init_seed": 15, "data_seed": 1500},  # the public one
    {"init_seed": 151, "data_seed": 7_000},
    {"init_seed": 152, "data_seed": 31_337},
]


def spec(n_layers, n_heads, n_kv_heads, steps, *, lr=0.1, weight_decay=0.01, schedule=None, **more):
    return {
        "config": {**SMALL, "n_layers": n_layers, "n_heads": n_heads},
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "steps": steps,
        "batch_size": 3,
        "lr": lr,
        "weight_decay": weight_decay,
        "schedule": schedule,
        "start_step": more.get("start_step", 0),
        "total_steps": more.get("total_steps"),
        "chunks": more.get("chunks"),
        "variants": VARIANTS,
    }


# name -> the run. weight_decay differs from the default somewhere, so an ignored argument shows;
# "onecycle_part" runs 4 steps of a 10-step schedule (total_steps matters); "later_steps" starts
# at step 4 without a state (the batches and rates of steps 4, 5, 6); "resumed" is cut by the
# tests into chunks of 2 and 3 steps: 2 layers of grouped-query attention, whose optimizer state
# (m and v of every layer) the second chunk continues from, and a one-cycle schedule over the
# whole run, so that the rate and b1 of each step depend on total_steps across the cut.
CASES = {
    "constant_mha": spec(2, 2, None, 4, weight_decay=0.2),
    "cosine_gqa": spec(1, 4, 2, 4, schedule="cosine"),
    "onecycle_part": spec(1, 2, None, 4, schedule="onecycle", total_steps=10, weight_decay=0.1),
    "later_steps": spec(1, 4, 1, 3, schedule="onecycle", start_step=4, total_steps=10),
    "resumed": spec(2, 4, 2, 5, schedule="onecycle", total_steps=5, weight_decay=0.1, chunks=[2, 3]),
}


def solution():
    """solutions/l15_training.py, imported with the solutions folder on sys.path (and the lesson
    modules it imports from there); the caller's sys.path and lesson modules are left as they were."""
    import importlib
    import re

    lesson = re.compile(r"l\d\d_\w+")
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if lesson.fullmatch(name)}
    sys.path.insert(0, str(SOLUTIONS))
    try:
        return importlib.import_module("l15_training")
    finally:
        sys.path.remove(str(SOLUTIONS))
        for name in [name for name in sys.modules if lesson.fullmatch(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def start_model(sol, run, init_seed):
    """init_model's model, its key/value projections cut to G*K columns when G < H."""
    model = sol.init_model(run["config"], init_seed)
    n_heads, n_kv = run["n_heads"], run["n_kv_heads"] or run["n_heads"]
    width = n_kv * run["config"]["d_model"] // n_heads  # G*K
    for layer in model["layers"]:
        for key in ("w_k", "w_v", "b_k", "b_v"):
            layer[key] = layer[key][..., :width].copy()
    return model


def leaves(tree, path=""):
    """(path, array) for every array of a model-shaped tree: tok_emb, layers.0.w_q, ..."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from leaves(value, f"{path}.{i}")
    else:
        yield path, np.asarray(tree)


def build() -> dict[str, np.ndarray]:
    """Every fixture array, keyed as in the file."""
    sol = solution()
    arrays: dict[str, np.ndarray] = {"cases": np.array(list(CASES))}
    for name, run in CASES.items():
        losses, steps, models, middles = [], [], [], []
        for variant in run["variants"]:
            model = start_model(sol, run, variant["init_seed"])

            def train(steps, model=model, variant=variant, run=run):
                return sol.train(
                    model,
                    steps,
                    run["batch_size"],
                    run["lr"],
                    variant["data_seed"],
                    run["n_heads"],
                    run["n_kv_heads"],
                    weight_decay=run["weight_decay"],
                    schedule=run["schedule"],
                    start_step=run["start_step"],
                    total_steps=run["total_steps"],
                )

            trained, run_losses, state = train(run["steps"])
            assert run_losses.shape == (run["steps"],) and np.isfinite(run_losses).all()
            losses.append(run_losses)
            steps.append(state["step"])
            found = list(leaves(trained))
            models.append(np.concatenate([value.ravel() for _, value in found]))
            if run["chunks"]:
                middle = train(run["chunks"][0])[0]
                middles.append(np.concatenate([value.ravel() for _, value in leaves(middle)]))
        shapes = [[path, list(value.shape)] for path, value in found]
        arrays[f"{name}__spec"] = np.array(json.dumps({**run, "leaves": shapes}, sort_keys=True))
        arrays[f"{name}__losses"] = np.array(losses, dtype=np.float64)
        arrays[f"{name}__step"] = np.array(steps, dtype=np.int64)
        arrays[f"{name}__model"] = np.array(models, dtype=np.float64)
        if middles:
            arrays[f"{name}__middle"] = np.array(middles, dtype=np.float64)
    return arrays


def differences(built: dict[str, np.ndarray], path: Path = OUT) -> list[str]:
    """What differs between freshly built arrays and the file at ``path`` ([] = the same)."""
    with np.load(path, allow_pickle=False) as saved:
        stored = {key: saved[key] for key in saved.files}
    problems = [f"missing from the file: {key}" for key in built if key not in stored]
    problems += [f"not built by the tool: {key}" for key in stored if key not in built]
    for key in built.keys() & stored.keys():
        a, b = built[key], stored[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{key}: {a.shape} {a.dtype} built, {b.shape} {b.dtype} stored")
        elif a.dtype.kind == "f" and not np.allclose(a, b, rtol=1e-10, atol=1e-12):
            problems.append(f"{key}: values differ by up to {np.abs(a - b).max():.3g}")
        elif a.dtype.kind != "f" and not np.array_equal(a, b):
            problems.append(f"{key}: values differ")
    return sorted(problems)


def main(argv: list[str]) -> int:
    built = build()
    if "--check" in argv:
        problems = differences(built)
        print("\n".join(problems) or f"{OUT} is up to date.")
        return 1 if problems else 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **built)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(CASES)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
