"""The lesson 3 solution agrees with torch.nn.functional.scaled_dot_product_attention.

PyTorch returns only `out`; the weights are read through it by attending over an identity value
matrix (v = I gives out = weights @ I = weights). Masks use the same convention in both: boolean,
True = may attend, broadcast from the right against (..., T, S).

Fully masked query rows: torch 2.13 on CPU returns zeros for them (its math and flash kernels
both do); older versions returned NaN. The comparison is made only where torch's answer is
defined (finite), and the solution's own rows are asserted to be exactly zero.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import import_lessons

torch = pytest.importorskip("torch")
F = torch.nn.functional

B, H, T, S, K, KV = 2, 3, 4, 5, 6, 7


@pytest.fixture(scope="module")
def attention():
    """solutions/l03_attention.py, imported with solutions/ on the path for its l02_softmax."""
    return import_lessons("l03_attention")[0]


def qkv(seed, lead=(B, H), t=T, s=S, dtype=np.float64):
    r = np.random.default_rng(seed)
    q = (r.standard_normal((*lead, t, K)) * 1.5).astype(dtype)
    k = (r.standard_normal((*lead, s, K)) * 1.5).astype(dtype)
    v = r.standard_normal((*lead, s, KV)).astype(dtype)
    return q, k, v


def torch_attention(q, k, v, mask=None, scale=None):
    """torch's out, and its weights read through an identity value matrix."""
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v))
    tm = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale)
    eye = torch.eye(k.shape[-2], dtype=tk.dtype).expand(*k.shape[:-1], k.shape[-2])
    weights = F.scaled_dot_product_attention(tq, tk, eye, attn_mask=tm, scale=scale)
    return out.numpy(), weights.numpy()


def assert_close(actual, expected, dtype=np.float64):
    tol = 1e-9 if dtype == np.float64 else 2e-5
    assert actual.dtype == dtype, f"dtype {actual.dtype}, expected {dtype}"
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def test_out_and_weights_match_torch_without_a_mask(attention):
    q, k, v = qkv(1)
    out, weights = attention.scaled_dot_product_attention(q, k, v)
    expected_out, expected_weights = torch_attention(q, k, v)
    assert out.shape == (B, H, T, KV) and weights.shape == (B, H, T, S)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_scores_equal_torch_q_times_k_transposed_times_the_scale(attention):
    q, k, _ = qkv(2)
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    for scale in (None, 0.37):
        factor = 1 / np.sqrt(K) if scale is None else scale
        expected = (tq @ tk.transpose(-1, -2) * factor).numpy()
        assert_close(attention.attention_scores(q, k, scale=scale), expected)


@pytest.mark.parametrize("scale", [0.37, 1.0, 2.5, 0.0])
def test_an_explicit_scale_matches_torch(attention, scale):
    q, k, v = qkv(3)
    out, weights = attention.scaled_dot_product_attention(q, k, v, scale=scale)
    expected_out, expected_weights = torch_attention(q, k, v, scale=scale)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def _masks(r, lead):
    """Boolean masks of every supported shape for inputs with leading axes ``lead``."""
    b = lead[0]
    causal = np.tril(np.ones((T, S), bool), k=S - T)
    lengths = np.array([S, 2, 3][:b])
    padding = np.arange(S) < lengths[:, None]  # (B, S)
    padding = padding.reshape(b, *([1] * len(lead)), S)  # (B, 1, S) or (B, 1, 1, S)
    per_batch = r.random((b, *([1] * (len(lead) - 1)), T, S)) < 0.6
    per_batch[..., 0, 0] = True
    full = r.random((*lead, T, S)) < 0.6
    full[..., 0, 0] = True
    return {"(T, S) causal": causal, "padding": padding, "per batch element": per_batch, "full": full}


@pytest.mark.parametrize("lead", [(B,), (B, H)], ids=["B T K", "B H T K"])
@pytest.mark.parametrize("kind", ["(T, S) causal", "padding", "per batch element", "full"])
def test_boolean_masks_match_torch(attention, lead, kind):
    r = np.random.default_rng(4)
    q, k, v = qkv(5, lead=lead)
    mask = _masks(r, lead)[kind]
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.8)
    expected_out, expected_weights = torch_attention(q, k, v, mask, scale=0.8)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_fully_masked_rows_are_zero_and_agree_with_torch_where_torch_is_defined(attention):
    q, k, v = qkv(6)
    r = np.random.default_rng(7)
    mask = r.random((B, 1, T, S)) < 0.6
    mask[..., 0, 0] = True
    mask[0, 0, 1] = False  # batch element 0, query 1: every key masked
    mask[1, 0, 3] = False  # batch element 1, query 3
    empty = ~np.broadcast_to(mask, (B, H, T, S)).any(axis=-1)  # (B, H, T)
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask=mask)
    assert not np.isnan(out).any() and not np.isnan(weights).any()
    assert np.all(out[empty] == 0) and np.all(weights[empty] == 0)
    expected_out, expected_weights = torch_attention(q, k, v, mask)
    defined = np.isfinite(expected_out).all(axis=-1) & np.isfinite(expected_weights).all(axis=-1)
    assert defined[~empty].all(), "torch returned NaN for a row that may attend some key"
    assert_close(out[defined], expected_out[defined])
    assert_close(weights[defined], expected_weights[defined])


def test_float32_matches_torch_loosely_and_stays_float32(attention):
    q, k, v = qkv(8, dtype=np.float32)
    mask = np.tril(np.ones((T, S), bool), k=S - T)
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask=mask)
    expected_out, expected_weights = torch_attention(q, k, v, mask)
    assert_close(out, expected_out, np.float32)
    assert_close(weights, expected_weights, np.float32)
    assert attention.attention_scores(q, k).dtype == np.float32


def test_different_query_and_key_lengths_in_both_directions(attention):
    for t, s in ((1, 5), (6, 2)):
        q, k, v = qkv(9, t=t, s=s)
        out, weights = attention.scaled_dot_product_attention(q, k, v)
        expected_out, expected_weights = torch_attention(q, k, v)
        assert out.shape == (B, H, t, KV) and weights.shape == (B, H, t, s)
        assert_close(out, expected_out)
        assert_close(weights, expected_weights)
