"""Lesson 14's solution against PyTorch's autograd.

Every gradient the solution returns is compared, array by array, with torch.autograd.grad of
L = sum(grad_out * out) for a random grad_out, in float64, with the contract's norm-wise
tolerance: max |a - b| <= 1e-9 * max |b| + 1e-12 (1e-4 and 1e-6 for float32 inputs, whose
answers must stay float32). The floor matters: b_k's gradient is zero in theory.

PyTorch's side is written out here, op by op, as the course defines the forward passes (lessons
3, 6, 8, 11). Its masked softmax gives a fully masked row zeros (torch.softmax of an all -inf row
is NaN): such a row's scores are replaced by zeros before the softmax and its weights multiplied
by 0 after. One test also uses torch.nn.functional.scaled_dot_product_attention's math backend.
The cases have masks, fully masked query rows, leading axes that broadcast (k and v (S, K) or
(1, S, K) against q (B, T, K), a mask adding a batch axis), T != S and T == S, every group size
of grouped-query attention, and the tiny model, where head_mask_gradient fed with the gradient
backpropagated to a layer's output must give each sequence's dL/dxi of the whole model.
Everything skips without torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from course import tiny_model
from tests.helpers import import_lessons

torch = pytest.importorskip("torch")

B, H, T, S, K, KV = 2, 3, 4, 6, 5, 7  # all different, so that a swapped axis shows
D = 12  # model width of the multi-head cases: 4 heads of 3, or 6 heads of 2, ...


@pytest.fixture(scope="module")
def sol():
    (l14,) = import_lessons("l14_attention_backward")
    return l14


def tol(dtype):
    """The contract's (relative, absolute) tolerance for answers of this dtype."""
    return (1e-4, 1e-6) if np.dtype(dtype) == np.float32 else (1e-9, 1e-12)


def agree(actual, expected, what, dtype=np.float64, scale=0.0, precision=None):
    """The contract's norm-wise comparison: same shape, the dtype of the inputs, and
    max |actual - expected| <= rtol * max(max |expected|, scale) + atol, with the tolerance of
    `precision` (default: of dtype).

    `scale` serves an array that is zero in theory (b_k's gradient): in float32 its rounding
    error grows with the size of the terms it sums, not with its own (zero) size, so it is
    measured against a gradient of those terms (w_k's); in float64 the floor suffices."""
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: {type(actual)}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype}, expected {np.dtype(dtype)}"
    rtol, atol = tol(dtype if precision is None else precision)
    error = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
    bound = rtol * max(float(np.max(np.abs(expected), initial=0.0)), scale) + atol
    assert error <= bound, f"{what}: max error {error:.3g} > {bound:.3g}"


def leaf(a):
    """A float64 tensor that autograd follows, from an array of any float dtype."""
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def autograd(out, grad_out, inputs):
    """d(sum(grad_out * out)) / d(each input), as float64 arrays."""
    loss = (out * torch.as_tensor(np.asarray(grad_out, dtype=np.float64))).sum()
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [
        torch.zeros_like(x).numpy() if g is None else g.numpy() for x, g in zip(inputs, grads, strict=True)
    ]


def masked_softmax(scores, mask):
    """Softmax over the last axis with -inf where mask is False; an all-masked row gives zeros
    (and no NaN anywhere, forward or backward)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    keep = torch.tensor(np.array(mask, dtype=bool))  # a copy: a broadcast view is read-only
    any_key = keep.any(dim=-1, keepdim=True)
    scores = torch.where(keep, scores, -math.inf)  # the mask may broadcast the scores' axes
    scores = torch.where(any_key, scores, 0.0)
    return torch.softmax(scores, dim=-1) * any_key


def torch_attention(q, k, v, mask=None, scale=None):
    """Lesson 3's attention in PyTorch (its leading axes broadcast, as numpy's do)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return masked_softmax(q @ k.transpose(-1, -2) * scale, mask) @ v


