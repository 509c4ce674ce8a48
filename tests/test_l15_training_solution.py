"""Lesson 15's solution against PyTorch: the loss, the whole model's gradient, AdamW, the
schedules and the training loop.

Every gradient is compared, array by array, with torch.autograd of F.cross_entropy(ignore_index=-1)
on the same model written in PyTorch (checked here against the models tools/train_tiny_model.py
and tools/uptrain_gqa.py trained), in float64, with the contract's norm-wise tolerance:
max |a - b| <= 1e-9 * max |b| + 1e-12 (1e-4 and 1e-6 for float32 inputs, whose answers must stay
float32). The floor matters: b_k's gradient is zero in theory. The models have random weights of
order 1 (init_model's 0.02 gives gradients too small to show a wrong term), more than one layer
(so a forgotten residual path shows), repeated tokens and unscored positions, T = L and T < L,
and G = H, G = 2 and G = 1 key/value heads.

adamw_step is compared with torch.optim.AdamW over ten steps (its moments and step count too),
schedule_at with CosineAnnealingLR and OneCycleLR step by step, and train with a PyTorch loop
that runs the recipe of the tools (AdamW, the scheduler stepped after the optimizer, the same
make_task batches) in float64. Over several steps the two runs drift apart by more than one
gradient's rounding (see TRAIN_RTOL). Resuming in chunks must equal one call exactly.
Everything skips without torch.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course import tiny_model
from course.tiny_model import IGNORE, LAYER_KEYS, make_task
from tests.helpers import import_lessons

torch = pytest.importorskip("torch")
F = torch.nn.functional

# The same examples on every run, nothing written to .hypothesis/.
PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.too_slow],
)

# A small model of every size different (a swapped axis shows): V, L, D, H, K = D // H.
SMALL = {"vocab_size": 7, "max_len": 9, "d_model": 12, "n_heads": 4, "n_layers": 2}
# make_task needs L >= 16 (two copies of up to 8 tokens): the training runs use this one.
TRAINED = {"vocab_size": 16, "max_len": 16, "d_model": 16, "n_heads": 4, "n_layers": 2}

# train against a PyTorch loop: losses and every trained array within
# TRAIN_RTOL * max |b| + TRAIN_ATOL. One gradient agrees to ~1e-15, and a few Adam steps carry that
# on: measured, ~1e-14 relative after 6 steps; the bound leaves four orders of magnitude for other
# BLAS builds and stays far below what a wrong formula changes (eps added before the bias
# correction, the subtlest of the lesson's optimizer mistakes, moves some array of these models by
# 3e-5 to 3e-3 of its largest weight in 6 steps). b_k is the exception: its gradient is zero in
# theory, rounding noise d (~1e-16) on each side, a different noise, and Adam moves each weight by
# lr * m_hat / (sqrt(v_hat) + eps), about lr * d / eps (1e-10 at lr = 1e-2) where the gradient
# is far below eps = 1e-8. Measured, ~2e-9 after 6 steps; b_k changes nothing downstream (softmax
# ignores a constant added to a row), so the drift stays its own, and it gets an absolute bound of
# lr * 1e-6 per step (noise up to 1e-14).
TRAIN_RTOL, TRAIN_ATOL = 1e-10, 1e-13


@pytest.fixture(scope="module")
def sol():
    (l15,) = import_lessons("l15_training")
    return l15


# --- comparison and conversion helpers ------------------------------------------------------------


def tol(dtype):
    """The contract's (relative, absolute) tolerance for answers of this dtype."""
    return (1e-4, 1e-6) if np.dtype(dtype) == np.float32 else (1e-9, 1e-12)


