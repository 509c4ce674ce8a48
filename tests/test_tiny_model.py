"""The tiny model lessons 10 and 11 study: shipped weights, card and task, checked from the files.

The card is re-measured from the shipped weights (nothing in it is taken on trust), the numpy
forward pass equals the training tool's PyTorch model, and the task builds what it promises.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from course import tiny_model
from course.tiny_model.measure import card_text, measure

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "course" / "tiny_model"


def test_the_weights_ship_inside_the_package_under_one_megabyte():
    assert (FOLDER / "weights.npz").stat().st_size < 1_000_000
    model = tiny_model.load()
    cfg = tiny_model.config()
    V, L, D, H = cfg["vocab_size"], cfg["max_len"], cfg["d_model"], cfg["n_heads"]
    assert model["tok_emb"].shape == (V, D) and model["pos_emb"].shape == (L, D)
    assert model["unembed"].shape == (D, V) and model["b_unembed"].shape == (V,)
    assert len(model["layers"]) == cfg["n_layers"]
    for layer in model["layers"]:
        assert set(layer) == set(tiny_model.LAYER_KEYS)
        assert layer["w_q"].shape == (D, D) and layer["w_o"].shape == (D, D) and layer["b_k"].shape == (D,)
        assert all(value.dtype == np.float64 for value in layer.values())
    assert D % H == 0


def test_load_returns_fresh_arrays_each_time():
    first = tiny_model.load()
    first["layers"][0]["w_q"][:] = 0.0
    assert np.abs(tiny_model.load()["layers"][0]["w_q"]).sum() > 0


def test_the_task_copies_a_segment_and_scores_only_inside_the_copy():
    tokens, targets, distance = tiny_model.make_task(200, seed=7)
    again = tiny_model.make_task(200, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip((tokens, targets, distance), again, strict=True))
    L = tiny_model.config()["max_len"]
    assert tokens.shape == targets.shape == (200, L) and distance.shape == (200,)
    for b in range(200):
        scored = np.nonzero(targets[b] != tiny_model.IGNORE)[0]
        low, high = tiny_model.SEGMENT
        assert low - 1 <= len(scored) <= high - 1
        assert np.array_equal(scored, np.arange(scored[0], scored[0] + len(scored)))  # one run
        assert np.array_equal(targets[b, scored], tokens[b, scored + 1])  # the next token
        # the copied tokens repeat the ones `distance` positions earlier
        copy = np.arange(scored[0], scored[-1] + 2)
        assert distance[b] >= len(copy)
        assert np.array_equal(tokens[b, copy], tokens[b, copy - distance[b]])


def test_the_card_is_what_the_shipped_weights_measure():
    card = tiny_model.card()
    measured = measure(tiny_model.load(), tiny_model.config())
    assert measured["eval"] == card["eval"]
    assert measured["accuracy"] == pytest.approx(card["accuracy"], abs=2e-4)
    assert measured["loss"] == pytest.approx(card["loss"], abs=2e-4)
    assert (
        len(measured["heads"]) == len(card["heads"]) == card["config"]["n_layers"] * card["config"]["n_heads"]
    )
    for got, shipped in zip(measured["heads"], card["heads"], strict=True):
        assert (got["layer"], got["head"], got["role"], got["offset"]) == (
            shipped["layer"],
            shipped["head"],
            shipped["role"],
            shipped["offset"],
        )
        for key in ("confidence", "positional_share", "copy_share", "accuracy_without", "loss_without"):
            assert got[key] == pytest.approx(shipped[key], abs=2e-4), (got, key)
    assert (FOLDER / "README.md").read_text(encoding="utf-8") == card_text(card)


def test_the_card_shows_what_the_lessons_teach():
    """A positional head and copy heads appear; some heads cost almost nothing, one breaks it."""
    card = tiny_model.card()
    roles = [h["role"] for h in card["heads"]]
    assert "positional -1" in roles and "copy" in roles
    costs = sorted(card["accuracy"] - h["accuracy_without"] for h in card["heads"])
    assert costs[0] < 0.02 and costs[-1] > 0.3
    assert card["accuracy"] > 0.9


def _tool():
    spec = importlib.util.spec_from_file_location("train_tiny_model", ROOT / "tools" / "train_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_tiny_model", module)
    spec.loader.exec_module(module)
    return module


def test_the_numpy_forward_equals_the_pytorch_model_it_was_trained_as():
    torch = pytest.importorskip("torch")
    tool = _tool()
    cfg = tiny_model.config()
    net = tool.TinyModel(**cfg).double()
    model = tiny_model.load()
    with torch.no_grad():
        for name in ("tok_emb", "pos_emb", "unembed", "b_unembed"):
            getattr(net, name).copy_(torch.from_numpy(model[name]))
        for layer, params in zip(net.layers, model["layers"], strict=True):
            for key, value in params.items():
                layer[key].copy_(torch.from_numpy(value))
    tokens, _, _ = tiny_model.make_task(16, seed=3)
    masks = np.ones((cfg["n_layers"], cfg["n_heads"]))
    masks[0, 1] = 0.0
    masks[1, 2] = 0.5
    for head_masks in (None, masks):
        logits, weights = tiny_model.forward(model, tokens, head_masks)
        with torch.no_grad():
            t_masks = None if head_masks is None else torch.from_numpy(head_masks)
            t_logits, t_weights = net(torch.from_numpy(tokens), t_masks)
        np.testing.assert_allclose(logits, t_logits.numpy(), rtol=1e-5, atol=1e-5)
        for ours, theirs in zip(weights, t_weights, strict=True):
            np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=1e-5)


def test_the_card_records_the_training_that_made_it():
    pytest.importorskip("torch")  # the training tool imports it
    card = json.loads((FOLDER / "card.json").read_text(encoding="utf-8"))
    tool = _tool()
    assert card["config"] == tool.CONFIG
    assert card["training"]["steps"] == tool.TRAIN["steps"] and card["training"]["seed"] == tool.TRAIN["seed"]