def torch_mha(x_q, x_kv, params, n_heads, mask=None, n_kv_heads=None, xi=None):
    """Lessons 6, 8 and 11 in PyTorch: multi-head attention, grouped-query attention when
    n_kv_heads is given (key/value heads repeat-interleaved), head h's output times xi[..., h]
    when xi is given ((H,) or one row per sequence, (B, H))."""
    G = n_kv_heads or n_heads
    b, t, _ = x_q.shape
    s = x_kv.shape[1]

    def project(x, name, heads):
        y = x @ params[f"w_{name}"]
        if params.get(f"b_{name}") is not None:
            y = y + params[f"b_{name}"]
        return y.reshape(y.shape[0], y.shape[1], heads, -1).transpose(1, 2)  # (B, heads, N, K)

    q = project(x_q, "q", n_heads)
    k = project(x_kv, "k", G).repeat_interleave(n_heads // G, dim=1)
    v = project(x_kv, "v", G).repeat_interleave(n_heads // G, dim=1)
    if mask is not None:
        mask = np.broadcast_to(mask, (b, t, s))[:, None]
    heads = torch_attention(q, k, v, mask)  # (B, H, T, K)
    if xi is not None:
        heads = heads * xi.reshape(-1, n_heads, 1, 1)
    out = heads.transpose(1, 2).reshape(b, t, -1) @ params["w_o"]
    if params.get("b_o") is not None:
        out = out + params["b_o"]
    return out


def random_mask(r, shape, full_rows=1):
    """Booleans with about a third masked, and `full_rows` query rows masked entirely."""
    mask = r.random(shape) > 0.35
    flat = mask.reshape(-1, shape[-1])
    for row in r.choice(len(flat), size=full_rows, replace=False):
        flat[row] = False
    return flat.reshape(shape)


def layer_params(r, d=D, hk=D, gk=D, biases=True, dtype=np.float64):
    params = {
        "w_q": r.standard_normal((d, hk)) / np.sqrt(d),
        "w_k": r.standard_normal((d, gk)) / np.sqrt(d),
        "w_v": r.standard_normal((d, gk)) / np.sqrt(d),
        "w_o": r.standard_normal((hk, d)) / np.sqrt(hk),
    }
    if biases:
        params.update(b_q=r.standard_normal(hk), b_k=r.standard_normal(gk))
        params.update(b_v=r.standard_normal(gk), b_o=r.standard_normal(d))
    return {name: value.astype(dtype) for name, value in params.items()}


# --- softmax_backward -------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_softmax_backward_equals_autograd_of_the_softmax_along_any_axis(sol, axis):
    r = np.random.default_rng(10 + axis)
    scores = r.standard_normal((2, 3, 4, 5)) * 3
    g = r.standard_normal(scores.shape)
    z = leaf(scores)
    w = torch.softmax(z, dim=axis)
    (expected,) = autograd(w, g, [z])
    agree(sol.softmax_backward(w.detach().numpy(), g, axis=axis), expected, f"softmax_backward axis={axis}")


def test_softmax_backward_of_a_masked_softmax_gives_a_fully_masked_row_zeros(sol):
    r = np.random.default_rng(11)
    scores = r.standard_normal((3, T, S))
    mask = random_mask(r, (3, T, S), full_rows=2)
    g = r.standard_normal(scores.shape)
    z = leaf(scores)
    w = masked_softmax(z, mask)
    (expected,) = autograd(w, g, [z])
    got = sol.softmax_backward(w.detach().numpy(), g)
    agree(got, expected, "softmax_backward of masked weights")
    assert np.all(got[~mask] == 0.0), "masked scores get exactly no gradient"
    assert np.all(got[~mask.any(-1)] == 0.0)


def test_softmax_backward_keeps_float32_float32(sol):
    r = np.random.default_rng(12)
    z = leaf(r.standard_normal((T, S)).astype(np.float32))
    w = torch.softmax(z, dim=-1)
    g = r.standard_normal((T, S)).astype(np.float32)
    (expected,) = autograd(w, g, [z])
    got = sol.softmax_backward(w.detach().numpy().astype(np.float32), g)
    agree(got, expected, "softmax_backward float32", np.float32)


# --- attention_backward -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "t", "scale"), [(20, T, None), (21, S, None), (22, T, 0.7), (23, 1, None), (24, S, 0.0)]
)
def test_attention_backward_equals_autograd_with_masks_and_fully_masked_rows(sol, seed, t, scale):
    """(B, H, ...) inputs, T != S and T == S (where a missing transpose keeps its shape), the
    default scale and explicit ones, random masks with fully masked query rows."""
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal(shape) * 1.5 for shape in ((B, H, t, K), (B, H, S, K), (B, H, S, KV)))
    mask = random_mask(r, (B, 1, t, S), full_rows=1)
    g = r.standard_normal((B, H, t, KV))
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    expected = autograd(torch_attention(tq, tk, tv, mask, scale), g, [tq, tk, tv])
    got = sol.attention_backward(q, k, v, g, mask, scale)
    assert isinstance(got, tuple) and len(got) == 3
    for name, a, e in zip(("grad_q", "grad_k", "grad_v"), got, expected, strict=True):
        agree(a, e, name)


