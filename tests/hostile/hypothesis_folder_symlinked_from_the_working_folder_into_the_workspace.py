# lesson: 1
# expect: still raises NotImplementedError
# ---- l01_projections.py
# The grader kept hypothesis's own folder in the worker's working folder, where learner code
# may write: a `.hypothesis` symlink made there at import (and again at every call) sent the
# grader's writes through it into any folder the user can write, here the learner's workspace
# (23 files). Nothing of the grader's may live where learner code can write; the workspace
# must not change.
import os

import numpy as np

WORKSPACE = os.path.dirname(os.path.abspath(__file__))


def plant():
    try:
        os.symlink(WORKSPACE, ".hypothesis")
    except OSError:
        pass


plant()


def linear(x, w, b=None):
    plant()
    out = x @ w
    return out if b is None else out + b


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
