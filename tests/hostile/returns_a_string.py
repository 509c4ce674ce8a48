# lesson: 1
# expect: returned a str
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    return "x @ w + b"


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