def test_attention_backward_without_a_mask_equals_autograd(sol):
    r = np.random.default_rng(25)
    q, k, v = r.standard_normal((B, T, K)), r.standard_normal((B, S, K)), r.standard_normal((B, S, KV))
    g = r.standard_normal((B, T, KV))
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    expected = autograd(torch_attention(tq, tk, tv), g, [tq, tk, tv])
    for name, a, e in zip(
        ("grad_q", "grad_k", "grad_v"), sol.attention_backward(q, k, v, g), expected, strict=True
    ):
        agree(a, e, name)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "mask_shape"),
    [
        ((B, T, K), (1, S, K), (1, S, KV), (T, S)),
        ((B, T, K), (S, K), (S, KV), (B, 1, S)),
        ((B, T, K), (S, K), (B, S, KV), None),
        ((B, H, T, K), (B, 1, S, K), (1, H, S, KV), (B, 1, T, S)),
        ((T, K), (S, K), (S, KV), (B, T, S)),  # the mask alone adds the batch axis
        ((1, T, K), (B, S, K), (B, S, KV), (1, T, S)),
    ],
)
def test_attention_backward_sums_broadcast_inputs_back_to_their_own_shapes(
    sol, q_shape, k_shape, v_shape, mask_shape
):
    """Autograd reduces a broadcast input's gradient to the input's shape: a sum over the axes
    broadcasting added or stretched. The solution must return exactly that."""
    r = np.random.default_rng(hash((q_shape, k_shape, v_shape, mask_shape)) % 2**32)
    q, k, v = r.standard_normal(q_shape), r.standard_normal(k_shape), r.standard_normal(v_shape)
    mask = None if mask_shape is None else random_mask(r, mask_shape, full_rows=1)
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    out = torch_attention(tq, tk, tv, mask)
    g = r.standard_normal(tuple(out.shape))
    expected = autograd(out, g, [tq, tk, tv])
    got = sol.attention_backward(q, k, v, g, mask)
    for name, a, e, shape in zip(
        ("grad_q", "grad_k", "grad_v"), got, expected, (q_shape, k_shape, v_shape), strict=True
    ):
        assert a.shape == shape, f"{name}: {a.shape}, the input is {shape}"
        agree(a, e, name)


def test_attention_backward_equals_the_math_backend_of_scaled_dot_product_attention(sol):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    r = np.random.default_rng(26)
    q, k, v = (
        r.standard_normal((B, H, T, K)),
        r.standard_normal((B, H, S, K)),
        r.standard_normal((B, H, S, KV)),
    )
    mask = random_mask(r, (B, 1, T, S), full_rows=0)
    mask[..., 0] = True  # every query sees a key: torch's answer for a fully masked row varies by version
    g = r.standard_normal((B, H, T, KV))
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=torch.as_tensor(mask), scale=0.3
        )
    expected = autograd(out, g, [tq, tk, tv])
    for name, a, e in zip(
        ("grad_q", "grad_k", "grad_v"), sol.attention_backward(q, k, v, g, mask, 0.3), expected, strict=True
    ):
        agree(a, e, name)


def test_a_masked_pair_gets_no_gradient_and_a_fully_masked_query_none_at_all(sol):
    r = np.random.default_rng(27)
    q, k, v = r.standard_normal((T, K)), r.standard_normal((S, K)), r.standard_normal((S, KV))
    mask = np.ones((T, S), dtype=bool)
    mask[1] = False  # query 1 sees nothing
    mask[:, 2] = False  # key 2 is seen by nobody
    grad_q, grad_k, grad_v = sol.attention_backward(q, k, v, r.standard_normal((T, KV)), mask)
    assert np.all(grad_q[1] == 0.0)
    assert np.all(grad_k[2] == 0.0) and np.all(grad_v[2] == 0.0)
    assert np.all(np.isfinite(grad_q)) and np.all(np.isfinite(grad_k)) and np.all(np.isfinite(grad_v))


