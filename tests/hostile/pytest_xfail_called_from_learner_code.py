# lesson: 1
# expect: pytest.xfail
# ---- l01_projections.py
import pytest


def linear(x, w, b=None):
    pytest.xfail("known to fail, nothing to see")


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
