# lesson: 1
# expect: printed more than 8 MiB
# expect: print inside a loop
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    for i in range(200_000):  # about 200 MB of output
        print(f"{i:08d} " + "spam " * 200)
    return np.zeros((*x.shape[:-1], w.shape[1]), dtype=x.dtype)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
