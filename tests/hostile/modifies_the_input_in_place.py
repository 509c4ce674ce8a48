# lesson: 1
# expect: changed its input in place
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x @ w
    if b is not None:
        out += b
    x *= 0.0  # "free" the input once used: the caller's array is now all zeros
    return out


def head_projections(x, w_heads):
    x[...] = x[:, ::-1]  # reverses the caller's positions in place, then projects
    return np.einsum("btd,hdk->bhtk", x, w_heads)


def fuse_head_weights(w_heads):
    H, D, K = w_heads.shape
    w_heads[:] = np.transpose(w_heads, (1, 0, 2)).reshape(H, D, K)  # scrambles the input
    return np.transpose(w_heads, (1, 0, 2)).reshape(D, H * K)
