# lesson: 1
# expect: sys.exit
# expect: line 5
# expect: instead of returning a value
# ---- l01_projections.py
import sys


def linear(x, w, b=None):
    sys.exit(0)  # "everything went fine", says the exit code


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
