"""The lesson 8 solution agrees with PyTorch's grouped-query attention and with lesson 6.

PyTorch (2.5 and later) computes grouped-query attention inside
torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True): q is (B, H, T, K),
k and v are (B, G, S, K), and it repeat-interleaves k and v to H heads itself. The reference
below does the whole computation in torch (projections, head split, attention, merge, output
projection), so only the weights are shared with the solution. PyTorch returns only `out`; the
weights are read through it by attending over an identity value matrix (v = I gives
out = weights @ I = weights). Masks use the same convention in both: boolean, True = may attend.

Fully masked query rows: torch 2.13 on CPU returns zeros for them, as the course does; the
comparison with a fully masked row is made only where torch's answer is finite, in case an older
torch returns NaN there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import SOLUTIONS, import_lessons

torch = pytest.importorskip("torch")
F = torch.nn.functional

B, T, S, H, K = 2, 4, 5, 8, 3
D = H * K  # 24


def _load(module):
    """solutions/<module>.py under a private name, with solutions/ on the path for its imports."""
    path = SOLUTIONS / f"{module}.py"
    needed = [path] + [SOLUTIONS / f"{m}.py" for m in ("l01_projections", "l03_attention", "l05_heads")]
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        pytest.skip(f"solutions not written yet: {', '.join(missing)}")
    return import_lessons(module)[0]


@pytest.fixture(scope="module")
def gqa():
    return _load("l08_gqa")


@pytest.fixture(scope="module")
def mha():
    return _load("l06_multi_head")


def make_params(seed, n_heads=H, n_kv_heads=4, d=D, bias=True, dtype=np.float64):
    r = np.random.default_rng(seed)
    n_k = d // n_heads
    shapes = {
        "w_q": (d, n_heads * n_k),
        "w_k": (d, n_kv_heads * n_k),
        "w_v": (d, n_kv_heads * n_k),
        "w_o": (n_heads * n_k, d),
    }
    if bias:
        shapes.update(
            {"b_q": (n_heads * n_k,), "b_k": (n_kv_heads * n_k,), "b_v": (n_kv_heads * n_k,), "b_o": (d,)}
        )
    return {
        name: (r.standard_normal(shape) * (2.0 / math.sqrt(d) if name[0] == "w" else 1.0)).astype(dtype)
        for name, shape in shapes.items()
    }


def make_inputs(seed, b=B, t=T, s=S, d=D, dtype=np.float64):
    r = np.random.default_rng(seed)
    return r.standard_normal((b, t, d)).astype(dtype), r.standard_normal((b, s, d)).astype(dtype)


def torch_gqa(x_q, x_kv, params, n_heads, n_kv_heads, mask=None):
    """Grouped-query attention in torch: (out (B, T, D), weights (B, H, T, S)) as numpy arrays."""
    n_b, n_t, n_d = x_q.shape
    n_s = x_kv.shape[1]
    n_k = n_d // n_heads
    p = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in params.items()}
    tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)

    def project(x, w, bias):
        y = x @ p[w]
        return y + p[bias] if bias in p else y

    q = project(tq, "w_q", "b_q").view(n_b, n_t, n_heads, n_k).transpose(1, 2)  # (B, H, T, K)
    k = project(tkv, "w_k", "b_k").view(n_b, n_s, n_kv_heads, n_k).transpose(1, 2)  # (B, G, S, K)
    v = project(tkv, "w_v", "b_v").view(n_b, n_s, n_kv_heads, n_k).transpose(1, 2)
    tm = None
    if mask is not None:
        full = np.array(np.broadcast_to(mask, (n_b, n_t, n_s)))  # a writable copy for torch
        tm = torch.from_numpy(full)[:, None]  # (B, T, S) -> (B, 1, T, S)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=tm, enable_gqa=True)  # (B, H, T, K)
    eye = torch.eye(n_s, dtype=k.dtype).expand(n_b, n_kv_heads, n_s, n_s)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=tm, enable_gqa=True)
    concat = heads.transpose(1, 2).reshape(n_b, n_t, n_heads * n_k)  # (B, T, H*K)
    return project(concat, "w_o", "b_o").numpy(), weights.numpy()


def assert_close(actual, expected, dtype=np.float64):
    tol = 1e-9 if dtype == np.float64 else 2e-5
    assert actual.dtype == dtype, f"dtype {actual.dtype}, expected {dtype}"
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def masks(seed, b=B):
    """Boolean masks of every supported shape; no query row is fully masked."""
    r = np.random.default_rng(seed)
    causal = np.tril(np.ones((T, S), bool), k=S - T)
    padding = (np.arange(S) < np.array([S, 2, 3][:b])[:, None])[:, None, :]  # (B, 1, S)
    per_batch = r.random((b, T, S)) < 0.6
    per_batch[..., 0] = True
    return {"(T, S) causal": causal, "(B, 1, S) padding": padding, "(B, T, S)": per_batch}


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4], ids=["G=1 (MQA)", "G=2", "G=4"])
def test_out_and_weights_equal_torch_sdpa_with_enable_gqa(gqa, n_kv_heads):
    x_q, x_kv = make_inputs(1)
    params = make_params(2, n_kv_heads=n_kv_heads)
    out, weights = gqa.grouped_query_attention(x_q, x_kv, params, H, n_kv_heads)
    expected_out, expected_weights = torch_gqa(x_q, x_kv, params, H, n_kv_heads)
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, S)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4], ids=["G=1 (MQA)", "G=2", "G=4"])
@pytest.mark.parametrize("kind", ["(T, S) causal", "(B, 1, S) padding", "(B, T, S)"])
def test_boolean_masks_equal_torch_sdpa_with_enable_gqa(gqa, n_kv_heads, kind):
    x_q, x_kv = make_inputs(3)
    params = make_params(4, n_kv_heads=n_kv_heads)
    mask = masks(5)[kind]
    out, weights = gqa.grouped_query_attention(x_q, x_kv, params, H, n_kv_heads, mask=mask)
    expected_out, expected_weights = torch_gqa(x_q, x_kv, params, H, n_kv_heads, mask)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_fully_masked_rows_are_zero_and_agree_with_torch_where_torch_is_defined(gqa):
    x_q, x_kv = make_inputs(6)
    params = make_params(7, n_kv_heads=2)
    mask = masks(8)["(B, T, S)"]
    mask[0, 1] = False  # batch element 0, query 1: every key masked
    mask[1, 3] = False
    out, weights = gqa.grouped_query_attention(x_q, x_kv, params, H, 2, mask=mask)
    assert not np.isnan(out).any() and not np.isnan(weights).any()
    assert np.all(weights[0, :, 1] == 0) and np.all(weights[1, :, 3] == 0)
    np.testing.assert_allclose(out[0, 1], params["b_o"], rtol=1e-12, atol=1e-12)  # only b_o left
    expected_out, expected_weights = torch_gqa(x_q, x_kv, params, H, 2, mask)
    rows = np.isfinite(expected_out).all(axis=-1)  # (B, T)
    assert rows.sum() >= B * T - 2, "torch returned NaN for a row that may attend some key"
    assert_close(out[rows], expected_out[rows])
    head_rows = np.isfinite(expected_weights).all(axis=-1)  # (B, H, T)
    assert_close(weights[head_rows], expected_weights[head_rows])


def test_float32_matches_torch_loosely_and_stays_float32(gqa):
    x_q, x_kv = make_inputs(9, dtype=np.float32)
    params = make_params(10, n_kv_heads=2, dtype=np.float32)
    mask = masks(11)["(T, S) causal"]
    out, weights = gqa.grouped_query_attention(x_q, x_kv, params, H, 2, mask=mask)
    expected_out, expected_weights = torch_gqa(x_q, x_kv, params, H, 2, mask)
    assert_close(out, expected_out, np.float32)
    assert_close(weights, expected_weights, np.float32)


def test_without_biases_and_with_self_attention(gqa):
    x_q, _ = make_inputs(12, s=T)
    params = make_params(13, n_kv_heads=4, bias=False)
    out, weights = gqa.grouped_query_attention(x_q, x_q, params, H, 4)
    expected_out, expected_weights = torch_gqa(x_q, x_q, params, H, 4)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4, 8])
def test_repeat_kv_equals_torch_repeat_interleave(gqa, n_kv_heads):
    x = np.random.default_rng(14).standard_normal((B, n_kv_heads, S, K))
    n_rep = H // n_kv_heads
    expected = torch.repeat_interleave(torch.from_numpy(x), n_rep, dim=1).numpy()
    np.testing.assert_array_equal(gqa.repeat_kv(x, n_rep), expected)
    index = gqa.kv_head_for_query_head(H, n_kv_heads)
    np.testing.assert_array_equal(x[:, index], expected)  # the map and the repeat agree


def test_g_equals_h_is_lesson_6_multi_head_attention(gqa, mha):
    x_q, x_kv = make_inputs(15)
    params = make_params(16, n_kv_heads=H)  # w_k, w_v (D, H*K): plain multi-head attention
    mask = masks(17)["(B, T, S)"]
    out, weights = gqa.grouped_query_attention(x_q, x_kv, params, H, H, mask=mask)
    expected_out, expected_weights = mha.multi_head_attention(x_q, x_kv, params, H, mask=mask)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_mean_pooling_is_exact_when_the_heads_of_each_group_are_equal(gqa):
    """Ainslie et al.'s conversion: mean-pool the k/v heads of each group of an MHA checkpoint.

    When the H key (and value) heads of an MHA model are already equal within each group of
    H // G consecutive heads, pooling loses nothing: GQA with the pooled weights equals MHA.
    The pooling is only exact with the groups in np.repeat's order, which this checks too.
    """
    n_kv = 2
    n_rep = H // n_kv
    x_q, x_kv = make_inputs(18)
    small = make_params(19, n_kv_heads=n_kv)  # G = 2 heads of w_k, w_v
    full = dict(small)
    for name in ("w_k", "w_v", "b_k", "b_v"):  # MHA weights: each kv head copied into its group
        heads = small[name].reshape(*small[name].shape[:-1], n_kv, K)
        full[name] = np.repeat(heads, n_rep, axis=-2).reshape(*small[name].shape[:-1], H * K)
    pooled = dict(full)
    for name in ("w_k", "w_v", "b_k", "b_v"):  # mean over the n_rep heads of each group
        heads = full[name].reshape(*full[name].shape[:-1], n_kv, n_rep, K)
        pooled[name] = heads.mean(axis=-2).reshape(*full[name].shape[:-1], n_kv * K)
    np.testing.assert_allclose(pooled["w_k"], small["w_k"], rtol=1e-12)
    out_mha, weights_mha = gqa.grouped_query_attention(x_q, x_kv, full, H, H)
    out_gqa, weights_gqa = gqa.grouped_query_attention(x_q, x_kv, pooled, H, n_kv)
    assert_close(out_gqa, out_mha)
    assert_close(weights_gqa, weights_mha)


@pytest.mark.parametrize(
    ("n_heads", "n_kv_heads", "d", "numbers"), [(6, 4, 12, ("6", "4")), (4, 2, 10, ("10", "4"))]
)
def test_bad_sizes_raise_value_error_naming_the_numbers(gqa, n_heads, n_kv_heads, d, numbers):
    x_q, x_kv = make_inputs(20, d=d)
    params = {
        "w_q": np.zeros((d, 8)),
        "w_k": np.zeros((d, 4)),
        "w_v": np.zeros((d, 4)),
        "w_o": np.zeros((8, d)),
    }
    with pytest.raises(ValueError) as info:
        gqa.grouped_query_attention(x_q, x_kv, params, n_heads, n_kv_heads)
    assert all(n in str(info.value) for n in numbers), str(info.value)
    with pytest.raises(ValueError, match="n_heads=6 is not divisible by n_kv_heads=4"):
        gqa.kv_head_for_query_head(6, 4)


def test_the_inputs_are_left_unchanged(gqa):
    x_q, x_kv = make_inputs(21)
    params = make_params(22, n_kv_heads=2)
    copies = [x_q.copy(), x_kv.copy(), {k: v.copy() for k, v in params.items()}]
    gqa.grouped_query_attention(x_q, x_kv, params, H, 2, mask=masks(23)["(B, T, S)"])
    np.testing.assert_array_equal(x_q, copies[0])
    np.testing.assert_array_equal(x_kv, copies[1])
    assert set(params) == set(copies[2])
    for name, value in params.items():
        np.testing.assert_array_equal(value, copies[2][name])
