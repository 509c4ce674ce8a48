"""`course show 14 --map`: Michel et al.'s importance of every head of the tiny model, exactly from
the learner's head_mask_gradient, beside lesson 11's central-difference estimate
(tests/lessons/pictures_l14_attention_backward.py).

- The pictures module's trusted passes: its forward is course.tiny_model's; the gradient it hands
  the learner, d(sum_b L_b)/d(out of layer l's attention), and its finite differences are checked
  here against central differences of course.tiny_model's own forward, so the picture's "exact"
  side rests on the learner's function alone.
- With the reference solution as the learner's module, the exact and finite-difference
  importances agree to 1e-4 relative (issue 32's done-when), and equal the per-sequence
  derivatives of the solution's head_mask_gradient.
- A learner's unusable or wrong answer gives one sentence, or the table says they disagree.
- The screen reads at 80 columns, through the `course` command.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from course import tiny_model
from course.content.catalog import load_catalog
from course.engine.pictures.figures import LineChart, NumberTable, figures
from tests.helpers import REPO, SOLUTIONS, import_lessons, run_course, solutions_with

MODULE = "l14_attention_backward"
PICTURES = REPO / "tests" / "lessons" / f"pictures_{MODULE}.py"
H = tiny_model.config()["n_heads"]


@pytest.fixture(scope="module")
def pictures():
    spec = importlib.util.spec_from_file_location("pictures_l14_under_test", PICTURES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small():
    """The tiny model on 12 copy-task sequences of another seed than the picture's."""
    tokens, targets, _ = tiny_model.make_task(12, 7)
    return tiny_model.load(), tokens, targets