@pytest.mark.parametrize("seed", [28, 29])
def test_attention_backward_keeps_float32_float32_at_the_float32_tolerance(sol, seed):
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal(shape).astype(np.float32) for shape in ((B, T, K), (1, S, K), (B, S, KV)))
    mask = random_mask(r, (B, T, S), full_rows=1)
    g = r.standard_normal((B, T, KV)).astype(np.float32)
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    expected = autograd(torch_attention(tq, tk, tv, mask), g, [tq, tk, tv])
    for name, a, e in zip(
        ("grad_q", "grad_k", "grad_v"), sol.attention_backward(q, k, v, g, mask), expected, strict=True
    ):
        agree(a, e, name, np.float32)


def test_attention_backward_follows_numpys_promotion_for_mixed_inputs(sol):
    r = np.random.default_rng(30)
    q = r.standard_normal((T, K)).astype(np.float32)
    k, v = r.standard_normal((S, K)), r.standard_normal((S, KV)).astype(np.float32)
    g = r.standard_normal((T, KV)).astype(np.float32)
    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    expected = autograd(torch_attention(tq, tk, tv), g, [tq, tk, tv])
    for name, a, e in zip(
        ("grad_q", "grad_k", "grad_v"), sol.attention_backward(q, k, v, g), expected, strict=True
    ):
        # float64 out, but v and grad_out meet in float32 (grad_out @ v^T), as they would in
        # PyTorch: the answer is as precise as float32
        agree(a, e, name, np.result_type(q, k, v, g), precision=np.float32)


# --- multi_head_attention_backward ----------------------------------------------------------------


def check_layer(got, expected_inputs, expected_params, params, dtype=np.float64):
    grad_x_q, grad_x_kv, grad_params = got
    agree(grad_x_q, expected_inputs[0], "grad_x_q", dtype)
    agree(grad_x_kv, expected_inputs[1], "grad_x_kv", dtype)
    assert set(grad_params) == set(params), f"keys {sorted(grad_params)}, params has {sorted(params)}"
    for name, value in params.items():
        if value is None:
            assert grad_params[name] is None, f"{name} is None in params: its gradient must be None"
        else:
            zero_in_theory = name == "b_k" and np.dtype(dtype) == np.float32
            scale = float(np.max(np.abs(expected_params["w_k"]))) if zero_in_theory else 0.0
            agree(grad_params[name], expected_params[name], f"grad_params[{name!r}]", dtype, scale)


def torch_layer_gradients(x_q, x_kv, params, n_heads, g, mask, n_kv_heads=None):
    """Autograd's gradients of sum(g * out) for the inputs and every parameter that is not None."""
    tx_q, tx_kv = leaf(x_q), leaf(x_kv)
    tparams = {name: None if value is None else leaf(value) for name, value in params.items()}
    out = torch_mha(tx_q, tx_kv, tparams, n_heads, mask, n_kv_heads)
    names = [name for name, value in tparams.items() if value is not None]
    grads = autograd(out, g, [tx_q, tx_kv] + [tparams[name] for name in names])
    return grads[:2], dict(zip(names, grads[2:], strict=True))


@pytest.mark.parametrize(
    ("seed", "n_heads", "t", "s", "mask_shape"),
    [(40, 4, T, S, (T, S)), (41, 3, S, S, (B, 1, S)), (42, 6, T, S, (B, T, S)), (43, 2, T, S, None)],
)
def test_multi_head_attention_backward_equals_autograd_for_every_input_weight_and_bias(
    sol, seed, n_heads, t, s, mask_shape
):
    r = np.random.default_rng(seed)
    x_q, x_kv = r.standard_normal((B, t, D)), r.standard_normal((B, s, D))
    params = layer_params(r)
    mask = None if mask_shape is None else random_mask(r, mask_shape, full_rows=1)
    g = r.standard_normal((B, t, D))
    inputs, grads = torch_layer_gradients(x_q, x_kv, params, n_heads, g, mask)
    check_layer(sol.multi_head_attention_backward(x_q, x_kv, params, n_heads, g, mask), inputs, grads, params)


def test_b_ks_gradient_is_zero_up_to_rounding_and_meets_the_absolute_floor(sol):
    r = np.random.default_rng(44)
    x = r.standard_normal((B, T, D))
    params = layer_params(r)
    _, _, grads = sol.multi_head_attention_backward(x, x, params, 4, r.standard_normal((B, T, D)))
    assert np.max(np.abs(grads["b_k"])) <= 1e-12


