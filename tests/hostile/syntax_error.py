# lesson: 1
# expect: syntax error
# expect: line 5
# expect: out = x @ w +
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x @ w +
    return out


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
