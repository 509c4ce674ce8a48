"""Lesson 9: the KV cache.

The idea
--------
A language model writes one token at a time. To choose token t+1 it runs on tokens 0..t, to
choose token t+2 on tokens 0..t+1, and so on. Under a causal mask position j only ever looks at
positions <= j, so what a layer computes for position j, its key k_j and its value v_j included,
is the same at every later step. Recomputing them for the whole prefix at every step is waste.
A KV cache keeps the keys and values of every position seen so far; each step then projects
ONLY the new token, appends its key and value, and lets its query attend to the whole cache:

    q = x_t W_Q,   k = x_t W_K,   v = x_t W_V              the new token only
    cache_k = [cache_k ; k],   cache_v = [cache_v ; v]      append along the positions S
    out_t = softmax(q cache_k^T / sqrt(K)) cache_v, then W_O  every cached position, its own too

out_t is exactly the last row of full causal attention over the whole sequence, for the price of
one query row instead of a whole (T, T) attention map: over N tokens the attention work grows like
N^2 instead of N^3, and the projections like N instead of N^2. Only keys and values are cached:
an old query is never needed again.

The cache has the shape (B, G, S, K): batch, key/value heads, positions, head width. With
grouped-query attention (lesson 8) it holds the G key/value heads, never the H copies repeated
for the query heads: repeat_kv runs at attention time, on the fly. That is what GQA is for: it
shrinks the cache, the memory that grows with every token (Ainslie et al. 2023).

What a cache costs
------------------
Every layer stores, for every position and every key/value head, one key and one value of
head_dim numbers:

    bytes = 2 * batch * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_value

2 for K and V; bytes_per_value is 2 in fp16 or bf16 (the default), 4 in fp32, 1 in int8.

GPT-3 175B (Brown et al. 2020): 96 layers, 96 heads of head_dim 128 (d_model 12,288 = 96 * 128),
plain multi-head attention (G = H = 96). One token in fp16:

    2 * 96 layers * 96 heads * 128 * 2 bytes = 4,718,592 bytes = 4.5 MiB, about 4.7 MB per token.

Its 2,048-token context is 9 GiB of cache for ONE sequence; an 80 GiB GPU holding nothing but
cache fits 18,204 tokens. Had GPT-3 used GQA-8 (the 96 query heads sharing 8 key/value heads),
its cache would be 96 / 8 = 12 times smaller: 393,216 bytes (384 KiB) per token.

Llama 2 70B (Touvron et al. 2023) does use GQA: 80 layers, 64 query heads sharing 8 key/value
heads, head_dim 128:

    2 * 80 layers * 8 kv heads * 128 * 2 bytes = 327,680 bytes = 320 KiB per token,

so 80 GiB hold 262,144 tokens of cache: a batch of 64 sequences at the full 4,096-token context.
With 64 key/value heads (plain MHA) it would be 8 times more, 2.5 MiB per token: only 32,768
tokens, a batch of 8. (The weights need memory too: 70B parameters in fp16 are 140 GB, spread
over several GPUs. The cache, not the weights, is what limits batch size and context length.)

Several new tokens at once
--------------------------
The prompt is usually fed in one go (the "prefill"), and some servers append chunks of tokens.
Then x_t is (B, T_new, D), and the T_new new queries are the LAST T_new of the S + T_new
positions: new query i sees every cached position and the new positions up to itself. That is
lesson 4's causal_mask(T_new, S + T_new), aligned bottom-right. (PyTorch's is_causal=True is
aligned top-left; it agrees only when T == S, e.g. a prefill from an empty cache.)

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width
    H query heads    G key/value heads (G divides H)    K head width (D // H)

- Arrays are batch first: x_t is (B, T_new, D); caches are (B, G, S, K); an empty cache has S = 0,
  e.g. np.zeros((B, G, 0, K)).
- Parameters are a dict: w_q (D, H*K), w_k (D, G*K), w_v (D, G*K), w_o (H*K, D), optional
  b_q, b_k, b_v, b_o, applied as x @ w + b. Head h owns columns h*K:(h+1)*K.
- Query head h uses key/value head h // (H // G) (lesson 8's repeat-interleave).
- The default scale is 1/sqrt(K), K the head width, not the model width D.
- Functions never modify their inputs (the caches passed in included), and return the dtype of
  their inputs.

This lesson uses your earlier lessons: linear (1), scaled_dot_product_attention (3),
causal_mask (4), split_heads and merge_heads (5), repeat_kv (8). Finish those first.
"""

