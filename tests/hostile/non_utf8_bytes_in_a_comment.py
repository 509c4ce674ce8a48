# lesson: 1
# expect: UTF-8
# expect: save it as UTF-8
# expect: line 3
# ---- l01_projections.py
import numpy as np

# café au lait, saved by an editor in Latin-1, and a stray byte order mark: ÿþ
def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
