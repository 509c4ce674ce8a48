"""Lesson 3: scaled dot-product attention.

The idea
--------
Every query asks a question; every key advertises what its position has to offer; every value is
what that position hands over. Attention compares each query with each key by a dot product,
turns one query's scores into weights with a softmax over the keys, and returns the weighted
average of the values:

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V        (Vaswani et al. 2017, eq. 1)

where d_k, the head width, is the letter K of our conventions: K = q.shape[-1]. For one query t
and one key s the score is  q_t . k_s / sqrt(K). Row t of the weights says how
much of each value goes into output row t; it is positive and sums to 1, so every output row is a
weighted average (a convex combination) of value rows.

Why divide by sqrt(K)? If the 2K numbers of a query and of a key are independent, each with
mean 0 and variance 1, their dot product has mean 0 and variance K (each of its K terms q_i k_i
has mean 0 and variance 1): the scores grow like sqrt(K) with the head width, the softmax
saturates on the largest one and its gradients vanish. Dividing by sqrt(K) keeps the scores at
variance 1 whatever the head width. K here is the head width, q.shape[-1], not the model width D,
nor the number of keys S.

Masks
-----
A mask says which keys a query may look at: a boolean array broadcastable to (..., T, S), True =
may attend (the convention of torch.nn.functional.scaled_dot_product_attention). A blocked key must
get exactly zero weight, and the other weights of its row must still sum to 1. Both hold when the
blocked score is replaced by -inf BEFORE the softmax, as exp(-inf) = 0:

    scores [[2, 1, 3]]  mask [[True, False, True]]  ->  [[2, -inf, 3]]  ->  [[0.27, 0, 0.73]]

Two tempting shortcuts are wrong:
- zeroing the weights AFTER the softmax leaves rows that sum to less than 1;
- writing -1e9 instead of -inf looks the same until a query has every key masked (a padded
  position, say): then all its scores are -1e9, and the softmax spreads the weight uniformly over
  keys the query was not allowed to see.
With -inf, a fully masked row is all -inf, and lesson 2's softmax returns zeros for it: that query
gets all-zero weights and an all-zero output, never NaN.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    H heads    K head width

- q is (..., T, K), k is (..., S, K), v is (..., S, Kv): any leading axes, e.g. (B, T, K) or
  (B, H, T, K); the value width Kv is often K but need not be. Queries and keys must share K.
- Masks are boolean, True = may attend, broadcastable to (..., T, S): (T, S) for every batch
  element alike, (B, 1, S) for padding, (B, T, S) for one mask per batch element. With
  (B, H, T, K) inputs, give the mask a head axis of size 1: (B, 1, 1, S) or (B, 1, T, S).
- The default scale is 1/sqrt(K), K = q.shape[-1]. A scale passed in is used exactly as given.
- Functions never modify their inputs, and return the dtype of their inputs (float32 stays
  float32).

This lesson uses your softmax from lesson 2 (`from l02_softmax import softmax`): finish that first.
PyTorch computes the same `out` with
`torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)`.

Edit this file, then run `course check 3`.
"""

import math

import numpy as np
from l02_softmax import softmax  # your softmax from lesson 2


def attention_scores(q, k, scale=None):
    """Scaled dot products of every query with every key: q @ k^T * scale.

    q:     (..., T, K)   queries
    k:     (..., S, K)   keys, with the same leading axes as q
    scale: a number, or None for the default 1 / sqrt(K) where K = q.shape[-1]
    returns (..., T, S), same dtype as q: scores[..., t, s] = scale * (q[..., t, :] . k[..., s, :])

    TODO:
      1. Unpack the sizes you need: K = q.shape[-1].
      2. If scale is None, set it to 1 / sqrt(K). Test `scale is None`, not `not scale`: an
         explicit scale=0.0 is a scale, and any scale passed in is used exactly as given.
         Keep the scale a plain Python float: in numpy 2 a float32 array times a numpy float64
         comes out float64, and np.sqrt returns a numpy float64, whereas the math module's
         square root returns a Python float. Turn a scale passed in into a Python float too.
      3. Swap the last two axes of k: (..., S, K) -> (..., K, S). Only those two: k.T would
         reverse EVERY axis of a 3-D or 4-D array, (B, H, S, K) -> (K, S, H, B).
      4. Multiply q @ k_t: (..., T, K) @ (..., K, S) -> (..., T, S), then multiply by the scale.
         Build a new array; do not scale q in place (no `q *= scale`).
    """
    raise NotImplementedError


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """Attention: softmax(q @ k^T * scale, masked) @ v. Returns (out, weights).

    q:     (..., T, K)
    k:     (..., S, K)
    v:     (..., S, Kv)
    mask:  booleans broadcastable to (..., T, S), True = may attend; None = attend everywhere
    scale: as in attention_scores (None = 1 / sqrt(K))
    returns (out, weights):
      out     (..., T, Kv)  out[..., t, :] = sum over s of weights[..., t, s] * v[..., s, :]
      weights (..., T, S)   each row sums to 1 over the keys it may attend, or is all zero
                            when the mask blocks every key of that query

    TODO:
      1. scores = attention_scores(q, k, scale): (..., T, S). Pass the scale on.
      2. If a mask is given, build new scores: -inf where the mask is False, the score where
         it is True. The mask broadcasts against the scores, (T, S) or (B, 1, S) against
         (..., T, S). Use -inf, not -1e9 (a fully masked row would get uniform weights), and
         do it BEFORE the softmax.
      3. weights = softmax(scores, axis=-1): normalise over the keys S (the last axis), not over
         the queries. Lesson 2's softmax turns an all -inf row into zeros.
      4. out = weights @ v: (..., T, S) @ (..., S, Kv) -> (..., T, Kv). Use the masked weights.
      5. Return the pair (out, weights), in that order.
    """
    raise NotImplementedError