import numpy as np
from l01_projections import linear  # your lesson 1
from l03_attention import scaled_dot_product_attention  # your lesson 3
from l04_masks import causal_mask  # your lesson 4
from l05_heads import merge_heads, split_heads  # your lesson 5
from l08_gqa import repeat_kv  # your lesson 8


def kv_cache_bytes(batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_value=2):
    """Bytes of a KV cache: keys and values of every layer, key/value head and position.

    batch:           B, sequences decoded together
    seq_len:         S, positions cached per sequence
    n_layers:        attention layers, each with its own cache
    n_kv_heads:      G, key/value heads per layer (H for multi-head attention, 1 for MQA)
    head_dim:        K, numbers per key (and per value)
    bytes_per_value: 2 for fp16/bf16 (the default), 4 for fp32, 1 for int8
    returns an int: 2 * batch * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_value

    Check yourself: GPT-3 175B (96 layers, 96 heads, head_dim 128) in fp16 needs
    kv_cache_bytes(1, 1, 96, 96, 128) == 4_718_592 bytes for every token of every sequence.

    TODO:
      1. Count the numbers one layer stores for one sequence and one position: a key and a value
         (that is the 2) for each of the n_kv_heads heads, head_dim numbers each.
      2. Multiply by the positions (seq_len), the sequences (batch) and the layers (n_layers).
      3. Multiply by bytes_per_value and return the product. With int arguments, `*` keeps it an
         exact Python int.
    """
    ### BEGIN SOLUTION
    # One layer caches, for one sequence and one position, a key AND a value (the factor 2) for
    # each of its n_kv_heads heads, head_dim numbers each. Every position of every sequence in
    # every layer has its own, so the count is a plain product. Python ints never overflow, so
    # the product of int arguments is exact however large the cache.
    #
    #     GPT-3 175B, fp16:   2 * 96 * 96 * 128 * 2 = 4,718,592 bytes per token (4.5 MiB)
    #     same, with GQA-8:   2 * 96 *  8 * 128 * 2 =   393,216 bytes per token (12 times less)
    #     Llama 2 70B, fp16:  2 * 80 *  8 * 128 * 2 =   327,680 bytes per token (320 KiB)
    #     80 GiB / 320 KiB = 262,144 tokens = 64 sequences of 4,096 tokens
    per_position = 2 * n_kv_heads * head_dim  # one key and one value per key/value head
    values = per_position * seq_len * batch * n_layers  # every position, sequence and layer
    return values * bytes_per_value
    ### END SOLUTION


