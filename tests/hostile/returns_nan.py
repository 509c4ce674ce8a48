# lesson: 1
# expect: NaN values where numbers were expected
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    return np.full((*x.shape[:-1], w.shape[1]), np.nan, dtype=x.dtype)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
