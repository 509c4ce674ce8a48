"""Lesson 11's solution against PyTorch and against the trusted tiny-model package.

- The head mask: PyTorch's own attention (torch.nn.functional.scaled_dot_product_attention) with
  each head's output scaled before the output projection, and the same as zeroing the head's rows
  of W_O.
- model_forward equals course.tiny_model.forward on the shipped weights, for any head masks.
- sequence_losses equals torch.nn.functional.cross_entropy (ignore_index=-1) averaged per sequence.
- head_importance at the default eps equals the EXACT derivative from torch.autograd within the
  grading test's tolerance, on the grading test's own model, while a one-sided difference does
  not: this checks the premise of the grading test independently of finite differences.
- ablation_importance agrees with the model card's ablations (accuracy pooled the same way).
"""

from __future__ import annotations

import numpy as np
import pytest

from course import tiny_model
from tests.helpers import import_lessons

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def sol():
    (l11,) = import_lessons("l11_head_pruning")
    return l11


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=torch.float64)


def torch_attention(x, params, n_heads, xi, causal=True):
    """One layer in PyTorch: heads by F.scaled_dot_product_attention, scaled by xi before W_O."""
    B, T, D = x.shape
    q, k, v = (x @ _t(params[f"w_{n}"]) + _t(params[f"b_{n}"]) for n in "qkv")
    K = q.shape[-1] // n_heads
    q, k, v = (a.reshape(B, T, n_heads, K).transpose(1, 2) for a in (q, k, v))
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, T, K)
    heads = heads * xi.reshape(-1, n_heads, 1, 1)  # xi (H,) or one row per sequence (B, H)
    return heads.transpose(1, 2).reshape(B, T, n_heads * K) @ _t(params["w_o"]) + _t(params["b_o"])


def torch_losses(model, tokens, targets, n_heads, xi):
    """Per-sequence losses (B,) of the model in PyTorch as a function of the masks xi, (L, H) or
    one set per sequence (B, L, H)."""
    T = tokens.shape[1]
    x = _t(model["tok_emb"])[torch.as_tensor(tokens)] + _t(model["pos_emb"])[:T]
    for layer, params in enumerate(model["layers"]):
        x = x + torch_attention(x, params, n_heads, xi[..., layer, :])
    logits = x @ _t(model["unembed"]) + _t(model["b_unembed"])
    tgt = torch.as_tensor(targets)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=-1, reduction="none")
    scored = (tgt != -1).to(torch.float64)
    return (ce * scored).sum(dim=1) / scored.sum(dim=1)


