"""Lesson 10's solution against PyTorch, against the shipped tiny model and against the code
that measured its model card (course.tiny_model.measure).

- tiny_model_weights on the shipped weights equals the trusted numpy forward and a PyTorch model
  built from torch.nn.MultiheadAttention layers loaded with the same weights (need_weights=True,
  average_attn_weights=False gives the per-head weights).
- head_confidence and relative_position_share equal torch reductions (torch.argmax returns the
  first of equal maxima, as np.argmax does), and, where both apply (T == S, no masked row), the
  card's own head_statistics.
- With T != S only the bottom-right alignment finds a previous-token head in the last rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from course import tiny_model
from course.tiny_model import measure
from tests.helpers import import_lessons


@pytest.fixture(scope="module")
def sol():
    (l10,) = import_lessons("l10_head_roles")
    return l10


@pytest.fixture(scope="module")
def shipped():
    model = tiny_model.load()
    tokens, targets, distance = tiny_model.make_task(64, seed=3)
    return model, tokens, targets, distance


def torch_weights(torch, model, tokens, n_heads):
    """The tiny model's per-layer weights from torch.nn.MultiheadAttention modules."""
    x = torch.from_numpy(model["tok_emb"][tokens] + model["pos_emb"][: tokens.shape[1]])
    n_t = tokens.shape[1]
    blocked = ~torch.ones(n_t, n_t, dtype=torch.bool).tril()  # PyTorch's bool mask: True = blocked
    out = []
    for p in model["layers"]:
        d = p["w_q"].shape[0]
        mha = torch.nn.MultiheadAttention(d, n_heads, batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            # PyTorch stores (d_out, d_in): the course's weights transposed
            mha.in_proj_weight.copy_(torch.from_numpy(np.concatenate([p["w_q"].T, p["w_k"].T, p["w_v"].T])))
            mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])))
            mha.out_proj.weight.copy_(torch.from_numpy(p["w_o"].T))
            mha.out_proj.bias.copy_(torch.from_numpy(p["b_o"]))
            y, w = mha(x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False)
        x = x + y
        out.append(w.numpy())
    return np.stack(out)


def test_tiny_model_weights_equal_the_trusted_forward_and_torch(sol, shipped):
    model, tokens, _, _ = shipped
    n_heads = tiny_model.config()["n_heads"]
    mine = sol.tiny_model_weights(model, tokens, n_heads)
    _, trusted = tiny_model.forward(model, tokens, n_heads=n_heads)
    np.testing.assert_allclose(mine, np.stack(trusted), rtol=1e-9, atol=1e-12)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(mine, torch_weights(torch, model, tokens, n_heads), rtol=1e-7, atol=1e-10)


def test_confidence_and_shares_equal_torch_reductions(sol):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    w = np.round(r.dirichlet(np.ones(7) * 0.5, size=(3, 2, 4, 5)), 1)  # (3, 2, H=4, T=5, S=7), ties
    w[0, :, :, 2] = 0.0  # masked rows
    tw = torch.from_numpy(w)
    nonzero = (tw != 0).any(dim=-1)  # (..., H, T)
    top = tw.max(dim=-1).values
    per_head = lambda a: a.movedim(-2, 0).reshape(4, -1)  # noqa: E731
    expected = (per_head(top) * per_head(nonzero)).sum(1) / per_head(nonzero).sum(1)
    np.testing.assert_allclose(sol.head_confidence(w), expected.numpy(), rtol=1e-12)
    for offset in (-2, -1, 0, 1):
        target = torch.arange(5) + (7 - 5) + offset
        counted = nonzero & (target >= 0) & (target < 7)
        hits = counted & (tw.argmax(dim=-1) == target)
        share = per_head(hits).sum(1).double() / per_head(counted).sum(1)
        np.testing.assert_allclose(sol.relative_position_share(w, offset), share.numpy(), rtol=1e-12)


def test_on_the_card_s_own_data_the_numbers_equal_the_card_s_measurement_code(sol):
    """measure.head_statistics averages over (B, T) with T == S and no masked rows; there the
    lesson's functions must give the same numbers (the card stays a measurement, not a lookup)."""
    model = tiny_model.load()
    cfg = tiny_model.config()
    tokens, targets, distance = tiny_model.make_task(200, seed=measure.EVAL_SEED)
    weights = sol.tiny_model_weights(model, tokens, cfg["n_heads"])
    for layer_weights in weights:
        stats = measure.head_statistics(layer_weights, targets, distance)
        np.testing.assert_allclose(sol.head_confidence(layer_weights), stats["confidence"], rtol=1e-12)
        for offset, share in stats["shares"].items():
            np.testing.assert_allclose(sol.relative_position_share(layer_weights, offset), share, rtol=1e-12)


