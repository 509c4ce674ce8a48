# lesson: 1
# expect: linear is a class
# ---- l01_projections.py
import numpy as np


class linear:  # calling it builds an object holding the answer, not the answer itself
    def __init__(self, x, w, b=None):
        self.out = x @ w if b is None else x @ w + b

    def __repr__(self):
        return f"linear(out={self.out.shape})"


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
