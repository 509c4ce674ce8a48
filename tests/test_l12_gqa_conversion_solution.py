"""Lesson 12's solution against PyTorch and against the trusted tiny model.

A converted layer run by lesson 8's grouped_query_attention must give what PyTorch gives with
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) on the
same pooled weights (PyTorch repeat-interleaves the key/value heads itself), and mean-pooling the
weights must equal mean-pooling the projected keys and values of each group (the projection is
linear), computed in PyTorch with a view (B, T, G, r, K) and a mean over r. The converted tiny
model's forward pass is checked layer by layer the same way, and the MHA model through the
lesson's code against course.tiny_model.forward.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources

import numpy as np
import pytest

from course import tiny_model
from tests.helpers import import_lessons


@pytest.fixture(scope="module")
def sol():
    modules = import_lessons("l04_masks", "l08_gqa", "l12_gqa_conversion")
    return dict(zip(("l04", "l08", "l12"), modules, strict=True))


@pytest.fixture(scope="module")
def model():
    return tiny_model.load()


def tokens_and_targets(n=64):
    tokens, targets, _ = tiny_model.make_task(n, seed=7)
    return tokens, targets


def torch_gqa_layer(torch, x, params, n_heads, n_kv_heads):
    """Causal GQA in PyTorch: (B, T, D) -> (B, T, D), SDPA repeating the G key/value heads."""
    t = {name: torch.from_numpy(w) for name, w in params.items()}
    xt = torch.from_numpy(x)
    n_b, n_t, _ = x.shape
    k_width = t["w_q"].shape[1] // n_heads

    def project(name, n):
        return (xt @ t[f"w_{name}"] + t[f"b_{name}"]).view(n_b, n_t, n, k_width).transpose(1, 2)

    q, k, v = project("q", n_heads), project("k", n_kv_heads), project("v", n_kv_heads)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return (heads.transpose(1, 2).reshape(n_b, n_t, n_heads * k_width) @ t["w_o"] + t["b_o"]).numpy()


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_mean_pooled_weights_project_to_the_mean_of_each_groups_keys_and_values(sol, model, n_kv_heads):
    torch = pytest.importorskip("torch")
    params = model["layers"][0]
    n_heads = tiny_model.config()["n_heads"]
    pooled = sol["l12"].mean_pool_kv_heads(params, n_heads, n_kv_heads)
    x = np.random.default_rng(0).standard_normal((3, 5, params["w_q"].shape[0]))
    xt = torch.from_numpy(x)
    k_width = params["w_q"].shape[1] // n_heads
    r = n_heads // n_kv_heads
    for name in "kv":
        full = xt @ torch.from_numpy(params[f"w_{name}"]) + torch.from_numpy(params[f"b_{name}"])
        grouped = full.view(3, 5, n_kv_heads, r, k_width).mean(dim=3).reshape(3, 5, n_kv_heads * k_width)
        mine = x @ pooled[f"w_{name}"] + pooled[f"b_{name}"]
        np.testing.assert_allclose(mine, grouped.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["mean", "first", "random", "modulo"])
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_a_converted_layer_in_lesson_8_equals_torch_sdpa_with_enable_gqa(sol, model, method, n_kv_heads):
    torch = pytest.importorskip("torch")
    n_heads = tiny_model.config()["n_heads"]
    converted = sol["l12"].convert_model(model, n_heads, n_kv_heads, method, seed=3)
    x = np.random.default_rng(1).standard_normal((2, 7, model["tok_emb"].shape[1]))
    for params in converted["layers"]:
        mine, _ = sol["l08"].grouped_query_attention(
            x, x, params, n_heads, n_kv_heads, sol["l04"].causal_mask(7)
        )
        np.testing.assert_allclose(
            mine, torch_gqa_layer(torch, x, params, n_heads, n_kv_heads), rtol=1e-9, atol=1e-10
        )


def test_the_converted_model_forward_equals_torch_layer_by_layer(sol, model):
    torch = pytest.importorskip("torch")
    n_heads, n_kv_heads = tiny_model.config()["n_heads"], 2
    converted = sol["l12"].convert_model(model, n_heads, n_kv_heads, "mean")
    tokens, _ = tokens_and_targets(16)
    x = converted["tok_emb"][tokens] + converted["pos_emb"][: tokens.shape[1]]
    for params in converted["layers"]:
        x = x + torch_gqa_layer(torch, x, params, n_heads, n_kv_heads)
    expected = x @ converted["unembed"] + converted["b_unembed"]
    mine = sol["l12"].gqa_model_forward(converted, tokens, n_heads, n_kv_heads)
    np.testing.assert_allclose(mine, expected, rtol=1e-9, atol=1e-9)


def test_repeat_interleave_of_the_pooled_heads_is_what_each_query_head_reads(sol, model):
    torch = pytest.importorskip("torch")
    n_heads, n_kv_heads = tiny_model.config()["n_heads"], 2
    params = model["layers"][1]
    pooled = sol["l12"].mean_pool_kv_heads(params, n_heads, n_kv_heads)
    k_width = params["w_q"].shape[1] // n_heads
    w = torch.from_numpy(pooled["w_k"]).view(-1, n_kv_heads, k_width)
    repeated = torch.repeat_interleave(w, n_heads // n_kv_heads, dim=1)  # (D, H, K)
    groups = sol["l08"].kv_head_for_query_head(n_heads, n_kv_heads)
    np.testing.assert_array_equal(repeated.numpy(), pooled["w_k"].reshape(-1, n_kv_heads, k_width)[:, groups])
    # query head h reads the mean of a group that holds its own old key head
    for h in range(n_heads):
        own = params["w_k"][:, h * k_width : (h + 1) * k_width]
        group = [g for g in range(n_heads) if g // (n_heads // n_kv_heads) == h // (n_heads // n_kv_heads)]
        mean = np.mean([params["w_k"][:, g * k_width : (g + 1) * k_width] for g in group], axis=0)
        np.testing.assert_allclose(repeated[:, h].numpy(), mean)
        assert h in group and own.shape == mean.shape


def test_the_mha_model_through_the_lesson_equals_the_trusted_forward(sol, model):
    tokens, _ = tokens_and_targets()
    n_heads = tiny_model.config()["n_heads"]
    expected, _ = tiny_model.forward(model, tokens)
    np.testing.assert_allclose(
        sol["l12"].gqa_model_forward(model, tokens, n_heads, n_heads), expected, atol=1e-10
    )


def test_the_conversion_table_of_the_tiny_model(sol, model):
    tokens, targets = tokens_and_targets(100)
    cfg = tiny_model.config()
    n_heads = cfg["n_heads"]
    methods = ("mean", "first", "random", "modulo")
    table = sol["l12"].conversion_table(model, tokens, targets, n_heads, (1, 2, 4), methods, 0)
    _, accuracy = tiny_model.loss_and_accuracy(tiny_model.forward(model, tokens)[0], targets)
    np.testing.assert_allclose(table["relative_error"][:, 2], 0.0, atol=1e-12)  # G = H: exact
    np.testing.assert_allclose(table["accuracy"][:, 2], accuracy)
    # G = 1 pools every head, so modulo and consecutive groups are the same group
    np.testing.assert_allclose(table["relative_error"][0, 0], table["relative_error"][3, 0])
    assert table["relative_error"][0, 1] != table["relative_error"][3, 1]  # G = 2: they differ
    assert (table["relative_error"][:, :2] > 0).all()
    k_width = model["layers"][0]["w_q"].shape[1] // n_heads
    per_token = 2 * cfg["n_layers"] * k_width * 2  # bytes of K and V per kv head, layer and token
    assert table["cache_bytes"].tolist() == [per_token * g * tokens.shape[1] for g in (1, 2, 4)]


def test_the_conversions_leave_the_checkpoint_unchanged_and_return_copies(sol, model):
    n_heads = tiny_model.config()["n_heads"]
    params = {name: w.copy() for name, w in model["layers"][0].items()}
    for method in ("mean", "first", "random", "modulo"):
        for n_kv_heads in (1, 2, 4):
            converted, back = sol["l12"].fine_tune_step(params, n_heads, n_kv_heads, method)
            assert back is params
            for name, w in params.items():
                np.testing.assert_array_equal(w, model["layers"][0][name])
                assert not np.shares_memory(converted[name], w)


def test_the_recorded_uptraining_belongs_to_the_shipped_weights():
    """course/tiny_model/gqa_uptraining.json (tools/uptrain_gqa.py) is what lesson 12's pictures
    show after uptraining: it must be measured on the weights the package ships."""
    files = resources.files(tiny_model.__name__)
    data = json.loads(files.joinpath("gqa_uptraining.json").read_text(encoding="utf-8"))
    weights = hashlib.sha256(files.joinpath("weights.npz").read_bytes()).hexdigest()
    assert data["weights_sha256"] == weights, "the weights changed: rerun python tools/uptrain_gqa.py"
    assert data["base_steps"] == tiny_model.card()["training"]["steps"]
    assert data["uptraining_steps"] == round(0.05 * data["base_steps"])
    runs = {(run["method"], run["n_kv_heads"]): run["curve"] for run in data["runs"]}
    assert set(runs) == {(m, g) for m in ("mean", "first", "random") for g in (1, 2)} | {("mha", 4)}
    for curve in runs.values():
        assert curve[0]["step"] == 0 and curve[-1]["step"] == data["uptraining_steps"]