def test_a_none_bias_gets_none_and_an_absent_one_no_key(sol):
    r = np.random.default_rng(45)
    x_q, x_kv = r.standard_normal((B, T, D)), r.standard_normal((B, S, D))
    params = layer_params(r, biases=False)
    params["b_q"] = None
    params["b_o"] = r.standard_normal(D)
    g = r.standard_normal((B, T, D))
    mask = random_mask(r, (T, S))
    inputs, grads = torch_layer_gradients(x_q, x_kv, params, 4, g, mask)
    got = sol.multi_head_attention_backward(x_q, x_kv, params, 4, g, mask)
    check_layer(got, inputs, grads, params)
    assert "b_k" not in got[2] and got[2]["b_q"] is None


def test_self_attentions_input_gradient_is_the_sum_of_the_two_returned_ones(sol):
    r = np.random.default_rng(46)
    x = r.standard_normal((B, T, D))
    params = layer_params(r)
    causal = np.tril(np.ones((T, T), dtype=bool))
    g = r.standard_normal((B, T, D))
    tx = leaf(x)
    (expected,) = autograd(
        torch_mha(tx, tx, {n: torch.as_tensor(p) for n, p in params.items()}, 4, causal), g, [tx]
    )
    grad_x_q, grad_x_kv, _ = sol.multi_head_attention_backward(x, x, params, 4, g, causal)
    agree(grad_x_q + grad_x_kv, expected, "grad_x_q + grad_x_kv")


def test_multi_head_attention_backward_keeps_float32_float32(sol):
    r = np.random.default_rng(47)
    x_q = r.standard_normal((B, T, D)).astype(np.float32)
    x_kv = r.standard_normal((B, S, D)).astype(np.float32)
    params = layer_params(r, dtype=np.float32)
    g = r.standard_normal((B, T, D)).astype(np.float32)
    mask = random_mask(r, (B, 1, S), full_rows=1)
    inputs, grads = torch_layer_gradients(x_q, x_kv, params, 4, g, mask)
    got = sol.multi_head_attention_backward(x_q, x_kv, params, 4, g, mask)
    check_layer(got, inputs, grads, params, np.float32)


# --- grouped_query_attention_backward ----------------------------------------------------------


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(6, 1), (6, 2), (6, 3), (6, 6), (4, 2)])
def test_grouped_query_attention_backward_equals_autograd_for_every_group_size(sol, n_heads, n_kv_heads):
    r = np.random.default_rng(50 + n_heads * 10 + n_kv_heads)
    head = D // n_heads
    x_q, x_kv = r.standard_normal((B, T, D)), r.standard_normal((B, S, D))
    params = layer_params(r, gk=n_kv_heads * head)
    mask = random_mask(r, (T, S), full_rows=1)
    g = r.standard_normal((B, T, D))
    inputs, grads = torch_layer_gradients(x_q, x_kv, params, n_heads, g, mask, n_kv_heads)
    got = sol.grouped_query_attention_backward(x_q, x_kv, params, n_heads, n_kv_heads, g, mask)
    check_layer(got, inputs, grads, params)
    assert got[2]["w_k"].shape == (D, n_kv_heads * head) and got[2]["b_v"].shape == (n_kv_heads * head,)


def test_grouped_query_attention_backward_with_self_attention_and_missing_biases(sol):
    r = np.random.default_rng(57)
    x = r.standard_normal((B, S, D))
    params = layer_params(r, gk=2 * 3, biases=False)
    params.update(b_k=None, b_v=r.standard_normal(6), b_o=None)
    causal = np.tril(np.ones((S, S), dtype=bool))
    g = r.standard_normal((B, S, D))
    inputs, grads = torch_layer_gradients(x, x, params, 4, g, causal, 2)
    check_layer(sol.grouped_query_attention_backward(x, x, params, 4, 2, g, causal), inputs, grads, params)


def test_grouped_query_attention_backward_keeps_float32_float32(sol):
    r = np.random.default_rng(58)
    x_q = r.standard_normal((B, T, D)).astype(np.float32)
    x_kv = r.standard_normal((B, S, D)).astype(np.float32)
    params = layer_params(r, gk=2 * 2, dtype=np.float32)
    g = r.standard_normal((B, T, D)).astype(np.float32)
    inputs, grads = torch_layer_gradients(x_q, x_kv, params, 6, g, None, 2)
    check_layer(
        sol.grouped_query_attention_backward(x_q, x_kv, params, 6, 2, g), inputs, grads, params, np.float32
    )


