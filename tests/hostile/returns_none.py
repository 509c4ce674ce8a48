# lesson: 1
# expect: returned None (is a `return` missing?)
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x @ w
    if b is not None:
        out = out + b


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