def losses_loop(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(B,): each sequence's mean cross-entropy over its scored positions, one position at a time."""
    losses = np.zeros(logits.shape[0])
    for b in range(logits.shape[0]):
        scored = [t for t in range(logits.shape[1]) if targets[b, t] != tiny_model.IGNORE]
        for t in scored:
            z = logits[b, t] - logits[b, t].max()
            losses[b] -= z[targets[b, t]] - np.log(np.sum(np.exp(z)))
        losses[b] /= len(scored)
    return losses


def total_loss(model, tokens, targets, layer=None, direction=None, step=0.0) -> float:
    """sum_b L_b by course.tiny_model's own layers, with ``step * direction`` added to the
    output of layer ``layer``'s attention."""
    x = model["tok_emb"][tokens] + model["pos_emb"][: tokens.shape[1]]
    for index, params in enumerate(model["layers"]):
        out, _ = tiny_model.attention_layer(x, params, H)
        if index == layer:
            out = out + step * direction
        x = x + out
    return float(np.sum(losses_loop(x @ model["unembed"] + model["b_unembed"], targets)))


def test_the_trusted_forward_is_course_tiny_models(pictures, small):
    model, tokens, targets = small
    xs, caches, _ = pictures.layer_inputs_and_gradients(model, tokens, targets, H)
    logits, weights = tiny_model.forward(model, tokens)
    for layer, params in enumerate(model["layers"]):
        out, _ = tiny_model.attention_layer(xs[layer], params, H)
        np.testing.assert_allclose(caches[layer]["out"], out, rtol=0, atol=1e-12)
        np.testing.assert_allclose(caches[layer]["weights"], weights[layer], rtol=0, atol=1e-12)
    top = xs[-1] + caches[-1]["out"]
    np.testing.assert_allclose(top @ model["unembed"] + model["b_unembed"], logits, rtol=0, atol=1e-11)
    np.testing.assert_allclose(
        pictures.sequence_losses(logits, targets), losses_loop(logits, targets), atol=1e-12
    )


@pytest.mark.parametrize("layer", [0, 1])
def test_the_output_gradient_handed_to_the_learner_is_the_losses_derivative(pictures, small, layer):
    """d(sum_b L_b)/d(out of layer l) against central differences of course.tiny_model's forward:
    along random directions, and entry by entry at a scored position, at a position that only
    later layers carry forward, and after the last scored position (zero for the last layer)."""
    model, tokens, targets = small
    _, _, grads = pictures.layer_inputs_and_gradients(model, tokens, targets, H)
    grad = grads[layer]
    assert grad.shape == (*tokens.shape, tiny_model.config()["d_model"])
    r = np.random.default_rng(layer)
    eps = 1e-5
    directions = [r.standard_normal(grad.shape) for _ in range(4)]
    b = 0
    scored = np.flatnonzero(targets[b] != tiny_model.IGNORE)
    for t, d in ((scored[0], 3), (scored[0] - 1, 5), (scored[-1] + 1, 7)):
        one = np.zeros(grad.shape)
        one[b, t, d] = 1.0
        directions.append(one)
    for u in directions:
        up = total_loss(model, tokens, targets, layer, u, eps)
        down = total_loss(model, tokens, targets, layer, u, -eps)
        numeric, exact = (up - down) / (2 * eps), float(np.sum(grad * u))
        assert abs(numeric - exact) <= 1e-6 * max(abs(exact), 1e-3), (layer, numeric, exact)
    if layer == len(model["layers"]) - 1:
        assert np.all(grad[b, scored[-1] + 1 :] == 0)  # nothing scored reads those positions
    else:
        assert np.abs(grad[b, scored[0] - 1]).max() > 1e-6  # a later layer carries it forward


def test_the_finite_differences_move_one_head_as_course_tiny_model_does(pictures, small):
    model, tokens, targets = small
    xs, caches, _ = pictures.layer_inputs_and_gradients(model, tokens, targets, H)
    for layer, head, xi in ((0, 2, 1.25), (1, 3, 0.5), (0, 0, 0.0)):
        masks = np.ones((len(model["layers"]), H))
        masks[layer, head] = xi
        want = losses_loop(tiny_model.forward(model, tokens, masks)[0], targets)
        got = pictures.losses_with_head_scaled(model, caches, xs, targets, H, layer, head, xi)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def made():
    """The figures of `course show 14 --map` with the reference solution as the learner's file."""
    found, problem = figures(load_catalog().by_module(MODULE), SOLUTIONS)
    assert problem == ""
    return found


def test_the_exact_importance_agrees_with_central_differences_to_1e_4(made, pictures):
    table, chart = made
    assert isinstance(table, NumberTable) and isinstance(chart, LineChart)
    assert len(table.rows) == tiny_model.config()["n_layers"] * H
    columns = {name: i for i, name in enumerate(table.columns)}
    exact = np.array([row[columns["exact (yours)"]] for row in table.rows])
    estimate = np.array([row[columns["central diff."]] for row in table.rows])
    assert np.all(exact > 1e-3)  # every head of the trained model matters somewhat
    assert np.max(np.abs(exact - estimate) / np.abs(estimate)) <= 1e-4
    largest = max(row[columns["rel. diff."]] for row in table.rows)
    assert "They agree" in table.title and f"{largest:.1e}" in table.title
    # the eps chart: central differences beat one-sided ones at eps = 1e-1 .. 1e-5 and reach
    # 1e-4 at lesson 11's eps; rounding makes very small steps worse again
    central, one_sided = chart.series["central"], chart.series["one-sided"]
    steps = [round(-x) for x in chart.x]
    assert steps == list(range(1, 9))
    assert all(central[i] < one_sided[i] for i in range(5))
    assert all(central[i] < one_sided[i] - 1 for i in (1, 2))
    assert central[steps.index(3)] < -4 and central[-1] > min(central) + 1


def test_the_exact_column_is_the_mean_absolute_of_the_solutions_per_sequence_derivatives(made, pictures):
    """The table's "exact" is E_b |head_mask_gradient| of each layer, on the trusted inputs."""
    (l14,) = import_lessons(MODULE)
    model = tiny_model.load()
    tokens, targets, _ = tiny_model.make_task(pictures.SEQUENCES, pictures.SEED)
    xs, _, grads = pictures.layer_inputs_and_gradients(model, tokens, targets, H)
    mask = np.tril(np.ones((tokens.shape[1],) * 2, dtype=bool))
    importance = [
        np.abs(l14.head_mask_gradient(xs[layer], xs[layer], params, H, grads[layer], mask)).mean(axis=0)
        for layer, params in enumerate(model["layers"])
    ]
    table = made[0]
    np.testing.assert_allclose([row[2] for row in table.rows], np.concatenate(importance), rtol=1e-12)


LAST_DEF = "\n\ndef head_mask_gradient(x_q, x_kv, params, n_heads, grad_out, mask=None):\n"


@pytest.mark.parametrize(
    "body, words",
    [
        ("    return np.zeros((3,))\n", "head_mask_gradient returned (3,) for layer 0"),
        ("    return np.full((x_q.shape[0], n_heads), np.nan)\n", "NaN or inf"),
        ("    return [[0.0] * n_heads] * x_q.shape[0]\n", "head_mask_gradient returned list"),
    ],
)
def test_an_unusable_answer_is_one_sentence(tmp_path, body, words):
    source = (SOLUTIONS / f"{MODULE}.py").read_text() + LAST_DEF + body
    found, problem = figures(load_catalog().by_module(MODULE), solutions_with(tmp_path, MODULE, source))
    assert found == [] and words in problem and problem.count(". ") == 0, problem


def test_a_wrong_gradient_shows_as_disagreement(tmp_path):
    """Importance from the batch-mean loss: every per-sequence derivative divided by B."""
    source = (
        (SOLUTIONS / f"{MODULE}.py")
        .read_text()
        .replace("def head_mask_gradient(", "def _right_head_mask_gradient(")
    )
    source += LAST_DEF + (
        "    return _right_head_mask_gradient(x_q, x_kv, params, n_heads, grad_out, mask) / x_q.shape[0]\n"
    )
    found, problem = figures(load_catalog().by_module(MODULE), solutions_with(tmp_path, MODULE, source))
    assert problem == ""
    assert "They disagree" in found[0].title


def test_course_show_14_map_reads_at_80_columns(tmp_path):
    done = run_course("init", "ws", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    workspace = tmp_path / "ws"
    for solution in SOLUTIONS.glob("l*.py"):
        shutil.copy(solution, workspace)
    done = run_course("show", "14", "--map", cwd=workspace, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in done.stdout
    flat = " ".join(done.stdout.split())
    assert "They agree" in flat and re.search(r"L1 H3 │ +copy │", done.stdout)
    assert "central" in flat and "one-sided" in flat


def test_the_pictures_module_uses_no_solution(pictures):
    """It ships to learners without solutions/: it imports numpy, course.tiny_model and the
    testing face only."""
    imports = re.findall(r"^(?:from|import) (\S+)", Path(pictures.__file__).read_text(), flags=re.M)
    assert set(imports) <= {"__future__", "numpy", "course", "course.engine.testing"}, imports
