"""Lesson 15's experiments (tests/lessons/pictures_l15_training.py, `course experiment 15 NAME`)
and their recorded reference figures (course/tiny_model/l15_experiments.json, written by
tools/record_l15_experiments.py).

- The trusted parts: the pictures module's forward equals course.tiny_model's (G = H) and lesson
  12's GQA forward (G < H); its init_model makes the lesson's given arrays; its plans are the
  recipes of the shipped figures (tools/uptrain_gqa.py, the model card).
- Drift: a short prefix of each experiment rerun with the reference solution gives the recorded
  numbers, and the recorded file is complete (every seed, every checkpoint) and agrees with
  PyTorch within the tolerance the experiment states, with margin.
- End to end: both experiments' run functions on short plans, through workers as a learner's
  `course experiment` runs them, with progress up to the total, readable at 80 columns; a
  learner's unusable answer is one sentence; the uptraining verdict holds every checkpoint of the
  learner's curves to the stated tolerance.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import subprocess
import sys
from dataclasses import asdict, replace

import numpy as np
import pytest
from rich.console import Console

from course import tiny_model
from course.engine.calls.errors import LearnerError
from course.engine.calls.learner_module import LearnerModule
from course.engine.pictures.figures import LineChart, NumberTable
from course.engine.sandbox.limits import Limits
from course.render.pictures import figure
from tests.helpers import LESSONS, REPO, SOLUTIONS, import_lessons

PICTURES = REPO / "tests" / "lessons" / "pictures_l15_training.py"
TOOL = REPO / "tools" / "record_l15_experiments.py"
RECORD = REPO / "course" / "tiny_model" / "l15_experiments.json"
SHIPPED = REPO / "course" / "tiny_model" / "gqa_uptraining.json"
ROUNDING = 1e-4 + 1e-9  # the recorded figures have 4 decimals
MARGIN = 0.1  # the reference must land within this share of the stated tolerance of PyTorch
H = tiny_model.config()["n_heads"]


@pytest.fixture(scope="module")
def pictures():
    spec = importlib.util.spec_from_file_location("pictures_l15_under_test", PICTURES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up here, as the engine's load
    spec.loader.exec_module(module)
    return module


def load_tool():
    spec = importlib.util.spec_from_file_location("record_l15_experiments", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sol():
    return import_lessons("l15_training", "l12_gqa_conversion")


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


def quiet(done: float, total: float, status: str = "") -> None:
    pass


# -- the trusted parts ------------------------------------------------------------------------------


def test_the_trusted_forward_is_the_tiny_models_and_lesson_12s(pictures, sol):
    tokens, _, _ = tiny_model.make_task(7, seed=3)
    model = tiny_model.load()
    logits, weights = pictures.forward(model, tokens, H, H)
    want_logits, want_weights = tiny_model.forward(model, tokens)
    np.testing.assert_allclose(logits, want_logits, rtol=0, atol=1e-12)
    for got, want in zip(weights, want_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    lesson_12 = sol[1]
    for G, method in ((2, "mean"), (1, "random"), (2, "first")):
        converted = lesson_12.convert_model(model, H, G, method, 0)
        want = lesson_12.gqa_model_forward(converted, tokens, H, G)
        want = want[0] if isinstance(want, tuple) else want
        np.testing.assert_allclose(pictures.forward(converted, tokens, H, G)[0], want, rtol=0, atol=1e-12)


def test_the_trusted_init_model_makes_the_lessons_given_arrays(pictures, sol):
    (skeleton,) = import_lessons("l15_training", folder=LESSONS)
    config = tiny_model.config()
    for seed in (0, 3):
        trusted = pictures.init_model(config, seed)
        for given in (sol[0].init_model(config, seed), skeleton.init_model(config, seed)):
            flat = [trusted[k] for k in ("tok_emb", "pos_emb", "unembed", "b_unembed")]
            other = [given[k] for k in ("tok_emb", "pos_emb", "unembed", "b_unembed")]
            for mine, theirs in zip(trusted["layers"], given["layers"], strict=True):
                flat += [mine[k] for k in tiny_model.LAYER_KEYS]
                other += [theirs[k] for k in tiny_model.LAYER_KEYS]
            assert all(np.array_equal(a, b) for a, b in zip(flat, other, strict=True))


def test_the_plans_are_the_recipes_of_the_shipped_figures(pictures):
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    card = tiny_model.card()
    plan = pictures.UPTRAINING
    assert plan.steps == shipped["uptraining_steps"] == round(shipped["share"] * card["training"]["steps"])
    optimizer = shipped["optimizer"]
    assert (plan.lr, plan.weight_decay, plan.batch) == (
        optimizer["lr"],
        optimizer["weight_decay"],
        optimizer["batch"],
    )
    assert optimizer["schedule"] == "cosine"
    for run in shipped["runs"]:
        assert tuple(point["step"] for point in run["curve"]) == plan.checkpoints
    assert set(plan.methods) | {"mha"} == {run["method"] for run in shipped["runs"]}
    assert shipped["eval"] == card["eval"]
    assert pictures.HEADS.seed == card["training"]["seed"]


# -- the recorded figures ------------------------------------------------------------------------------


def test_the_recording_is_complete_and_of_these_weights_and_plans(pictures, record):
    weights = hashlib.sha256((REPO / "course" / "tiny_model" / "weights.npz").read_bytes()).hexdigest()
    assert record["weights_sha256"] == weights
    assert record["uptraining"]["plan"] == json.loads(json.dumps(asdict(pictures.UPTRAINING)))
    plan = json.loads(json.dumps(asdict(pictures.HEADS)))
    plan.pop("seed")
    assert record["heads"]["plan"] == plan
    runs = record["uptraining"]["runs"]
    assert [(r["n_kv_heads"], r["method"]) for r in runs] == [
        (G, m) for G in pictures.UPTRAINING.kv_heads for m in pictures.UPTRAINING.methods
    ]
    seeds = record["heads"]["runs"]
    assert [run["seed"] for run in seeds] == list(range(len(seeds))) and len(seeds) >= 5
    steps = list(range(0, pictures.HEADS.steps + 1, pictures.HEADS.every))
    for run in seeds:
        assert run["steps"] == steps and len(run["heads"]) == 2 * H
        assert all(len(head[key]) == len(steps) for head in run["heads"] for key in ("role", "copy_share"))


def test_the_reference_lands_within_the_stated_tolerance_of_pytorch_with_margin(pictures, record):
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    gap = pictures.reference_gap(record["uptraining"]["runs"], shipped["runs"])
    assert gap <= MARGIN * pictures.TOLERANCE, gap


def test_a_short_prefix_of_each_experiment_still_gives_the_recorded_numbers():
    """Drift: the tool's --check reruns 50 uptraining steps of G = 2 mean (on the 400-step
    schedule) and the heads run of seed 0 to its first measurement with the reference solution,
    in a process of its own (one BLAS thread, as the worker and the recording run), and compares
    them with the recorded file."""
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("no drift"), done.stdout + done.stderr[-2000:]


def test_the_drift_check_names_what_moved(record):
    """What --check compares (``differences``), on a copy of the file with three figures moved."""
    tool = load_tool()
    moved = json.loads(json.dumps(record))
    moved["uptraining"]["runs"][0]["curve"][1]["accuracy"] = 0.5
    moved["heads"]["runs"][0]["heads"][2]["role"][0] = "copy"
    moved["heads"]["runs"][0]["heads"][5]["copy_share"][1] = 0.9
    was = (record["uptraining"]["runs"][0]["curve"][1]["accuracy"], record["heads"]["runs"][0]["heads"])
    assert tool.differences("all", moved, record) == [
        f"all uptraining runs[0] curve[1] accuracy: 0.5 now, {was[0]!r} recorded",
        f"all heads runs[0] heads[2] role[0]: 'copy' now, {was[1][2]['role'][0]!r} recorded",
        f"all heads runs[0] heads[5] copy_share[1]: 0.9 now, {was[1][5]['copy_share'][1]!r} recorded",
    ]
    nudged = json.loads(json.dumps(record))
    nudged["uptraining"]["runs"][0]["curve"][1]["accuracy"] += 1e-4  # the last decimal: rounding
    assert tool.differences("all", nudged, record) == []


# -- end to end ---------------------------------------------------------------------------------------


def rendered(figures: list) -> str:
    """The figures as `course experiment` draws them on an 80-column terminal."""
    console = Console(width=80, record=True, file=io.StringIO())
    for each in figures:
        console.print(figure(each))
    return console.export_text()


def test_both_experiments_run_through_workers_with_progress_and_read_at_80_columns(pictures):
    """Short plans of both experiments on the solution folder, as `course experiment` runs them:
    the learner's train and lesson 12's convert_model each in a worker under the experiment's
    limits, the optimizer state travelling back and forth between chunks."""
    module = LearnerModule(SOLUTIONS, "l15_training", limits=Limits.for_experiments())
    reports: list[tuple[float, float, str]] = []
    try:
        up = replace(pictures.UPTRAINING, kv_heads=(1,), methods=("random",), until=25)
        made = pictures.uptraining(module, lambda *r: reports.append(r), up)
        heads = replace(pictures.HEADS, until=pictures.CHUNK, every=pictures.CHUNK)
        made += pictures.heads(module, lambda *r: reports.append(r), heads)
    finally:
        module.close()
    assert [type(f) for f in made] == [NumberTable, LineChart, NumberTable, LineChart, LineChart, NumberTable]
    assert "Within the tolerance" in made[0].title
    (row,) = made[0].rows
    assert row[:2] == (1, "random") and abs(row[-1]) <= ROUNDING  # step 25 as PyTorch recorded it
    done = [d for d, _, _ in reports]
    assert done[-1] == reports[-1][1] == heads.until and reports[-1][2].startswith(f"step {heads.until} of")
    text = rendered(made)
    assert all(len(line) <= 80 for line in text.splitlines())
    # every table laid out as a table (one that cannot fit is written as "column: value" lines)
    assert sum("╇" in line for line in text.splitlines()) == 3 and "seed: " not in text


class Returns:
    """A stand-in learner module whose train returns ``value``."""

    def __init__(self, value) -> None:
        self.value = value

    def train(self, *args, **kwargs):
        return self.value


@pytest.mark.parametrize(
    "value, words",
    [
        (None, "train returned something other than (model, losses, state)."),
        (({"layers": []}, np.zeros(1), None), "is not a model dict with a list of 2 layers"),
        ("nan", "has NaN or inf in tok_emb: the training diverged"),
        ("losses", "returned losses (2,); expected (1,) numbers"),
        ("nan loss", "train returned a loss of NaN or inf by step 1: the training diverged"),
    ],
)
def test_an_unusable_answer_of_train_is_one_sentence(pictures, value, words):
    model = tiny_model.load()
    if value == "nan":
        broken = dict(model, tok_emb=np.full_like(model["tok_emb"], math.nan))
        value = (broken, np.zeros(1), None)
    elif value == "losses":
        value = (model, np.zeros(2), None)
    elif value == "nan loss":
        value = (model, np.full(1, math.nan), None)
    with pytest.raises(LearnerError, match=words.replace("(", r"\(").replace(")", r"\)")):
        pictures.train_chunk(Returns(value), model, None, 0, 1, (64, 1e-3, 0, H, H))


def test_the_seeds_finding_is_computed_from_the_recorded_runs(pictures, record):
    seeds = record["heads"]["runs"]
    table = pictures.seeds_table(seeds, H, record)
    assert [row[0] for row in table.rows] == [run["seed"] for run in seeds]
    assert f" of {len(seeds)} seeds" in table.title  # counted from the recording, never written in


@pytest.mark.parametrize(
    "moved, words",
    [
        (0.0, "your accuracy equals PyTorch's to the 4 decimals recorded"),
        (0.0015, "within 0.002 of PyTorch's (the largest difference is 0.0015, G = 1, first, step 200)"),
        (-0.003, "your accuracy at G = 1, first, step 200 differs from PyTorch's by 0.0030, more than 0.002"),
    ],
)
def test_the_uptraining_verdict_holds_the_learners_curves_to_the_tolerance(pictures, record, moved, words):
    """The verdict reads every checkpoint of the learner's curves, not only before and after."""
    runs = json.loads(json.dumps(record["uptraining"]["runs"]))
    (run,) = [r for r in runs if (r["n_kv_heads"], r["method"]) == (1, "first")]
    run["curve"][4]["accuracy"] = round(run["curve"][4]["accuracy"] + moved, 4)  # step 200
    table = pictures.uptraining_figures(runs)[0]
    assert words in " ".join(table.title.split())
    assert len(table.rows) == 6 and all(abs(row[-1]) < 1e-9 for row in table.rows)  # after: unmoved
