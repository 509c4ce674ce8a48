# lesson: 1
# expect: returned a list; expected a numpy array
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x @ w if b is None else x @ w + b
    return out.tolist()


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
