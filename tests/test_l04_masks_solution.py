"""The lesson 4 solution agrees with PyTorch's causal masks, and says where it does not.

PyTorch's `scaled_dot_product_attention(..., is_causal=True)` aligns its causal mask top-left
(query i sees keys j <= i), the course aligns it bottom-right (j <= i + S - T), as decoding with
a KV cache needs. For T == S the two are the same mask; for T != S they differ, and the course's
mask equals torch.ones(T, S).tril(diagonal=S - T), PyTorch's `causal_lower_right(T, S)`.
"""

import numpy as np
import pytest

from tests.helpers import import_lessons

torch = pytest.importorskip("torch")
F = torch.nn.functional


(masks,) = import_lessons("l04_masks")


def qkv(t, s, dtype=torch.float64, seed=0, b=2, h=3, k=5):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, t, k, generator=g, dtype=dtype),
        torch.randn(b, h, s, k, generator=g, dtype=dtype),
        torch.randn(b, h, s, k, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("t", [1, 2, 5, 8])
def test_for_t_equal_s_our_causal_mask_gives_the_same_attention_as_is_causal(t):
    q, k, v = qkv(t, t)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(masks.causal_mask(t)))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)
    assert torch.equal(torch.from_numpy(masks.causal_mask(t, t)), torch.ones(t, t, dtype=torch.bool).tril())


def test_for_t_equal_s_the_agreement_holds_in_float32():
    q, k, v = qkv(6, 6, dtype=torch.float32, seed=1)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(masks.causal_mask(6)))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t, s", [(1, 4), (2, 5), (3, 7), (4, 6)])
def test_for_t_less_than_s_our_mask_is_tril_with_diagonal_s_minus_t(t, s):
    ours = torch.from_numpy(masks.causal_mask(t, s))
    assert ours.dtype == torch.bool and ours.shape == (t, s)
    assert torch.equal(ours, torch.ones(t, s).tril(diagonal=s - t).bool())
    from torch.nn.attention.bias import causal_lower_right

    assert torch.equal(ours, causal_lower_right(t, s)._materialize())


@pytest.mark.parametrize("t, s", [(1, 4), (2, 5), (3, 7), (4, 6)])
def test_for_t_less_than_s_our_mask_differs_from_is_causal(t, s):
    """Documented difference: is_causal=True is aligned top-left, ours bottom-right."""
    ours = torch.from_numpy(masks.causal_mask(t, s))
    top_left = torch.ones(t, s, dtype=torch.bool).tril()
    assert not torch.equal(ours, top_left)
    q, k, v = qkv(t, s, seed=2)
    with_ours = F.scaled_dot_product_attention(q, k, v, attn_mask=ours)
    with_is_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(with_ours, with_is_causal)
    torch.testing.assert_close(
        with_is_causal, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left), rtol=0, atol=1e-9
    )


@pytest.mark.parametrize("t, s", [(2, 5), (3, 7)])
def test_our_bottom_right_mask_gives_the_same_attention_as_causal_lower_right(t, s):
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = qkv(t, s, seed=3)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(masks.causal_mask(t, s)))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(t, s))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)


def test_decoding_with_a_cache_equals_the_last_rows_of_full_causal_attention():
    """Why bottom-right: the T new queries against all S keys give the last T rows of the full run."""
    s, t = 7, 3
    q, k, v = qkv(s, s, seed=4)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    new = F.scaled_dot_product_attention(
        q[..., s - t :, :], k, v, attn_mask=torch.from_numpy(masks.causal_mask(t, s))
    )
    torch.testing.assert_close(new, full[..., s - t :, :], rtol=0, atol=1e-9)


def test_padding_mask_is_the_logical_not_of_torch_key_padding_mask():
    lengths = np.array([3, 7, 1, 5])
    s = 7
    ours = masks.padding_mask(lengths, s)
    assert ours.shape == (4, 1, s) and ours.dtype == np.bool_
    key_padding_mask = torch.arange(s)[None, :] >= torch.from_numpy(lengths)[:, None]  # True = ignore
    assert torch.equal(torch.from_numpy(ours[:, 0, :]), ~key_padding_mask)


def test_combined_masks_give_the_same_attention_as_torch_multihead_attention_masks():
    """nn.MultiheadAttention takes key_padding_mask and a boolean attn_mask with True = blocked."""
    b, t, d, n_heads = 3, 6, 12, 4
    lengths = np.array([6, 4, 2])
    g = torch.Generator().manual_seed(5)
    x = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    mha = torch.nn.MultiheadAttention(d, n_heads, batch_first=True, dtype=torch.float64).eval()
    key_padding_mask = torch.arange(t)[None, :] >= torch.from_numpy(lengths)[:, None]
    causal_blocked = torch.ones(t, t, dtype=torch.bool).triu(1)
    with torch.no_grad():
        expected, _ = mha(
            x, x, x, key_padding_mask=key_padding_mask, attn_mask=causal_blocked, need_weights=False
        )
    allowed = masks.combine_masks(masks.causal_mask(t), None, masks.padding_mask(lengths, t))
    assert allowed.shape == (b, t, t) and allowed.dtype == np.bool_
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)

    def heads(y):  # (B, T, D) -> (B, H, T, K)
        return y.view(b, t, n_heads, d // n_heads).transpose(1, 2)

    with torch.no_grad():
        q, k, v = heads(x @ w_q.T + b_q), heads(x @ w_k.T + b_k), heads(x @ w_v.T + b_v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(allowed)[:, None])
        out = mha.out_proj(out.transpose(1, 2).reshape(b, t, d))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-9)


def test_combine_masks_of_nothing_is_none_which_sdpa_reads_as_attend_everywhere():
    assert masks.combine_masks(None, None) is None
    assert masks.combine_masks() is None
    q, k, v = qkv(3, 4, seed=6)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=None),
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 4).bool()),
        rtol=0,
        atol=1e-9,
    )
