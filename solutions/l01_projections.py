"""Lesson 1: linear projections, one weight matrix per head.

The idea
--------
Attention never compares raw token vectors. It first projects every token three times, into a
query, a key and a value, with learned weight matrices:

    Q = X W_Q,    K = X W_K,    V = X W_V

Multi-head attention does this once per head: head h has its own W_Qh of shape (D, K) and sees
its own K-dimensional view of every token. In practice the H per-head matrices are stored side by
side as one fused (D, H*K) matrix, head h owning columns h*K:(h+1)*K, so one matrix product
projects all heads at once. This lesson builds all three views of the same computation.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    D model width    H heads    K head width (D // H)

- Arrays are batch first: x is (B, T, D).
- Weights are stored (d_in, d_out) and applied as x @ w + b, exactly as in the formula X W_Q.
  (PyTorch stores them (d_out, d_in) and computes x @ w.T; lesson 6 converts between the two.)
- Functions never modify their inputs, and return the dtype of their inputs.
"""

import numpy as np


def linear(x, w, b=None):
    """Apply a linear layer: x @ w + b over the last axis of x.

    x: (..., d_in)   any number of leading axes, e.g. (B, T, D)
    w: (d_in, d_out)
    b: (d_out,) or None
    returns (..., d_out), same dtype as x

    TODO:
      1. Multiply x by w with `@` (matmul broadcasts over x's leading axes). No transpose: w is
         already stored (d_in, d_out).
      2. If b is given, add it: (d_out,) broadcasts over every position.
      3. Return a new array; do not change x in place.
    """
    ### BEGIN SOLUTION
    # `@` treats the leading axes of x as a batch of (T, d_in) matrices, so one product serves
    # (d_in,), (T, d_in) and (B, T, d_in) alike. The weight is stored (d_in, d_out): no transpose.
    # The bias (d_out,) broadcasts over every position. `out = x @ w` is a new array, so adding
    # the bias to it cannot touch the caller's x.
    out = x @ w  # (..., d_in) @ (d_in, d_out) -> (..., d_out)
    if b is not None:
        out = out + b  # (..., d_out) + (d_out,)
    return out
    ### END SOLUTION


def head_projections(x, w_heads):
    """Project x into H heads, each with its own (D, K) matrix.

    x:       (B, T, D)
    w_heads: (H, D, K)   w_heads[h] is head h's projection W_h
    returns  (B, H, T, K) where out[:, h] == x @ w_heads[h]

    TODO:
      1. Unpack the sizes: B, T, D = x.shape and H, _, K = w_heads.shape.
      2. Compute every head's product x @ w_heads[h], (B, T, D) @ (D, K) -> (B, T, K), for all
         H heads at once, the heads in order along a new axis 1: (B, H, T, K). Two ways: give x
         a head axis of size 1, (B, 1, T, D), so that `@` broadcasts it against the H matrices
         (H, D, K); or write the sum over the model width D with every axis named
         (b t d, h d k -> b h t k). A Python loop over the heads works too, but is not needed.
    """
    ### BEGIN SOLUTION
    # einsum names every axis: for each batch b, head h and position t, sum over the model
    # width d of x[b, t, d] * w_heads[h, d, k]. Heads stay in order along axis 1.
    B, T, D = x.shape
    H, _, K = w_heads.shape
    return np.einsum("btd,hdk->bhtk", x, w_heads)  # (B, T, D), (H, D, K) -> (B, H, T, K)
    ### END SOLUTION


def fuse_head_weights(w_heads):
    """Fuse H per-head weights into one matrix, head h in columns h*K:(h+1)*K.

    w_heads: (H, D, K)
    returns  (D, H*K) such that (x @ fused)[..., h*K:(h+1)*K] == x @ w_heads[h]

    TODO:
      1. Unpack the sizes: H, D, K = w_heads.shape.
      2. Move the head axis after D: (H, D, K) -> (D, H, K), so that each input row d holds the
         H heads' blocks of K numbers next to each other.
      3. Reshape (D, H, K) -> (D, H*K): row d becomes the H blocks side by side, head h in
         columns h*K:(h+1)*K. (Reshaping (H, D, K) directly would mix rows of different heads:
         that is the classic mistake this exercise is about.)
    """
    ### BEGIN SOLUTION
    # The fused matrix is the concatenation [W_0 | W_1 | ... | W_{H-1}] along the output axis.
    # Moving the head axis next to K first puts, for each input row d, the H blocks of K columns
    # side by side; only then does a reshape lay them out as one row of H*K numbers.
    H, D, K = w_heads.shape
    by_row = np.transpose(w_heads, (1, 0, 2))  # (H, D, K) -> (D, H, K)
    return by_row.reshape(D, H * K)  # (D, H, K) -> (D, H*K)
    ### END SOLUTION
