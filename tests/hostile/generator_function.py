# lesson: 1
# expect: yield
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    out = x @ w
    yield out if b is None else out + b  # yield instead of return: linear(...) is a generator


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