def test_grouped_query_attention_backward_refuses_groups_that_do_not_divide_the_heads(sol):
    r = np.random.default_rng(59)
    x = r.standard_normal((B, T, D))
    params = layer_params(r, gk=4 * 3)
    with pytest.raises(ValueError, match="6.*4|4.*6"):
        sol.grouped_query_attention_backward(x, x, params, 6, 4, r.standard_normal((B, T, D)))


# --- head_mask_gradient ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "n_heads", "t", "s", "mask_shape", "dtype"),
    [
        (60, 4, T, S, (T, S), np.float64),
        (61, 3, S, S, (B, S, S), np.float64),
        (62, 6, T, S, None, np.float64),
        (63, 4, T, S, (B, 1, S), np.float32),
    ],
)
def test_head_mask_gradient_equals_autograd_of_each_sequences_sum_with_a_head_mask_variable(
    sol, seed, n_heads, t, s, mask_shape, dtype
):
    """One head mask xi per sequence, (B, H): sequence b's sum(grad_out[b] * out[b]) depends on
    row b only, so one backward pass gives every sequence's own derivative."""
    r = np.random.default_rng(seed)
    x_q, x_kv = r.standard_normal((B, t, D)).astype(dtype), r.standard_normal((B, s, D)).astype(dtype)
    params = layer_params(r, dtype=dtype)
    mask = None if mask_shape is None else random_mask(r, mask_shape, full_rows=1)
    g = r.standard_normal((B, t, D)).astype(dtype)
    xi = torch.ones((B, n_heads), dtype=torch.float64, requires_grad=True)
    tparams = {n: torch.as_tensor(p.astype(np.float64)) for n, p in params.items()}
    out = torch_mha(leaf(x_q), leaf(x_kv), tparams, n_heads, mask, xi=xi)
    (expected,) = autograd(out, g, [xi])
    got = sol.head_mask_gradient(x_q, x_kv, params, n_heads, g, mask)
    # (B, H) float64 whatever the inputs, as precise as the inputs' dtype
    agree(got, expected, "head_mask_gradient", np.float64, precision=dtype)


def test_head_mask_gradient_averaged_absolutely_is_michels_importance_on_the_tiny_model(sol):
    """The tiny model in PyTorch with one head mask per sequence and layer: autograd gives each
    sequence's dL_b/dxi of the whole model. head_mask_gradient on layer l's input, fed with the
    gradient of sum_b L_b backpropagated to layer l's output, must give the same numbers."""
    model = tiny_model.load()
    n_heads = tiny_model.config()["n_heads"]
    tokens, targets, _ = tiny_model.make_task(12, seed=3)
    n, t = tokens.shape
    xi = torch.ones((n, len(model["layers"]), n_heads), dtype=torch.float64, requires_grad=True)
    x = torch.as_tensor(model["tok_emb"], dtype=torch.float64)[torch.as_tensor(tokens)]
    x = x + torch.as_tensor(model["pos_emb"][:t], dtype=torch.float64)
    causal = np.tril(np.ones((t, t), dtype=bool))
    inputs, outputs = [], []
    for layer, params in enumerate(model["layers"]):
        tparams = {name: torch.as_tensor(p, dtype=torch.float64) for name, p in params.items()}
        out = torch_mha(x, x, tparams, n_heads, causal, xi=xi[:, layer])
        out.retain_grad()
        inputs.append(x.detach().numpy().copy())
        outputs.append(out)
        x = x + out
    logits = x @ torch.as_tensor(model["unembed"], dtype=torch.float64)
    logits = logits + torch.as_tensor(model["b_unembed"], dtype=torch.float64)
    tgt = torch.as_tensor(targets)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=-1, reduction="none")
    scored = (tgt != -1).to(torch.float64)
    ((ce * scored).sum(dim=1) / scored.sum(dim=1)).sum().backward()
    for layer, params in enumerate(model["layers"]):
        got = sol.head_mask_gradient(
            inputs[layer], inputs[layer], params, n_heads, outputs[layer].grad.numpy(), causal
        )
        expected = xi.grad[:, layer].numpy()
        agree(got, expected, f"layer {layer}'s dL_b/dxi")
        importance = np.abs(got).mean(axis=0)
        agree(importance, np.abs(expected).mean(axis=0), f"layer {layer}'s importance")