def agree(actual, expected, what, dtype=np.float64, scale=0.0, rtol=None, atol=None):
    """The contract's norm-wise comparison: same shape, the dtype of the inputs, and
    max |actual - expected| <= rtol * max(max |expected|, scale) + atol.

    `scale` serves an array that is zero in theory (b_k's gradient): in float32 its rounding
    error grows with the size of the terms it sums, not with its own (zero) size, so it is
    measured against a gradient of those terms (w_k's); in float64 the floor suffices."""
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: {type(actual)}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype}, expected {np.dtype(dtype)}"
    default_rtol, default_atol = tol(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    error = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
    bound = rtol * max(float(np.max(np.abs(expected), initial=0.0)), scale) + atol
    assert error <= bound, f"{what}: max error {error:.3g} > {bound:.3g}"


def close(actual, expected, what, rtol):
    """Two Python floats within rtol of the expected one."""
    assert isinstance(actual, float), f"{what}: {type(actual)}, not a Python float"
    assert abs(actual - expected) <= rtol * abs(expected), f"{what}: {actual!r}, expected {expected!r}"


def named(tree, prefix=""):
    """(name, array) of every array of a model-shaped tree, in tree_map's order."""
    if isinstance(tree, dict):
        return [item for key, value in tree.items() for item in named(value, f"{prefix}{key}.")]
    if isinstance(tree, (list, tuple)):
        return [item for i, value in enumerate(tree) for item in named(value, f"{prefix}{i}.")]
    return [(prefix[:-1], tree)]


def leaves(tree):
    """The tree with every array a float64 tensor that autograd follows."""
    if isinstance(tree, dict):
        return {key: leaves(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [leaves(value) for value in tree]
    return torch.tensor(np.asarray(tree, dtype=np.float64), requires_grad=True)


def random_model(r, config, n_kv_heads=None, dtype=np.float64):
    """A model of `config` with G = n_kv_heads key/value heads and weights of order 1: every
    bias non-zero (b_k's gradient is then zero only because softmax ignores a constant)."""
    V, L, D, H = config["vocab_size"], config["max_len"], config["d_model"], config["n_heads"]
    K, G = D // H, n_kv_heads or H

    def w(rows, cols):
        return r.standard_normal((rows, cols)) / math.sqrt(rows)

    def b(n):
        return r.standard_normal(n) * 0.3

    model = {"tok_emb": r.standard_normal((V, D)), "pos_emb": r.standard_normal((L, D)) * 0.5}
    model.update(unembed=w(D, V) * 2, b_unembed=b(V))
    widths = {"q": H * K, "k": G * K, "v": G * K}
    model["layers"] = [
        {
            **{f"w_{n}": w(D, widths[n]) * 1.5 for n in "qkv"},
            **{f"b_{n}": b(widths[n]) for n in "qkv"},
            "w_o": w(H * K, D),
            "b_o": b(D),
        }
        for _ in range(config["n_layers"])
    ]
    model["layers"] = [{key: layer[key] for key in LAYER_KEYS} for layer in model["layers"]]
    return model if dtype == np.float64 else _astype(model, dtype)


def _astype(tree, dtype):
    if isinstance(tree, dict):
        return {key: _astype(value, dtype) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_astype(value, dtype) for value in tree]
    return tree.astype(dtype)


def random_batch(r, config, batch, t, scored=0.6):
    """Tokens with repeats (V < B*T), targets with about 1 - scored of them IGNORE, and at least
    one scored position."""
    tokens = r.integers(0, config["vocab_size"], size=(batch, t))
    targets = r.integers(0, config["vocab_size"], size=(batch, t))
    targets[r.random((batch, t)) >= scored] = IGNORE
    targets[0, -1] = r.integers(0, config["vocab_size"])
    return tokens, targets


def torch_forward(params, tokens, n_heads, n_kv_heads=None):
    """The tiny model's forward pass in PyTorch (course.tiny_model.forward; lesson 12's GQA with
    key/value head h // (H // G) for query head h): logits (B, T, V)."""
    G = n_kv_heads or n_heads
    B, T = tokens.shape
    x = params["tok_emb"][torch.as_tensor(tokens)] + params["pos_emb"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for p in params["layers"]:
        q, k, v = (x @ p[f"w_{n}"] + p[f"b_{n}"] for n in "qkv")
        K = q.shape[-1] // n_heads
        q = q.reshape(B, T, n_heads, K).transpose(1, 2)
        k, v = (a.reshape(B, T, G, K).transpose(1, 2).repeat_interleave(n_heads // G, dim=1) for a in (k, v))
        weights = (q @ k.transpose(-1, -2) / math.sqrt(K)).masked_fill(~causal, -math.inf).softmax(-1)
        x = x + (weights @ v).transpose(1, 2).reshape(B, T, -1) @ p["w_o"] + p["b_o"]
    return x @ params["unembed"] + params["b_unembed"]


def torch_loss(logits, targets):
    """F.cross_entropy over the scored positions, as the tools train with."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), torch.as_tensor(targets).reshape(-1), ignore_index=IGNORE)


def torch_gradients(model, tokens, targets, n_heads, n_kv_heads=None):
    """(loss, [(name, gradient)]) of the model by autograd in float64, in tree_map's order."""
    params = leaves(model)
    loss = torch_loss(torch_forward(params, tokens, n_heads, n_kv_heads), targets)
    names, tensors = zip(*named(params), strict=True)
    grads = torch.autograd.grad(loss, tensors)
    return loss.item(), [(name, g.numpy()) for name, g in zip(names, grads, strict=True)]


def check_gradients(got, expected, dtype=np.float64):
    """Every array of `got` (a tree) against autograd's, under the contract's tolerance."""
    expected = dict(expected)
    got = dict(named(got))
    assert set(got) == set(expected), f"gradient arrays {sorted(got)}, the model's {sorted(expected)}"
    for name, value in got.items():
        zero_in_theory = name.endswith("b_k") and np.dtype(dtype) == np.float32
        scale = float(np.max(np.abs(expected[name.replace("b_k", "w_k")]))) if zero_in_theory else 0.0
        agree(value, expected[name], f"grads[{name}]", dtype, scale)


# --- shapes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_returns_a_python_float_and_a_gradient_of_the_logits_shape_and_dtype(sol, dtype):
    r = np.random.default_rng(1)
    logits = r.standard_normal((2, 3, 5)).astype(dtype)
    targets = np.array([[1, IGNORE, 4], [IGNORE, 0, IGNORE]])
    loss, grad = sol.cross_entropy(logits, targets)
    assert type(loss) is float
    assert isinstance(grad, np.ndarray) and grad.shape == (2, 3, 5) and grad.dtype == dtype


@pytest.mark.parametrize(("n_kv_heads", "t"), [(None, 9), (2, 5), (1, 1)])
def test_model_gradients_returns_a_gradient_shaped_like_the_model_for_every_array(sol, n_kv_heads, t):
    r = np.random.default_rng(2)
    model = random_model(r, SMALL, n_kv_heads)
    tokens, targets = random_batch(r, SMALL, 3, t)
    loss, grads = sol.model_gradients(model, tokens, targets, SMALL["n_heads"], n_kv_heads)
    assert type(loss) is float
    assert set(grads) == set(model) and len(grads["layers"]) == len(model["layers"])
    for layer, expected in zip(grads["layers"], model["layers"], strict=True):
        assert list(layer) == list(expected), "each layer's keys, in the model's order"
    weights = dict(named(model))
    assert set(dict(named(grads))) == set(weights)
    for name, g in named(grads):
        p = weights[name]
        assert g.shape == p.shape and g.dtype == p.dtype, f"{name}: {g.shape} {g.dtype}, the weight {p.shape}"


def test_adamw_step_returns_new_arrays_shaped_like_the_params_and_a_state_with_the_step_count(sol):
    r = np.random.default_rng(3)
    params = {"a": r.standard_normal((3, 4)), "layers": [{"w": r.standard_normal(5).astype(np.float32)}]}
    grads = {"a": r.standard_normal((3, 4)), "layers": [{"w": r.standard_normal(5).astype(np.float32)}]}
    new, state = sol.adamw_step(params, grads, None, 1e-3)
    assert set(state) == {"step", "m", "v"} and state["step"] == 1
    for tree in (new, state["m"], state["v"]):
        assert [(n, a.shape, a.dtype) for n, a in named(tree)] == [
            (n, a.shape, a.dtype) for n, a in named(params)
        ]
    for (_, a), (_, p) in zip(named(new), named(params), strict=True):
        assert not np.shares_memory(a, p), "the new params are new arrays"
    _, state = sol.adamw_step(new, grads, state, 1e-3)
    assert state["step"] == 2


def test_train_returns_the_model_a_float64_loss_per_step_and_the_state_to_resume_from(sol):
    r = np.random.default_rng(4)
    model = random_model(r, TRAINED, 2)
    trained, losses, state = sol.train(model, 3, 4, 1e-3, 0, TRAINED["n_heads"], 2)
    assert isinstance(losses, np.ndarray) and losses.shape == (3,) and losses.dtype == np.float64
    assert state["step"] == 3
    assert [(n, a.shape) for n, a in named(trained)] == [(n, a.shape) for n, a in named(model)]


def test_init_model_has_the_layout_of_the_shipped_model(sol):
    config = tiny_model.config()
    model, shipped = sol.init_model(config, 0), tiny_model.load()
    assert [(n, a.shape, a.dtype) for n, a in named(model)] == [
        (n, a.shape, a.dtype) for n, a in named(shipped)
    ]


# --- hand-checked ---------------------------------------------------------------------------------


def test_uniform_logits_give_log_v_and_the_softmax_minus_the_one_hot_over_the_scored_count(sol):
    """Every probability 1/V: the loss is log V, and each scored row of the gradient is
    (1/V - onehot) / N with N = 3 scored positions of 6."""
    V = 4
    targets = np.array([[2, IGNORE, 0], [IGNORE, IGNORE, 3]])
    loss, grad = sol.cross_entropy(np.zeros((2, 3, V)), targets)
    assert loss == pytest.approx(math.log(V), rel=1e-15)
    expected = np.zeros((2, 3, V))
    for b, t in ((0, 0), (0, 2), (1, 2)):
        expected[b, t] = 1 / V
        expected[b, t, targets[b, t]] -= 1
    np.testing.assert_allclose(grad, expected / 3, rtol=1e-15, atol=1e-17)


def test_an_unscored_positions_logits_change_neither_the_loss_nor_any_gradient(sol):
    r = np.random.default_rng(5)
    logits = r.standard_normal((2, 4, 6))
    targets = np.array([[1, IGNORE, 5, IGNORE], [IGNORE, 0, IGNORE, 2]])
    loss, grad = sol.cross_entropy(logits, targets)
    changed = logits.copy()
    changed[targets == IGNORE] = r.standard_normal(6) * 50
    changed_loss, changed_grad = sol.cross_entropy(changed, targets)
    assert changed_loss == loss
    np.testing.assert_array_equal(changed_grad, grad)
    assert np.all(grad[targets == IGNORE] == 0.0)


def test_cross_entropy_leaves_the_logits_as_they_were(sol):
    r = np.random.default_rng(6)
    logits = r.standard_normal((2, 3, 5))
    before = logits.copy()
    sol.cross_entropy(logits, np.array([[0, 1, IGNORE], [4, IGNORE, 2]]))
    np.testing.assert_array_equal(logits, before)


def test_adamws_first_step_moves_each_weight_by_the_rate_against_its_gradients_sign(sol):
    """At t = 1 the bias corrections make m_hat = g and v_hat = g**2: the step is
    lr * g / (|g| + eps), lr in the gradient's direction whatever its size; the decay first
    shrinks p by 1 - lr * wd."""
    p = np.array([1.0, -2.0, 0.5, 3.0])
    g = np.array([1e-3, -5.0, 2e2, 0.0])
    lr, wd, eps = 0.1, 0.2, 1e-8
    new, state = sol.adamw_step({"p": p}, {"p": g}, None, lr, eps=eps, weight_decay=wd)
    expected = p * (1 - lr * wd) - lr * g / (np.abs(g) + eps)
    np.testing.assert_allclose(new["p"], expected, rtol=1e-14)
    np.testing.assert_allclose(state["m"]["p"], 0.1 * g, rtol=1e-15)
    np.testing.assert_allclose(state["v"]["p"], 0.001 * g * g, rtol=1e-12)


def test_a_constant_gradient_moves_a_weight_by_the_rate_at_every_step_without_decay(sol):
    """For a constant gradient the corrected m_hat is g and v_hat is g**2 at every t (the bias
    correction undoes the zero start exactly), so every step is lr (eps aside)."""
    p, state = {"p": np.array([0.0])}, None
    for step in range(1, 6):
        p, state = sol.adamw_step(p, {"p": np.array([0.25])}, state, 0.01, weight_decay=0.0)
        assert p["p"][0] == pytest.approx(-0.01 * step, rel=1e-7)  # 0.25 / (0.25 + eps)


def test_the_schedules_at_their_hand_computed_points(sol):
    lr = 0.02
    assert sol.schedule_at(None, 7, 10, lr) == (lr, 0.9)
    assert sol.schedule_at("cosine", 0, 10, lr) == (pytest.approx(lr), 0.9)
    assert sol.schedule_at("cosine", 5, 10, lr) == (pytest.approx(lr / 2), 0.9)
    # OneCycle over 10 steps: warm-up steps 0 .. 2 (0.3 * 10 - 1 = 2), then down to step 9
    assert sol.schedule_at("onecycle", 0, 10, lr) == (pytest.approx(lr / 25), pytest.approx(0.95))
    assert sol.schedule_at("onecycle", 2, 10, lr) == (pytest.approx(lr), pytest.approx(0.85))
    assert sol.schedule_at("onecycle", 9, 10, lr) == (pytest.approx(lr / 25 / 1e4), pytest.approx(0.95))
    with pytest.raises(ValueError, match="linear"):
        sol.schedule_at("linear", 0, 10, lr)


def test_init_model_draws_every_weight_from_normal_0_002_and_zeroes_every_bias(sol):
    """As tools/train_tiny_model.py starts the model in PyTorch (the same distribution, not the
    same numbers): the 38,400 weights of the tiny model pooled have mean 0 and standard
    deviation 0.02 within a few standard errors, each array's within 10%."""
    config = tiny_model.config()
    model = sol.init_model(config, 0)
    weights = [(n, a) for n, a in named(model) if not n.split(".")[-1].startswith("b")]
    biases = [(n, a) for n, a in named(model) if n.split(".")[-1].startswith("b")]
    assert len(biases) == 1 + 4 * config["n_layers"]
    for name, bias in biases:
        assert np.all(bias == 0.0), f"{name} is not all 0"
    pooled = np.concatenate([a.ravel() for _, a in weights])
    assert pooled.size == 38_400
    assert abs(pooled.mean()) <= 4 * 0.02 / math.sqrt(pooled.size)
    assert abs(pooled.std() / 0.02 - 1) <= 4 / math.sqrt(2 * pooled.size)
    for name, a in weights:
        assert abs(a.std() / 0.02 - 1) <= 0.1, f"{name}: std {a.std():.4f}"
    again, other = sol.init_model(config, 0), sol.init_model(config, 1)
    for (_, a), (_, b), (_, c) in zip(named(model), named(again), named(other), strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.float64
        assert np.all(a == 0) or not np.array_equal(a, c), "another seed, other weights"


# --- PyTorch: cross_entropy -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("seed", "shape", "scale"), [(10, (3, 5, 7), 1.0), (11, (1, 9, 32), 4.0)])
def test_cross_entropy_equals_f_cross_entropy_with_ignore_index_and_its_autograd(
    sol, dtype, seed, shape, scale
):
    r = np.random.default_rng(seed)
    logits = (r.standard_normal(shape) * scale).astype(dtype)
    targets = r.integers(0, shape[-1], size=shape[:2])
    targets[r.random(shape[:2]) < 0.4] = IGNORE
    targets[0, 0] = 1
    z = leaves(logits)
    expected = torch_loss(z, targets)
    (expected_grad,) = torch.autograd.grad(expected, z)
    loss, grad = sol.cross_entropy(logits, targets)
    close(loss, expected.item(), "loss", tol(dtype)[0])
    agree(grad, expected_grad.numpy(), "grad_logits", dtype)


def test_nothing_scored_gives_a_nan_loss_as_pytorchs_and_a_zero_gradient(sol):
    logits = np.random.default_rng(12).standard_normal((2, 3, 4))
    targets = np.full((2, 3), IGNORE)
    z = leaves(logits)
    expected = torch_loss(z, targets)
    (expected_grad,) = torch.autograd.grad(expected, z)
    loss, grad = sol.cross_entropy(logits, targets)
    assert math.isnan(loss) and math.isnan(expected.item())
    assert np.all(grad == 0.0) and np.all(expected_grad.numpy() == 0.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("size", [1e3, 1e4, 3e30])
def test_extreme_logits_give_a_finite_loss_equal_to_pytorchs(sol, dtype, size):
    """exp(1000) overflows float64 and exp(-1000) underflows to 0: only the log-softmax form,
    after the row maximum is subtracted, stays finite (3e30 fits float32, whose exp(89)
    already overflows)."""
    r = np.random.default_rng(13)
    logits = (r.choice([-1.0, 0.0, 0.5, 1.0], size=(2, 4, 6)) * size).astype(dtype)
    targets = r.integers(0, 6, size=(2, 4))
    targets[1, 1] = IGNORE
    z = leaves(logits)
    expected = torch_loss(z, targets)
    (expected_grad,) = torch.autograd.grad(expected, z)
    loss, grad = sol.cross_entropy(logits, targets)
    assert math.isfinite(loss) and np.all(np.isfinite(grad))
    close(loss, expected.item(), "loss", tol(dtype)[0])
    agree(grad, expected_grad.numpy(), "grad_logits", dtype)


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 9)),
    scored=st.floats(0.0, 1.0),
    scale=st.sampled_from([1e-3, 1.0, 30.0, 1e4]),
)
def test_cross_entropy_equals_pytorch_for_any_shape_scored_share_and_logit_size(
    sol, seed, shape, scored, scale
):
    r = np.random.default_rng(seed)
    logits = r.standard_normal(shape) * scale
    targets = np.where(r.random(shape[:2]) < scored, r.integers(0, shape[-1], size=shape[:2]), IGNORE)
    z = leaves(logits)
    expected = torch_loss(z, targets)
    (expected_grad,) = torch.autograd.grad(expected, z)
    loss, grad = sol.cross_entropy(logits, targets)
    if (targets == IGNORE).all():
        assert math.isnan(loss) and np.all(grad == 0.0)
        return
    close(loss, expected.item(), "loss", 1e-12)
    agree(grad, expected_grad.numpy(), "grad_logits")
    assert np.all(np.abs(grad.sum(axis=-1)) <= 1e-15), "each row of softmax - onehot sums to 0"


# --- PyTorch: model_gradients ---------------------------------------------------------------------


def load_into(module, model):
    """The tools' torch module with the model's float64 weights, by name."""
    with torch.no_grad():
        for name, value in named(model):
            parts = name.split(".")
            target = module.layers[int(parts[1])][parts[2]] if parts[0] == "layers" else getattr(module, name)
            target.copy_(torch.from_numpy(value))
    return module


def test_the_pytorch_forward_here_is_the_one_the_training_tools_ran():
    """The oracle of these tests against TinyModel (tools/train_tiny_model.py) and GQAModel
    (tools/uptrain_gqa.py), both in float64, on the shipped model and its G = 2 conversion."""
    from tools.train_tiny_model import TinyModel
    from tools.uptrain_gqa import GQAModel, convert

    config = tiny_model.config()
    H = config["n_heads"]
    model = tiny_model.load()
    tokens, _, _ = make_task(4, seed=1)
    tiny = load_into(TinyModel(**config).double(), model)
    with torch.no_grad():
        expected, _ = tiny(torch.from_numpy(tokens))
        got = torch_forward(leaves(model), tokens, H)
    agree(got.detach().numpy(), expected.numpy(), "the oracle against TinyModel")

    converted = copy.deepcopy(model)
    for i, layer in enumerate(converted["layers"]):
        for key in ("w_k", "b_k", "w_v", "b_v"):
            layer[key] = convert(layer[key], H, 2, "mean", seed=i)
    gqa = load_into(GQAModel(converted, H, 2).double(), converted)  # it rounds them to float32
    with torch.no_grad():
        expected = gqa(torch.from_numpy(tokens))
        got = torch_forward(leaves(converted), tokens, H, 2)
    agree(got.detach().numpy(), expected.numpy(), "the oracle against GQAModel")


@pytest.mark.parametrize(
    ("seed", "n_kv_heads", "t"),
    [(20, None, SMALL["max_len"]), (21, None, 5), (22, 2, SMALL["max_len"]), (23, 2, 6), (24, 1, 7)],
)
def test_model_gradients_equals_autograd_for_every_weight_with_g_equal_h_g_2_and_g_1(
    sol, seed, n_kv_heads, t
):
    """Random weights of order 1, two layers, repeated tokens (V = 7 < B*T), unscored
    positions, T = L and T < L (pos_emb's last rows get exactly 0)."""
    r = np.random.default_rng(seed)
    model = random_model(r, SMALL, n_kv_heads)
    tokens, targets = random_batch(r, SMALL, 3, t)
    assert len(np.unique(tokens)) < tokens.size, "some token repeats"
    expected_loss, expected = torch_gradients(model, tokens, targets, SMALL["n_heads"], n_kv_heads)
    loss, grads = sol.model_gradients(model, tokens, targets, SMALL["n_heads"], n_kv_heads)
    close(loss, expected_loss, "loss", 1e-12)
    check_gradients(grads, expected)
    assert np.all(grads["pos_emb"][t:] == 0.0)
    unused = np.setdiff1d(np.arange(SMALL["vocab_size"]), tokens)
    assert np.all(grads["tok_emb"][unused] == 0.0)


def test_model_gradients_of_the_shipped_model_on_the_copy_task_equals_autograd(sol):
    """The tiny model as lessons 10 to 12 study it (V = 32, L = 24, D = 64, H = 4), on a batch of
    its task, and its G = 1 conversion."""
    config = tiny_model.config()
    model = tiny_model.load()
    tokens, targets, _ = make_task(8, seed=5)
    expected_loss, expected = torch_gradients(model, tokens, targets, config["n_heads"])
    loss, grads = sol.model_gradients(model, tokens, targets, config["n_heads"])
    close(loss, expected_loss, "loss", 1e-12)
    check_gradients(grads, expected)
    for layer in model["layers"]:
        for key in ("w_k", "b_k", "w_v", "b_v"):
            layer[key] = (
                layer[key]
                .reshape(*layer[key].shape[:-1], 1, 4, -1)
                .mean(axis=-2)
                .reshape(*layer[key].shape[:-1], -1)
            )
    expected_loss, expected = torch_gradients(model, tokens, targets, config["n_heads"], 1)
    loss, grads = sol.model_gradients(model, tokens, targets, config["n_heads"], 1)
    close(loss, expected_loss, "loss", 1e-12)
    check_gradients(grads, expected)


def test_b_ks_gradient_is_zero_up_to_rounding_and_meets_the_absolute_floor(sol):
    r = np.random.default_rng(25)
    model = random_model(r, SMALL, 2)
    tokens, targets = random_batch(r, SMALL, 3, SMALL["max_len"])
    _, grads = sol.model_gradients(model, tokens, targets, SMALL["n_heads"], 2)
    for layer in grads["layers"]:
        assert np.max(np.abs(layer["b_k"])) <= 1e-12
        assert np.max(np.abs(layer["w_k"])) > 1e-3, "the keys' weights do get a gradient"


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_model_gradients_keeps_a_float32_model_float32_at_the_float32_tolerance(sol, n_kv_heads):
    r = np.random.default_rng(26)
    model = random_model(r, SMALL, n_kv_heads, dtype=np.float32)
    tokens, targets = random_batch(r, SMALL, 3, 8)
    expected_loss, expected = torch_gradients(model, tokens, targets, SMALL["n_heads"], n_kv_heads)
    loss, grads = sol.model_gradients(model, tokens, targets, SMALL["n_heads"], n_kv_heads)
    close(loss, expected_loss, "loss", 1e-4)
    check_gradients(grads, expected, np.float32)


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    groups=st.sampled_from([(4, 4), (4, 2), (4, 1), (2, 1), (3, 3), (6, 2)]),
    batch=st.integers(1, 3),
    t=st.integers(1, 9),
    n_layers=st.integers(1, 3),
)
def test_model_gradients_equals_autograd_for_any_heads_groups_length_and_depth(
    sol, seed, groups, batch, t, n_layers
):
    H, G = groups
    config = dict(SMALL, n_heads=H, n_layers=n_layers)
    r = np.random.default_rng(seed)
    model = random_model(r, config, G)
    tokens, targets = random_batch(r, config, batch, t)
    expected_loss, expected = torch_gradients(model, tokens, targets, H, G)
    loss, grads = sol.model_gradients(model, tokens, targets, H, G)
    close(loss, expected_loss, "loss", 1e-12)
    check_gradients(grads, expected)


# --- PyTorch: adamw_step --------------------------------------------------------------------------


def parameter_tree(r):
    """Several arrays in a model-like tree, some gradient entries zero or near eps."""
    return {
        "emb": r.standard_normal((5, 3)),
        "bias": r.standard_normal(4),
        "layers": [{"w": r.standard_normal((3, 2)), "b": r.standard_normal(2)} for _ in range(2)],
    }


def gradient_tree(r, params):
    def one(p):
        g = r.standard_normal(p.shape) * r.choice([1e-9, 1e-3, 1.0, 10.0], size=p.shape)
        return np.where(r.random(p.shape) < 0.1, 0.0, g)

    return {
        "emb": one(params["emb"]),
        "bias": one(params["bias"]),
        "layers": [{key: one(value) for key, value in layer.items()} for layer in params["layers"]],
    }


def adamw_against_torch(sol, seed, steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, vary_b1=False):
    """`steps` adamw_steps and torch.optim.AdamW steps from the same params and gradients (b1
    changed before each step when vary_b1, as OneCycle does): the params and the state after each."""
    r = np.random.default_rng(seed)
    params = parameter_tree(r)
    tensors = [leaves(p) for _, p in named(params)]
    optimizer = torch.optim.AdamW(tensors, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    state = None
    for step in range(1, steps + 1):
        b1 = betas[0] if not vary_b1 else 0.85 + 0.1 * r.random()
        optimizer.param_groups[0]["betas"] = (b1, betas[1])
        grads = gradient_tree(r, params)
        params, state = sol.adamw_step(params, grads, state, lr, (b1, betas[1]), eps, weight_decay)
        for tensor, (_, g) in zip(tensors, named(grads), strict=True):
            tensor.grad = torch.from_numpy(g.copy())
        optimizer.step()
        assert state["step"] == step
        for (name, p), (_, m), (_, v), tensor in zip(
            named(params), named(state["m"]), named(state["v"]), tensors, strict=True
        ):
            agree(p, tensor.detach().numpy(), f"step {step}: {name}")
            agree(m, optimizer.state[tensor]["exp_avg"].numpy(), f"step {step}: m of {name}")
            agree(v, optimizer.state[tensor]["exp_avg_sq"].numpy(), f"step {step}: v of {name}")
            assert int(optimizer.state[tensor]["step"]) == step


@pytest.mark.parametrize(
    ("lr", "betas", "eps", "weight_decay"),
    [(1e-3, (0.9, 0.999), 1e-8, 0.01), (0.05, (0.8, 0.95), 1e-6, 0.3), (0.01, (0.0, 0.5), 1e-3, 0.0)],
)
def test_ten_adamw_steps_equal_torch_optim_adamw_params_moments_and_step(sol, lr, betas, eps, weight_decay):
    adamw_against_torch(sol, 30, 10, lr, betas, eps, weight_decay)


def test_adamw_with_b1_changed_at_every_step_equals_torch_as_onecycle_changes_it(sol):
    adamw_against_torch(sol, 31, 10, 0.01, vary_b1=True)


def test_adamw_step_modifies_no_input_and_the_same_state_gives_the_same_step_again(sol):
    r = np.random.default_rng(32)
    params = parameter_tree(r)
    grads = gradient_tree(r, params)
    _, state = sol.adamw_step(params, grads, None, 0.01)
    params, grads = parameter_tree(r), gradient_tree(r, params)
    before = copy.deepcopy((params, grads, state))
    first, first_state = sol.adamw_step(params, grads, state, 0.01)
    for (name, a), (_, b) in zip(named((params, grads, state)), named(before), strict=True):
        assert type(a) is type(b) and np.array_equal(a, b), f"{name} was modified"
    assert state["step"] == 1 and first_state["step"] == 2
    again, again_state = sol.adamw_step(params, grads, state, 0.01)
    for (name, a), (_, b) in zip(named((first, first_state)), named((again, again_state)), strict=True):
        assert np.array_equal(a, b), f"{name}: a retried step differs"
    for (_, new), (_, old) in zip(named(first_state), named(state), strict=True):
        assert not isinstance(new, np.ndarray) or not np.shares_memory(new, old), "new moments, not the old"


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.integers(1, 4),
    lr=st.floats(1e-4, 0.1),
    b1=st.floats(0.0, 0.99),
    b2=st.floats(0.5, 0.9999),
    eps=st.sampled_from([1e-10, 1e-8, 1e-4]),
    weight_decay=st.floats(0.0, 0.5),
)
def test_adamw_step_equals_torch_for_any_hyperparameters(sol, seed, steps, lr, b1, b2, eps, weight_decay):
    adamw_against_torch(sol, seed, steps, lr, (b1, b2), eps, weight_decay)


# --- PyTorch: schedule_at -------------------------------------------------------------------------


def torch_schedule(schedule, total_steps, lr):
    """(lr, beta1) of each step of a run of torch.optim.AdamW with the tools' scheduler."""
    p = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.AdamW([p], lr=lr)
    if schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    else:
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=total_steps)
    seen = []
    for _ in range(total_steps):
        group = optimizer.param_groups[0]
        seen.append((group["lr"], group["betas"][0]))
        optimizer.step()
        scheduler.step()
    return seen


def check_schedule(sol, schedule, total_steps, lr):
    """Per step, the rate within 1e-12 of the peak (CosineAnnealingLR computes each rate from
    the one before, so its rounding differs from the closed form's) and the same b1."""
    for step, (rate, b1) in enumerate(torch_schedule(schedule, total_steps, lr)):
        got_rate, got_b1 = sol.schedule_at(schedule, step, total_steps, lr)
        assert abs(got_rate - rate) <= 1e-12 * lr, (
            f"{schedule} step {step} of {total_steps}: {got_rate}, {rate}"
        )
        assert abs(got_b1 - b1) <= 1e-12, f"{schedule} step {step} of {total_steps}: b1 {got_b1}, {b1}"


@pytest.mark.parametrize("schedule", ["cosine", "onecycle"])
@pytest.mark.parametrize("total_steps", [1, 2, 3, 4, 5, 7, 10, 400])
def test_schedule_at_equals_torchs_scheduler_at_every_step(sol, schedule, total_steps):
    check_schedule(sol, schedule, total_steps, 3e-3)


@PROPERTY
@given(total_steps=st.integers(1, 300), lr=st.floats(1e-5, 1.0))
def test_schedule_at_equals_torchs_onecycle_for_any_length(sol, total_steps, lr):
    check_schedule(sol, "onecycle", total_steps, lr)
    for step in (0, total_steps // 2, total_steps - 1):
        rate, b1 = sol.schedule_at("onecycle", step, total_steps, lr)
        assert 0 < rate <= lr and 0.85 <= b1 <= 0.95


# --- PyTorch: train -------------------------------------------------------------------------------


def check_trained(trained, expected, steps, lr):
    """The trained model against the PyTorch loop's, array by array (see TRAIN_RTOL)."""
    for (name, got), (_, want) in zip(named(trained), expected, strict=True):
        atol = steps * lr * 1e-6 if name.endswith("b_k") else TRAIN_ATOL
        agree(got, want, f"trained {name}", rtol=TRAIN_RTOL, atol=atol)


def torch_train(model, steps, batch, lr, data_seed, n_heads, n_kv_heads, schedule, weight_decay=0.01):
    """The tools' training loop in float64: AdamW on every array (one group), the scheduler
    stepped after the optimizer, step i on make_task(batch, data_seed + i, V, L)."""
    params = leaves(model)
    tensors = [p for _, p in named(params)]
    optimizer = torch.optim.AdamW(tensors, lr=lr, weight_decay=weight_decay)
    scheduler = None
    if schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    elif schedule == "onecycle":
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    V, L = model["tok_emb"].shape[0], model["pos_emb"].shape[0]
    losses = []
    for i in range(steps):
        tokens, targets, _ = make_task(batch, data_seed + i, V, L)
        loss = torch_loss(torch_forward(params, tokens, n_heads, n_kv_heads), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return [(name, p.detach().numpy()) for name, p in named(params)], np.array(losses)


@pytest.mark.parametrize("schedule", [None, "cosine", "onecycle"])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_train_equals_a_pytorch_training_loop_with_adamw_and_the_scheduler(sol, schedule, n_kv_heads):
    """Six steps of a small model, losses and final weights within TRAIN_RTOL (see its comment)."""
    r = np.random.default_rng(40)
    model = random_model(r, TRAINED, n_kv_heads)
    H, steps, batch, lr, data_seed = TRAINED["n_heads"], 6, 8, 1e-2, 1234
    expected, expected_losses = torch_train(model, steps, batch, lr, data_seed, H, n_kv_heads, schedule)
    trained, losses, state = sol.train(
        model, steps, batch, lr, data_seed, H, n_kv_heads, schedule=schedule, total_steps=steps
    )
    agree(losses, expected_losses, "losses", rtol=TRAIN_RTOL, atol=TRAIN_ATOL)
    assert losses[-1] < losses[0], "the loss falls"
    assert state["step"] == steps
    check_trained(trained, expected, steps, lr)


def test_train_from_init_model_equals_pytorch_as_the_tools_train_the_shipped_model(sol):
    """The recipe of tools/train_tiny_model.py (lr 3e-3, OneCycle, weight decay 0.01) for a few
    steps of a small model started by init_model (tiny gradients, hence Adam's eps matters)."""
    model = sol.init_model(TRAINED, 7)
    expected, expected_losses = torch_train(model, 5, 8, 3e-3, 10_000, TRAINED["n_heads"], None, "onecycle")
    trained, losses, _ = sol.train(model, 5, 8, 3e-3, 10_000, TRAINED["n_heads"], schedule="onecycle")
    agree(losses, expected_losses, "losses", rtol=TRAIN_RTOL, atol=TRAIN_ATOL)
    check_trained(trained, expected, 5, 3e-3)


@pytest.mark.parametrize("schedule", [None, "onecycle"])
def test_training_in_chunks_resumed_from_the_state_equals_one_call_exactly(sol, schedule):
    r = np.random.default_rng(41)
    model = random_model(r, TRAINED, 2)
    before = copy.deepcopy(model)
    args = {"batch_size": 4, "lr": 1e-2, "data_seed": 77, "n_heads": TRAINED["n_heads"], "n_kv_heads": 2}
    whole, whole_losses, whole_state = sol.train(model, 7, **args, schedule=schedule)
    part, state, losses = model, None, []
    for start, steps in ((0, 3), (3, 1), (4, 3)):
        part, chunk, state = sol.train(
            part, steps, **args, schedule=schedule, state=state, start_step=start, total_steps=7
        )
        losses.append(chunk)
    np.testing.assert_array_equal(np.concatenate(losses), whole_losses)
    for (name, a), (_, b) in zip(named((part, state)), named((whole, whole_state)), strict=True):
        assert np.array_equal(a, b), f"{name} differs after resuming"
    for (name, a), (_, b) in zip(named(model), named(before), strict=True):
        assert np.array_equal(a, b), f"train modified the model's {name}"
