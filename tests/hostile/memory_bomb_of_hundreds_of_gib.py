# lesson: 1
# expect: ran out of memory
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    scratch = np.empty((400 * 1024**3 // 8,))  # 400 GiB of float64, not even touched
    return scratch[: x.shape[0]]


def head_projections(x, w_heads):
    ones = np.ones((300, 1024, 1024, 1024), dtype=np.uint8)  # 300 GiB, filled
    return ones.sum()


def fuse_head_weights(w_heads):
    raise NotImplementedError
