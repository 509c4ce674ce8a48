"""The lesson 7 solution agrees with PyTorch, with lesson 6 and with the lesson's own claims.

- count_parameters equals the number of parameters of torch.nn.MultiheadAttention (and, for
  grouped-query attention, of the four torch.nn.Linear layers such a layer is made of).
- The hand-built two-head weights solve the task through the lesson 6 solution's
  multi_head_attention and through torch.nn.MultiheadAttention loaded with those weights
  (PyTorch stores weights (d_out, d_in) and its boolean attn_mask means True = NOT allowed).
- The grading tests' loop oracle agrees with torch.nn.MultiheadAttention on random weights.
- best_single_head_error is sqrt(1 - 1/V), far above the two heads' error, fast, and reached by
  an actual single head built from the least-squares read-out (so it is the best, not a bound).
- The helpers the lesson hands out (make_inputs, target_outputs) build exactly what is graded.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from tests.helpers import LESSONS, SOLUTIONS, import_lessons
from tests.lessons.test_l07_why_heads import FIRST_GRADED, inputs, multi_head_loop, targets

V, L = 5, 7  # K = 12, D = 24


def load(folder, module):
    return import_lessons(module, folder=folder)[0]


@pytest.fixture(scope="module")
def solution():
    return load(SOLUTIONS, "l07_why_heads")


@pytest.fixture(scope="module")
def skeleton():
    return load(LESSONS, "l07_why_heads")


@pytest.fixture(scope="module")
def lesson6():
    """solutions/l06_multi_head.py (it imports l01, l03, l05 solutions); skipped if not there."""
    if not (SOLUTIONS / "l06_multi_head.py").is_file():
        pytest.skip("solutions/l06_multi_head.py is not written yet")
    try:
        return load(SOLUTIONS, "l06_multi_head")
    except ImportError as exc:  # an earlier lesson's solution is missing
        pytest.skip(f"the lesson 6 solution cannot be imported yet: {exc}")


def causal(t):
    return np.tril(np.ones((t, t), dtype=bool))


def tokens_for(seed, n_b=16, n_t=L, v=V):
    return np.random.default_rng(seed).integers(0, v, size=(n_b, n_t))


def rms_distance(out, y):
    """Root-mean-square over the graded positions of the Euclidean distance |out - y|."""
    diff = (out - y)[:, FIRST_GRADED:]
    return float(np.sqrt(np.mean(np.sum(diff**2, axis=-1))))


# ---------------------------------------------------------------- count_parameters
@pytest.mark.parametrize(
    "d, h, bias",
    [
        (12, 1, True),
        (12, 3, True),
        (12, 4, False),
        (24, 6, True),
        (32, 8, False),
        (64, 16, True),
        (10, 10, True),
    ],
)
def test_count_parameters_equals_pytorch_multihead_attention(solution, d, h, bias):
    torch = pytest.importorskip("torch")
    layer = torch.nn.MultiheadAttention(d, h, bias=bias)
    expected = sum(p.numel() for p in layer.parameters())
    assert solution.count_parameters(d, h, bias=bias) == expected
    assert expected == 4 * d * d + 4 * d * bias


@pytest.mark.parametrize(
    "d, h, g, bias", [(16, 8, 2, True), (12, 4, 1, True), (24, 6, 3, False), (64, 8, 8, True)]
)
def test_count_parameters_under_gqa_equals_pytorch_linear_layers(solution, d, h, g, bias):
    torch = pytest.importorskip("torch")
    k = d // h
    layers = [
        torch.nn.Linear(d, h * k, bias=bias),
        torch.nn.Linear(d, g * k, bias=bias),
        torch.nn.Linear(d, g * k, bias=bias),
        torch.nn.Linear(h * k, d, bias=bias),
    ]
    expected = sum(p.numel() for layer in layers for p in layer.parameters())
    assert solution.count_parameters(d, h, n_kv_heads=g, bias=bias) == expected


def test_count_parameters_is_an_int_and_the_same_for_every_number_of_heads(solution):
    counts = {h: solution.count_parameters(48, h) for h in (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)}
    assert set(counts.values()) == {4 * 48 * 48 + 4 * 48}
    assert all(type(c) is int for c in counts.values())


@pytest.mark.parametrize("args", [(10, 4), (30, 6, 4), (12, 5, 1)])
def test_count_parameters_raises_value_error_naming_the_numbers(solution, args):
    with pytest.raises(ValueError) as info:
        solution.count_parameters(*args)
    for n in args[1:]:
        assert str(n) in str(info.value)


# ---------------------------------------------------------------- two_head_weights
def test_two_head_weights_solve_the_task_through_the_lesson_6_solution(solution, lesson6):
    params = solution.two_head_weights(V, L)
    tokens = tokens_for(0)
    x = solution.make_inputs(tokens, V, L)
    out, weights = lesson6.multi_head_attention(x, x, params, 2, mask=causal(L))
    y = solution.target_outputs(tokens, V, L)
    assert np.abs(out - y)[:, FIRST_GRADED:].max() < 1e-12
    for h, offset in enumerate((1, 2)):  # head h attends exactly to the key t - offset
        for t in range(FIRST_GRADED, L):
            np.testing.assert_allclose(weights[:, h, t, t - offset], 1.0, atol=1e-12)
    oracle_out, oracle_weights = multi_head_loop(x, params, 2)
    np.testing.assert_allclose(out, oracle_out, atol=1e-12)
    np.testing.assert_allclose(weights, oracle_weights, atol=1e-12)


def torch_layer(params, d, n_heads, dtype):
    """torch.nn.MultiheadAttention holding the course params (weights transposed to (out, in))."""
    torch = pytest.importorskip("torch")
    layer = torch.nn.MultiheadAttention(d, n_heads, batch_first=True, dtype=dtype)
    zeros = np.zeros(d)
    with torch.no_grad():
        layer.in_proj_weight.copy_(
            torch.from_numpy(np.concatenate([params["w_q"].T, params["w_k"].T, params["w_v"].T], axis=0))
        )
        layer.in_proj_bias.copy_(
            torch.from_numpy(
                np.concatenate([params.get("b_q", zeros), params.get("b_k", zeros), params.get("b_v", zeros)])
            )
        )
        layer.out_proj.weight.copy_(torch.from_numpy(params["w_o"].T.copy()))
        layer.out_proj.bias.copy_(torch.from_numpy(params.get("b_o", zeros)))
    return layer


def torch_attend(layer, x, dtype):
    torch = pytest.importorskip("torch")
    n_t = x.shape[1]
    tx = torch.from_numpy(x).to(dtype)
    not_allowed = torch.from_numpy(~causal(n_t))  # PyTorch: True = may NOT attend
    with torch.no_grad():
        out, weights = layer(tx, tx, tx, attn_mask=not_allowed, need_weights=True, average_attn_weights=False)
    return out.double().numpy(), weights.double().numpy()


def test_two_head_weights_solve_the_task_through_torch_multihead_attention(solution):
    torch = pytest.importorskip("torch")
    params = solution.two_head_weights(V, L)
    d = 2 * (V + L)
    for n_t in (L, 4):
        tokens = tokens_for(n_t, n_t=n_t)
        x = solution.make_inputs(tokens, V, L)
        y = solution.target_outputs(tokens, V, L)
        out, weights = torch_attend(torch_layer(params, d, 2, torch.float64), x, torch.float64)
        assert np.abs(out - y)[:, FIRST_GRADED:].max() < 1e-9
        oracle_out, oracle_weights = multi_head_loop(x, params, 2)
        np.testing.assert_allclose(out, oracle_out, atol=1e-9)
        np.testing.assert_allclose(weights, oracle_weights, atol=1e-9)
    # float32: the scores are 50 apart, so the softmax is one-hot in single precision too
    out32, _ = torch_attend(torch_layer(params, d, 2, torch.float32), x, torch.float32)
    assert np.abs(out32 - y)[:, FIRST_GRADED:].max() < 1e-5


def test_the_grading_oracle_matches_torch_on_random_weights_with_biases():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(7)
    d, n_heads, n_t = 12, 3, 5
    params = {name: r.standard_normal((d, d)) for name in ("w_q", "w_k", "w_v", "w_o")}
    params.update({name: r.standard_normal(d) for name in ("b_q", "b_k", "b_v", "b_o")})
    x = r.standard_normal((2, n_t, d))
    out, weights = torch_attend(torch_layer(params, d, n_heads, torch.float64), x, torch.float64)
    oracle_out, oracle_weights = multi_head_loop(x, params, n_heads)
    np.testing.assert_allclose(oracle_out, out, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(oracle_weights, weights, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- one head against two
@pytest.mark.parametrize("v", [2, 3, 5, 8])
def test_best_single_head_error_is_sqrt_1_minus_1_over_v_for_every_mixture(solution, v):
    expected = math.sqrt(1 - 1 / v)
    for a in np.linspace(0, 1, 11):
        assert solution.single_head_error(v, a) == pytest.approx(expected, abs=1e-9)
    assert solution.best_single_head_error(v) == pytest.approx(expected, abs=1e-9)


def test_best_single_head_error_is_far_above_the_two_heads_error(solution):
    params = solution.two_head_weights(V, L)
    tokens = tokens_for(3, n_b=40)
    x = solution.make_inputs(tokens, V, L)
    out, _ = multi_head_loop(x, params, 2)
    two_heads = rms_distance(out, solution.target_outputs(tokens, V, L))
    one_head = solution.best_single_head_error(V)
    assert two_heads < 1e-9
    assert one_head > 0.5
    assert one_head > 1e6 * two_heads


def test_best_single_head_error_takes_less_than_50_ms(solution):
    solution.best_single_head_error(V)  # warm up numpy's lstsq
    started = time.perf_counter()
    solution.best_single_head_error(V)
    assert time.perf_counter() - started < 0.05


def single_head_params(v, ln, a, readout):
    """One head of width D = 2(V + L): weight a on key t-1, 1 - a on t-2, W_O = the read-out."""
    k = 2 * (v + ln)  # the single head is as wide as the whole layer
    score = 50.0
    w_q, w_k, w_v = np.zeros((k, k)), np.zeros((k, k)), np.zeros((k, k))
    for t in range(ln):
        w_q[v + t, t] = math.sqrt(k)
    for s in range(ln):  # score(t, s) = 50 + log a if s = t-1, 50 + log(1-a) if s = t-2, else 0
        if s + 1 < k:
            w_k[v + s, s + 1] = score + math.log(a)
        if s + 2 < k:
            w_k[v + s, s + 2] = score + math.log(1 - a)
    for j in range(v):
        w_v[j, j] = 1.0  # the head's output is the blend a e_(t-1) + (1-a) e_(t-2) in 0:V
    w_o = np.zeros((k, k))
    b_o = np.zeros(k)
    half = v + ln
    w_o[:v, :v], w_o[:v, half : half + v] = readout[:v, :v], readout[:v, v:]
    b_o[:v], b_o[half : half + v] = readout[v, :v], readout[v, v:]
    return {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o, "b_o": b_o}


@pytest.mark.parametrize("a", [0.3, 0.5, 0.8])
def test_a_real_single_head_reaches_the_best_single_head_error(solution, a):
    v, ln = 4, 3
    eye = np.eye(v)
    prev, prev2 = np.divmod(np.arange(v * v), v)
    features = np.concatenate([a * eye[prev] + (1 - a) * eye[prev2], np.ones((v * v, 1))], axis=1)
    readout, *_ = np.linalg.lstsq(features, np.concatenate([eye[prev], eye[prev2]], axis=1), rcond=None)
    tokens = np.stack([prev2, prev, np.zeros_like(prev)], axis=1)  # position 2 sees every pair
    out, weights = multi_head_loop(inputs(tokens, v, ln), single_head_params(v, ln, a, readout), 1)
    np.testing.assert_allclose(weights[:, 0, 2, :2], np.broadcast_to([1 - a, a], (v * v, 2)), atol=1e-12)
    assert rms_distance(out, targets(tokens, v, ln)) == pytest.approx(
        solution.single_head_error(v, a), abs=1e-9
    )


# ---------------------------------------------------------------- what the learner is handed
@pytest.mark.parametrize("v, ln, n_t", [(5, 7, 7), (3, 4, 4), (9, 5, 3), (2, 8, 6)])
def test_the_lesson_helpers_build_exactly_what_is_graded(solution, skeleton, v, ln, n_t):
    tokens = tokens_for(v * ln, n_b=4, n_t=n_t, v=v)
    for module in (solution, skeleton):
        np.testing.assert_array_equal(module.make_inputs(tokens, v, ln), inputs(tokens, v, ln))
        np.testing.assert_array_equal(module.target_outputs(tokens, v, ln), targets(tokens, v, ln))


def test_the_skeleton_hands_out_the_same_single_head_error(solution, skeleton):
    assert skeleton.SCORE == solution.SCORE == 50.0
    for v in (2, 5):
        assert skeleton.best_single_head_error(v) == solution.best_single_head_error(v)
