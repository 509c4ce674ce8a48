# lesson: 1
# expect: no function named `linear`
# ---- l01_projections.py
import numpy as np


def linear_layer(x, w, b=None):  # renamed: the grader asks for linear
    out = x @ w
    return out if b is None else out + b


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
