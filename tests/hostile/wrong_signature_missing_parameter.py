# lesson: 1
# expect: linear() takes 2 positional arguments but 3 were given
# ---- l01_projections.py
import numpy as np


def linear(x, w):  # the bias parameter is missing
    return x @ w


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
