# lesson: 1
# expect: ended the Python process (exit code 0)
# expect: while the file was being imported
# ---- l01_projections.py
import os

import numpy as np

os._exit(0)


def linear(x, w, b=None):
    return x @ w


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
