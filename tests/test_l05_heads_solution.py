"""The lesson 5 solution splits and merges heads exactly as PyTorch's nn.MultiheadAttention does.

PyTorch splits with x.view(B, T, H, K).transpose(1, 2) (in its (T, B, D) layout:
q.view(T, B * H, K).transpose(0, 1)) and merges with out.transpose(1, 2).reshape(B, T, H * K):
head h owns features h*K:(h+1)*K, as in the course.
"""

import numpy as np
import pytest

from tests.helpers import import_lessons

torch = pytest.importorskip("torch")
F = torch.nn.functional


(heads,) = import_lessons("l05_heads")


@pytest.mark.parametrize("b, t, n_heads, k", [(2, 3, 4, 5), (1, 7, 2, 3), (3, 1, 6, 1), (2, 8, 1, 4)])
def test_split_heads_equals_torch_view_then_transpose(b, t, n_heads, k):
    x = np.random.default_rng(b * 100 + t).standard_normal((b, t, n_heads * k))
    ours = heads.split_heads(x, n_heads)
    theirs = torch.from_numpy(x).view(b, t, n_heads, k).transpose(1, 2)
    assert ours.shape == tuple(theirs.shape) and ours.dtype == np.float64
    np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.mark.parametrize("b, t, n_heads, k", [(2, 3, 4, 5), (1, 7, 2, 3), (3, 1, 6, 1)])
def test_merge_heads_equals_torch_transpose_then_reshape(b, t, n_heads, k):
    x = np.random.default_rng(t).standard_normal((b, n_heads, t, k)).astype(np.float32)
    ours = heads.merge_heads(x)
    theirs = torch.from_numpy(x).transpose(1, 2).contiguous().view(b, t, n_heads * k)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_split_heads_matches_the_layout_of_multi_head_attention_forward():
    """PyTorch's own (T, B, D) layout: q.view(T, B * H, K).transpose(0, 1) is (B*H, T, K)."""
    b, t, n_heads, k = 2, 5, 3, 4
    x = np.random.default_rng(7).standard_normal((b, t, n_heads * k))
    time_first = torch.from_numpy(x).transpose(0, 1)  # (T, B, D)
    theirs = time_first.reshape(t, b * n_heads, k).transpose(0, 1)  # (B*H, T, K)
    np.testing.assert_array_equal(heads.split_heads(x, n_heads).reshape(b * n_heads, t, k), theirs.numpy())


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
def test_split_attend_merge_reproduces_torch_multihead_attention(dtype, tol):
    """Project with the module's weights, split, attend each head, merge, project back."""
    b, t, s, d, n_heads = 2, 4, 6, 12, 3
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(d, n_heads, batch_first=True, dtype=dtype).eval()
    g = torch.Generator().manual_seed(1)
    x_q = torch.randn(b, t, d, generator=g, dtype=dtype)
    x_kv = torch.randn(b, s, d, generator=g, dtype=dtype)
    with torch.no_grad():
        expected, expected_weights = mha(x_q, x_kv, x_kv, average_attn_weights=False)
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
        q = heads.split_heads((x_q @ w_q.T + b_q).numpy(), n_heads)  # (B, H, T, K)
        k = heads.split_heads((x_kv @ w_k.T + b_k).numpy(), n_heads)  # (B, H, S, K)
        v = heads.split_heads((x_kv @ w_v.T + b_v).numpy(), n_heads)
        out = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
        merged = heads.merge_heads(out.numpy())  # (B, T, H*K): Concat(head_1, ..., head_H)
        result = mha.out_proj(torch.from_numpy(merged))
        scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) / (d // n_heads) ** 0.5
    assert merged.dtype == q.dtype == (np.float64 if dtype == torch.float64 else np.float32)
    torch.testing.assert_close(result, expected, rtol=tol, atol=tol)
    torch.testing.assert_close(scores.softmax(-1), expected_weights, rtol=tol, atol=tol)


def test_split_heads_rejects_a_width_that_h_does_not_divide():
    with pytest.raises(ValueError, match=r"10.*4"):
        heads.split_heads(np.zeros((2, 3, 10)), 4)