def decode_step(x_t, cache_k, cache_v, params, n_heads, n_kv_heads):
    """One decoding step with a KV cache. Returns (out_t, cache_k, cache_v), the caches extended.

    x_t:        (B, T_new, D)   the new token(s); usually T_new = 1
    cache_k:    (B, G, S, K)    keys of the S positions seen so far (S = 0: empty cache)
    cache_v:    (B, G, S, K)    their values
    params:     dict of w_q (D, H*K), w_k (D, G*K), w_v (D, G*K), w_o (H*K, D), optional biases
    n_heads:    H, query heads
    n_kv_heads: G, key/value heads (G divides H)
    returns (out_t, cache_k, cache_v):
      out_t    (B, T_new, D)       what grouped-query attention outputs at the new positions
      cache_k  (B, G, S + T_new, K)  the old keys, then the new ones (new arrays)
      cache_v  (B, G, S + T_new, K)

    Decoding a sequence x (B, T, D) token by token from an empty cache, x[:, t:t+1] at step t,
    gives at step t exactly row t of lesson 8's
    grouped_query_attention(x, x, params, H, G, mask=causal_mask(T)).

    TODO:
      1. Read the sizes: B, T_new, D from x_t and G, S, K from cache_k; H = n_heads. If
         n_kv_heads does not divide H, or a cache is not 4-D with B and n_kv_heads on its first
         two axes, raise a ValueError naming the numbers.
      2. Project the new tokens only, with your linear (lesson 1), adding each bias only when
         params has it: q with w_q -> (B, T_new, H*K); k and v with w_k and w_v
         -> (B, T_new, G*K). The S cached positions are never projected again.
      3. Split into heads with your split_heads (lesson 5): q into H heads (B, H, T_new, K);
         k and v into G heads (B, G, T_new, K), not H.
      4. Append the new keys after the cached ones along the positions, axis 2:
         (B, G, S, K) and (B, G, T_new, K) -> (B, G, S + T_new, K); the same for the values.
         Build new arrays: never write into the caches passed in (the caller may still need
         them, to branch from an old cache).
      5. Repeat the extended caches to H heads with your repeat_kv (lesson 8), H // G copies of
         each head, for the attention only: (B, G, S + T_new, K) -> (B, H, S + T_new, K). The
         caches you return keep their G heads: storing the copies would spend the memory GQA
         saves.
      6. The mask is your causal_mask(T_new, S + T_new) (lesson 4), aligned bottom-right: new
         query i sees every cached position and the new positions up to itself, its OWN key and
         value included (so append BEFORE attending). For T_new = 1 it allows everything.
      7. Attend with your scaled_dot_product_attention (lesson 3) and its default scale
         1/sqrt(K): the heads' outputs (B, H, T_new, K); the weights are not needed.
      8. Merge the heads with merge_heads (lesson 5), (B, H, T_new, K) -> (B, T_new, H*K), then
         project with w_o and b_o -> (B, T_new, D).
      9. Return (out_t, the extended cache_k, the extended cache_v), in that order.
    """
    ### BEGIN SOLUTION
    # Only the new tokens are projected: the keys and values of the S earlier positions are in
    # the cache already, and a causal model never changes them. The new keys and values are split
    # into the G key/value heads and appended after the cached ones along axis 2, the positions.
    # np.concatenate builds new arrays, so the caller's caches stay as they were: a caller may
    # keep an old cache to branch from it (beam search, a retried sampling step).
    #
    # The returned caches keep G heads. repeat_kv copies them to H heads only for the attention
    # itself (query head h reads key/value head h // (H // G)); storing the copies would throw
    # away the memory GQA saves.
    #
    # The new queries are the last T_new of the S + T_new positions, so the bottom-right
    # causal_mask(T_new, S + T_new) lets new query i see every cached position and the new ones
    # up to itself. Its own key must be among them: the cache is extended BEFORE attending. For
    # one new token the mask is all True; for a prefill from an empty cache (S = 0) it is the
    # plain lower triangle. The scale is the default 1/sqrt(K), K the head width.
    B, T_new, D = x_t.shape
    H, G = n_heads, n_kv_heads
    if H % G != 0:
        raise ValueError(f"n_heads = {H} is not a multiple of n_kv_heads = {G}")
    for name, cache in (("cache_k", cache_k), ("cache_v", cache_v)):
        if cache.ndim != 4 or cache.shape[0] != B or cache.shape[1] != G:
            raise ValueError(
                f"{name} has shape {cache.shape}; expected (B, G, S, K) with B = {B} and G = n_kv_heads = {G}"
            )
    _, _, S, K = cache_k.shape

    q = linear(x_t, params["w_q"], params.get("b_q"))  # (B, T_new, D) -> (B, T_new, H*K)
    k = linear(x_t, params["w_k"], params.get("b_k"))  # (B, T_new, D) -> (B, T_new, G*K)
    v = linear(x_t, params["w_v"], params.get("b_v"))  # (B, T_new, D) -> (B, T_new, G*K)
    q = split_heads(q, H)  # (B, T_new, H*K) -> (B, H, T_new, K)
    k = split_heads(k, G)  # (B, T_new, G*K) -> (B, G, T_new, K)
    v = split_heads(v, G)  # (B, T_new, G*K) -> (B, G, T_new, K)

    # (B, G, S, K) and (B, G, T_new, K) -> (B, G, S + T_new, K): the new positions come last
    new_k = np.concatenate([cache_k, k], axis=2)
    new_v = np.concatenate([cache_v, v], axis=2)

    k_rep = repeat_kv(new_k, H // G)  # (B, G, S + T_new, K) -> (B, H, S + T_new, K)
    v_rep = repeat_kv(new_v, H // G)  # (B, G, S + T_new, K) -> (B, H, S + T_new, K)
    mask = causal_mask(T_new, S + T_new)  # (T_new, S + T_new), broadcast over B and H
    out, _ = scaled_dot_product_attention(q, k_rep, v_rep, mask)  # -> (B, H, T_new, K)

    out = merge_heads(out)  # (B, H, T_new, K) -> (B, T_new, H*K)
    out = linear(out, params["w_o"], params.get("b_o"))  # (B, T_new, H*K) -> (B, T_new, D)
    return out, new_k, new_v
    ### END SOLUTION
