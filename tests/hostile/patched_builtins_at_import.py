# lesson: 1
# expect: returned wrong values
# ---- l01_projections.py
import builtins

import numpy as np

# isinstance always says yes, abs always says 0, all() and any() always agree, len lies.
builtins.isinstance = lambda obj, cls: True
builtins.abs = lambda value: 0
builtins.all = lambda iterable: True
builtins.any = lambda iterable: False
builtins.round = lambda value, ndigits=None: value
builtins.float = lambda value=0.0: 0.0


def linear(x, w, b=None):
    return np.ones((*x.shape[:-1], w.shape[1]), dtype=x.dtype)


def head_projections(x, w_heads):
    return np.ones((x.shape[0], w_heads.shape[0], x.shape[1], w_heads.shape[2]), dtype=x.dtype)


def fuse_head_weights(w_heads):
    raise NotImplementedError