def test_the_tiny_model_has_a_previous_token_head_and_copy_heads(sol, shipped):
    """What the lesson tells the learner they will find: a positional -1 head in layer 0 and
    confident content heads in layer 1 (measured on the first 16 positions, as the picture does)."""
    model, _, _, _ = shipped
    tokens, _, _ = tiny_model.make_task(200, seed=0)
    roles = sol.model_head_roles(model, tokens[:, :16], tiny_model.config()["n_heads"])
    assert "positional -1" in roles[0], roles
    assert roles[1].count("content") >= 2, roles


def test_the_last_rows_need_the_bottom_right_alignment(sol, shipped):
    model, tokens, _, _ = shipped
    n_heads = tiny_model.config()["n_heads"]
    weights = sol.tiny_model_weights(model, tokens[:, :16], n_heads)[0]  # layer 0 (B, H, 16, 16)
    full = sol.relative_position_share(weights, -1)
    last = sol.relative_position_share(weights[..., -6:, :], -1)
    best = int(np.argmax(full))
    assert full[best] >= 0.9 and last[best] >= 0.9
    # aligned top-left, the last 6 rows (positions 10..15) would be looked for at keys 0..5
    top_left = (weights[..., -6:, :].argmax(-1) == np.arange(6) - 1)[..., 1:].mean(axis=(0, 2))
    assert top_left[best] < 0.2


def test_classify_heads_rules(sol):
    w = np.zeros((10, 2, 2, 2))
    w[:, :, 0] = [0.2, 0.8]
    w[:, :, 1] = [0.8, 0.2]
    w[9, 1, 1] = [0.2, 0.8]
    assert sol.classify_heads(w) == ["positional -1", "positional 1"]
    assert sol.classify_heads(np.zeros((1, 3, 2, 2))) == ["diffuse"] * 3
    uniform = np.tril(np.ones((24, 24))) / np.arange(1, 25)[:, None]
    assert abs(sol.head_confidence(uniform[None])[0] - sum(1 / n for n in range(1, 25)) / 24) < 1e-12
    assert sol.classify_heads(uniform[None]) == ["diffuse"]


def test_the_map_picture_labels_every_head_of_every_layer_with_the_learners_numbers(tmp_path):
    """`course show 10 --map` on the solutions: a grid of every head of both layers on one
    10-token sequence, labelled with role and confidence, and the table of measurements; on the
    skeleton the maps still come (from the trusted forward) with '?' where a function is missing."""
    import shutil

    from course.content.catalog import load_catalog
    from course.engine.pictures.figures import HeadGrid, NumberTable, figures
    from tests.helpers import LESSONS, SOLUTIONS

    lesson = load_catalog().by_module("l10_head_roles")
    cfg = tiny_model.config()
    made, problem = figures(lesson, SOLUTIONS)
    assert problem == ""
    grid, table = made
    assert isinstance(grid, HeadGrid) and isinstance(table, NumberTable)
    assert grid.maps.shape == (cfg["n_layers"], cfg["n_heads"], 10, 10)
    labels = [grid.label(layer, h) for layer in range(cfg["n_layers"]) for h in range(cfg["n_heads"])]
    assert all("conf 0." in label for label in labels), labels
    assert any(label.startswith("positional -1") for label in labels[: cfg["n_heads"]]), labels
    assert sum(label.startswith("content") for label in labels[cfg["n_heads"] :]) >= 2, labels
    assert len(table.rows) == cfg["n_layers"] * cfg["n_heads"]

    for name in (
        "l01_projections",
        "l02_softmax",
        "l03_attention",
        "l04_masks",
        "l05_heads",
        "l06_multi_head",
    ):
        shutil.copy(SOLUTIONS / f"{name}.py", tmp_path)
    shutil.copy(LESSONS / "l10_head_roles.py", tmp_path)
    made, problem = figures(lesson, tmp_path)
    assert problem == ""
    grid, table = made
    assert "not ready yet" in grid.title and "Not written yet" in grid.title
    assert all(grid.label(0, h).startswith("role: ?") for h in range(cfg["n_heads"]))
