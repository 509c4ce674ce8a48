"""Lesson 9's solution against PyTorch and against the lessons it builds on.

Decoding a sequence one token at a time with the KV cache must give exactly what full causal
grouped-query attention gives on the whole sequence. PyTorch computes the latter with
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True): with
T == S its top-left causal mask is the same as the course's bottom-right one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import import_lessons

B, H, G, K = 2, 4, 2, 3
D = H * K
T = 6


@pytest.fixture(scope="module")
def sol():
    """The solutions of lessons 4, 8 and 9, imported by module name as a learner's are, with
    every lesson module they import taken from solutions/ (not from a skeleton that another test
    may have imported under the same name), and sys.modules restored afterwards."""
    modules = import_lessons("l04_masks", "l08_gqa", "l09_kv_cache")
    return dict(zip(("l04", "l08", "l09"), modules, strict=True))


def make_params(r, n_kv_heads=G, bias=True, dtype=np.float64):
    params = {
        "w_q": r.standard_normal((D, H * K)),
        "w_k": r.standard_normal((D, n_kv_heads * K)),
        "w_v": r.standard_normal((D, n_kv_heads * K)),
        "w_o": r.standard_normal((H * K, D)),
    }
    if bias:
        params.update(
            b_q=r.standard_normal(H * K),
            b_k=r.standard_normal(n_kv_heads * K),
            b_v=r.standard_normal(n_kv_heads * K),
            b_o=r.standard_normal(D),
        )
    return {name: (w / np.sqrt(w.shape[0]) if w.ndim == 2 else w).astype(dtype) for name, w in params.items()}


def decode(l09, x, params, n_kv_heads, chunks):
    """Decode x chunk by chunk from an empty cache: (out (B, T, D), cache_k, cache_v)."""
    cache_k = cache_v = np.zeros((x.shape[0], n_kv_heads, 0, K), dtype=x.dtype)
    outs, start = [], 0
    for size in chunks:
        out, cache_k, cache_v = l09.decode_step(
            x[:, start : start + size], cache_k, cache_v, params, H, n_kv_heads
        )
        assert out.shape == (x.shape[0], size, D)
        assert cache_k.shape == cache_v.shape == (x.shape[0], n_kv_heads, start + size, K)
        outs.append(out)
        start += size
    return np.concatenate(outs, axis=1), cache_k, cache_v


def torch_causal_gqa(torch, x, params, n_kv_heads, attn_mask=None):
    """Full causal GQA in PyTorch: (out (B, T, D), k (B, G, T, K), v (B, G, T, K))."""
    t = {name: torch.from_numpy(w) for name, w in params.items()}
    xt = torch.from_numpy(x)
    n_b, n_t, _ = x.shape

    def project(name, n):
        y = xt @ t[f"w_{name}"] + t.get(f"b_{name}", 0)  # (B, T, D) -> (B, T, n*K)
        return y.view(n_b, n_t, n, K).transpose(1, 2)  # -> (B, n, T, K)

    q, k, v = project("q", H), project("k", n_kv_heads), project("v", n_kv_heads)
    if attn_mask is None:
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        heads = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=True
        )
    concat = heads.transpose(1, 2).reshape(n_b, n_t, H * K)  # (B, H, T, K) -> (B, T, H*K)
    out = concat @ t["w_o"] + t.get("b_o", 0)
    return out.numpy(), k.numpy(), v.numpy()


@pytest.mark.parametrize("n_kv_heads", [G, H, 1], ids=["gqa", "mha", "mqa"])
def test_token_by_token_decoding_equals_torch_causal_gqa_in_float64(sol, n_kv_heads):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    params = make_params(r, n_kv_heads)
    x = r.standard_normal((B, T, D))
    out, cache_k, cache_v = decode(sol["l09"], x, params, n_kv_heads, [1] * T)
    expected, k, v = torch_causal_gqa(torch, x, params, n_kv_heads)
    np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(cache_k, k, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(cache_v, v, rtol=1e-9, atol=1e-9)


def test_token_by_token_decoding_equals_torch_in_float32(sol):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1)
    params = make_params(r, dtype=np.float32)
    x = r.standard_normal((B, T, D)).astype(np.float32)
    out, cache_k, cache_v = decode(sol["l09"], x, params, G, [1] * T)
    assert out.dtype == cache_k.dtype == cache_v.dtype == np.float32
    expected, _, _ = torch_causal_gqa(torch, x, params, G)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_decoding_in_chunks_without_biases_equals_torch(sol):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(2)
    params = make_params(r, bias=False)
    x = r.standard_normal((B, T, D))
    out, _, _ = decode(sol["l09"], x, params, G, [3, 1, 2])
    expected, _, _ = torch_causal_gqa(torch, x, params, G)
    np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-9)


def test_a_chunk_after_a_cache_needs_the_bottom_right_mask_not_is_causal(sol):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(3)
    params = make_params(r)
    x = r.standard_normal((B, T, D))
    prefix, chunk = 4, 2
    _, cache_k, cache_v = decode(sol["l09"], x[:, :prefix], params, G, [prefix])
    out, _, _ = sol["l09"].decode_step(x[:, prefix:], cache_k, cache_v, params, H, G)
    full, _, _ = torch_causal_gqa(torch, x, params, G)
    np.testing.assert_allclose(out, full[:, prefix:], rtol=1e-9, atol=1e-9)
    # the same chunk computed by PyTorch with its top-left is_causal on (T_new, S) is different
    t = {name: torch.from_numpy(w) for name, w in params.items()}
    xt = torch.from_numpy(x)
    q = (xt[:, prefix:] @ t["w_q"] + t["b_q"]).view(B, chunk, H, K).transpose(1, 2)
    k = (xt @ t["w_k"] + t["b_k"]).view(B, T, G, K).transpose(1, 2)
    v = (xt @ t["w_v"] + t["b_v"]).view(B, T, G, K).transpose(1, 2)
    f = torch.nn.functional.scaled_dot_product_attention
    top_left = f(q, k, v, is_causal=True, enable_gqa=True)
    bottom_right = f(q, k, v, attn_mask=torch.from_numpy(sol["l04"].causal_mask(chunk, T)), enable_gqa=True)
    mine = bottom_right.transpose(1, 2).reshape(B, chunk, H * K) @ t["w_o"] + t["b_o"]
    np.testing.assert_allclose(out, mine.numpy(), rtol=1e-9, atol=1e-9)
    assert not torch.allclose(top_left, bottom_right)


def test_decoding_equals_lesson_8_with_the_causal_mask_of_lesson_4(sol):
    r = np.random.default_rng(4)
    params = make_params(r)
    x = r.standard_normal((B, T, D))
    out, _, _ = decode(sol["l09"], x, params, G, [1] * T)
    expected, _ = sol["l08"].grouped_query_attention(x, x, params, H, G, mask=sol["l04"].causal_mask(T))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_decode_step_leaves_the_caches_and_params_unchanged(sol):
    r = np.random.default_rng(5)
    params = make_params(r)
    cache_k, cache_v = r.standard_normal((2, B, G, 4, K))
    x_t = r.standard_normal((B, 1, D))
    before = [a.copy() for a in (x_t, cache_k, cache_v, *params.values())]
    _, new_k, new_v = sol["l09"].decode_step(x_t, cache_k, cache_v, params, H, G)
    for old, now in zip(before, (x_t, cache_k, cache_v, *params.values()), strict=True):
        np.testing.assert_array_equal(old, now)
    np.testing.assert_array_equal(new_k[:, :, :4], cache_k)
    np.testing.assert_array_equal(new_v[:, :, :4], cache_v)


def test_a_cache_of_h_repeated_heads_is_refused(sol):
    r = np.random.default_rng(6)
    params = make_params(r)
    cache = np.zeros((B, H, 2, K))
    with pytest.raises(ValueError, match="n_kv_heads"):
        sol["l09"].decode_step(r.standard_normal((B, 1, D)), cache, cache, params, H, G)


def test_gpt3_175b_caches_4_7_mb_per_token_and_12_times_less_with_gqa_8(sol):
    kv_cache_bytes = sol["l09"].kv_cache_bytes
    per_token = kv_cache_bytes(1, 1, n_layers=96, n_kv_heads=96, head_dim=128)
    assert per_token == 2 * 96 * 96 * 128 * 2 == 4_718_592 == int(4.5 * 2**20)
    assert isinstance(per_token, int)
    assert kv_cache_bytes(1, 2048, 96, 96, 128) == 9 * 2**30  # the full context: 9 GiB
    assert 80 * 2**30 // per_token == 18_204  # tokens in 80 GiB
    assert per_token // kv_cache_bytes(1, 1, 96, 8, 128) == 12
    assert kv_cache_bytes(1, 1, 96, 96, 128, bytes_per_value=4) == 2 * per_token  # fp32


def test_llama_2_70b_caches_320_kib_per_token_and_80_gib_hold_262_144_tokens(sol):
    kv_cache_bytes = sol["l09"].kv_cache_bytes
    per_token = kv_cache_bytes(1, 1, n_layers=80, n_kv_heads=8, head_dim=128)
    assert per_token == 2 * 80 * 8 * 128 * 2 == 327_680 == 320 * 2**10
    assert 80 * 2**30 // per_token == 262_144
    assert kv_cache_bytes(64, 4096, 80, 8, 128) == 80 * 2**30  # 64 sequences at full context
    assert kv_cache_bytes(1, 1, 80, 64, 128) == 8 * per_token == 2.5 * 2**20  # as plain MHA
    assert 80 * 2**30 // kv_cache_bytes(1, 1, 80, 64, 128) == 32_768
