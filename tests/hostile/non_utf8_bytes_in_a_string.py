# lesson: 1
# expect: UTF-8
# expect: save it as UTF-8
# expect: line 5
# ---- l01_projections.py
import numpy as np


def linear(x, w, b=None):
    label = "café ÿþ"  # Latin-1 bytes inside a string literal
    raise NotImplementedError(label)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
