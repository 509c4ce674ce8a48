# lesson: 1
# expect: returned dtype float32; expected float64
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x.astype(np.float32) @ w.astype(np.float32)
    return out if b is None else out + b.astype(np.float32)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
