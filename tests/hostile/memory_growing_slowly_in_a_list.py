# lesson: 1
# expect: ran out of memory
# limits: call=5,memory=256M
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    hoard = []
    while True:  # 8 MiB at a time, forever
        hoard.append(np.ones(1024 * 1024))


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