def test_masked_attention_equals_pytorch_with_scaled_heads(sol):
    r = np.random.default_rng(0)
    D, H, B, T = 12, 4, 2, 5
    params = {n: r.standard_normal((D, D)) / np.sqrt(D) for n in ("w_q", "w_k", "w_v", "w_o")}
    params.update({n: r.standard_normal(D) * 0.3 for n in ("b_q", "b_k", "b_v", "b_o")})
    x = r.standard_normal((B, T, D))
    xi = np.array([1.0, 0.0, 2.5, -0.5])
    causal = np.tril(np.ones((T, T), dtype=bool))
    out, weights = sol.masked_multi_head_attention(x, x, params, H, xi, causal)
    expected = torch_attention(_t(x), params, H, _t(xi)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    assert weights.shape == (B, H, T, T)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    # removing head 1 is zeroing rows 1*K:2*K of W_O
    K = D // H
    zeroed = {**params, "w_o": params["w_o"].copy()}
    zeroed["w_o"][K : 2 * K] = 0.0
    ones_but_1 = np.array([1.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(
        sol.masked_multi_head_attention(x, x, params, H, ones_but_1, causal)[0],
        sol.masked_multi_head_attention(x, x, zeroed, H, np.ones(H), causal)[0],
        rtol=1e-12,
        atol=1e-12,
    )


def test_model_forward_equals_the_tiny_model_package_on_the_shipped_weights(sol):
    model = tiny_model.load()
    n_heads = tiny_model.config()["n_heads"]
    tokens, _, _ = tiny_model.make_task(50, 7)
    masks = np.random.default_rng(1).normal(size=(len(model["layers"]), n_heads))
    for head_masks in (None, masks):
        logits, weights = sol.model_forward(model, tokens, head_masks, n_heads)
        exp_logits, exp_weights = tiny_model.forward(model, tokens, head_masks, n_heads)
        np.testing.assert_allclose(logits, exp_logits, rtol=1e-10, atol=1e-10)
        for w, e in zip(weights, exp_weights, strict=True):
            np.testing.assert_allclose(w, e, rtol=1e-10, atol=1e-12)


def test_sequence_losses_equal_pytorch_cross_entropy(sol):
    r = np.random.default_rng(2)
    logits = r.standard_normal((6, 9, 11)) * 5 + 300.0
    targets = r.integers(0, 11, size=(6, 9))
    targets[r.random((6, 9)) < 0.5] = -1
    targets[:, 0] = 3
    ce = torch.nn.functional.cross_entropy(
        _t(logits).transpose(1, 2), torch.as_tensor(targets), ignore_index=-1, reduction="none"
    ).numpy()
    scored = targets != -1
    expected = (ce * scored).sum(1) / scored.sum(1)
    np.testing.assert_allclose(sol.sequence_losses(logits, targets), expected, rtol=1e-12)


def exact_importance(model, tokens, targets, n_heads):
    """E_x |dL(x)/dxi| from torch.autograd, each layer's row divided by its l2 norm."""
    # one copy of the masks per sequence: sequence b's loss depends on its own copy only, so one
    # backward pass of the summed losses gives every sequence's own derivative
    xi = torch.ones((len(tokens), len(model["layers"]), n_heads), dtype=torch.float64, requires_grad=True)
    torch_losses(model, tokens, targets, n_heads, xi).sum().backward()
    raw = xi.grad.abs().mean(dim=0).numpy()  # (B, L, H) -> (L, H)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_the_grading_models_central_difference_is_exact_within_the_tolerance_and_one_sided_is_not(sol):
    from tests.lessons import test_l11_head_pruning as grading

    model, tokens, targets = grading.importance_setup()
    exact = exact_importance(model, tokens, targets, grading.H)
    central = sol.head_importance(model, tokens, targets, grading.DEFAULT_EPS, grading.H)
    central_error = np.abs(central - exact).max()
    one_sided = grading.importance_from(
        grading.derivatives_loop(model, tokens, targets, grading.DEFAULT_EPS, kind="forward")
    )
    one_sided_error = np.abs(one_sided - exact).max()
    assert central_error < grading.TOLERANCE / 10, central_error
    assert one_sided_error > grading.TOLERANCE * 10, one_sided_error
    # and the grading test's stand-in for the exact derivative (central at 1e-6) is exact
    stand_in = grading.importance_from(grading.derivatives_loop(model, tokens, targets, 1e-6))
    assert np.abs(stand_in - exact).max() < grading.TOLERANCE / 100


def test_head_importance_equals_autograd_on_the_shipped_model(sol):
    model = tiny_model.load()
    n_heads = tiny_model.config()["n_heads"]
    tokens, targets, _ = tiny_model.make_task(100, 3)
    np.testing.assert_allclose(
        sol.head_importance(model, tokens, targets, 1e-3, n_heads),
        exact_importance(model, tokens, targets, n_heads),
        atol=1e-5,
    )


def test_ablation_agrees_with_the_model_cards_ablations(sol):
    """The card pools the loss over every scored position and rounds to 4 decimals; the
    accuracy is pooled the same way as scored_accuracy."""
    from course.tiny_model.measure import EVAL_SEED, EVAL_SIZE

    card = tiny_model.card()
    cfg = tiny_model.config()
    model = tiny_model.load()
    tokens, targets, _ = tiny_model.make_task(EVAL_SIZE, EVAL_SEED)
    _, accuracy_change = sol.ablation_importance(model, tokens, targets, cfg["n_heads"])
    for head in card["heads"]:
        assert accuracy_change[head["layer"], head["head"]] + card["accuracy"] == pytest.approx(
            head["accuracy_without"], abs=2e-4
        )


def test_pruning_everything_leaves_the_model_without_heads(sol):
    model = tiny_model.load()
    n_heads = tiny_model.config()["n_heads"]
    tokens, targets, _ = tiny_model.make_task(100, 4)
    importance = sol.head_importance(model, tokens, targets, 1e-3, n_heads)
    order, accuracies = sol.pruning_curve(model, tokens, targets, importance)
    n = len(model["layers"]) * n_heads
    assert order.shape == (n, 2) and accuracies.shape == (n + 1,)
    assert sorted(map(tuple, order.tolist())) == [
        (la, h) for la in range(len(model["layers"])) for h in range(n_heads)
    ]
    empty = np.zeros((len(model["layers"]), n_heads))
    _, accuracy = tiny_model.loss_and_accuracy(tiny_model.forward(model, tokens, empty, n_heads)[0], targets)
    _, full = tiny_model.loss_and_accuracy(tiny_model.forward(model, tokens, None, n_heads)[0], targets)
    assert accuracies[0] == pytest.approx(full) and accuracies[-1] == pytest.approx(accuracy)
