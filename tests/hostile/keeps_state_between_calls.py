# lesson: 1
# expect: returned wrong values
# ---- l01_projections.py
# Right on the first call only: a module-level counter makes every later call add it to the
# answer. The grader's calls all go to the same worker process, so the count survives between
# checks, and a check that calls linear twice (or a property test) sees two different answers.
import numpy as np

calls = 0


def linear(x, w, b=None):
    global calls
    out = x @ w
    if b is not None:
        out = out + b
    calls += 1
    return out if calls == 1 else out + calls


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
